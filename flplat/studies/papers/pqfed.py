"""PQFed (seed 004), MNIST: Table II (the target T with similar / dissimilar collaborators, FedAvg), Table V (T plus
the clients up to a dissimilarity rate, FedAvg / FedProx / FedDyn), Table VI (PQFed's strict and lenient selection
against IFCA), Fig. 3 (EMD to the target against the dissimilarity rate r for several LDP budgets ε) and §V-D's
membership-inference attack against ε (Fig. 4); the last two need no training. Table VIII (Algorithm 2's stages) is
not ported yet.

Each training cell is one run of configs/pqfed/mnist_lenient.yaml (IFCA: mnist_baseline.yaml, k = 4 clusters as
the paper's §V-F); the number is ``target_accuracy`` (T's test accuracy after the last round; for IFCA the
``global_accuracy`` of the baseline config, which only T is tested in). FedProx's μ = 0.01 (the paper gives none).
Reduced (docs/results.md): 200 images per source (the paper's 400), 10 rounds (20). Fig. 3 follows
``PQFed.similarity`` without the training (public PCA, Laplace LDP, K-means over the pooled noisy features, EMD).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from flplat.studies.papers import SMOKE
from flplat.studies.reproduce import Cell, Method, Table, plot_cells

RATES = [round(0.1 * i, 1) for i in range(11)]
CONFIG = "configs/pqfed/mnist_lenient.yaml"
FED16 = [f"partition.num_clients={1 + len(RATES)}", f"partition.pqfed_rates={RATES}"]
FED2 = ["partition.num_clients=20", f"partition.pqfed_rates={[0.0] * 4 + [1.0] * 15}"]
INNER = {"FedAvg": ["algorithm.inner=fedavg", "algorithm.inner_params={}"],
         "FedProx": ["algorithm.inner=fedprox", "algorithm.inner_params={mu: 0.01}"],
         "FedDyn": ["algorithm.inner=feddyn", "algorithm.inner_params={}"]}


def _given(ids) -> list[str]:
    return ["algorithm.selection=given", f"algorithm.collaborators={list(ids)}"]


TABLE2_CELLS = [Cell("exp1", CONFIG, [*FED2, "algorithm.selection=none"]),
                Cell("exp2", CONFIG, [*FED2, *_given([1, 2, 3, 4])]),
                Cell("exp3", CONFIG, [*FED2, *_given([5, 6, 7, 8])]),
                Cell("exp4", CONFIG, [*FED2, *_given(range(1, 10))]),
                Cell("exp5", CONFIG, [*FED2, "algorithm.selection=all"])]
TABLE5_CELLS = [Cell(f"exp{5 + j}", CONFIG, [*FED16, *_given(range(1, j + 1))]) for j in range(1, 12)]
# smoke: the whole MNIST pool (the sources are drawn from it) and test set (it holds the 500-image public sample)
SCALES = {"smoke": [*SMOKE, "data.max_train_samples=0", "data.max_test_samples=0",
                    "partition.pqfed_samples_per_source=30", "partition.pqfed_target_test_per_source=30",
                    "federation.eval_every=2"],
          "reduced": ["partition.pqfed_samples_per_source=200", "partition.pqfed_target_test_per_source=200",
                      "federation.rounds=10", "federation.eval_every=10"]}
NOTES = {"smoke": "CI size: 30 images per source, 2 rounds, the MLP",
         "reduced": "200 images per source instead of 400 (T trains on 600, tests on 600), 10 rounds instead of 20; "
                    "LeNet-5 for the paper's 2-conv MNIST CNN"}
COMMON = dict(metric="target_accuracy", scales=SCALES, notes=NOTES, seeds=[0, 1, 2], scale_factor=100.0, tie=0.002)

EPSILONS = (0.1, 1.0, 10.0, math.inf)


def _fig3_cells() -> list[Cell]:
    from flplat.maths.pqfed import GROUND_COSTS

    return [Cell(f"eps{e:g}_{g}", params={"epsilon": e, "ground_cost": g}) for e in EPSILONS for g in GROUND_COSTS]


@functools.lru_cache(maxsize=2)
def _features(seed: int, scale: str):
    """One repetition's federation (seed = repetition) projected on the public PCA: (clients' features, lo, hi)."""
    from flplat.data.datasets import load_dataset
    from flplat.data.partitions import build_federation
    from flplat.experiment import load_config
    from flplat.maths import pqfed as pm

    rates = RATES[1:]
    per_source = {"smoke": 60, "reduced": 400, "paper": 400}[scale]
    cfg = load_config(None, ["data.name=mnist", "partition.name=pqfed", f"partition.num_clients={1 + len(rates)}",
                             f"partition.pqfed_rates={rates}", "partition.train_fraction=1.0",
                             "partition.test_fraction=0.0", f"partition.pqfed_samples_per_source={per_source}",
                             "partition.pqfed_pca_components=50", "tracking.enabled=false"])
    data = build_federation(load_dataset(cfg.data, 0), cfg.partition, seed)
    pub = data.x_global_test[data.public_indices].numpy()
    mean, comps = pm.fit_public_pca(pub, 50)
    lo, hi = pm.feature_range(pm.project(pub, mean, comps))
    feats = [pm.project(data.x[data.indices(k, "train")].numpy(), mean, comps) for k in range(data.num_clients)]
    return feats, lo, hi


def emd_curve(cell: Cell, seed: int, scale: str) -> dict[str, float]:
    """One repetition of Fig. 3: EMD of the clients at r = 0.1..1.0 to the target, for the cell's ε / ground cost
    (the noise drawn from a generator seeded by the repetition, so both ground costs see the same noisy data)."""
    from flplat.maths import pqfed as pm

    feats, lo, hi = _features(seed, scale)
    rng = np.random.default_rng([seed, 1])
    noisy = [pm.laplace_ldp(f, cell.params["epsilon"], rng, lo, hi) for f in feats]
    centers, hists = pm.kmeans_histograms(noisy, 15, seed=seed)
    emd = pm.emd_to_target(hists, 0, centers, cell.params["ground_cost"])[1:]
    return {f"r={r:g}": float(v) for r, v in zip(RATES[1:], emd)}


def _fig3(ctx):
    import matplotlib

    matplotlib.use("Agg")
    import statistics

    import matplotlib.pyplot as plt

    ours, scale, path = ctx.ours, ctx.scale, ctx.path
    cells = list(dict.fromkeys(c for c, _ in ours))
    costs = sorted({c.split("_", 1)[1] for c in cells})
    fig, axes = plt.subplots(1, len(costs), figsize=(5 * len(costs), 4), squeeze=False)
    for ax, g in zip(axes[0], costs):
        for c in (c for c in cells if c.endswith("_" + g)):
            rows = [m for cc, m in ours if cc == c]
            ax.plot([float(m[2:]) for m in rows], [statistics.fmean(ours[(c, m)]) for m in rows], "o-",
                    label=c.split("_")[0].replace("eps", "ε = "))
        ax.set(xlabel="dissimilarity rate r", ylabel="EMD to the target", title=f"ground cost: {g}")
        ax.legend()
    fig.suptitle(f"PQFed Fig. 3 (MNIST, scale {scale})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


MIA_EPSILONS = (0.1, 1.0, 10.0, 100.0, 1000.0, math.inf)


def mia(cell: Cell, seed: int, scale: str) -> dict[str, float]:
    """§V-D / Fig. 4: the membership-inference attack on every client's clean PCA features at the cell's ε (50
    trials of 200 members each, 5 and 40 at smoke), averaged over the clients."""
    from flplat.maths import pqfed as pm

    feats, _, _ = _features(seed, scale)
    rng = np.random.default_rng([seed, 2])
    n, trials = (40, 5) if scale == "smoke" else (200, 50)
    res = [pm.membership_inference(f, cell.params["epsilon"], rng, n=n, trials=trials) for f in feats]
    return {k: float(np.mean([r[k] for r in res])) for k in ("power", "fpr", "advantage")}


TABLES = [
    Table("table2", "PQFed Table II (MNIST, FedAvg): T alone and with similar / dissimilar collaborators",
          TABLE2_CELLS, [Method("FedAvg", INNER["FedAvg"])], reference=None, **COMMON),
    Table("table5", "PQFed Table V (MNIST): T plus the clients with r ≤ the bound", TABLE5_CELLS,
          [Method(n, o) for n, o in INNER.items()], **COMMON),
    Table("table6", "PQFed Table VI (MNIST): PQFed's own selection against IFCA", [Cell("mnist", CONFIG, FED16)],
          [Method("PQFed strict", ["algorithm.selection=strict"]),
           Method("PQFed lenient", ["algorithm.selection=lenient"]),
           Method("IFCA", ["algorithm.name=ifca", "algorithm.num_clusters=4"], metric="global_accuracy",
                  config="configs/pqfed/mnist_baseline.yaml")],
          reference="IFCA", focus=["PQFed strict", "PQFed lenient"], **COMMON),
    Table("fig3", "PQFed Fig. 3 (MNIST): EMD to the target against the dissimilarity rate r", _fig3_cells(),
          [Method(f"r={r:g}") for r in RATES[1:]], kind="analysis", analyze=emd_curve, reference=None,
          seeds=list(range(10)), figure=_fig3,
          notes={"smoke": "60 images per source, 1 repetition", "reduced": "the paper's sizes, 10 repetitions",
                 "paper": "the paper's sizes, 10 repetitions"}),
    Table("mia", "PQFed §V-D / Fig. 4 (MNIST): membership-inference power, false-positive rate and advantage "
          "against ε", [Cell(f"eps{e:g}", params={"epsilon": e}) for e in MIA_EPSILONS],
          [Method(q) for q in ("power", "fpr", "advantage")], kind="analysis", analyze=mia, reference=None,
          seeds=[0], figure=lambda ctx: plot_cells(ctx.ours, f"PQFed MIA (MNIST, scale {ctx.scale})", "rate",
                                                   ctx.path),
          notes={"smoke": "60 images per source, 5 trials of 40 members", "reduced": "the paper's sizes, one "
                 "federation (seed 0)", "paper": "the paper's sizes, one federation (seed 0)"}),
]
