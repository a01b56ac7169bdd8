"""DA-PFL (seed 002): on the paper's data, Table II (CIFAR-100, the first 20 classes), Table III on FEMNIST, Table IV on
CIFAR-100 and Table VI's CIFAR-100 / FEMNIST columns (``table2``, ``table3_femnist``, ``table4_cifar100``,
``table6_cifar100_femnist``); Table I (CIFAR-10, mean personalised accuracy over the last 10 rounds, 20 / 100 clients at
q = 0.4 / 0.2, low (α = 1.0) and high (α = 0.5) imbalance), Table III (FEMNIST) compared on digits and FMNIST in its
place (the paper has no digits / FMNIST; FEMNIST is its handwriting dataset: the claim, DA-PFL above FedAvg and every
baseline, is judged, values are not comparable), Table V (ablations V1 / V2, CIFAR-10, 20 clients, α = 1.0; on digits
and CIFAR-10), Table IV (Many / Medium / Few class accuracy; the paper's is CIFAR-100, run on digits and FMNIST) and
Table VI (rounds to 40% / 50%: CIFAR-10 as the paper, digits and FMNIST for its FEMNIST columns), and the accuracy
curves of Fig. 4 as a PNG per table.

Models as §IV-D: CIFAR-10 and CIFAR-100 the two FedRep CNNs it follows (``dapfl_cnn10``, ``dapfl_cnn100``: 2 conv + 3
fully connected layers, sizes from FedRep's code, :mod:`flplat.models.cnn`), FEMNIST the two-hidden-layer MLP. The
stand-ins keep stand-in models, said in each header: digits the same MLP, FMNIST LeNet-5.

Methods as §IV-D: SGD lr 0.01 (CIFAR-100: 0.001), batch 10, the same regularisation coefficient for every regularisation
method (λ = μ = 1), FedRep's head / body epochs 10 / 1 (its paper), the clustering methods' k = 3 for 20 clients and 7
for 100 (§IV-D). The ready configs (configs/dapfl/) are the paper's protocol at CPU size (digits: 100 rounds; FMNIST: a
6,000-image pool, 60 rounds), so ``reduced`` runs them as they are; CIFAR-10 runs the full data.

Fig. 1 (the toy example of §I: aggregation weight against accuracy, FedAMP's similarity against DA-PFL's affinity)
and Fig. 3 (the class × client heat maps of the partition at α = 1 and 0.5) train no federation run: they are
analyses of :mod:`flplat.studies.papers.dapfl_figures`, with CIFAR-10 at ``paper``, FMNIST at ``reduced`` and digits
at ``smoke``.
"""

from __future__ import annotations

from flplat.studies.papers import SMOKE
from flplat.studies.papers import dapfl_figures as figs
from flplat.studies.reproduce import Cell, Method, Table, plot_curves

# every DA-PFL cell measures the rounds to 40% and 50% (Table VI's CIFAR-10 / FEMNIST targets), so that Tables I,
# III, IV and VI share their runs
TARGETS = ["metrics.target_accuracy=[0.4,0.5]"]
# CIFAR-100's Table VI targets are 20% / 30%: its cells measure all four (Tables II, IV and VI share the runs)
TARGETS_BY = {"cifar100": ["metrics.target_accuracy=[0.2,0.3,0.4,0.5]"]}


def _cells(dataset: str) -> list[Cell]:
    return [Cell(f"{dataset}_k{k}_{lvl}", f"configs/dapfl/{dataset}_k{k}_a{a}.yaml", TARGETS_BY.get(dataset, TARGETS),
                 params={"k": 3 if k == 20 else 7}) for k in (20, 100) for lvl, a in (("low", "1.0"), ("high", "0.5"))]


def _by_metric(dataset: str, cols: dict[str, str], substitute: str | None) -> list[Cell]:
    """Cells of one run (20 clients, high imbalance) read through several metrics (Tables IV and VI)."""
    return [Cell(f"{dataset}_{name}", f"configs/dapfl/{dataset}_k20_a0.5.yaml", TARGETS_BY.get(dataset, TARGETS),
                 params={"k": 3},
                 substitute=substitute, metric=metric) for name, metric in cols.items()]


FMM = {"many": "acc_many_last10", "medium": "acc_medium_last10", "few": "acc_few_last10",
       "avg": "mean_local_accuracy_last10"}
ROUNDS = {"c40": "rounds_to_acc40", "c50": "rounds_to_acc50"}
ROUNDS_CIFAR100 = {"c20": "rounds_to_acc20", "c30": "rounds_to_acc30"}


METHODS = [Method(n, o) for n, o in (
    ("FedAvg", ["algorithm.name=fedavg"]),
    ("FedProx", ["algorithm.name=fedprox", "algorithm.mu=1.0"]),
    ("Ditto", ["algorithm.name=ditto", "algorithm.lam=1.0"]),
    ("FedRep", ["algorithm.name=fedrep", "algorithm.head_epochs=10", "algorithm.body_epochs=1"]),
    ("CReFF", ["algorithm.name=creff"]),
    ("IFCA", ["algorithm.name=ifca", "algorithm.num_clusters={k}"]),
    ("FedPFA", ["algorithm.name=fedpfa"]),
    ("FedAMP", ["algorithm.name=fedamp"]),
    ("FedSoft", ["algorithm.name=fedsoft", "algorithm.num_clusters={k}"]),
    ("DA-PFL", ["algorithm.name=dapfl", "algorithm.lam=1.0"]))]
ABLATIONS = [Method("DA-PFL-V1", ["algorithm.name=dapfl", "algorithm.lam=1.0", "algorithm.affinity=false",
                                  "algorithm.dynamic=false"]),
             Method("DA-PFL-V2", ["algorithm.name=dapfl", "algorithm.lam=1.0", "algorithm.dynamic=false"]),
             Method("DA-PFL", ["algorithm.name=dapfl", "algorithm.lam=1.0"])]
SCALES = {"smoke": [*SMOKE, "partition.min_samples=2"], "reduced": []}
NOTES = {"smoke": "CI size: 600 training samples, 2 rounds of 1 epoch, the MLP",
         "reduced": "the ready configs as they are: digits (1,797 images, MLP, 100 rounds) or FMNIST (6,000-image "
                    "pool, LeNet-5, 60 rounds) in place of the paper's datasets and models; CIFAR-10 full with the "
                    "paper's CNN (FedRep's CIFAR-10 CNN, dapfl_cnn10) and rounds",
         "paper": "the ready configs as they are: CIFAR-10 with the paper's CNN (FedRep's CIFAR-10 CNN, dapfl_cnn10); "
                  "digits (MLP) and FMNIST (LeNet-5) in place of the paper's datasets and models"}


def _curves(ctx):
    """Fig. 4 style: mean personalised accuracy per round, every method, one panel per cell."""
    plot_curves(ctx, "mean_local_accuracy", "DA-PFL: mean personalised accuracy per round", "accuracy")


COMMON = dict(metric="mean_local_accuracy_last10", figure=_curves, scales=SCALES, notes=NOTES, seeds=[0, 1, 2],
              scale_factor=100.0, tie=0.005)

# the paper's CIFAR-100 (first 20 classes) and FEMNIST, besides the digits / FMNIST stand-ins above: Table II, Table III
# on FEMNIST (LEAF's JSON, the 10 lowercase letters a-j, writers pooled and dealt by the Dirichlet partition as in every
# DA-PFL table, §IV-B; the two-hidden-layer MLP), Table IV's Many / Medium / Few on CIFAR-100, Table VI on FEMNIST
PAPER_NOTES = {**NOTES, "reduced": "the ready configs as they are (the paper's data, rounds and models; CIFAR-100's "
               "dapfl_cnn100, FEMNIST's two-hidden-layer MLP)"}
PAPER_COMMON = {**COMMON, "notes": PAPER_NOTES}

TABLES = [
    Table("table1", "DA-PFL Table I: mean personalised accuracy (%), CIFAR-10", _cells("cifar10"), METHODS, **COMMON),
    Table("table3_digits", "DA-PFL Table III (FEMNIST) on digits: mean personalised accuracy (%)", _cells("digits"),
          METHODS, substitute="digits (scikit-learn, 8x8; the same two-hidden-layer MLP) in place of FEMNIST",
          **COMMON),
    Table("table3_fmnist", "DA-PFL Table III (FEMNIST) on FMNIST: mean personalised accuracy (%)", _cells("fmnist"),
          METHODS, substitute="Fashion-MNIST (6,000-image pool) with LeNet-5 in place of FEMNIST with the "
          "two-hidden-layer MLP",
          **COMMON),
    Table("table5", "DA-PFL Table V: ablations, 20 clients, α = 1.0 (CIFAR-10 as the paper; digits in its place)",
          [_cells("cifar10")[0], Cell("digits_k20_low", "configs/dapfl/digits_k20_a1.0.yaml",
                                      substitute="digits with the MLP in place of CIFAR-10 with its CNN")],
          ABLATIONS, reference="DA-PFL-V1", **COMMON),
    Table("table4", "DA-PFL Table IV: Many / Medium / Few class accuracy (%), 20 clients, high imbalance (the paper: "
          "CIFAR-100; digits and FMNIST in its place)",
          _by_metric("digits", FMM, "digits with the MLP in place of CIFAR-100 with its CNN") +
          _by_metric("fmnist", FMM, "FMNIST with LeNet-5 in place of CIFAR-100 with its CNN"), METHODS, **COMMON),
    Table("table6", "DA-PFL Table VI: rounds to reach 40% / 50% mean personalised accuracy, 20 clients, high imbalance "
          "(lower is better; not reached: no value)",
          _by_metric("cifar10", ROUNDS, None) +
          _by_metric("digits", ROUNDS, "digits in place of FEMNIST (the same MLP)") +
          _by_metric("fmnist", ROUNDS, "FMNIST with LeNet-5 in place of FEMNIST with the MLP"),
          [m for m in METHODS if m.name in ("FedAvg", "FedProx", "Ditto", "CReFF", "FedPFA", "FedAMP", "DA-PFL")],
          higher_is_better=False, **{**COMMON, "scale_factor": 1.0, "tie": 0.5}),
    Table("table2", "DA-PFL Table II: mean personalised accuracy (%), CIFAR-100 (the first 20 classes)",
          _cells("cifar100"), METHODS, **PAPER_COMMON),
    Table("table3_femnist", "DA-PFL Table III: mean personalised accuracy (%), FEMNIST (10 lowercase letters)",
          _cells("femnist"), METHODS, **PAPER_COMMON),
    Table("table4_cifar100", "DA-PFL Table IV: Many / Medium / Few class accuracy (%), CIFAR-100 (first 20 classes), "
          "20 clients, high imbalance", _by_metric("cifar100", FMM, None), METHODS, **PAPER_COMMON),
    Table("table6_cifar100_femnist", "DA-PFL Table VI (CIFAR-100 and FEMNIST columns): rounds to reach 20% / 30% "
          "(CIFAR-100) and 40% / 50% (FEMNIST) mean personalised accuracy, 20 clients, high imbalance (lower is "
          "better; not reached: no value)",
          _by_metric("cifar100", ROUNDS_CIFAR100, None) + _by_metric("femnist", ROUNDS, None),
          [m for m in METHODS if m.name in ("FedAvg", "FedProx", "Ditto", "CReFF", "FedPFA", "FedAMP", "DA-PFL")],
          higher_is_better=False, **{**PAPER_COMMON, "scale_factor": 1.0, "tie": 0.5}),
]

# ---------------------------------------------------------------------------------------- Figs. 1 and 3 (no runs)
FIG_NOTES = {"smoke": "digits (configs/dapfl/digits_k20_*.yaml) in place of CIFAR-10",
             "reduced": "FMNIST (configs/dapfl/fmnist_k20_*.yaml, its 6,000-image pool) in place of CIFAR-10",
             "paper": "CIFAR-10 (configs/dapfl/cifar10_k20_*.yaml)"}
FIG1_NOTES = {k: f"{v}; classes A, B, C = {figs.TOY_CLASSES[figs.FIG_DATA[k]]}; the pair trains "
                 f"{figs.PAIR_ROUNDS[k]} rounds of FedAvg" + ("; 0.4 × the §I counts (digits is small)" if k == "smoke"
                                                              else "") for k, v in FIG_NOTES.items()}
FIGS = dict(kind="analysis", reference=None, datasets=["cifar10", "fmnist (reduced)", "digits (smoke)"])

TABLES += [
    Table("fig1", "DA-PFL Fig. 1: accuracy and aggregation weights of four groups (client 0 with client g): FedAMP's "
          "similarity against DA-PFL's affinity", [Cell(g) for g in figs.PARTNERS],
          [Method(r) for r in figs.FIG1_ROWS], analyze=figs.toy_point, figure=figs.plot_toy,
          findings=figs.fig1_findings, seeds=[0, 1, 2, 3, 4], notes=FIG1_NOTES, **FIGS),
    Table("fig3", "DA-PFL Fig. 3: samples per class and client of the partition, 20 clients, α = 1 (low) and 0.5 "
          "(high imbalance)", [Cell(f"alpha={a}", params={"alpha": a}) for a in ("1.0", "0.5")],
          [Method(r) for r in figs.FIG3_ROWS], analyze=figs.partition_profile, figure=figs.plot_partitions,
          findings=figs.fig3_findings, seeds=[0, 1, 2], notes=FIG_NOTES, **FIGS),
]
