"""Structured experiment configuration (OmegaConf) and its validation, in one place.

An experiment config is an :class:`ExperimentConfig`. The ``algorithm`` and ``model`` sections are namespaced by
name: their keys are checked against the ``Config`` dataclass registered under ``algorithm.name`` /
``model.name``, so ``algorithm.mu`` is only valid when the algorithm defines ``mu``. Switching algorithms on a
config written for another one works: when an override changes ``algorithm.name``, the file's algorithm keys are
moved to ``algorithm_unused`` -- carried, warned about, logged as ``algorithm_unused.*`` params, never used -- and
the chosen algorithm starts from its defaults plus the ``algorithm.*`` overrides. An override that the chosen
algorithm does not define stays an error (naming the algorithms that define it).

Every invalid value raises :class:`~flplat.errors.ConfigError` with a one-line message that names the dotted key
and the allowed values; the CLI turns it into exit status 2 before anything (an MLflow run, a file) is created.

This module sits below data, models and algorithms (they import its dataclasses and :func:`namespaced_section`)
and imports none of them: the names to check against come in as :class:`Registries`, filled in by the one
validation entry point :func:`flplat.experiment.load_config`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from flplat.errors import ConfigError, check_choice, check_range, first_line

__all__ = ["ConfigError", "ExperimentConfig", "Registries", "dotlist", "namespaced_section", "parse_config",
           "validate"]


ACS_STATES = ["AL", "AK", "AZ", "AR", "CA", "CO", "CT", "DE", "FL", "GA", "HI", "ID", "IL", "IN", "IA", "KS", "KY",
              "LA", "ME", "MD", "MA", "MI", "MN", "MS", "MO", "MT", "NE", "NV", "NH", "NJ", "NM", "NY", "NC", "ND",
              "OH", "OK", "OR", "PA", "RI", "SC", "SD", "TN", "TX", "UT", "VT", "VA", "WA", "WV", "WI", "WY", "PR"]


@dataclass
class TextConfig:
    """Text datasets (sent140, amazon_reviews; flplat/data/text.py): lowercase word tokens, a vocabulary built on
    the training split only, ids padded / truncated to ``max_length`` (0 = padding, 1 = out of vocabulary)."""

    max_length: int = 25  # tokens per example (the Clust-PSI-PFL authors' Sent140 length)
    min_freq: int = 1  # a word enters the vocabulary when it occurs at least this often in the training split
    max_vocab: int = 100000  # at most this many words (most frequent first); 0: no limit
    padding: str = "pre"  # pre | post: where the padding ids go (pre: Keras' pad_sequences default)
    truncation: str = "pre"  # pre | post: which end of a long example is cut off


@dataclass
class ACSIncomeConfig:
    """``acs_income`` (folktables' ACSIncome task on ACS PUMS person files; flplat/data/tabular.py)."""

    year: int = 2018
    horizon: str = "1-Year"  # 1-Year | 5-Year
    states: list[str] = field(default_factory=lambda: list(ACS_STATES))  # 50 states + PR: 1,664,500 people (2018)
    scaler: str = "robust"  # robust (median / IQR) | standard (mean / std) | none: per feature, fitted on the pool


@dataclass
class SerengetiConfig:
    """``serengeti`` (Snapshot Serengeti consensus table, Swanson et al. 2015; flplat/data/tabular.py)."""

    num_classes: int = 13  # the most frequent species (ties: alphabetical); used when `classes` is empty
    classes: list[str] = field(default_factory=list)  # explicit species names, in label order
    features: list[str] = field(default_factory=lambda: [
        "NumImages", "Count", "Standing", "Resting", "Moving", "Eating", "Interacting", "Babies", "Hour", "Month",
        "Site"])
    scaler: str = "standard"  # robust | standard | none


@dataclass
class Sent140Config:
    """``sent140`` (flplat/data/text.py): LEAF's JSON or the original Sentiment140 CSV."""

    source: str = "auto"  # auto (LEAF JSON when present, else the CSV) | leaf | csv
    labels: str = "polarity3"  # polarity3: 0/2/4 -> 0/1/2 (3 classes, Table I) | binary: negative 0, positive 1


@dataclass
class AmazonConfig:
    """``amazon_reviews`` (flplat/data/text.py)."""

    source: str = "categories"  # categories (6 product classes, 40k + 10k) | full (5 stars) | polarity (2)
    fields: str = "text"  # text | title_text (the title, a space, then the text)


@dataclass
class FEMNISTConfig:
    """``femnist`` (LEAF's JSON; flplat/data/leaf.py)."""

    classes: list[str] = field(default_factory=lambda: list("abcdefghij"))  # characters kept (empty: all 62)


@dataclass
class CheXpertConfig:
    """``chexpert`` (train.csv / valid.csv + images; flplat/data/medical.py)."""

    image_size: int = 64  # images resized to image_size x image_size, grey (Flux's code: 64)
    uncertain: str = "ones"  # ones (U-Ones: -1 -> 1, Flux's code) | zeros (U-Zeros); blank is always 0
    age_threshold: int = 50  # meta['age_group'] = age >= this (Flux App. B.1: < 50 vs >= 50)
    max_train_rows: int = 0  # > 0: only the first rows of train.csv (Flux's code: 100,000); 0: all


@dataclass
class OfficeHomeConfig:
    """``office_home`` (<Domain>/<Class>/*.jpg; flplat/data/officehome.py)."""

    num_classes: int = 20  # the first classes in sorted folder order (Flux App. B.1: 20); 0: all 65
    image_size: int = 64  # Flux's code: 64 x 64
    domains: list[str] = field(default_factory=lambda: ["Art", "Clipart", "Product", "Real_World"])


@dataclass
class DataConfig:
    """Which dataset to load and from where (see :mod:`flplat.data.datasets`)."""

    name: str = "digits"
    root: str | None = None  # directory with the raw files; None: documented locations / $FLPLAT_DATA
    download: bool = False  # let torchvision download when the files are not found locally
    cache: bool = True  # keep decoded, standardised image files on disk (keyed by the files' SHA-256)
    cache_dir: str | None = None  # where; None: ~/.cache/flplat/decoded
    max_train_samples: int = 0  # > 0: keep a random subset of this many training-pool samples (CPU-sized runs)
    max_test_samples: int = 0  # > 0: the same for the official (global) test set
    # `synthetic` only: a Gaussian-mixture classification task
    synthetic_samples: int = 2000
    synthetic_features: int = 20
    synthetic_classes: int = 10
    synthetic_separation: float = 2.0
    cifar100_classes: int = 0  # cifar100: keep the first n classes (DA-PFL Table II: 20); 0: all 100
    # the papers' other datasets (flplat/data/tabular.py, text.py, leaf.py, medical.py, officehome.py)
    text: TextConfig = field(default_factory=TextConfig)
    acs: ACSIncomeConfig = field(default_factory=ACSIncomeConfig)
    serengeti: SerengetiConfig = field(default_factory=SerengetiConfig)
    sent140: Sent140Config = field(default_factory=Sent140Config)
    amazon: AmazonConfig = field(default_factory=AmazonConfig)
    femnist: FEMNISTConfig = field(default_factory=FEMNISTConfig)
    chexpert: CheXpertConfig = field(default_factory=CheXpertConfig)
    officehome: OfficeHomeConfig = field(default_factory=OfficeHomeConfig)
    # your own files (flplat/data/user_files.py): imagefolder | npz | table
    path: str | None = None  # the folder (imagefolder) or file (npz; table: .csv / .parquet); relative: under data.root
    test_path: str | None = None  # imagefolder / table: an official test set in the same layout / columns (optional)
    label_column: str = "label"  # table: the label column
    feature_columns: list[str] = field(default_factory=list)  # table: feature columns ([]: every other column)
    categorical: str = "onehot"  # table: text feature columns -> onehot | ordinal (categories of the training file)
    standardize: bool = True  # table: numeric features, imagefolder: channels, z-scored with the training pool's stats
    client_column: str | None = None  # natural client of each sample: table column | npz array | imagefolder level
    meta_columns: list[str] = field(default_factory=list)  # per-sample metadata kept for partition.name=metadata
    folder_levels: list[str] = field(default_factory=list)  # imagefolder: names of folder levels above the classes
    index_file: str | None = None  # imagefolder: CSV with a `path` column (relative to data.path) + client/meta columns
    image_size: int = 0  # imagefolder: resize every image to image_size x image_size (0: keep; sizes must agree)
    grey: bool = False  # imagefolder: one grey channel (else RGB)


@dataclass
class PartitionConfig:
    """How the training pool is dealt to clients (see :mod:`flplat.data.partitions`)."""

    name: str = "dirichlet"  # iid | dirichlet | similarity | cafa | shift | pqfed | natural | metadata
    num_clients: int = 10
    alpha: float = 0.3  # dirichlet concentration
    similarity: float = 0.5  # S of the Similarity protocol: the IID share of the data
    min_samples: int = 10  # dirichlet: redraw while a client holds fewer samples
    max_retries: int = 100  # dirichlet: give up (with an error) after this many redraws
    # pqfed (flplat/data/pqfed_partition.py): target client 0 from `pqfed_target_sources` sources, one client per rate r
    pqfed_rates: list[float] = field(default_factory=lambda: [round(0.1 * i, 1) for i in range(11)])
    pqfed_sources: int = 15  # K-means clusters of the public-PCA features ("sources")
    pqfed_target_sources: int = 3
    pqfed_samples_per_source: int = 400
    pqfed_target_test_per_source: int = 400
    pqfed_public_size: int = 500  # public sample drawn from the official test set
    pqfed_pca_components: int = 50
    pqfed_diff: str = "per_slot"  # per_slot | single: how c_diff is drawn (see flplat/data/pqfed_partition.py)
    # shift (Flux App. B.1 / F.1 Table 9; see flplat/data/shift_partition.py)
    shift_type: str = "feature"  # feature (P(X)) | label (P(Y)) | concept_yx (P(Y|X)) | concept_xy (P(X|Y))
    shift_level: int = 1  # 1..8, the rows of Table 9
    num_unseen_clients: int = 0  # extra test-only clients drawn from the training clients' distributions
    samples_per_client: int = 0  # shift, metadata: samples dealt to each client (0: the pool split evenly)
    label_bank_size: int = 5  # shift_type=label: number of class sets in the bank
    train_copies: int = 1  # shift: each training client's train split repeated this many times (Flux App. F.2)
    # natural (flplat/data/group_partitions.py): every client id of the dataset is one client
    natural_min_samples: int = 1  # drop natural clients with fewer pool samples
    natural_max_clients: int = 0  # keep at most this many (the first of a seeded shuffle); 0: all
    natural_test: str = "auto"  # split (test_fraction) | official (client_ids_test) | users (test users unseen) | auto
    # metadata (flplat/data/group_partitions.py): distributions = level combinations of dataset metadata columns
    meta_columns: list[str] = field(default_factory=list)  # e.g. [view, age, sex] (Flux CheXpert high, App. B.1)
    meta_bins: dict[str, list[float]] = field(default_factory=dict)  # cut points, e.g. {age: [50]}: <50 | >=50
    meta_assign: str = "random"  # random: each client draws a distribution | balanced: distributions cycled
    # cafa (CAFA §IV-B): share of IID clients; classes per non-IID client; relative client sizes
    iid_fraction: float = 0.5
    class_fraction_min: float = 0.2
    class_fraction_max: float = 0.4
    size_min: float = 0.5
    size_max: float = 1.0
    # per-client local splits (fractions of each client's data; they must sum to 1)
    train_fraction: float = 0.8
    val_fraction: float = 0.0
    test_fraction: float = 0.2


@dataclass
class OptimizerConfig:
    """Client optimizer (fresh state for every client and round)."""

    name: str = "adam"  # adam | sgd | adamw
    lr: float = 1e-3
    momentum: float = 0.0  # sgd only
    weight_decay: float = 0.0


@dataclass
class FailuresConfig:
    """Simulated client failures per round (flplat/engine/failures.py); seeded from the root seed and the round."""

    dropout: float = 0.0  # probability a sampled client never reports
    straggler: float = 0.0  # probability a client completes only x of its E local epochs, x uniform in 1..E
    straggler_policy: str = "partial"  # partial: aggregate the inexact update (FedProx) | drop: discard it
    corrupt: float = 0.0  # probability a client's update is NaN/Inf (rejected and counted, never averaged)


@dataclass
class FederationConfig:
    """The round loop: T rounds, client fraction q, E local epochs."""

    rounds: int = 10
    client_fraction: float = 0.5
    local_epochs: int = 1
    batch_size: int = 32
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    eval_every: int = 1  # evaluate every client each n rounds (the last round always)
    accuracy_window: int = 30  # rounds per window of the windowed average accuracy (CAFA Table IV)
    eval_batch_size: int = 1024
    batched_eval: bool = True  # clients sharing a model (global / cluster) scored in one pass, personal models in
    #                            vmap groups (flplat/engine/batched_eval.py); false: every client one by one
    eval_group_size: int = 0  # max personal models per vmap evaluation group; 0: as many as fit eval_batch_size rows
    #                           and 128 MiB of stacked weights
    client_state_dtype: str = "float32"  # per-client state rows (personalised models): float32 | float16
    client_state_dir: str | None = None  # keep per-client state in memory-mapped files here (None: in RAM); each
    #                                    run (each process) uses its own subdirectory run-<key>, removed at the end
    keep_client_state: bool = False  # keep that subdirectory after the run
    vectorize: bool = False  # train clients in vmap groups (flplat/engine/vectorized.py); falls back per client, logged
    vectorize_group: int = 0  # max clients per vmap group; 0: all of a round's (same lr / trainable) clients
    vectorize_keep_mib: int = 512  # keep a vmap group's stacked parameters and optimizer state for the next group
    #                                while they take at most this many MiB (reused, not page-faulted in anew), and
    #                                (glibc) let the process keep up to this many MiB of freed memory; 0: neither
    failures: FailuresConfig = field(default_factory=FailuresConfig)


@dataclass
class FabricConfig:
    """Lightning Fabric settings: where and at which precision clients train."""

    accelerator: str = "cpu"  # cpu | cuda | gpu | mps | auto
    devices: Any = 1
    num_nodes: int = 1
    precision: str = "32-true"  # 32-true | bf16-mixed | 16-mixed | bf16-true | 64-true
    num_threads: int = 0  # torch intra-op threads; 0 leaves torch's default


@dataclass
class TrackingConfig:
    """MLflow tracking. ``uri`` None: $MLFLOW_TRACKING_URI, else a SQLite store in ``mlruns/``."""

    enabled: bool = True
    uri: str | None = None
    experiment: str = "flplat"
    run_name: str | None = None
    store_dir: str = "mlruns"
    artifact_root: str | None = None  # artifacts of new experiments (None: beside the store, <store>/artifacts)
    plots: bool = True
    parent_run_id: str | None = None  # nest this run under another (seed sweeps, tuning studies)
    # checkpoints (flplat/engine/checkpoint.py): every n rounds (0: none), in checkpoint_dir (None: beside the
    # store, <store>/checkpoints/<run id>.pt); a FINISHED run's checkpoint is removed unless keep_checkpoint
    checkpoint_every: int = 1
    checkpoint_dir: str | None = None
    keep_checkpoint: bool = False
    heartbeat_s: float = 30.0  # the run's flplat.heartbeat tag is refreshed this often (flplat runs --stale)
    # a RUNNING run is stale (dead: SIGKILL, power cut) once its heartbeat is older than
    # stale_beats x heartbeat_s + stale_margin_s (flplat/tracking/heartbeat.py: runs --stale, run --resume, studies)
    stale_beats: int = 3
    stale_margin_s: float = 60.0
    log_models: bool = True  # final global / cluster models as artifacts under models/ (flplat/tracking/models.py)
    log_personal_models: bool = False  # also every client's final model (K x P: as large as the client store)
    system_metrics: bool = True  # MLflow's system/* metrics when psutil is installed (extra [system])
    system_metrics_interval: float = 10.0  # seconds between system-metric samples
    # TWEMA smoothing p in [0, 1] of the per-round curves `flplat reproduce` draws (CAFA Fig. 6; 0: raw). CAFA names
    # the smoothing but gives no parameter: 0.9 decays the past by 0.70 per round over 150 rounds
    # (flplat/metrics/curves.py). A plotting choice: like every tracking key it does not change a run's identity
    curve_smoothing: float = 0.9


@dataclass
class MetricsConfig:
    """Run-level summaries (see :mod:`flplat.metrics.personalized`): DA-PFL's method accuracy (mean over the last
    rounds), rounds to reach target accuracies (Table VI) and the Few/Medium/Many class buckets (Table IV)."""

    accuracy_key: str = "mean_local_accuracy"  # summarised: mean_local_accuracy | global_accuracy
    last_rounds: int = 10  # mean over the evaluations of the last n rounds
    target_accuracy: list[float] = field(default_factory=list)  # rounds to reach each, e.g. [0.4, 0.5]
    class_bucket_edges: list[float] = field(default_factory=lambda: [30.0, 80.0])  # Few < a <= Medium <= b < Many


@dataclass
class ExperimentConfig:
    seed: int = 0
    data: DataConfig = field(default_factory=DataConfig)
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    model: Any = field(default_factory=lambda: {"name": "mlp"})
    algorithm: Any = field(default_factory=lambda: {"name": "fedavg"})
    # per-algorithm defaults a paper's config file carries, e.g. {ifca: {num_clusters: 0}}: applied when
    # algorithm.name is that algorithm, under the keys the algorithm section sets itself (see apply_algorithm_defaults)
    algorithm_defaults: Any = field(default_factory=dict)
    federation: FederationConfig = field(default_factory=FederationConfig)
    fabric: FabricConfig = field(default_factory=FabricConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    # filled by parse_config, not meant to be set: the config file's algorithm keys when an override switched
    # algorithm.name to another algorithm -- carried, reported, not used (see _set_aside_switched_algorithm_keys)
    algorithm_unused: Any = field(default_factory=dict)
    # modules to import before the config is checked, whose import registers algorithms, datasets, models or
    # partitions (a list, e.g. [my_pkg.my_algo]; see flplat/plugins.py and docs/extending.md); --plugin MODULE adds
    plugins: Any = field(default_factory=list)


PRECISIONS = ("32-true", "32", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true")
ACCELERATORS = ("cpu", "cuda", "gpu", "mps", "auto")
OPTIMIZERS = ("adam", "adamw", "sgd")


_SCHEMAS: dict[type, DictConfig] = {}


def structured_schema(cls: type) -> DictConfig:
    """``OmegaConf.structured(cls)``, built once per dataclass (the slowest part of loading a config: a grid plans
    hundreds). Only ever read: pass it as the first config of ``OmegaConf.merge``, which copies it."""
    if cls not in _SCHEMAS:
        _SCHEMAS[cls] = OmegaConf.structured(cls)
    return _SCHEMAS[cls]


def namespaced_section(section: str, registry: dict, raw: Any) -> DictConfig:
    """Validate a ``{name: ..., **params}`` section against the registered entry's Config dataclass."""
    raw = OmegaConf.to_container(raw) if isinstance(raw, DictConfig) else dict(raw or {})
    name = raw.get("name")
    if name not in registry:
        raise ConfigError(f"{section}.name={name!r} is not valid; choose one of: {', '.join(sorted(registry))}")
    schema_cls = registry[name].Config
    schema = structured_schema(schema_cls)
    params = {k: v for k, v in raw.items() if k != "name"}
    unknown = sorted(set(params) - {f.name for f in dataclasses.fields(schema_cls)})
    if unknown:
        known = ", ".join(f.name for f in dataclasses.fields(schema_cls)) or "(none)"
        raise ConfigError(f"unknown key {section}.{unknown[0]} for {section} {name!r}; valid keys: name, {known}")
    try:
        merged = OmegaConf.merge(schema, params)
    except OmegaConfBaseException as e:
        raise ConfigError(f"{section}.{getattr(e, 'full_key', '') or ''}: {first_line(e)}") from None
    out = OmegaConf.create({"name": name, **OmegaConf.to_container(merged)})
    check = getattr(registry[name], "validate_config", None)
    if check is not None:
        check(merged, section)
    return out


def owners(registry: dict, key: str) -> list[str]:
    """The registered entries whose Config defines ``key``."""
    return sorted(n for n, e in registry.items() if key in {f.name for f in dataclasses.fields(e.Config)})


@dataclass(frozen=True)
class Registries:
    """The names the config is checked against. The registries live above this module (data, models,
    algorithms import the config's dataclasses), so the caller hands them in: :func:`flplat.experiment.load_config`
    is the one entry point that does."""

    datasets: Any
    partitions: Any
    shift_types: Any
    models: dict
    algorithms: dict


def _set_aside_switched_algorithm_keys(file_layer: DictConfig, override_layer: DictConfig) -> None:
    """When the overrides switch ``algorithm.name`` away from the file's algorithm, the file's ``algorithm.*``
    keys are that algorithm's hyperparameters: move them to ``algorithm_unused`` (carried, reported, not used),
    so the chosen algorithm starts from its own defaults plus the ``algorithm.*`` overrides -- also where both
    algorithms define a key of the same name (``tau``, ``selection``) with another meaning."""
    section = file_layer.get("algorithm") if isinstance(file_layer, DictConfig) else None
    chosen = OmegaConf.select(override_layer, "algorithm.name", default=None)
    if not isinstance(section, DictConfig) or chosen is None or section.get("name") in (None, chosen):
        return
    keys = {k: v for k, v in OmegaConf.to_container(section).items() if k != "name"}
    if keys:
        file_layer.algorithm = {"name": section.get("name")}
        file_layer.algorithm_unused = keys


# YAML 1.1 reads these words as booleans; an override such as algorithm.knee_guard=off must stay the string "off"
# for a string key (a boolean key still accepts it: OmegaConf turns "off" into False)
_YAML_BOOL_WORDS = frozenset({"on", "off", "yes", "no"})


def dotlist(overrides) -> DictConfig:
    """``OmegaConf.from_dotlist`` of ``key=value`` overrides, with on/off/yes/no kept as strings."""
    fixed = []
    for o in overrides:
        key, _, value = o.partition("=")
        fixed.append(f"{key}='{value}'" if value.strip().lower() in _YAML_BOOL_WORDS else o)
    return OmegaConf.from_dotlist(fixed)


def _yaml_kind(path: Path) -> str | None:
    """None when the YAML document at ``path`` is a mapping (or empty), else what it is: list, str, int, ..."""
    import yaml

    try:
        doc = yaml.safe_load(path.read_text())
    except Exception:  # OmegaConf read it: a tag safe_load does not know; leave the judgement to OmegaConf
        return None
    if doc is None or isinstance(doc, dict):
        return None
    return {"str": "string", "NoneType": "null"}.get(type(doc).__name__, type(doc).__name__)


def parse_config(path: str | Path | None = None, overrides: tuple[str, ...] | list[str] = ()) -> DictConfig:
    """Merge the schema defaults, an optional YAML file and ``dotted.key=value`` overrides (not yet validated:
    :func:`flplat.experiment.load_config` parses and validates)."""
    base = structured_schema(ExperimentConfig)
    layers = []
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist; "
                              "pass a YAML file such as configs/quickstart.yaml")
        try:
            loaded = OmegaConf.load(p)
        except Exception as e:  # yaml errors (and a bare number: OmegaConf refuses to load it)
            kind = _yaml_kind(p)
            if kind is not None:
                raise ConfigError(f"config file {str(path)!r} is not a mapping of config keys (it holds a YAML "
                                  f"{kind}); allowed: a mapping of sections (seed, data, partition, model, algorithm, "
                                  "...)") from None
            raise ConfigError(f"config file {str(path)!r} is not valid YAML: {first_line(e)}; allowed: a YAML "
                              "mapping of sections (seed, data, partition, model, algorithm, ...)") from None
        kind = _yaml_kind(p) if isinstance(loaded, DictConfig) else type(loaded).__name__.replace("Config", "").lower()
        if kind is not None:  # (OmegaConf reads a bare scalar `just a string` as the key {'just a string': None})
            raise ConfigError(f"config file {str(path)!r} is not a mapping of config keys (it holds a YAML {kind}); "
                              "allowed: a mapping of sections (seed, data, partition, model, algorithm, ...)")
        if len(loaded) == 0:
            raise ConfigError(f"config file {str(path)!r} is empty; allowed: a mapping of sections such as "
                              "configs/quickstart.yaml (or no file: `flplat run` needs one, overrides go after it)")
        layers.append(loaded)
    for o in overrides:
        if "=" not in o:
            raise ConfigError(f"override {o!r} must look like dotted.key=value")
        key = o.split("=", 1)[0].strip()
        if not key or any(part == "" for part in key.split(".")):
            raise ConfigError(f"override key {key!r} (in {o!r}) has an empty part; allowed: dotted.key=value with "
                              "keys of configs/quickstart.yaml, e.g. federation.rounds=5")
    try:
        layers.append(dotlist(overrides))
        if len(layers) == 2:
            _set_aside_switched_algorithm_keys(*layers)
        cfg = OmegaConf.merge(base, *layers)
    except (ConfigKeyError, ConfigAttributeError) as e:
        key = getattr(e, "full_key", None) or first_line(e)
        raise ConfigError(f"unknown config key {key!r}; valid keys are those of configs/quickstart.yaml "
                          "and flplat/config.py") from None
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        raise ConfigError(f"{key}: {first_line(e)}" if key else first_line(e)) from None
    except TypeError as e:  # OmegaConf: "Cannot merge incompatible container types" (a mapping for a list, ...)
        found = next((m for layer in layers if (m := _shape_mismatch(base, layer))), None)
        raise ConfigError(found or first_line(e)) from None
    return cfg


def _shape(node: Any) -> str:
    return "a mapping" if isinstance(node, DictConfig) else "a list" if isinstance(node, ListConfig) else "a value"


_SHAPE_EXAMPLE = {"a mapping": "{key: value}", "a list": "[a, b]"}


def _shape_mismatch(schema: DictConfig, layer: DictConfig, prefix: str = "") -> str | None:
    """The first key of ``layer`` that holds a mapping where ``schema`` holds a list or the other way round (what
    OmegaConf's merge refuses with a bare TypeError), as a one-line message; None when there is none."""
    for k in layer:
        if k not in schema:
            continue
        want, got = _shape(schema._get_node(k)), _shape(layer._get_node(k))
        if want != got and "a value" not in (want, got):
            return (f"{prefix}{k} is {got} where {want} is expected; allowed: {want}, "
                    f"e.g. {prefix}{k}={_SHAPE_EXAMPLE[want]}")
        if want == got == "a mapping":
            found = _shape_mismatch(schema[k], layer[k], f"{prefix}{k}.")
            if found:
                return found
    return None


def _validate_paper_data(d: Any) -> None:
    """The data.* groups of the papers' other datasets (flplat/data/tabular.py, text.py, leaf.py, medical.py)."""
    check_range(0 <= d.cifar100_classes <= 100, "data.cifar100_classes", d.cifar100_classes, "an integer in [0, 100]")
    t = d.text
    check_range(t.max_length >= 1, "data.text.max_length", t.max_length, "an integer >= 1")
    check_range(t.min_freq >= 1, "data.text.min_freq", t.min_freq, "an integer >= 1")
    check_range(t.max_vocab >= 0, "data.text.max_vocab", t.max_vocab, "an integer >= 0 (0: no limit)")
    check_choice("data.text.padding", t.padding, ("pre", "post"))
    check_choice("data.text.truncation", t.truncation, ("pre", "post"))
    check_choice("data.acs.horizon", d.acs.horizon, ("1-Year", "5-Year"))
    check_range(d.acs.year >= 2014, "data.acs.year", d.acs.year, "a survey year >= 2014")
    bad = [s for s in d.acs.states if s not in ACS_STATES]
    check_range(bool(d.acs.states) and not bad, "data.acs.states", list(d.acs.states),
                f"a non-empty list of: {', '.join(ACS_STATES)}")
    for key, value in (("data.acs.scaler", d.acs.scaler), ("data.serengeti.scaler", d.serengeti.scaler)):
        check_choice(key, value, ("none", "robust", "standard"))
    check_range(d.serengeti.num_classes >= 2 or len(d.serengeti.classes) >= 2, "data.serengeti.num_classes",
                d.serengeti.num_classes, "an integer >= 2 (or data.serengeti.classes with at least 2 species)")
    check_range(bool(d.serengeti.features), "data.serengeti.features", [], "a non-empty list of columns")
    check_choice("data.sent140.source", d.sent140.source, ("auto", "csv", "leaf"))
    check_choice("data.sent140.labels", d.sent140.labels, ("binary", "polarity3"))
    check_choice("data.amazon.source", d.amazon.source, ("categories", "full", "polarity"))
    check_choice("data.amazon.fields", d.amazon.fields, ("text", "title_text"))
    chars = list(d.femnist.classes)
    check_range(len(set(chars)) == len(chars) and all(len(c) == 1 and c.isascii() and c.isalnum() for c in chars),
                "data.femnist.classes",
                list(d.femnist.classes), "distinct characters of 0-9, A-Z, a-z (empty: all 62)")
    check_range(d.chexpert.image_size >= 8, "data.chexpert.image_size", d.chexpert.image_size, "an integer >= 8")
    check_choice("data.chexpert.uncertain", d.chexpert.uncertain, ("ones", "zeros"))
    check_range(d.chexpert.max_train_rows >= 0, "data.chexpert.max_train_rows", d.chexpert.max_train_rows,
                "an integer >= 0 (0: all)")
    o = d.officehome
    check_range(0 <= o.num_classes <= 65, "data.officehome.num_classes", o.num_classes, "an integer in [0, 65]")
    check_range(o.image_size >= 8, "data.officehome.image_size", o.image_size, "an integer >= 8")
    check_range(bool(o.domains), "data.officehome.domains", [], "a non-empty subset of Art, Clipart, Product, "
                "Real_World")


def validate(cfg: DictConfig, names: Registries) -> DictConfig:
    """Check every value; return the config with the namespaced sections resolved to their full schemas."""
    check_choice("data.name", cfg.data.name, names.datasets)
    d = cfg.data
    check_range(d.max_train_samples >= 0, "data.max_train_samples", d.max_train_samples, "an integer >= 0 (0: all)")
    check_range(d.max_test_samples >= 0, "data.max_test_samples", d.max_test_samples, "an integer >= 0 (0: all)")
    check_range(d.synthetic_samples >= 2, "data.synthetic_samples", d.synthetic_samples, "an integer >= 2")
    check_range(d.synthetic_features >= 1, "data.synthetic_features", d.synthetic_features, "an integer >= 1")
    check_range(d.synthetic_classes >= 2, "data.synthetic_classes", d.synthetic_classes, "an integer >= 2")
    check_range(d.synthetic_separation >= 0, "data.synthetic_separation", d.synthetic_separation, "a number >= 0")
    _validate_paper_data(d)
    check_choice("data.categorical", d.categorical, ("onehot", "ordinal"))
    check_range(d.image_size >= 0, "data.image_size", d.image_size, "an integer >= 0 (0: keep the files' size)")

    p = cfg.partition
    check_choice("partition.name", p.name, names.partitions)
    check_range(p.num_clients >= 1, "partition.num_clients", p.num_clients, "an integer >= 1")
    check_range(p.alpha > 0 and math.isfinite(p.alpha), "partition.alpha", p.alpha, "a finite number > 0")
    check_range(0.0 <= p.similarity <= 1.0, "partition.similarity", p.similarity, "a number in [0, 1]")
    check_range(p.min_samples >= 1, "partition.min_samples", p.min_samples, "an integer >= 1")
    check_range(p.max_retries >= 1, "partition.max_retries", p.max_retries, "an integer >= 1")
    check_range(all(0.0 <= float(r) <= 1.0 for r in p.pqfed_rates), "partition.pqfed_rates", list(p.pqfed_rates),
           "a list of numbers in [0, 1]")
    for k in ("pqfed_sources", "pqfed_target_sources", "pqfed_samples_per_source", "pqfed_pca_components"):
        check_range(p[k] >= 1, f"partition.{k}", p[k], "an integer >= 1")
    check_range(p.pqfed_target_test_per_source >= 0, "partition.pqfed_target_test_per_source",
           p.pqfed_target_test_per_source, "an integer >= 0")
    check_range(p.pqfed_public_size >= 2, "partition.pqfed_public_size", p.pqfed_public_size, "an integer >= 2")
    check_range(p.pqfed_target_sources < p.pqfed_sources, "partition.pqfed_target_sources", p.pqfed_target_sources,
           "an integer in [1, partition.pqfed_sources - 1]")
    check_choice("partition.pqfed_diff", p.pqfed_diff, ("per_slot", "single"))
    if p.name == "shift":
        check_choice("partition.shift_type", p.shift_type, names.shift_types)
        check_range(1 <= p.shift_level <= 8, "partition.shift_level", p.shift_level, "an integer in 1..8")
    if p.name in ("shift", "metadata"):
        check_range(p.num_unseen_clients >= 0, "partition.num_unseen_clients", p.num_unseen_clients, "an integer >= 0")
        check_range(p.samples_per_client >= 0, "partition.samples_per_client", p.samples_per_client,
               "an integer >= 0 (0: the pool split evenly)")
    if p.name == "shift":
        check_range(p.label_bank_size >= 1, "partition.label_bank_size", p.label_bank_size, "an integer >= 1")
    check_range(p.train_copies >= 1 and (p.train_copies == 1 or p.name == "shift"), "partition.train_copies",
                p.train_copies, "an integer >= 1 (> 1 only with partition.name=shift)")
    check_range(0.0 <= p.iid_fraction <= 1.0, "partition.iid_fraction", p.iid_fraction, "a number in [0, 1]")
    check_range(0.0 < p.class_fraction_min <= 1.0, "partition.class_fraction_min", p.class_fraction_min,
           "a number in (0, 1]")
    check_range(p.class_fraction_min <= p.class_fraction_max <= 1.0, "partition.class_fraction_max",
           p.class_fraction_max, "a number in [partition.class_fraction_min, 1]")
    check_range(p.size_min > 0 and math.isfinite(p.size_min), "partition.size_min", p.size_min, "a finite number > 0")
    check_range(p.size_min <= p.size_max and math.isfinite(p.size_max), "partition.size_max", p.size_max,
           "a finite number >= partition.size_min")
    check_range(p.natural_min_samples >= 1, "partition.natural_min_samples", p.natural_min_samples, "an integer >= 1")
    check_range(p.natural_max_clients >= 0, "partition.natural_max_clients", p.natural_max_clients,
                "an integer >= 0 (0: all)")
    check_choice("partition.natural_test", p.natural_test, ("auto", "split", "official", "users"))
    check_choice("partition.meta_assign", p.meta_assign, ("random", "balanced"))
    if p.name == "metadata":
        check_range(len(p.meta_columns) >= 1, "partition.meta_columns", list(p.meta_columns),
                    "a non-empty list of the dataset's metadata columns, e.g. [view]")
    for col, cuts in p.meta_bins.items():
        check_range(list(cuts) == sorted(cuts) and all(math.isfinite(c) for c in cuts), f"partition.meta_bins.{col}",
                    list(cuts), "increasing finite cut points, e.g. [50]")
    for k in ("train_fraction", "val_fraction", "test_fraction"):
        check_range(0.0 <= p[k] <= 1.0, f"partition.{k}", p[k], "a number in [0, 1]")
    total = p.train_fraction + p.val_fraction + p.test_fraction
    check_range(abs(total - 1.0) < 1e-6, "partition.train_fraction+val_fraction+test_fraction", round(total, 6),
           "fractions summing to 1")
    check_range(p.train_fraction > 0, "partition.train_fraction", p.train_fraction, "a number in (0, 1]")

    f = cfg.federation
    check_range(f.rounds >= 1, "federation.rounds", f.rounds, "an integer >= 1")
    check_range(0.0 < f.client_fraction <= 1.0, "federation.client_fraction", f.client_fraction, "a number in (0, 1]")
    check_range(f.local_epochs >= 1, "federation.local_epochs", f.local_epochs, "an integer >= 1")
    check_range(f.batch_size >= 1, "federation.batch_size", f.batch_size, "an integer >= 1")
    check_range(f.eval_every >= 1, "federation.eval_every", f.eval_every, "an integer >= 1")
    check_range(f.accuracy_window >= 1, "federation.accuracy_window", f.accuracy_window, "an integer >= 1")
    check_range(f.eval_batch_size >= 1, "federation.eval_batch_size", f.eval_batch_size, "an integer >= 1")
    check_range(f.vectorize_group >= 0, "federation.vectorize_group", f.vectorize_group,
                "an integer >= 0 (0: no limit)")
    check_range(f.vectorize_keep_mib >= 0, "federation.vectorize_keep_mib", f.vectorize_keep_mib,
                "an integer >= 0 (0: keep nothing)")
    check_range(f.eval_group_size >= 0, "federation.eval_group_size", f.eval_group_size,
                "an integer >= 0 (0: automatic)")
    for k in ("dropout", "straggler", "corrupt"):
        check_range(0.0 <= f.failures[k] <= 1.0, f"federation.failures.{k}", f.failures[k], "a probability in [0, 1]")
    check_choice("federation.failures.straggler_policy", f.failures.straggler_policy, ("partial", "drop"))
    check_choice("federation.optimizer.name", f.optimizer.name, OPTIMIZERS)
    check_choice("federation.client_state_dtype", f.client_state_dtype, ("float32", "float16"))
    check_range(f.optimizer.lr > 0 and math.isfinite(f.optimizer.lr), "federation.optimizer.lr", f.optimizer.lr,
                "a finite number > 0")
    o = f.optimizer
    check_range(0.0 <= o.momentum < 1.0, "federation.optimizer.momentum", o.momentum, "a number in [0, 1)")
    check_range(o.weight_decay >= 0, "federation.optimizer.weight_decay", o.weight_decay, "a number >= 0")

    fb = cfg.fabric
    check_choice("fabric.accelerator", fb.accelerator, ACCELERATORS)
    check_choice("fabric.precision", str(fb.precision), PRECISIONS)
    check_range(fb.num_nodes >= 1, "fabric.num_nodes", fb.num_nodes, "an integer >= 1")
    check_range(fb.num_threads >= 0, "fabric.num_threads", fb.num_threads, "an integer >= 0 (0: torch's default)")

    tr = cfg.tracking
    check_range(tr.checkpoint_every >= 0, "tracking.checkpoint_every", tr.checkpoint_every,
                "an integer >= 0 (0: no checkpoints)")
    check_range(tr.heartbeat_s > 0 and math.isfinite(tr.heartbeat_s), "tracking.heartbeat_s", tr.heartbeat_s,
                "a finite number of seconds > 0")
    check_range(tr.stale_beats >= 2, "tracking.stale_beats", tr.stale_beats, "an integer >= 2 (missed heartbeats)")
    check_range(tr.stale_margin_s >= 0 and math.isfinite(tr.stale_margin_s), "tracking.stale_margin_s",
                tr.stale_margin_s, "a finite number of seconds >= 0")
    check_range(cfg.tracking.system_metrics_interval > 0, "tracking.system_metrics_interval",
                cfg.tracking.system_metrics_interval, "a number of seconds > 0")
    check_range(0 <= tr.curve_smoothing <= 1, "tracking.curve_smoothing", tr.curve_smoothing,
                "a number in [0, 1] (0: no smoothing)")

    mc = cfg.metrics
    check_choice("metrics.accuracy_key", mc.accuracy_key, ("mean_local_accuracy", "global_accuracy"))
    check_range(mc.last_rounds >= 1, "metrics.last_rounds", mc.last_rounds, "an integer >= 1")
    check_range(all(0.0 < t <= 1.0 for t in mc.target_accuracy), "metrics.target_accuracy", list(mc.target_accuracy),
           "a list of numbers in (0, 1]")
    edges = list(mc.class_bucket_edges)
    check_range(len(edges) == 2 and 0 <= edges[0] <= edges[1], "metrics.class_bucket_edges", edges,
           "two numbers [a, b] with 0 <= a <= b")

    cfg.model = namespaced_section("model", names.models, cfg.model)
    name = cfg.algorithm.get("name")
    algorithm = apply_algorithm_defaults(cfg.algorithm_defaults, cfg.algorithm, names.algorithms)
    if name in names.algorithms:  # a key of another algorithm: say whose (switching is done by parse_config)
        own = {f.name for f in dataclasses.fields(names.algorithms[name].Config)}
        for k in sorted(set(algorithm) - own - {"name"}):
            if owners(names.algorithms, k):
                raise ConfigError(f"unknown key algorithm.{k} for algorithm {name!r} (a key of "
                                  f"{', '.join(owners(names.algorithms, k))}); valid keys: name, "
                                  f"{', '.join(sorted(own)) or '(none)'}")
    cfg.algorithm = namespaced_section("algorithm", names.algorithms, algorithm)
    return cfg


def apply_algorithm_defaults(defaults: Any, algorithm: Any, registry: dict) -> dict:
    """The algorithm section with ``algorithm_defaults[algorithm.name]`` filled in under its own keys: one config
    file serves every method of a comparison (Flux's grid gives IFCA, FeSEM, FedEM and FedRC the true M) while an
    explicit ``algorithm.KEY`` still wins."""
    per = OmegaConf.to_container(defaults) if isinstance(defaults, DictConfig) else dict(defaults or {})
    algo = OmegaConf.to_container(algorithm) if isinstance(algorithm, DictConfig) else dict(algorithm or {})
    for name, keys in per.items():
        check_choice("algorithm_defaults key", name, registry)
        check_range(isinstance(keys, dict), f"algorithm_defaults.{name}", keys, "a mapping of that algorithm's keys")
    return {**per.get(algo.get("name"), {}), **algo}
