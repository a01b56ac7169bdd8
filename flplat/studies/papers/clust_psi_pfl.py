"""Clust-PSI-PFL (seed 000): Table III (global test accuracy) and Table IV (AD; lower is better) for FMNIST,
K = 100, every Table II method (the Table II best hyperparameters are the algorithms' defaults), CL (centralised
training) as the reference line of the paper's table.

Reduced scale (the documented CPU reduction of docs/results.md, Run B): the ``mlp`` (128-64) instead of the light
CNN (one CNN round took 86-145 s here), T = 20 rounds instead of 40, E = 5, evaluation every 5 rounds.
"""

from __future__ import annotations

from flplat.studies.papers import SMOKE
from flplat.studies.reproduce import Cell, Method, Table

SETTINGS = ["dirichlet_50", "dirichlet_0.7", "dirichlet_0.3", "dirichlet_0.2", "dirichlet_0.09", "dirichlet_0.05",
            "similarity_1", "similarity_0.03", "similarity_0"]
CELLS = [Cell(s, f"configs/clust_psi_pfl/table3/fmnist_k100_{s}.yaml") for s in SETTINGS]
METHODS = [Method(n, [f"algorithm.name={a}"]) for n, a in (
    ("CL", "centralized"), ("FedAvg", "fedavg"), ("FedProx", "fedprox"), ("FedAvgM", "fedavgm"),
    ("FedAdagrad", "fedadagrad"), ("FedYogi", "fedyogi"), ("FedAdam", "fedadam"), ("PoC", "poc"),
    ("HACCS", "haccs"), ("FedCLS", "fedcls"), ("CFL", "cfl"), ("FedSoft", "fedsoft"),
    ("Clust-PSI-PFL", "clust_psi_pfl"))]
TABLE4_METHODS = [m for m in METHODS if m.name in ("FedAvg", "FedAvgM", "HACCS", "CFL", "Clust-PSI-PFL")]
# smoke: 10 clients (100 clients of a 600-sample pool are infeasible for the Dirichlet cells)
SCALES = {"smoke": [*SMOKE, "partition.num_clients=10", "partition.min_samples=5"],
          "reduced": ["model.name=mlp", "federation.rounds=20", "federation.local_epochs=5",
                      "federation.eval_every=5"]}
NOTES = {"smoke": "CI size: 600 training images, 10 clients, 2 rounds of 1 epoch, the MLP",
         "reduced": "the MLP (128-64) instead of the light CNN, T = 20 rounds instead of 40 (E = 5, q = 0.5 as the "
                    "paper), evaluation every 5 rounds"}

TABLES = [
    Table("table3", "Clust-PSI-PFL Table III: global test accuracy, FMNIST, K = 100", CELLS, METHODS,
          metric="global_accuracy", scales=SCALES, notes=NOTES, seeds=[0, 1, 2, 3, 4], tie=0.005),
    Table("table4", "Clust-PSI-PFL Table IV: AD (distance of the local accuracies from 1; lower is better), FMNIST, "
          "K = 100", CELLS, TABLE4_METHODS, metric="ad", higher_is_better=False, scales=SCALES, notes=NOTES,
          seeds=[0, 1, 2, 3, 4], tie=0.005),
]
