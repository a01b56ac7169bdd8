"""DA-PFL (seed 002): the analyses and drawings behind Fig. 1 and Fig. 3 (the tables are in
:mod:`flplat.studies.papers.dapfl`). Neither trains a federation run; both use the DA-PFL ready configs
(``configs/dapfl/<data>_k20_a<α>.yaml``) with the dataset a scale choice (``FIG_DATA``: CIFAR-10, as Table I, at
``paper``; FMNIST at ``reduced``; digits at ``smoke``).

**Fig. 1** ("The relationship between accuracy and weighting metrics, including the affinity of DA-PFL and the
similarity of FedAMP"), from §I: client 0 holds 80, 50 and 20 samples of classes A, B and C; group g is client 0
with client g. "Group 1 has the highest similarity value between client 0 and client 1 because both clients contain
the same number of samples (80, 50, and 20 samples) for the same class labels", group 4 the lowest ("different data
distributions"); aggregating group 4 "can balance the class distribution between Class A and Class C"; Fig. 1(b)
plots, per group, FedAMP's aggregation weight (red), DA-PFL's (orange) and the accuracy: "the highest aggregate weight
of FedAMP is group 1 and the lowest aggregate weight is group 4, while the accuracy of group 1 is lower than that of
group 4 (about an 8% decrease) ... the trend of the aggregate weight of DA-PFL is more similar to the trend of the
model accuracy". The paper gives only client 0's and client 1's counts; ours (:data:`PARTNERS`) are client 0's counts
permuted over the classes, so every partner has client 0's size and imbalance and only the complementarity changes:
(80, 50, 20), (50, 80, 20), (20, 80, 50), (20, 50, 80) -- the pooled data of groups 1-4 go from (160, 100, 40) to
(100, 100, 100). A, B, C are three classes that resemble one another (:data:`TOY_CLASSES`), so that the balance of
the training data shows in the accuracy (with three easily told apart classes every group scores near 100 %).

Per seed (:func:`toy_groups`): the five clients draw disjoint samples of the pool (scale ``smoke``: 0.4 × the counts,
digits being small); from one initial model (the ready config's model, optimizer and batch size) each trains
``LOCAL_EPOCHS`` epoch(s) on its data -- the models they would upload after their first round. On those five models
flplat's own maths give client 0's aggregation weight for each partner: FedAMP's message-passing weight ξ_0g
(:func:`flplat.algorithms.fedamp.attention_weights` at the ``fedamp`` defaults, with both of its attentions:
``exp_cos``, HeurFedAMP's cosine and flplat's default, and ``exp_dist``, FedAMP's attention-inducing function
A(x) = 1 − e^{−x/σ} on squared distances -- models that share an initialisation have cosines near 1, so
``exp_cos`` weights differ in the fifth decimal only), DA-PFL's affinity c_0g (Eqs. 3-6,
:func:`flplat.maths.dapfl_affinity.affinity_matrix`) and its dynamic weight α_0g (Eqs. 7-8,
:func:`~flplat.maths.dapfl_affinity.dynamic_weights`), each over the four partners (ξ renormalised to sum 1 without
ξ_00). The accuracy of group g: client 0 and client g train ``PAIR_ROUNDS`` rounds of FedAvg from the same
initial model (``LOCAL_EPOCHS`` per round); the global model's accuracy on a test set with the same number of
images of A, B and C (the official test split; digits, which has none: images held out from the pool).
:func:`fig1_findings` judges the three statements above on the means over seeds.

**Fig. 3** ("Different imbalance distribution of class": per client the samples of each class, low imbalance α = 1 and
high α = 0.5; "Fig. 3(b) has a more heavily imbalance class distribution due to the more significant difference in
sample numbers between different classes"): the Dirichlet partition of the 20-client configs, exactly as their runs
draw it (the run's data and partition seeds), as a class × client heat map (yellow: few samples, dark blue: many, as
the paper's). :func:`partition_profile` gives per cell the mean classes a client holds, its largest class share and
the coefficient of variation of its class counts (the "difference in sample numbers between different classes");
:func:`fig3_findings` judges the claim on the last.
"""

from __future__ import annotations

import functools
import statistics

import numpy as np

FIG_DATA = {"smoke": "digits", "reduced": "fmnist", "paper": "cifar10"}
REPO_CONFIG = "configs/dapfl/{data}_k20_a{alpha}.yaml"
CLIENT0 = (80, 50, 20)  # §I: client 0's samples of classes A, B, C
PARTNERS = {"group1": (80, 50, 20), "group2": (50, 80, 20), "group3": (20, 80, 50), "group4": (20, 50, 80)}
# classes A, B, C: digits 3 / 5 / 8; FMNIST T-shirt / pullover / shirt; CIFAR-10 cat / deer / dog
TOY_CLASSES = {"digits": (3, 5, 8), "fmnist": (0, 2, 6), "cifar10": (3, 4, 5)}
COUNT_SCALE = {"smoke": 0.4, "reduced": 1.0, "paper": 1.0}  # digits: about 180 images a class
PAIR_ROUNDS = {"smoke": 2, "reduced": 20, "paper": 20}
LOCAL_EPOCHS = 1
DIGITS_TEST_PER_CLASS = 40  # digits has no test split: held out of the pool per class
AMP_ROWS = {"FedAMP weight (exp_cos)": "exp_cos", "FedAMP weight (exp_dist)": "exp_dist"}
FIG1_ROWS = ("accuracy", *AMP_ROWS, "DA-PFL affinity", "DA-PFL weight")
FIG3_ROWS = ("classes held", "largest class share", "class-count CV")


def _config(scale: str, alpha: str, seed: int):
    from flplat.experiment import load_config
    from flplat.studies.reproduce import REPO

    path = REPO / REPO_CONFIG.format(data=FIG_DATA[scale], alpha=alpha)
    return load_config(str(path), [f"seed={seed}", "tracking.enabled=false"])


def _vector(model):
    """The model's parameters as one detached vector."""
    import torch

    return torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()


def _train(model, x, y, epochs: int, cfg, seed: int) -> None:
    """``epochs`` of minibatch training on (x, y) with the config's optimizer and batch size (shuffled by seed)."""
    import torch

    from flplat.engine.client import make_optimizer

    o = cfg.federation.optimizer
    opt = make_optimizer(o.name, model.parameters(), o.lr, o.momentum, o.weight_decay)
    gen = torch.Generator().manual_seed(seed)
    bs = int(cfg.federation.batch_size)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=gen)
        for i in range(0, len(y), bs):
            b = order[i:i + bs]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[b]), y[b]).backward()
            opt.step()


def _accuracy(model, x, y) -> float:
    import torch

    model.eval()
    with torch.no_grad():
        return float((model(x).argmax(dim=1) == y).float().mean())


def _toy_data(seed: int, scale: str):
    """The five clients' (x, y) with labels 0, 1, 2 for A, B, C, their (5, 3) counts, and the balanced test set."""
    import torch

    from flplat.data.datasets import load_dataset
    from flplat.protocol.seeding import derive_seed

    cfg = _config(scale, "1.0", seed)
    ds = load_dataset(cfg.data, derive_seed(seed, "data"))
    classes = TOY_CLASSES[FIG_DATA[scale]]
    rng = np.random.default_rng([seed, 1])
    pool = {c: rng.permutation(np.flatnonzero(ds.y_train.numpy() == k)) for c, k in enumerate(classes)}
    if ds.x_test is None:  # hold a test set out of the pool
        test_idx = {c: p[:DIGITS_TEST_PER_CLASS] for c, p in pool.items()}
        pool = {c: p[DIGITS_TEST_PER_CLASS:] for c, p in pool.items()}
        xt = ds.x_train
    else:
        test_idx = {c: rng.permutation(np.flatnonzero(ds.y_test.numpy() == k)) for c, k in enumerate(classes)}
        xt = ds.x_test
    n_test = min(len(v) for v in test_idx.values())
    t = np.concatenate([v[:n_test] for v in test_idx.values()])
    test = (xt[t], torch.as_tensor(np.repeat(np.arange(3), n_test)))
    counts = np.array([CLIENT0, *PARTNERS.values()]) * COUNT_SCALE[scale]
    counts = np.rint(counts).astype(np.int64)
    clients, used = [], {c: 0 for c in pool}
    for row in counts:  # disjoint samples: each client takes the next ones of every class
        if any(used[c] + n > len(pool[c]) for c, n in enumerate(row)):
            raise ValueError(f"{FIG_DATA[scale]}: too few images of classes {classes} for the toy clients")
        idx = np.concatenate([pool[c][used[c]:used[c] + n] for c, n in enumerate(row)])
        used = {c: used[c] + n for c, n in enumerate(row)}
        clients.append((ds.x_train[idx], torch.as_tensor(np.repeat(np.arange(3), row))))
    return cfg, clients, counts, test


@functools.lru_cache(maxsize=4)
def toy_groups(seed: int, scale: str) -> dict[str, dict[str, float]]:
    """Fig. 1, one seed: per group (client 0 + client g) the pair's FedAvg accuracy on the balanced test set and
    client 0's FedAMP weight, DA-PFL affinity and DA-PFL weight for client g (see the module docstring)."""
    import torch

    from flplat.algorithms.dapfl import DAPFL
    from flplat.algorithms.fedamp import FedAMP, attention_weights
    from flplat.api import weighted_mean
    from flplat.maths.dapfl_affinity import affinity_matrix, dynamic_weights, pairwise_distances
    from flplat.models import build_model
    from flplat.protocol.seeding import derive_seed

    cfg, clients, counts, test = _toy_data(seed, scale)
    torch.manual_seed(derive_seed(seed, "init"))
    model = build_model(cfg.model, tuple(clients[0][0].shape[1:]), 3)
    init = _vector(model)
    local = []
    for k, (x, y) in enumerate(clients):  # the models the clients upload after their first round
        torch.nn.utils.vector_to_parameters(init, model.parameters())
        _train(model, x, y, LOCAL_EPOCHS, cfg, derive_seed(seed, "train", 1, k))
        local.append(_vector(model))
    w = torch.stack(local)
    amp, da = FedAMP.Config(), DAPFL.Config()
    xi = {row: attention_weights(w, att, amp.sigma, amp.alpha_k, amp.self_weight)[0, 1:]
          for row, att in AMP_ROWS.items()}
    c = torch.as_tensor(affinity_matrix(counts, da.min_shared, da.fill_factor))
    alpha = dynamic_weights(c, pairwise_distances(w, da.distance_power), da.sigma, da.eps)[0, 1:]
    out = {}
    for g, name in enumerate(PARTNERS, 1):
        pair, n = [clients[0], clients[g]], torch.tensor([float(len(clients[0][1])), float(len(clients[g][1]))])
        glob = init
        for r in range(1, PAIR_ROUNDS[scale] + 1):
            ups = []
            for k, (x, y) in zip((0, g), pair):
                torch.nn.utils.vector_to_parameters(glob, model.parameters())
                _train(model, x, y, LOCAL_EPOCHS, cfg, derive_seed(seed, "pair", g, r, k))
                ups.append(_vector(model))
            glob = weighted_mean(torch.stack(ups), n)
        torch.nn.utils.vector_to_parameters(glob, model.parameters())
        out[name] = {"accuracy": _accuracy(model, *test),
                     **{row: float(v[g - 1] / v.sum()) for row, v in xi.items()},
                     "DA-PFL affinity": float(c[0, g]), "DA-PFL weight": float(alpha[g - 1])}
    return out


def toy_point(cell, seed: int, scale: str) -> dict[str, float]:
    """Fig. 1, one group and seed (the four groups of a seed are computed together, once)."""
    return toy_groups(seed, scale)[cell.id]


def _rank_corr(a: list[float], b: list[float]) -> float:
    from scipy.stats import spearmanr

    r = spearmanr(a, b).statistic
    return float(r) if np.isfinite(r) else 0.0


def fig1_findings(ours: dict[tuple[str, str], list[float]]) -> list[tuple[str, bool | None, str]]:
    """§I's three statements on Fig. 1, on the means over seeds: FedAMP's weight highest for group 1 and lowest for
    group 4 (strictly; each attention); group 4's accuracy above group 1's (the paper: about 8 points); DA-PFL's
    weight follows the accuracy more closely than FedAMP's (Spearman's ρ over the four groups, DA-PFL's above each
    FedAMP attention's)."""
    groups = [g for g in PARTNERS if all(ours.get((g, r)) for r in FIG1_ROWS)]
    if len(groups) < len(PARTNERS):
        return [("FedAMP's weight highest for group 1, lowest for group 4; group 4 more accurate; DA-PFL's weight "
                 "follows the accuracy", None, "needs all four groups")]
    m = {r: [statistics.fmean(ours[(g, r)]) for g in groups] for r in FIG1_ROWS}
    acc, da = m["accuracy"], m["DA-PFL weight"]
    rho = {r: _rank_corr(m[r], acc) for r in (*AMP_ROWS, "DA-PFL weight")}
    out = []
    for row in AMP_ROWS:
        v = m[row]
        out.append((f"FedAMP's aggregation weight is highest for group 1 and lowest for group 4 ({AMP_ROWS[row]})",
                    v[0] > max(v[1:]) and v[-1] < min(v[:-1]), "groups 1-4: " + ", ".join(f"{x:.6g}" for x in v)))
    out.append(("group 1's accuracy is below group 4's (the paper: about 8 points)", acc[0] < acc[-1],
                f"group 1 {100 * acc[0]:.2f} %, group 4 {100 * acc[-1]:.2f} % ({100 * (acc[-1] - acc[0]):+.2f} "
                "points)"))
    out.append(("DA-PFL's aggregation weight follows the accuracy more closely than FedAMP's",
                all(rho["DA-PFL weight"] > rho[r] for r in AMP_ROWS),
                "Spearman ρ with the accuracy over the groups: " + ", ".join(f"{r} {v:+.2f}" for r, v in rho.items())
                + "; DA-PFL weight, groups 1-4: " + ", ".join(f"{x:.4f}" for x in da)))
    return out


def plot_toy(ctx) -> None:
    """Fig. 1(b): per group the accuracy (bars, mean ± std over seeds) and the aggregation weights of FedAMP (red)
    and DA-PFL (orange) on a second axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [g for g in PARTNERS if ctx.ours.get((g, "accuracy"))]
    if not groups:
        return
    x = np.arange(len(groups))
    acc = [ctx.ours[(g, "accuracy")] for g in groups]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.bar(x, [100 * statistics.fmean(a) for a in acc], 0.5, color="tab:blue", alpha=0.35,
           yerr=[100 * statistics.pstdev(a) if len(a) > 1 else 0 for a in acc], label="accuracy of the group")
    ax.set(xticks=x, xticklabels=[f"{g}\n{PARTNERS[g]}" for g in groups], ylabel="accuracy (%)",
           xlabel="client 0 (80, 50, 20) with client g (its A, B, C counts)")
    lo = min(100 * min(a) for a in acc)
    ax.set_ylim(max(0.0, lo - 10), 100)
    w = ax.twinx()
    for row, style in (("FedAMP weight (exp_cos)", "o-"), ("FedAMP weight (exp_dist)", "s--"),
                       ("DA-PFL weight", "o-")):
        w.plot(x, [statistics.fmean(ctx.ours[(g, row)]) for g in groups], style, label=row,
               color="tab:orange" if row.startswith("DA-PFL") else "tab:red")
    w.set(ylabel="client 0's aggregation weight", ylim=(0, None))
    lines = ax.get_legend_handles_labels()
    more = w.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=7, loc="upper left")
    fig.suptitle(f"DA-PFL Fig. 1: accuracy and aggregation weights, {FIG_DATA[ctx.scale]} (scale {ctx.scale})")
    fig.tight_layout()
    fig.savefig(ctx.path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------------- Fig. 3
@functools.lru_cache(maxsize=8)
def partition_counts(alpha: str, seed: int, scale: str) -> np.ndarray:
    """The (clients, classes) sample counts of the 20-client Dirichlet partition at ``alpha`` as the ready config's
    run draws it (its data and partition seeds; all of each client's samples)."""
    from flplat.data.datasets import load_dataset
    from flplat.data.partitions import build_federation
    from flplat.protocol.seeding import derive_seed

    cfg = _config(scale, alpha, seed)
    fed = build_federation(load_dataset(cfg.data, derive_seed(seed, "data")), cfg.partition,
                           derive_seed(seed, "partition"))
    return fed.label_counts("all")


def count_profile(counts: np.ndarray) -> dict[str, float]:
    """The mean over the rows (clients) of ``counts`` (clients × classes) of the classes held, the largest class
    share and the coefficient of variation (population std / mean) of the class counts."""
    n = np.asarray(counts, dtype=np.float64)
    tot = n.sum(axis=1)
    return {"classes held": float((n > 0).sum(axis=1).mean()), "largest class share": float((n.max(1) / tot).mean()),
            "class-count CV": float((n.std(axis=1) / n.mean(axis=1)).mean())}


def partition_profile(cell, seed: int, scale: str) -> dict[str, float]:
    """Fig. 3, one partition (:func:`count_profile` of its counts)."""
    return count_profile(partition_counts(cell.params["alpha"], seed, scale))


def fig3_findings(ours: dict[tuple[str, str], list[float]]) -> list[tuple[str, bool | None, str]]:
    """"Fig. 3(b) [α = 0.5] has a more heavily imbalance class distribution due to the more significant difference in
    sample numbers between different classes": holds when the mean class-count CV at α = 0.5 is above α = 1's."""
    low, high = ours.get(("alpha=1.0", "class-count CV")), ours.get(("alpha=0.5", "class-count CV"))
    if not low or not high:
        return [("α = 0.5 is more imbalanced than α = 1", None, "needs both cells")]
    lo, hi = statistics.fmean(low), statistics.fmean(high)
    return [("α = 0.5 is more imbalanced than α = 1: larger differences between a client's class counts", hi > lo,
             f"mean class-count CV: α = 1 {lo:.3f}, α = 0.5 {hi:.3f}")]


def plot_partitions(ctx) -> None:
    """Fig. 3: class × client heat maps of the samples, α = 1 (a) and α = 0.5 (b), first seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seed = ctx.seeds[0] if ctx.seeds else 0
    cells = [c for c in ("alpha=1.0", "alpha=0.5") if any(cc == c for cc, _ in ctx.ours)]
    if not cells:
        return
    fig, axes = plt.subplots(1, len(cells), figsize=(6.5 * len(cells), 4), squeeze=False)
    for ax, c in zip(axes[0], cells):
        n = partition_counts(c.split("=")[1], seed, ctx.scale)
        im = ax.imshow(n.T, cmap="YlGnBu", aspect="auto")
        ax.set(title=f"α = {c.split('=')[1]}", xlabel="client", ylabel="class", xticks=range(n.shape[0]),
               yticks=range(n.shape[1]))
        ax.tick_params(labelsize=7)
        fig.colorbar(im, ax=ax, label="samples")
    fig.suptitle(f"DA-PFL Fig. 3: samples per class and client, {FIG_DATA[ctx.scale]}, 20 clients, seed {seed} "
                 f"(scale {ctx.scale})")
    fig.tight_layout()
    fig.savefig(ctx.path, dpi=110)
    plt.close(fig)
