"""PQFed (seed 004), MNIST and CIFAR-10 (the CIFAR-10 tables: ``table2_cifar10``, ``table4`` (the paper's Table IV),
``table6_cifar10``, ``fig3_cifar10``, ``mia_cifar10``, ``table7`` / ``table7_stop`` (Table VII, §VI-A), on
configs/pqfed/cifar10_*.yaml, Table I's CIFAR-10 column). MNIST: Table II (the target T with similar / dissimilar
collaborators, FedAvg), Table V (T plus the clients up to a dissimilarity rate, FedAvg / FedProx / FedDyn), Table VI
(PQFed's strict and lenient selection against IFCA), Table VIII (§VI-A, Algorithm 2: T's test accuracy after each stage,
FedAvg / FedProx / FedDyn, and where Algorithm 2 stops), Fig. 3 (EMD to the target against the dissimilarity rate r for
several LDP budgets ε) and §V-D's membership-inference attack against ε (Fig. 4); the last two need no training.

Each training cell is one run of configs/pqfed/mnist_lenient.yaml (IFCA: mnist_baseline.yaml, k = 4 clusters as
the paper's §V-F); the number is ``target_accuracy`` (T's test accuracy after the last round; for IFCA the
``global_accuracy`` of the baseline config, which only T is tested in). FedProx's μ = 0.01 (the paper gives none).
The model is the paper's CNN (Fig. 2: two convolutions, one max-pool, two fully connected layers; ``pqfed_cnn``, whose
docstring in :mod:`flplat.models.cnn` gives the sizes chosen where the figure's text is silent) on MNIST and CIFAR-10,
at every scale but smoke (the MLP).
Reduced (docs/results_earlier.md): 200 images per source (the paper's 400), 10 rounds (20). Fig. 3 follows
``PQFed.similarity`` without the training (public PCA, Laplace LDP, K-means over the pooled noisy features, EMD).

Table VIII: one run of configs/pqfed/mnist_incremental.yaml per inner algorithm and seed, with
``algorithm.incremental_stop=false`` so that every one of the 11 stages (T with the i-th closest client by EMD) is
trained and reported, as the paper's table does; its cells ``stage1`` .. ``stage11`` read the series
``target_accuracy_by_stage`` at step i, so all of them share the run (the stage i of the paper is the client at
r = (i − 1)·10 %; ours is the i-th closest by noisy EMD, which the run's ``pqfed/selection.csv`` lists). The cell
``algorithm2`` is the accuracy of the model Algorithm 2 returns (``algorithm2_accuracy``: the stage of the first
decrease, or the last), and ``table8_stop`` the stage where it stops (``algorithm2_stage``), from the same runs.
The paper does not say how many rounds FederatedTrain runs per stage: ``rounds_per_stage`` = 20 (Table I's 20
rounds) at paper scale, 5 reduced (as docs/results_earlier.md's run), 1 at smoke. §VI-A's text and Table VIII
disagree on where Algorithm 2 stops on MNIST (configs/papers/pqfed.yaml, ``table8_stop``): both are typed in as
printed.
"""

from __future__ import annotations

import math

import numpy as np

from flplat.studies.papers import SMOKE
from flplat.studies.papers import pqfed_figures as figs
from flplat.studies.papers.pqfed_figures import RATES, emd_by_rate, mia_by_client
from flplat.studies.reproduce import Cell, Method, Table, plot_cells

CONFIG = "configs/pqfed/mnist_lenient.yaml"
FED16 = [f"partition.num_clients={1 + len(RATES)}", f"partition.rates={RATES}"]
FED2 = ["partition.num_clients=20", f"partition.rates={[0.0] * 4 + [1.0] * 15}"]
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
                    "partition.samples_per_source=30", "partition.target_test_per_source=30",
                    "federation.eval_every=2"],
          "reduced": ["partition.samples_per_source=200", "partition.target_test_per_source=200",
                      "federation.rounds=10", "federation.eval_every=10"]}
# the paper's CNN at every scale but smoke (Fig. 2: 2 conv, one max-pool, 2 fully connected; the sizes the figure's
# text does not give are flplat/models/cnn.py's choice, said in every header)
CNN_NOTE = "the paper's 2-conv CNN (pqfed_cnn; the sizes Fig. 2's text leaves open as PyTorch's MNIST example)"
NOTES = {"smoke": "CI size: 30 images per source, 2 rounds, the MLP in place of the paper's CNN",
         "reduced": "200 images per source instead of 400 (T trains on 600, tests on 600), 10 rounds instead of 20; "
                    + CNN_NOTE,
         "paper": "the paper's sizes (400 images per source), 20 rounds; " + CNN_NOTE}
COMMON = dict(metric="target_accuracy", scales=SCALES, notes=NOTES, seeds=[0, 1, 2], scale_factor=100.0, tie=0.002)

STAGES = len(RATES)  # Algorithm 2 visits every client other than T: 11 stages
INCREMENTAL = "configs/pqfed/mnist_incremental.yaml"
EVERY_STAGE = ["algorithm.incremental_stop=false"]  # train every stage; Algorithm 2's stop is logged all the same
TABLE8_CELLS = [*(Cell(f"stage{i}", INCREMENTAL, EVERY_STAGE, metric=f"target_accuracy_by_stage@{i}")
                  for i in range(1, STAGES + 1)),
                Cell("algorithm2", INCREMENTAL, EVERY_STAGE, metric="algorithm2_accuracy")]


def _stage_scales(rounds_per_stage: dict[str, int]) -> dict[str, list[str]]:
    return {k: [*SCALES[k], f"algorithm.rounds_per_stage={n}", f"federation.rounds={STAGES * n}",
                f"federation.eval_every={STAGES * n}"] for k, n in rounds_per_stage.items()}


TABLE8 = dict(scales=_stage_scales({"smoke": 1, "reduced": 5}), seeds=[0, 1, 2], scale_factor=1.0, notes={
    "smoke": "CI size: 30 images per source, 1 round per stage, the MLP in place of the paper's CNN",
    "reduced": "200 images per source instead of 400 (T trains on 600, tests on 600), 5 rounds per stage instead of 20 "
               f"(the paper does not give the number); {CNN_NOTE}; every stage trained (incremental_stop=false) so "
               "that each is reported",
    "paper": "400 images per source, 20 rounds per stage (the paper does not give the number; Table I's 20 rounds), "
             f"{CNN_NOTE}; every stage trained (incremental_stop=false) so that each is reported"})


def _table8_figure(ctx):
    """T's accuracy after each stage: ours (mean over seeds, solid) and the paper's (dashed), one colour per method."""
    import statistics

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from flplat.studies.reproduce import load_paper_values, paper_value

    values = load_paper_values("pqfed")
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, m in enumerate(dict.fromkeys(m for _, m in ctx.ours)):
        stages = [s for s in range(1, STAGES + 1) if ctx.ours.get((f"stage{s}", m))]
        ax.plot(stages, [statistics.fmean(ctx.ours[(f"stage{s}", m)]) for s in stages], "o-", color=f"C{i}",
                label=f"{m} (ours)")
        paper = [(s, paper_value(values, "table8", f"stage{s}", m)[0]) for s in range(1, STAGES + 1)]
        ax.plot(*zip(*[(s, v) for s, v in paper if v is not None]), "s--", color=f"C{i}", alpha=0.6,
                label=f"{m} (paper)")
    ax.set(xlabel="stage i (T with the i-th closest client)", ylabel="T's test accuracy",
           title=f"PQFed Table VIII / Algorithm 2 (MNIST, scale {ctx.scale})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(ctx.path, dpi=110)
    plt.close(fig)


EPSILONS = (0.1, 1.0, 10.0, math.inf)


def _fig3_cells(data: str = "mnist") -> list[Cell]:
    from flplat.maths.pqfed import GROUND_COSTS

    return [Cell(f"eps{e:g}_{g}", params={"epsilon": e, "ground_cost": g, "data": data}) for e in EPSILONS
            for g in GROUND_COSTS]


def emd_curve(cell: Cell, seed: int, scale: str) -> dict[str, float]:
    """One repetition of Fig. 3: EMD of the clients at r = 0.1..1.0 to the target, for the cell's ε / ground cost
    (the noise drawn from a generator seeded by the repetition, so both ground costs see the same noisy data)."""
    emd = emd_by_rate(seed, scale, cell.params.get("data", "mnist"), cell.params["epsilon"],
                      cell.params["ground_cost"])[1:]
    return {f"r={r:g}": float(v) for r, v in zip(RATES[1:], emd)}


def _fig3(ctx, data: str = "MNIST"):
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
    fig.suptitle(f"PQFed Fig. 3 ({data}, scale {scale})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


MIA_EPSILONS = (0.1, 1.0, 10.0, 100.0, 1000.0, math.inf)


def mia(cell: Cell, seed: int, scale: str) -> dict[str, float]:
    """§V-D / Fig. 4: the membership-inference attack on every client's clean PCA features at the cell's ε (50
    trials of 200 members each, 5 and 40 at smoke), averaged over the clients (Fig. 6 gives each client's)."""
    res = mia_by_client(seed, scale, cell.params.get("data", "mnist"), cell.params["epsilon"])
    return {k: float(np.mean([r[k] for r in res])) for k in ("power", "fpr", "advantage")}


# Figs. 5 and 6 (flplat/studies/papers/pqfed_figures.py)
FIG5_NOTES = {"smoke": "30 images per source, 1 repetition", "reduced": "the paper's sizes, 10 repetitions",
              "paper": "the paper's sizes, 10 repetitions"}
FIG6_NOTES = {"smoke": "30 images per source, 5 trials of 40 members", "reduced": "the paper's sizes, one "
              "federation (seed 0), 50 trials of 200 members", "paper": "the paper's sizes, one federation (seed 0), "
              "50 trials of 200 members"}


def _fig5(data: str = "mnist", name: str = "MNIST") -> Table:
    return Table(f"fig5{'' if data == 'mnist' else '_' + data}", f"PQFed Fig. 5 ({name}): EMD threshold bands at 30 "
                 "and 60 % of the largest EMD, the clients at r = 0..1 with LDP (ε = 10) and without (ε = ∞): the "
                 "largest r the strict / lenient selection keeps",
                 [Cell(f"eps{e:g}", params={"epsilon": e, "data": data}) for e in (10.0, math.inf)],
                 [Method(r) for r in figs.FIG5_ROWS], kind="analysis", analyze=figs.band_point, reference=None,
                 seeds=list(range(10)), tie=0.05, figure=lambda ctx: figs.plot_bands(ctx, name), datasets=[data],
                 notes=FIG5_NOTES)


def _fig6(data: str = "mnist", name: str = "MNIST") -> Table:
    return Table(f"fig6{'' if data == 'mnist' else '_' + data}", f"PQFed Fig. 6 ({name}): membership-inference "
                 "power of each client against ε (their mean is Fig. 4's power)",
                 [Cell(f"eps{e:g}", params={"epsilon": e, "data": data}) for e in MIA_EPSILONS],
                 [Method(r) for r in figs.FIG6_ROWS], kind="analysis", analyze=figs.client_powers, reference=None,
                 seeds=[0], figure=lambda ctx: figs.plot_client_powers(ctx, name), findings=figs.fig6_findings,
                 datasets=[data], notes=FIG6_NOTES)


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
    Table("table8", "PQFed Table VIII (MNIST): Algorithm 2, T's test accuracy after each stage (T with the i-th "
          "closest client) and of the model Algorithm 2 returns", TABLE8_CELLS,
          [Method(n, o) for n, o in INNER.items()], metric="target_accuracy", tie=0.002, figure=_table8_figure,
          **TABLE8),
    Table("table8_stop", "PQFed §VI-A (MNIST): the stage where Algorithm 2 stops (first decrease of T's accuracy)",
          [Cell("mnist", INCREMENTAL, EVERY_STAGE)], [Method(n, o) for n, o in INNER.items()],
          metric="algorithm2_stage", reference=None, tie=0.5, **TABLE8),
    Table("fig3", "PQFed Fig. 3 (MNIST): EMD to the target against the dissimilarity rate r", _fig3_cells(),
          [Method(f"r={r:g}") for r in RATES[1:]], kind="analysis", analyze=emd_curve, reference=None,
          seeds=list(range(10)), figure=_fig3, datasets=["mnist"],
          notes={"smoke": "30 images per source, 1 repetition", "reduced": "the paper's sizes, 10 repetitions",
                 "paper": "the paper's sizes, 10 repetitions"}),
    Table("mia", "PQFed §V-D / Fig. 4 (MNIST): membership-inference power, false-positive rate and advantage "
          "against ε", [Cell(f"eps{e:g}", params={"epsilon": e}) for e in MIA_EPSILONS],
          [Method(q) for q in ("power", "fpr", "advantage")], kind="analysis", analyze=mia, reference=None,
          datasets=["mnist"], seeds=[0],
          figure=lambda ctx: plot_cells(ctx.ours, f"PQFed MIA (MNIST, scale {ctx.scale})", "rate", ctx.path),
          notes={"smoke": "30 images per source, 5 trials of 40 members", "reduced": "the paper's sizes, one "
                 "federation (seed 0)", "paper": "the paper's sizes, one federation (seed 0)"}),
    _fig5(),
    _fig6(),
]

# ------------------------------------------------------------------ CIFAR-10 (Tables II, IV, VI, VII; §V-A, §VI-A)
# the same experiments on configs/pqfed/cifar10_*.yaml (Table I's CIFAR-10 column: batch 32; T tested on 300 images)
CIFAR = {"lenient": "configs/pqfed/cifar10_lenient.yaml", "baseline": "configs/pqfed/cifar10_baseline.yaml",
         "incremental": "configs/pqfed/cifar10_incremental.yaml"}


def _on_cifar(cells: list[Cell], config: str) -> list[Cell]:
    return [Cell(c.id, config, list(c.overrides), metric=c.metric) for c in cells]


CIFAR_SCALES = {"smoke": SCALES["smoke"],
                "reduced": ["partition.samples_per_source=200", "federation.rounds=10",
                            "federation.eval_every=10"]}
CIFAR_NOTES = {"smoke": NOTES["smoke"],
               "reduced": "200 images per source instead of 400 (T tests on its 300 as the paper), 10 rounds instead "
                          "of 20; " + CNN_NOTE,
               "paper": "the paper's sizes (400 images per source, T tested on 300), 20 rounds; " + CNN_NOTE}
CIFAR_COMMON = {**COMMON, "scales": CIFAR_SCALES, "notes": CIFAR_NOTES}
CIFAR_TABLE8 = {**TABLE8, "scales": {k: [*CIFAR_SCALES[k], *v[len(SCALES[k]):]] for k, v in TABLE8["scales"].items()},
                "notes": {k: v.replace("400 images per source", "400 images per source (T tested on 300)")
                          .replace("(T trains on 600, tests on 600)", "(T tests on its 300 as the paper)")
                          for k, v in TABLE8["notes"].items()}}

TABLES += [
    Table("table2_cifar10", "PQFed Table II (CIFAR-10, FedAvg): T alone and with similar / dissimilar collaborators",
          _on_cifar(TABLE2_CELLS, CIFAR["lenient"]), [Method("FedAvg", INNER["FedAvg"])], reference=None,
          **CIFAR_COMMON),
    Table("table4", "PQFed Table IV (CIFAR-10): T plus the clients with r ≤ the bound",
          _on_cifar(TABLE5_CELLS, CIFAR["lenient"]), [Method(n, o) for n, o in INNER.items()], **CIFAR_COMMON),
    Table("table6_cifar10", "PQFed Table VI (CIFAR-10): PQFed's own selection against IFCA",
          [Cell("cifar10", CIFAR["lenient"], FED16)],
          [Method("PQFed strict", ["algorithm.selection=strict"]),
           Method("PQFed lenient", ["algorithm.selection=lenient"]),
           Method("IFCA", ["algorithm.name=ifca", "algorithm.num_clusters=4"], metric="global_accuracy",
                  config=CIFAR["baseline"])],
          reference="IFCA", focus=["PQFed strict", "PQFed lenient"], **CIFAR_COMMON),
    Table("fig3_cifar10", "PQFed Fig. 3a (CIFAR-10): EMD to the target against the dissimilarity rate r",
          _fig3_cells("cifar10"), [Method(f"r={r:g}") for r in RATES[1:]], kind="analysis", analyze=emd_curve,
          reference=None, seeds=list(range(10)), figure=lambda ctx: _fig3(ctx, "CIFAR-10"), datasets=["cifar10"],
          notes={"smoke": "30 images per source, 1 repetition", "reduced": "the paper's sizes, 10 repetitions",
                 "paper": "the paper's sizes, 10 repetitions"}),
    Table("mia_cifar10", "PQFed §V-D / Fig. 4 (CIFAR-10): membership-inference power, false-positive rate and "
          "advantage against ε", [Cell(f"eps{e:g}", params={"epsilon": e, "data": "cifar10"}) for e in MIA_EPSILONS],
          [Method(q) for q in ("power", "fpr", "advantage")], kind="analysis", analyze=mia, reference=None,
          datasets=["cifar10"], seeds=[0],
          figure=lambda ctx: plot_cells(ctx.ours, f"PQFed MIA (CIFAR-10, scale {ctx.scale})", "rate", ctx.path),
          notes={"smoke": "30 images per source, 5 trials of 40 members", "reduced": "the paper's sizes, one "
                 "federation (seed 0)", "paper": "the paper's sizes, one federation (seed 0)"}),
    _fig5("cifar10", "CIFAR-10"),
    _fig6("cifar10", "CIFAR-10"),
    Table("table7", "PQFed Table VII (CIFAR-10): Algorithm 2, T's test accuracy after each stage (T with the i-th "
          "closest client) and of the model Algorithm 2 returns", _on_cifar(TABLE8_CELLS, CIFAR["incremental"]),
          [Method(n, o) for n, o in INNER.items()], metric="target_accuracy", tie=0.002, **CIFAR_TABLE8),
    Table("table7_stop", "PQFed §VI-A (CIFAR-10): the stage where Algorithm 2 stops (first decrease of T's accuracy)",
          [Cell("cifar10", CIFAR["incremental"], EVERY_STAGE)], [Method(n, o) for n, o in INNER.items()],
          metric="algorithm2_stage", reference=None, tie=0.5, **CIFAR_TABLE8),
]
