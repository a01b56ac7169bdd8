"""Flux (seed 003): App. F.1 on MNIST (Tables 12-19, the per-shift, per-level numbers behind Table 1 / Fig. 4):
four shift types × levels 2, 5, 8, known-association and test-phase accuracy, and the ARI of the clustered methods'
clusterings against the true distributions (our addition: the paper reports no ARI table; a PNG figure).

The three tables share their runs (same resolved configs): running ``test_phase`` after ``known_association`` trains
nothing new. Reduced scale (docs/results.md): 500 samples per client (the paper deals the pool evenly, about 3,000
per client) and SGD lr 0.03 instead of 0.005 so that the 10 rounds of 2 epochs on the smaller data converge.
Flux's DBSCAN scaling on MNIST is 1.0 (App. D.2), the algorithm's default.
"""

from __future__ import annotations

from flplat.studies.papers import SMOKE
from flplat.studies.reproduce import Cell, Method, Table, plot_cells

SHIFTS = ("feature", "label", "concept_yx", "concept_xy")
LEVELS = (2, 5, 8)
CELLS = [Cell(f"{s}_l{lv}", f"configs/flux/table1/mnist_{s}_l{lv}.yaml") for s in SHIFTS for lv in LEVELS]
METHODS = [Method(n, [f"algorithm.name={a}"]) for n, a in (
    ("FedAvg", "fedavg"), ("IFCA", "ifca"), ("FedRC", "fedrc"), ("FedEM", "fedem"), ("FeSEM", "fesem"),
    ("FedDrift", "feddrift"), ("CFL", "cfl"), ("pFedMe", "pfedme"), ("APFL", "apfl"), ("ATP", "atp"),
    ("Flux", "flux"), ("Flux-prior", "flux_prior"))]
CLUSTERED = [m for m in METHODS if m.name in ("IFCA", "FeSEM", "FedDrift", "CFL", "Flux", "Flux-prior")]
SCALES = {"smoke": [*SMOKE, "partition.samples_per_client=30"],  # 20 clients (10 unseen) x 30 = the 600 pool
          "reduced": ["partition.samples_per_client=500", "federation.optimizer.lr=0.03"]}
NOTES = {"smoke": "CI size: 30 samples per client, 2 rounds of 1 epoch, the MLP",
         "reduced": "500 samples per client instead of the whole pool dealt evenly (about 3,000), SGD lr 0.03 instead "
                    "of 0.005; LeNet-5, 10 clients, 10 rounds, E = 2 as the paper"}
COMMON = dict(scales=SCALES, notes=NOTES, seeds=[0, 1, 2], scale_factor=100.0, tie=0.005,
              focus=["Flux", "Flux-prior"])


def _ari_figure(ctx):
    plot_cells(ctx.ours, f"Flux: ARI of the clusterings against the true distributions (MNIST, scale {ctx.scale})",
               "ARI", ctx.path)


TABLES = [
    Table("known_association", "Flux App. F.1 (MNIST): accuracy with known association", CELLS, METHODS,
          metric="known_association_accuracy", **COMMON),
    Table("test_phase", "Flux App. F.1 (MNIST): test-phase accuracy (unseen, unlabeled clients)", CELLS, METHODS,
          metric="test_phase_accuracy", **COMMON),
    Table("ari", "Flux (MNIST): ARI of the clustering against the true distribution ids", CELLS, CLUSTERED,
          metric="ari", reference=None, figure=_ari_figure, **{**COMMON, "scale_factor": 1.0, "tie": 0.05}),
]
