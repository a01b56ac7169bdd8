"""CAFA (seed 001): Tables II-III (CBCC's IID / non-IID client detection: 25% and 50% IID clients, Cases 1-3 with
20, 40, 60 clients; no training) and Table V (best global test accuracy of FedAvg, FedProx, CAFA and the CBCC-only /
ABFA-only ablations, which the paper does not report).

Detection runs exactly what the ``cafa`` strategy does (class proportions of the train splits, silhouette K-means over
k = 2..n-1, largest cluster = IID) on the ``cafa`` partition. It depends on the labels only, so the dataset is a scale
choice: CIFAR-10 (the paper's) at ``paper``, Fashion-MNIST (also 10 balanced classes) at ``reduced``, digits at
``smoke``. Tables IV-V: CIFAR-10 / VGG-19 at ``paper`` (configs/cafa/table5_cifar10.yaml) and Fashion-MNIST with the
light CNN in its place (configs/cafa/table5_fmnist.yaml); reduced: 30 rounds (Table IV's first window only), clients
at 10-20% of the equal share (docs/results_earlier.md). The two tables share their runs.
"""

from __future__ import annotations

import numpy as np

from flplat.studies.papers import SMOKE
from flplat.studies.reproduce import Cell, Method, Table

DETECTION_DATA = {"smoke": "digits", "reduced": "fmnist", "paper": "cifar10"}
ROWS = ("Acc", "Precision", "Recall", "F1")


def _cases(frac: float) -> list[Cell]:
    return [Cell(f"case{i}", params={"clients": k, "iid_fraction": frac}) for i, k in enumerate((20, 40, 60), 1)]


def detection(cell: Cell, seed: int, scale: str) -> dict[str, float]:
    """CBCC on one ``cafa`` partition: accuracy, precision, recall, F1 of the IID detection and the chosen k."""
    from flplat.data.datasets import load_dataset
    from flplat.data.partitions import build_federation
    from flplat.experiment import load_config
    from flplat.maths.cafa_weights import cbcc_weights, class_proportions
    from flplat.maths.clustering import silhouette_kmeans
    from flplat.metrics.iid_detection import detection_metrics
    from flplat.protocol.seeding import derive_seed

    cfg = load_config(None, [f"data.name={DETECTION_DATA[scale]}", "partition.name=cafa",
                             f"partition.num_clients={cell.params['clients']}",
                             f"partition.iid_fraction={cell.params['iid_fraction']}", "partition.train_fraction=0.8",
                             "partition.val_fraction=0.2", "partition.test_fraction=0.0", f"seed={seed}"])
    ds = load_dataset(cfg.data, derive_seed(seed, "data"))
    fed = build_federation(ds, cfg.partition, derive_seed(seed, "partition"))
    res = silhouette_kmeans(class_proportions(fed.label_counts("train")),
                            rng=np.random.default_rng(derive_seed(seed, "server")).spawn(1)[0])
    _, pred, _ = cbcc_weights(res.labels)
    d = detection_metrics(pred, fed.meta["iid"])
    return {"K": float(res.k), "Acc": d["accuracy"], "Precision": d["precision"], "Recall": d["recall"], "F1": d["f1"]}


DET_METHODS = [Method(r) for r in ("K", *ROWS)]
DET = dict(kind="analysis", analyze=detection, reference=None, seeds=[0, 1, 2, 3, 4], tie=0.05,
           datasets=["cifar10", "fmnist (reduced)", "digits (smoke)"],
           notes={"smoke": "digits (labels only matter)", "reduced": "Fashion-MNIST in place of CIFAR-10 (the "
                  "detection sees class proportions only; both have 10 balanced classes)",
                  "paper": "CIFAR-10 as the paper"})

METHODS = [Method(n, o) for n, o in (
    ("FedAvg", ["algorithm.name=fedavg"]), ("FedProx", ["algorithm.name=fedprox"]), ("CAFA", ["algorithm.name=cafa"]),
    ("CBCC-only", ["algorithm.name=cafa", "algorithm.use_abfa=false"]),
    ("ABFA-only", ["algorithm.name=cafa", "algorithm.use_cbcc=false"]))]

T5_CELLS = [Cell("cifar10", "configs/cafa/table5_cifar10.yaml"),
            Cell("fmnist", "configs/cafa/table5_fmnist.yaml",
                 substitute="Fashion-MNIST / light CNN in place of CIFAR-10 / VGG-19")]
T5_SCALES = {"smoke": [*SMOKE, "partition.size_min=0.5", "federation.accuracy_window=1"],
             "reduced": ["federation.rounds=30", "partition.size_min=0.1", "partition.size_max=0.2"]}
T5_NOTES = {"smoke": "CI size: 600 training images, 2 rounds of 1 epoch (windows of 1 round), the MLP",
            "reduced": "30 rounds instead of 150 (so only Table IV's first window, rounds 0-29), clients hold 10-20% "
                       "of the equal share"}
WINDOWS = ((0, 29), (30, 59), (60, 89), (90, 119), (120, 149))
# Table IV: the mean global test accuracy over each window of 30 rounds: the series the orchestrator logs at the last
# round of each window (federation.accuracy_window = 30 in the configs); at smoke the windows are single rounds
T4_CELLS = [Cell(f"{c.id}_{a}-{b}", c.config, substitute=c.substitute,
                 metric=f"window_mean_global_test_accuracy_by_round@{b + 1}") for c in T5_CELLS for a, b in WINDOWS]

TABLES = [
    Table("table2", "CAFA Table II: CBCC's detection with 25% IID clients", _cases(0.25), DET_METHODS, **DET),
    Table("table3", "CAFA Table III: CBCC's detection with 50% IID clients", _cases(0.5), DET_METHODS, **DET),
    Table("table4", "CAFA Table IV: mean global test accuracy (%) per window of 30 rounds, 20 clients, 50% IID",
          T4_CELLS, METHODS[:3], metric="", scale_factor=100.0, seeds=[0, 1, 2], scales=T5_SCALES, notes=T5_NOTES,
          focus=["CAFA"]),
    Table("table5", "CAFA Table V: best global test accuracy (%), 20 clients, 50% IID", T5_CELLS,
          METHODS, metric="best_global_test_accuracy", scale_factor=100.0, seeds=[0, 1, 2], scales=T5_SCALES,
          notes=T5_NOTES, focus=["CAFA", "CBCC-only", "ABFA-only"]),
]
