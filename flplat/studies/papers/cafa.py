"""CAFA (seed 001): Tables II-III (CBCC's IID / non-IID client detection: 25% and 50% IID clients, Cases 1-3 with
20, 40, 60 clients; no training) and Table V (best global test accuracy of FedAvg, FedProx, CAFA and the CBCC-only /
ABFA-only ablations, which the paper does not report).

Detection runs exactly what the ``cafa`` strategy does (class proportions of the train splits, silhouette K-means over
k = 2..n-1, largest cluster = IID) on the ``cafa`` partition. It depends on the labels only, so the dataset is a scale
choice: CIFAR-10 (the paper's) at ``paper``, Fashion-MNIST (also 10 balanced classes) at ``reduced``, digits at
``smoke``. Tables IV-V: CIFAR-10 / VGG-19 (``vgg19``, the authors' CIFAR-10 form of it: :mod:`flplat.models.vgg`;
configs/cafa/table5_cifar10.yaml) at every scale but smoke, and Fashion-MNIST with the light CNN in their place
(configs/cafa/table5_fmnist.yaml); reduced: 30 rounds (Table IV's first window only), clients at 10-20% of the equal
share (docs/results_earlier.md). The two tables share their runs.

The figures (:mod:`flplat.studies.papers.cafa_figures`): Fig. 2 (the class proportions of 10 IID and 10 non-IID
clients) and Fig. 5 (CBCC through PCA, Table III's Case 3) are analyses like Tables II-III (no training; the same
datasets per scale); Fig. 4 (silhouette against k) and Fig. 6 (the accuracy curves, TWEMA-smoothed) read the runs of
Tables IV-V (the same cells, methods and scales, so the same runs: after those tables they train nothing). Fig. 6's
numbers are the ones §V-C gives about it: CAFA "reaching 66.8% accuracy (+8.07% over FedProx and +4.69% over FedAvg)
after the first 30 rounds" (the global test accuracy at round 30), FedAvg and FedProx above CAFA "up to around 10th
round" (a finding on round 10), and each curve's best (Table V's numbers, which the curves peak at).
"""

from __future__ import annotations

from flplat.studies.papers import SMOKE
from flplat.studies.papers import cafa_figures as figs
from flplat.studies.papers.cafa_figures import cbcc_case
from flplat.studies.reproduce import Cell, Method, Table

ROWS = ("Acc", "Precision", "Recall", "F1")


def _cases(frac: float) -> list[Cell]:
    return [Cell(f"case{i}", params={"clients": k, "iid_fraction": frac}) for i, k in enumerate((20, 40, 60), 1)]


def detection(cell: Cell, seed: int, scale: str) -> dict[str, float]:
    """CBCC on one ``cafa`` partition: accuracy, precision, recall, F1 of the IID detection and the chosen k."""
    from flplat.metrics.iid_detection import detection_metrics

    c = cbcc_case(cell.params["clients"], cell.params["iid_fraction"], seed, scale)
    d = detection_metrics(c.pred_iid, c.true_iid)
    return {"K": float(c.k), "Acc": d["accuracy"], "Precision": d["precision"], "Recall": d["recall"], "F1": d["f1"]}


DET_METHODS = [Method(r) for r in ("K", *ROWS)]
# no training: the labels of one partition per seed (Tables II-III, Figs. 2 and 5)
LABELS_ONLY = dict(kind="analysis", reference=None, seeds=[0, 1, 2, 3, 4],
                   datasets=["cifar10", "fmnist (reduced)", "digits (smoke)"],
                   notes={"smoke": "digits (labels only matter)", "reduced": "Fashion-MNIST in place of CIFAR-10 (the "
                          "partition and CBCC see class proportions only; both have 10 balanced classes)",
                          "paper": "CIFAR-10 as the paper"})
DET = dict(analyze=detection, tie=0.05, **LABELS_ONLY)

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
                       "of the equal share; CIFAR-10 with the paper's VGG-19 (the authors' CIFAR form: batch norm, "
                       "512-512 classifier), FMNIST with the light CNN in its place",
            "paper": "the paper's setting (150 rounds); CIFAR-10 with the paper's VGG-19 (the authors' CIFAR form: "
                     "batch norm, 512-512 classifier), FMNIST with the light CNN in its place"}
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

# ---------------------------------------------------------------------------------------------------- figures
CAFA_ROW = METHODS[2].overrides  # the CAFA runs of Tables IV-V
FIG6_CELLS = [Cell(f"{c.id}_{name}", c.config, substitute=c.substitute, metric=metric) for c in T5_CELLS
              for name, metric in (("round10", "global_test_accuracy@10"), ("round30", "global_test_accuracy@30"),
                                   ("best", "best_global_test_accuracy"))]

TABLES += [
    Table("fig2", "CAFA Fig. 2: class distribution features of 10 IID and 10 non-IID clients",
          [Cell("case1", params={"clients": 20, "iid_fraction": 0.5})], [Method(r) for r in figs.FIG2_ROWS],
          analyze=figs.class_profile, figure=figs.plot_class_profiles, findings=figs.fig2_findings, tie=0.5,
          **LABELS_ONLY),
    Table("fig4", "CAFA Fig. 4: silhouette score against k (CBCC's k and its silhouette; the CAFA runs of Tables "
          "IV-V), 20 clients, 50% IID", T5_CELLS,
          [Method("k", CAFA_ROW, metric="tau"), Method("silhouette at k", CAFA_ROW, metric="silhouette")],
          metric="tau", reference=None, tie=0.5, seeds=[0, 1, 2], scales=T5_SCALES, notes=T5_NOTES,
          focus=["k", "silhouette at k"], figure=figs.plot_silhouette),
    Table("fig5", "CAFA Fig. 5: CBCC's result through PCA, Case 3 of Table III (60 clients, 50% IID)",
          [Cell("case3", params={"clients": 60, "iid_fraction": 0.5})], [Method(r) for r in figs.FIG5_ROWS],
          analyze=figs.cbcc_pca, figure=figs.plot_cbcc_pca, findings=figs.fig5_findings, tie=0.05, **LABELS_ONLY),
    Table("fig6", "CAFA Fig. 6: global test accuracy (%) of FedAvg, FedProx and CAFA per round (TWEMA-smoothed in "
          "the figure): at rounds 10 and 30 and the best, 20 clients, 50% IID", FIG6_CELLS, METHODS[:3], metric="",
          scale_factor=100.0, seeds=[0, 1, 2], scales=T5_SCALES, notes=T5_NOTES, focus=["CAFA"],
          figure=figs.plot_accuracy, findings=figs.fig6_findings),
]
