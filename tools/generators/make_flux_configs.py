"""Write the ready configs for Flux's Table 1 MNIST / FMNIST / CIFAR-10 / CIFAR-100 columns (App. F.1: 4 shift types
x 8 levels), the
1,200-client scalability setting (App. F.2, Table 50, with the local data duplicated: ``partition.train_copies``), the
K-client setting of App. F.2 / Fig. 5 (configs/flux/clients.yaml, K = 5; the sweeps override K and the copies) and
the real-world sets (App. B.1, F.4 / Table 59): configs/flux/chexpert_{low,medium,high}.yaml and
configs/flux/officehome.yaml (``partition.name=metadata``: the planted distributions are level combinations of the
loaders' metadata columns), App. F.3's mixed shifts (Tables 56-58: configs/flux/mixed/, ``partition.name=mixed_shift``,
levels 3-6) and App. D.3's dynamic setting (Table 6: configs/flux/drift/, ``partition.name=drift``, levels 3, 5, 7).

One YAML per (dataset, shift type, level) under configs/flux/table1/, with the paper's setup (App. B.2: LeNet-5 on
MNIST / FMNIST / CIFAR-10 and ResNet-9 on CIFAR-100, 10 rounds (CIFAR-100: 15), 10 clients, E=2, SGD lr 0.005
momentum 0.9, batch 64, 20% validation per client). Table 1 reports the
mean over the 4 x 8 cells of a dataset. The algorithm is chosen at run time:
``flplat run configs/flux/table1/mnist_feature_l5.yaml algorithm.name=flux`` (or flux_prior, fedavg, cfl, ...).
Choices the paper leaves open: 10 unseen test clients drawn from the training clients' distributions, and a
60/20/20 train/validation/test split per client (the pool is dealt evenly to the 20 clients).
Per-method settings sit in ``algorithm_defaults`` (applied when ``algorithm.name`` is that method, under explicit
``algorithm.*`` keys): IFCA, FeSEM, FedEM and FedRC get the true number of distributions M (0 = the partition's M,
App. E.1) and Flux / Flux-soft the dataset's DBSCAN eps scaling (App. D.2).
Re-run after changing the template: python tools/generators/make_flux_configs.py
"""

from __future__ import annotations

from pathlib import Path

SHIFTS = ("feature", "label", "concept_yx", "concept_xy")
# App. D.2: DBSCAN eps scaling 1.0 on MNIST and CIFAR-10, 0.95 on FMNIST, 0.98 on CIFAR-100 (in algorithm_defaults of
# flux and flux_soft); App. B.2: LeNet-5 and 10 rounds, ResNet-9 and 15 rounds on CIFAR-100.
DATASETS = {"mnist": 1.0, "fmnist": 0.95, "cifar10": 1.0, "cifar100": 0.98}
MODEL = {"cifar100": ("resnet9", "ResNet-9", 15)}  # dataset -> (model, name, rounds); else LeNet-5, 10 rounds

TRUE_M = """# Per-method keys, applied when algorithm.name is that method (an explicit algorithm.KEY wins).
# App. E.1: IFCA, FeSEM, FedEM and FedRC are given the true number of distributions M (0: the partition's M).
{scaling_note}algorithm_defaults:
  ifca: {{num_clusters: 0}}
  fesem: {{num_clusters: 0}}
  fedem: {{num_components: 0}}
  fedrc: {{num_clusters: 0}}{scaling}
"""


def defaults(scaling: float) -> str:
    """The ``algorithm_defaults`` block of a config (true M for the baselines; Flux's eps scaling when not 1)."""
    if scaling == 1.0:
        return TRUE_M.format(scaling_note="", scaling="")
    lines = "".join(f"\n  {m}: {{dbscan_scaling: {scaling}}}" for m in ("flux", "flux_soft"))
    note = f"# App. D.2: Flux's DBSCAN eps scaling on this dataset is {scaling}.\n"
    return TRUE_M.format(scaling_note=note, scaling=lines)


# App. B.2's training setup, shared by the Table 1 cells and the real-world sets (a format template: {rounds})
FLUX_RUN = """algorithm:
  name: flux
federation:
  rounds: {rounds}
  client_fraction: 1.0
  local_epochs: 2
  batch_size: 64
  eval_batch_size: 1024
  optimizer:
    name: sgd
    lr: 0.005
    momentum: 0.9
"""

TEMPLATE = """# Flux (seed 003) Table 1 / App. F.1 cell: {dataset}, shift {shift}, level {level} (Table 9).
# Paper setup (App. B.2): {mname}, 10 clients, {rounds} rounds, E=2, SGD lr 0.005 momentum 0.9, batch 64, 20% \
validation.
# Run:  flplat run {path} algorithm.name=flux   (also flux_prior, fedavg, cfl, ifca, apfl, ...)
seed: 0
data:
  name: {dataset}
partition:
  name: shift
  type: {shift}
  level: {level}
  num_clients: 10
  num_unseen_clients: 10
  samples_per_client: 0
  train_fraction: 0.6
  val_fraction: 0.2
  test_fraction: 0.2
model:
  name: {model}
""" + FLUX_RUN + """tracking:
  experiment: flux-table1-{dataset}
{defaults}"""

SCALE = """# Flux (seed 003) App. F.2 / Table 50: 1,200 clients, participation 0.2, MNIST, known association.
# Shift: P(X) with rotations {{0, 90, 180, 270}} (level 3); change partition.type / level for the others
# (F.2: label level 7 = 4 classes, concept_yx level 5, concept_xy level 6).
# App. F.2 duplicates the local data as clients grow: x2 at 25 clients, x4 at 50, x8 at 100, i.e. K / 12.5; the
# factor for 1,200 clients is not stated, and K / 12.5 = 96 is used (27 training images per client -> 2,592; the
# 100-client setting, same split: 600 x 0.6 x 8 = 2,880). partition.train_copies repeats train splits (indices only).
# Run:  flplat run configs/flux/scalability_1200.yaml algorithm.name=flux   (or fedavg)
seed: 0
data:
  name: mnist
partition:
  name: shift
  type: feature
  level: 3
  num_clients: 1200
  num_unseen_clients: 100
  samples_per_client: 0
  train_copies: 96
  train_fraction: 0.6
  val_fraction: 0.2
  test_fraction: 0.2
model:
  name: lenet5
algorithm:
  name: flux
federation:
  rounds: 10
  client_fraction: 0.2
  local_epochs: 2
  batch_size: 64
  eval_every: 10
  optimizer:
    name: sgd
    lr: 0.005
    momentum: 0.9
tracking:
  experiment: flux-scalability
{defaults}"""

# App. F.2 / Fig. 5, Tables 51-55 (and the protocol of F.5 / Table 60 and F.6): K training clients, full
# participation, the local train data repeated as clients grow; the sweeps of flplat reproduce flux set K, the copies
# and the shift through overrides on this one file (flplat/studies/papers/flux_sweeps.py)
CLIENTS = """# Flux (seed 003) App. F.2 / Fig. 5, Tables 51-55: K clients on MNIST, full participation, known
# association and test phase. This file is K = 5 with P(X) at F.2's level; the sweeps set the rest by overrides:
# partition.num_clients = K, partition.train_copies = 1 / 2 / 4 / 8 at K = 5 / 25 / 50 / 100 (F.2: "For 5 clients, no
# duplication [...] For 100 clients [...] x 8"), and F.2's level per shift: P(X) rotations {{0, 90, 180, 270}} =
# level 3, P(Y) 4 classes = level 7, P(Y|X) swap pool 5 = level 5, P(X|Y) rotations on 6 classes = level 6.
# Choices F.2 leaves open: as many unseen test clients as training clients (Table 1's ready configs: 10 and 10), the
# pool dealt evenly to all of them, a 60/20/20 train/validation/test split per training client.
# Run:  flplat run configs/flux/clients.yaml algorithm.name=flux partition.num_clients=25 \\
#           partition.num_unseen_clients=25 partition.train_copies=2
seed: 0
data:
  name: mnist
partition:
  name: shift
  type: feature
  level: 3
  num_clients: 5
  num_unseen_clients: 5
  samples_per_client: 0
  train_copies: 1
  train_fraction: 0.6
  val_fraction: 0.2
  test_fraction: 0.2
model:
  name: lenet5
""" + FLUX_RUN + """tracking:
  experiment: flux-clients
{defaults}"""


# App. B.1: "Low heterogeneity: 2 distributions based on ViewPosition (Frontal vs. Lateral). Medium heterogeneity: 4
# distributions based on ViewPosition and Age (<50 vs. >=50). High heterogeneity: 8 distributions based on
# ViewPosition, Age, and Sex (Male vs. Female)" -> the chexpert loader's meta columns view / age / sex
CHEXPERT_LEVELS = {
    "low": (["view"], "2 distributions by ViewPosition (Frontal vs. Lateral)"),
    "medium": (["view", "age"], "4 distributions by ViewPosition and Age (< 50 vs. >= 50)"),
    "high": (["view", "age", "sex"], "8 distributions by ViewPosition, Age and Sex (Male vs. Female)"),
}

REAL = """# Flux (seed 003) {where}: {dataset_name}, {what}.
# Paper setup (App. B.2{f4}): ResNet-9, {clients_note}, {rounds} rounds, E=2, SGD lr 0.005 momentum 0.9, batch 64,
# 20% validation{loss}; DBSCAN eps scaling 1.0 (App. D.2).
# Choices the paper leaves open: {choices}
# Run:  flplat run {path} algorithm.name=flux   (also flux_prior, fedavg, cfl, ifca, apfl, ...)
seed: 0
data:
  name: {dataset}
partition:
  name: metadata
  columns: [{columns}]
  bins: {bins}
  assign: {assign}
  num_clients: 20
  num_unseen_clients: 20
  samples_per_client: 0
  train_fraction: 0.6
  val_fraction: 0.2
  test_fraction: 0.2
model:
  name: resnet9
""" + FLUX_RUN + """tracking:
  experiment: flux-{experiment}
{defaults}"""

UNSEEN = ("20 unseen test clients (Flux's test phase) drawn from the training clients' distributions, the pool dealt "
          "evenly to the 40 clients, a 60/20/20 train/validation/test split per training client")


def real_world(root: Path) -> None:
    """configs/flux/chexpert_<level>.yaml and configs/flux/officehome.yaml (App. B.1, B.2, F.4)."""
    for level, (columns, what) in CHEXPERT_LEVELS.items():
        path = root / f"chexpert_{level}.yaml"
        path.write_text(REAL.format(
            where="App. F.4 / Table 59 cell", dataset_name="CheXpert", what=f"non-IID level {level}: {what} (App. "
            "B.1)", f4=", F.4", clients_note="20 clients", rounds=20,
            loss=", binary cross-entropy (multi-label), macro ROC AUC", dataset="chexpert",
            choices=f"{UNSEEN}; each client draws its distribution uniformly (partition.assign=random, as the "
            "authors' generator); a sample of unknown sex belongs to no distribution.",
            path=path.relative_to(root.parents[1]), columns=", ".join(columns),
            bins="{age: [50]}" if "age" in columns else "{}", assign="random", experiment="chexpert",
            defaults=defaults(1.0)))
    path = root / "officehome.yaml"
    path.write_text(REAL.format(
        where="Table 1 cell", dataset_name="Office-Home", what="its four domains Art, Clipart, Product, Real-World as "
        "the distributions, 20 classes (App. B.1)", f4="", clients_note="20 clients", rounds=40, loss="",
        dataset="office_home", choices="the number of clients (20, as CheXpert's in App. F.4); " + UNSEEN + "; the "
        "domains cycled over the clients (partition.assign=balanced, as the authors' generator).",
        path=path.relative_to(root.parents[1]), columns="domain", bins="{}", assign="balanced",
        experiment="officehome", defaults=defaults(1.0)))


# App. F.3 / Tables 56-58: two shifts planted together (partition.name=mixed_shift), levels 3-6, MNIST
MIXES = {"feature+label": (56, "P(X) + P(Y)"), "concept_xy+label": (57, "P(X|Y) + P(Y)"),
         "concept_yx+label": (58, "P(Y|X) + P(Y)")}
MIXED = """# Flux (seed 003) App. F.3 / Table {table} cell: mnist, mixed shift {name}, level {level} \
(Table 9's row for both).
# Paper setup (App. B.2, as Table 1): LeNet-5, 10 clients, 10 rounds, E=2, SGD lr 0.005 momentum 0.9, batch 64, 20% \
validation.
# Our reading (F.3 says no more): each client draws one distribution of each shift at the level, independently; its
# id is the pair (flplat/data/mixed_shift_partition.py). 10 unseen test clients, a 60/20/20 split as Table 1's cells.
# Run:  flplat run {path} algorithm.name=flux   (also flux_prior, fedavg, cfl, ifca, apfl, ...)
seed: 0
data:
  name: mnist
partition:
  name: mixed_shift
  type: {mix}
  level: {level}
  num_clients: 10
  num_unseen_clients: 10
  samples_per_client: 0
  train_fraction: 0.6
  val_fraction: 0.2
  test_fraction: 0.2
model:
  name: lenet5
""" + FLUX_RUN + """tracking:
  experiment: flux-mixed-mnist
{defaults}"""

# App. D.3 / Table 6's dynamic setting (partition.name=drift): the four shifts at levels 3, 5, 7, MNIST
DRIFT_LEVELS = (3, 5, 7)
DRIFT = """# Flux (seed 003) App. D.3 / Table 6 cell (dynamic setting): mnist, shift {shift}, level {level} \
(Table 9's bank).
# "two distribution drifts during training and one during testing [...] all other settings match those in Table 1":
# LeNet-5, 10 clients, 10 rounds, E=2, SGD lr 0.005 momentum 0.9, batch 64, 20% validation. Each client holds two
# training distributions of the bank, the second from round 5 (ANDA's locker 0.5 of R = 10, the authors' generator),
# and its test data (unseen client j = training client j's) a third (flplat/data/drift_partition.py). Levels 3, 5, 7:
# D.3 says "three levels"; 3 / 5 / 7 are the P(X) banks of the authors' dynamic generator (4, 6, 12 patterns).
# Flux and Flux-soft re-cluster every round (algorithm.recluster_every=1: D.3's dynamic variant, warm-started from the
# nearest previous centroid), which includes the change round without being told it.
# Run:  flplat run {path} algorithm.name=flux   (also flux_soft, fedavg, cfl, ifca, apfl, ...)
seed: 0
data:
  name: mnist
partition:
  name: drift
  type: {shift}
  level: {level}
  change_rounds: [5]
  test_drift: true
  num_clients: 10
  num_unseen_clients: 10
  samples_per_client: 0
  train_fraction: 0.6
  val_fraction: 0.2
  test_fraction: 0.2
model:
  name: lenet5
""" + FLUX_RUN + """tracking:
  experiment: flux-drift-mnist
{defaults}  flux: {{recluster_every: 1}}
  flux_soft: {{recluster_every: 1}}
"""


def mixed_and_drift(root: Path) -> None:
    """configs/flux/mixed/mnist_<mix>_l<level>.yaml (Tables 56-58) and configs/flux/drift/mnist_<shift>_l<level>.yaml
    (Table 6's dynamic setting)."""
    for sub in ("mixed", "drift"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for mix, (table, name) in MIXES.items():
        for level in range(3, 7):
            path = root / "mixed" / f"mnist_{mix.replace('+', '_')}_l{level}.yaml"
            path.write_text(MIXED.format(table=table, name=name, level=level, mix=mix,
                                         path=path.relative_to(root.parents[1]), rounds=10, defaults=defaults(1.0)))
    for shift in SHIFTS:
        for level in DRIFT_LEVELS:
            path = root / "drift" / f"mnist_{shift}_l{level}.yaml"
            path.write_text(DRIFT.format(shift=shift, level=level, path=path.relative_to(root.parents[1]), rounds=10,
                                         defaults=defaults(1.0)))


def main() -> None:
    root = Path(__file__).resolve().parents[2] / "configs" / "flux"
    (root / "table1").mkdir(parents=True, exist_ok=True)
    for dataset, scaling in DATASETS.items():
        for shift in SHIFTS:
            for level in range(1, 9):
                path = root / "table1" / f"{dataset}_{shift}_l{level}.yaml"
                rel = path.relative_to(root.parents[1])
                model, mname, rounds = MODEL.get(dataset, ("lenet5", "LeNet-5", 10))
                path.write_text(TEMPLATE.format(dataset=dataset, shift=shift, level=level, path=rel, model=model,
                                                mname=mname, rounds=rounds, defaults=defaults(scaling)))
    (root / "scalability_1200.yaml").write_text(SCALE.format(defaults=defaults(1.0)))
    (root / "clients.yaml").write_text(CLIENTS.format(rounds=10, defaults=defaults(1.0)))
    real_world(root)
    mixed_and_drift(root)


if __name__ == "__main__":
    main()
