"""CAFA (seed 001): the analyses and drawings behind Figs. 2, 4, 5 and 6 (the tables are in
:mod:`flplat.studies.papers.cafa`).

* :func:`cbcc_case` -- CBCC on one ``cafa`` partition exactly as the ``cafa`` strategy runs it (class proportions of
  the train splits, silhouette K-means over k = 2..n-1, largest cluster = IID), shared by Tables II-III, Fig. 2 and
  Fig. 5. It depends on the labels only, so the dataset is a scale choice (``DETECTION_DATA``).
* Fig. 2 ("the category distribution features for 10 IID and 10 Non-IID clients ... IID clients exhibit more uniform
  distributions"): :func:`class_profile` summarises the class proportions of the 20-client, 50 %-IID partition (the
  setting of Tables IV-V) per group; :func:`fig2_findings` judges the caption's claim and §IV-B's "each client has
  20%-40% of the total categories (i.e., 2-4 in CIFAR-10)" for the non-IID clients.
* Fig. 4 ("the Silhouette Score curve, giving an example of how the Silhouette Score varies with k ... we used
  curves like this to automatically select k"): the ``silhouette_by_k`` series every ``cafa`` run logs, drawn from
  the CAFA runs of Tables IV-V (:func:`plot_silhouette`).
* Fig. 5 ("Visualization of CBCC's result through PCA dimensionality reduction under Case 3 of Table III (50% IID
  client)"; "a pair of clear visualization results before and after applying CBCC"): the clients' class-proportion
  vectors projected on their first two principal components, before (the clients as they are, IID / non-IID from
  the partition) and after CBCC (coloured by CBCC's K-means cluster, the largest one -- the IID cluster -- marked).
  :func:`cbcc_pca` gives Table III Case 3's numbers beside the PCA's explained variance; :func:`fig5_findings`
  judges "IID clients ... naturally form the largest cluster".
* Fig. 6 (FedAvg, FedProx and CAFA over 150 rounds, smoothed by TWEMA): the per-round global test accuracy of the
  Tables IV-V runs (mean over seeds), drawn raw and smoothed with :func:`flplat.metrics.curves.twema` at
  ``tracking.curve_smoothing`` (:func:`plot_accuracy`); :func:`fig6_findings` judges "both FedProx and FedAvg
  outperform CAFA in the beginning (i.e., up to around 10th round)".
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass

import numpy as np

DETECTION_DATA = {"smoke": "digits", "reduced": "fmnist", "paper": "cifar10"}
FIG2_CASE = (20, 0.5)  # 10 IID + 10 non-IID clients: Table III's Case 1, the Tables IV-V setting
FIG5_CASE = (60, 0.5)  # Table III's Case 3
GROUP_ROWS = ("classes held", "largest class share", "entropy")
FIG2_ROWS = (*(f"{g}: {r}" for g in ("IID", "non-IID") for r in GROUP_ROWS),
             "non-IID: fewest classes", "non-IID: most classes")
FIG5_ROWS = ("K", "IID cluster size", "Precision", "Recall", "F1", "PCA variance (2 components)")


@dataclass(frozen=True)
class CBCCCase:
    """One partition and CBCC's result on it."""

    props: np.ndarray  # (K, C) class proportions of the train splits (Eq. 1)
    true_iid: np.ndarray  # (K,) the partition's IID clients
    labels: np.ndarray  # (K,) K-means cluster of each client
    k: int
    scores: dict[int, float]  # mean silhouette per k
    pred_iid: np.ndarray  # (K,) in the largest cluster (Eq. 7)


@functools.lru_cache(maxsize=16)
def cbcc_case(clients: int, iid_fraction: float, seed: int, scale: str) -> CBCCCase:
    """CBCC on the ``cafa`` partition of ``clients`` clients, ``iid_fraction`` of them IID (80/20 train /
    validation), of ``DETECTION_DATA[scale]``; the K-means seed is the one the ``cafa`` strategy draws."""
    from flplat.data.datasets import load_dataset
    from flplat.data.partitions import build_federation
    from flplat.experiment import load_config
    from flplat.maths.cafa_weights import cbcc_weights, class_proportions
    from flplat.maths.clustering import silhouette_kmeans
    from flplat.protocol.seeding import derive_seed

    cfg = load_config(None, [f"data.name={DETECTION_DATA[scale]}", "partition.name=cafa",
                             f"partition.num_clients={clients}", f"partition.iid_fraction={iid_fraction}",
                             "partition.train_fraction=0.8", "partition.val_fraction=0.2",
                             "partition.test_fraction=0.0", f"seed={seed}"])
    ds = load_dataset(cfg.data, derive_seed(seed, "data"))
    fed = build_federation(ds, cfg.partition, derive_seed(seed, "partition"))
    props = class_proportions(fed.label_counts("train"))
    res = silhouette_kmeans(props, rng=np.random.default_rng(derive_seed(seed, "server")).spawn(1)[0])
    _, pred, _ = cbcc_weights(res.labels)
    return CBCCCase(props, np.asarray(fed.meta["iid"], dtype=bool), np.asarray(res.labels), int(res.k),
                    dict(res.scores), pred)


# ----------------------------------------------------------------------------------------------------- Fig. 2
def group_profile(props: np.ndarray) -> dict[str, float]:
    """Mean over the rows of ``props`` (class proportions) of: the classes held (proportion > 0), the largest class
    share, and the entropy normalised by log C (1: uniform over all C classes, 0: a single class)."""
    p = np.asarray(props, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(p > 0, p * np.log(p), 0.0).sum(axis=1) / np.log(p.shape[1])
    return {"classes held": float((p > 0).sum(axis=1).mean()), "largest class share": float(p.max(axis=1).mean()),
            "entropy": float(ent.mean())}


def class_profile(cell, seed: int, scale: str) -> dict[str, float]:
    """Fig. 2, one partition: per group (IID / non-IID) the mean classes held, largest share and normalised
    entropy, and the fewest / most classes a non-IID client holds."""
    c = cbcc_case(*FIG2_CASE, seed, scale)
    out = {}
    for name, mask in (("IID", c.true_iid), ("non-IID", ~c.true_iid)):
        out.update({f"{name}: {k}": v for k, v in group_profile(c.props[mask]).items()})
    held = (c.props[~c.true_iid] > 0).sum(axis=1)
    out.update({"non-IID: fewest classes": float(held.min()), "non-IID: most classes": float(held.max())})
    return out


def fig2_findings(ours: dict[tuple[str, str], list[float]]) -> list[tuple[str, bool | None, str]]:
    """The caption's "IID clients exhibit more uniform distributions" (holds: the IID clients' mean normalised
    entropy above the non-IID clients' in every seed) and §IV-B's 2-4 classes per non-IID client."""
    iid, non = ours.get(("case1", "IID: entropy"), []), ours.get(("case1", "non-IID: entropy"), [])
    lo, hi = ours.get(("case1", "non-IID: fewest classes"), []), ours.get(("case1", "non-IID: most classes"), [])
    out: list[tuple[str, bool | None, str]] = []
    if iid and non:
        out.append(("IID clients exhibit more uniform distributions (Fig. 2's caption)",
                    all(a > b for a, b in zip(iid, non)),
                    f"normalised entropy: IID {statistics.fmean(iid):.3f}, non-IID {statistics.fmean(non):.3f} "
                    f"(mean over {len(iid)} seed{'s' if len(iid) > 1 else ''}; holds: IID above non-IID in every "
                    "seed)"))
    if lo and hi:
        out.append(("each non-IID client holds 20-40 % of the classes, 2-4 of 10 (§IV-B)",
                    min(lo) >= 2 and max(hi) <= 4, f"non-IID clients hold {min(lo):g} to {max(hi):g} classes"))
    return out


def plot_class_profiles(ctx) -> None:
    """Fig. 2: one curve per client (class proportion against class), IID and non-IID side by side, first seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seed = ctx.seeds[0] if ctx.seeds else 0
    c = cbcc_case(*FIG2_CASE, seed, ctx.scale)
    classes = np.arange(c.props.shape[1])
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, (name, mask) in zip(axes, (("IID", c.true_iid), ("non-IID", ~c.true_iid))):
        for row in c.props[mask]:
            ax.plot(classes, row, "o-", ms=3, lw=1, alpha=0.8)
        ax.set(title=f"{name} clients ({int(mask.sum())})", xlabel="class", xticks=classes)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("share of the client's data")
    fig.suptitle(f"CAFA Fig. 2: class distribution features, {DETECTION_DATA[ctx.scale]}, seed {seed} "
                 f"(scale {ctx.scale})")
    fig.tight_layout()
    fig.savefig(ctx.path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------------- Fig. 4
def plot_silhouette(ctx) -> None:
    """Fig. 4: the mean silhouette against k of every CAFA run (one line per seed, one panel per dataset), the
    chosen k marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves: dict[str, list[tuple[str, list]]] = {}
    for (c, m), ids in ctx.runs.items():
        if m == "k":
            pts = [(ctx.client.get_run(r).data.params.get("seed", "?"), ctx.history(r, "silhouette_by_k")) for r in ids]
            if any(h for _, h in pts):
                curves[c] = [(s, h) for s, h in pts if h]
    if not curves:
        return
    fig, axes = plt.subplots(1, len(curves), figsize=(max(7.0, 5.5 * len(curves)), 3.8), squeeze=False)
    for ax, (c, hs) in zip(axes[0], curves.items()):
        for i, (seed, h) in enumerate(hs):
            ks, s = zip(*h)
            best = int(np.argmax(s))  # the smallest k at the maximum, as the search picks it
            ax.plot(ks, s, "o-", ms=3, lw=1.1, color=f"C{i}", label=f"seed {seed}: k = {ks[best]:g}")
            ax.plot([ks[best]], [s[best]], "*", ms=12, color=f"C{i}")
        ax.set(title=c, xlabel="number of clusters k", ylabel="mean silhouette score")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"CAFA Fig. 4: silhouette against k of the CAFA runs (scale {ctx.scale})")
    fig.tight_layout()
    fig.savefig(ctx.path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------------- Fig. 5
def pca2(x: np.ndarray) -> tuple[np.ndarray, float]:
    """The rows of ``x`` on their first two principal components and the share of the variance those keep."""
    from sklearn.decomposition import PCA

    pca = PCA(n_components=2, svd_solver="full").fit(np.asarray(x, dtype=np.float64))
    return pca.transform(x), float(pca.explained_variance_ratio_.sum())


def cbcc_pca(cell, seed: int, scale: str) -> dict[str, float]:
    """Fig. 5, one partition (Table III's Case 3): CBCC's k, the IID cluster's size, its precision / recall / F1
    against the partition's IID clients, and the variance the 2-D PCA keeps."""
    from flplat.metrics.iid_detection import detection_metrics

    c = cbcc_case(*FIG5_CASE, seed, scale)
    d = detection_metrics(c.pred_iid, c.true_iid)
    return {"K": float(c.k), "IID cluster size": float(c.pred_iid.sum()), "Precision": d["precision"],
            "Recall": d["recall"], "F1": d["f1"], "PCA variance (2 components)": pca2(c.props)[1]}


def fig5_findings(ours: dict[tuple[str, str], list[float]]) -> list[tuple[str, bool | None, str]]:
    """§V-B: "IID clients ... naturally form the largest cluster, which we refer to as the IID cluster" -- holds
    when, in every seed, the largest cluster is exactly the IID clients (F1 = 1)."""
    f1 = ours.get(("case3", "F1"), [])
    if not f1:
        return []
    p, r = ours.get(("case3", "Precision"), []), ours.get(("case3", "Recall"), [])
    return [("IID clients form the largest cluster, the IID cluster (§V-B, Fig. 5)", all(v == 1.0 for v in f1),
             f"the largest cluster is exactly the IID clients in {sum(v == 1.0 for v in f1)} of {len(f1)} seeds "
             f"(precision {statistics.fmean(p):.3f}, recall {statistics.fmean(r):.3f})")]


def plot_cbcc_pca(ctx) -> None:
    """Fig. 5: the clients' class-proportion vectors on their first two principal components, before CBCC (IID /
    non-IID as the partition made them) and after (CBCC's clusters, the largest -- the IID cluster -- in red)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seed = ctx.seeds[0] if ctx.seeds else 0
    c = cbcc_case(*FIG5_CASE, seed, ctx.scale)
    xy, var = pca2(c.props)
    fig, (before, after) = plt.subplots(1, 2, figsize=(10, 4.2), sharex=True, sharey=True)
    for mask, marker, name in ((c.true_iid, "o", "IID"), (~c.true_iid, "x", "non-IID")):
        before.scatter(xy[mask, 0], xy[mask, 1], marker=marker, color="tab:gray", label=f"{name} client")
    iid_cluster = int(np.bincount(c.labels).argmax())
    for k in np.unique(c.labels):  # colour: CBCC's cluster (red: the IID one); marker: the partition's truth
        color = "tab:red" if k == iid_cluster else f"C{k % 10 if k % 10 != 3 else 9}"
        for mask, marker in ((c.true_iid, "o"), (~c.true_iid, "x")):
            sel = (c.labels == k) & mask
            after.scatter(xy[sel, 0], xy[sel, 1], marker=marker, color=color, s=40 if k == iid_cluster else 25,
                          label="IID cluster" if k == iid_cluster and marker == "o" else None)
    before.set(title="before CBCC: the clients (IID / non-IID)", xlabel="PC 1", ylabel="PC 2")
    after.set(title=f"after CBCC: {c.k} clusters, the largest = IID", xlabel="PC 1")
    for ax in (before, after):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"CAFA Fig. 5: CBCC through PCA (variance kept {var:.0%}), Case 3 of Table III, "
                 f"{DETECTION_DATA[ctx.scale]}, seed {seed} (scale {ctx.scale})")
    fig.tight_layout()
    fig.savefig(ctx.path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------------- Fig. 6
def curve_smoothing(ctx) -> float:
    """``tracking.curve_smoothing`` of the table's runs as planned (``--set`` included), else its default."""
    from flplat.config import TrackingConfig

    if not ctx.jobs:
        return TrackingConfig().curve_smoothing
    from flplat.experiment import load_config

    job = ctx.jobs[0]
    return float(load_config(job.config, list(job.overrides)).tracking.curve_smoothing)


def mean_curve(ctx, run_ids: list[str], metric: str) -> tuple[list[int], list[float]]:
    """(rounds, mean over the runs of ``metric`` at each round any of them logged it)."""
    hists = [dict(ctx.history(r, metric)) for r in run_ids]
    rounds = sorted(set().union(*hists)) if hists else []
    return rounds, [float(np.mean([h[t] for h in hists if t in h])) for t in rounds]


def plot_accuracy(ctx) -> None:
    """Fig. 6: the global test accuracy per round of FedAvg, FedProx and CAFA (mean over seeds), raw (faint) and
    TWEMA-smoothed (``tracking.curve_smoothing``), one panel per dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from flplat.metrics.curves import twema

    p = curve_smoothing(ctx)
    datasets = list(dict.fromkeys(c.rsplit("_", 1)[0] for c, _ in ctx.runs))
    panels = {d: {m: ids for (c, m), ids in ctx.runs.items() if c == f"{d}_best" and ids} for d in datasets}
    panels = {d: runs for d, runs in panels.items() if runs}
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(max(8.0, 6 * len(panels)), 4), squeeze=False)
    for ax, (d, runs) in zip(axes[0], panels.items()):
        for i, (m, ids) in enumerate(runs.items()):
            rounds, acc = mean_curve(ctx, ids, "global_test_accuracy")
            if not rounds:
                continue
            ax.plot(rounds, acc, color=f"C{i}", alpha=0.25, lw=0.8)
            n = f"{len(ids)} seed{'s' if len(ids) > 1 else ''}"
            ax.plot(rounds, twema(rounds, acc, p), color=f"C{i}", lw=1.6, label=f"{m} ({n})")
        ax.set(title=d, xlabel="round", ylabel="global test accuracy")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"CAFA Fig. 6: TWEMA-smoothed accuracy, smoothing {p:g} (faint: raw; scale {ctx.scale})")
    fig.tight_layout()
    fig.savefig(ctx.path, dpi=110)
    plt.close(fig)


def fig6_findings(ours: dict[tuple[str, str], list[float]]) -> list[tuple[str, bool | None, str]]:
    """§V-C: "both FedProx and FedAvg outperform CAFA in the beginning (i.e., up to around 10th round)" -- per
    dataset, holds when both means at round 10 are above CAFA's."""
    claim = "FedAvg and FedProx above CAFA in the first rounds, up to about round 10"
    out: list[tuple[str, bool | None, str]] = []
    for cell in dict.fromkeys(c for c, _ in ours if c.endswith("_round10")):
        mean = {m: statistics.fmean(ours[(cell, m)]) for m in ("FedAvg", "FedProx", "CAFA") if ours.get((cell, m))}
        if len(mean) < 3:
            continue
        out.append((f"{claim} ({cell})", mean["FedAvg"] > mean["CAFA"] and mean["FedProx"] > mean["CAFA"],
                    "accuracy at round 10: " + ", ".join(f"{m} {100 * v:.2f} %" for m, v in mean.items())))
    return out or [(claim, None, "no run has all three methods at round 10 (fewer rounds at this scale, or not run)")]
