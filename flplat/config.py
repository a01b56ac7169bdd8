"""The run frame: the structured experiment configuration (OmegaConf) and its validation.

An experiment config is an :class:`ExperimentConfig`. Its four component sections are namespaced by name, one
contract for every registry: ``data`` (:data:`flplat.data.registry.DATASETS`), ``partition``
(:data:`~flplat.data.registry.PARTITIONS`), ``model`` and ``algorithm``. Each registered entry declares a ``Config``
dataclass; the section's keys are checked against the one of the entry its ``name`` chooses, so ``partition.alpha``
is valid only when the chosen partition defines ``alpha``. ``data`` and ``partition`` also hold the keys every
dataset / partition shares (:class:`DataConfig`, :class:`PartitionConfig`: where the files are, how many clients,
the local split fractions); an entry's own keys sit flat beside them (``data.samples``, ``partition.rates``). An
unknown key is a one-line error naming the valid keys, a key of another entry one naming its owners.

Switching an entry on a config written for another works the same way for the four sections: when an override
changes ``algorithm.name`` (``data.name``, ``partition.name``), the file's keys of that section -- except the shared
ones of :class:`DataConfig` / :class:`PartitionConfig` -- move to ``algorithm_unused`` (``data_unused``,
``partition_unused``): carried, warned about, logged as ``*_unused.*`` params, never used; the chosen entry starts
from its defaults plus the overrides. An override the chosen entry does not define stays an error.

Every invalid value raises :class:`~flplat.errors.ConfigError` with a one-line message that names the dotted key
and the allowed values; the CLI turns it into exit status 2 before anything (an MLflow run, a file) is created.
Value checks of an entry's keys live with the entry (a ``check()`` method of its Config, or ``validate_config`` for
models and algorithms); this module checks the frame's own sections.

This module sits below data, models and algorithms and imports none of them: it names no dataset, partition, model
or method beyond each section's default entry (what runs when a section names none). The registries to check against
come in as :class:`Registries`, handed in by the one validation entry point :func:`flplat.configure.load_config`;
checking one section against its entry is :mod:`flplat.config_sections`, parsing text into a config (and setting
switched keys aside) :mod:`flplat.config_load`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from flplat.config_sections import field_names, namespaced_section, owners, structured_schema, with_common
from flplat.errors import ConfigError, check_choice, check_range

__all__ = ["ConfigError", "DataConfig", "ExperimentConfig", "PartitionConfig", "Registries", "field_names",
           "namespaced_section", "owners", "structured_schema", "validate", "with_common"]


@dataclass
class DataConfig:
    """The keys every dataset shares; a dataset's own keys (its registered ``Config``) sit beside them in ``data``
    (see :mod:`flplat.data.registry`)."""

    name: str = "digits"
    root: str | None = None  # directory with the raw files; None: documented locations / $FLPLAT_DATA
    download: bool = False  # let torchvision download when the files are not found locally
    cache: bool = True  # keep decoded, standardised files on disk (keyed by the files' SHA-256)
    cache_dir: str | None = None  # where; None: ~/.cache/flplat/decoded
    max_train_samples: int = 0  # > 0: keep a random subset of this many training-pool samples (CPU-sized runs)
    max_test_samples: int = 0  # > 0: the same for the official (global) test set

    @staticmethod
    def check_shared(d: Any) -> None:
        check_range(d.max_train_samples >= 0, "data.max_train_samples", d.max_train_samples,
                    "an integer >= 0 (0: all)")
        check_range(d.max_test_samples >= 0, "data.max_test_samples", d.max_test_samples, "an integer >= 0 (0: all)")


@dataclass
class PartitionConfig:
    """The keys every partition shares: which protocol, how many clients, each client's local splits; a
    protocol's own keys (its registered ``Config``) sit beside them in ``partition``."""

    name: str = "dirichlet"
    num_clients: int = 10
    # per-client local splits (fractions of each client's data; they must sum to 1)
    train_fraction: float = 0.8
    val_fraction: float = 0.0
    test_fraction: float = 0.2

    @staticmethod
    def check_shared(p: Any) -> None:
        check_range(p.num_clients >= 1, "partition.num_clients", p.num_clients, "an integer >= 1")
        for k in ("train_fraction", "val_fraction", "test_fraction"):
            check_range(0.0 <= getattr(p, k) <= 1.0, f"partition.{k}", getattr(p, k), "a number in [0, 1]")
        total = p.train_fraction + p.val_fraction + p.test_fraction
        check_range(abs(total - 1.0) < 1e-6, "partition.train_fraction+val_fraction+test_fraction", round(total, 6),
                    "fractions summing to 1")
        check_range(p.train_fraction > 0, "partition.train_fraction", p.train_fraction, "a number in (0, 1]")


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
    # {name, the shared keys of DataConfig / PartitionConfig, the chosen entry's keys}: checked by validate
    data: Any = field(default_factory=lambda: {"name": DataConfig.name})
    partition: Any = field(default_factory=lambda: {"name": PartitionConfig.name})
    model: Any = field(default_factory=lambda: {"name": "mlp"})
    algorithm: Any = field(default_factory=lambda: {"name": "fedavg"})
    # per-entry defaults a comparison's config carries, {entry name: {key: value}}: applied when <section>.name is
    # that entry, under the keys the section sets itself (see apply_defaults)
    algorithm_defaults: Any = field(default_factory=dict)
    data_defaults: Any = field(default_factory=dict)
    partition_defaults: Any = field(default_factory=dict)
    federation: FederationConfig = field(default_factory=FederationConfig)
    fabric: FabricConfig = field(default_factory=FabricConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    # filled by parse_config, not meant to be set: the config file's keys of a section whose entry an override
    # switched (and keys of older versions no chosen entry uses) -- carried, reported, not used
    algorithm_unused: Any = field(default_factory=dict)
    data_unused: Any = field(default_factory=dict)
    partition_unused: Any = field(default_factory=dict)
    # modules to import before the config is checked, whose import registers algorithms, datasets, models or
    # partitions (a list, e.g. [my_pkg.my_algo]; see flplat/plugins.py and docs/extending.md); --plugin MODULE adds
    plugins: Any = field(default_factory=list)


PRECISIONS = ("32-true", "32", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true")
ACCELERATORS = ("cpu", "cuda", "gpu", "mps", "auto")
OPTIMIZERS = ("adam", "adamw", "sgd")
#: the namespaced sections with keys every entry shares, and the sections an override may switch
SHARED: dict[str, type] = {"data": DataConfig, "partition": PartitionConfig}
SWITCHABLE = ("algorithm", "data", "partition")


@dataclass(frozen=True)
class Registries:
    """The names the config is checked against. The registries live above this module (data, models,
    algorithms import the config's dataclasses), so the caller hands them in: :func:`flplat.configure.load_config`
    is the one entry point that does."""

    datasets: Any
    partitions: Any
    models: dict
    algorithms: dict


# ---------------------------------------------------------------------------------------------------- validation


def validate(cfg: DictConfig, names: Registries) -> DictConfig:
    """Check every value; return the config with the namespaced sections resolved to their full schemas."""
    cfg.data = namespaced_section("data", names.datasets, apply_defaults(cfg.data_defaults, cfg.data, names.datasets,
                                                                         "data"), DataConfig, "dataset")
    cfg.partition = namespaced_section("partition", names.partitions, apply_defaults(
        cfg.partition_defaults, cfg.partition, names.partitions, "partition"), PartitionConfig, "partition")
    _check_federation(cfg.federation)
    _check_run_settings(cfg)
    cfg.model = namespaced_section("model", names.models, cfg.model)
    name = cfg.algorithm.get("name")
    algorithm = apply_defaults(cfg.algorithm_defaults, cfg.algorithm, names.algorithms)
    if name in names.algorithms:  # a key of another algorithm: say whose (switching is done by parse_config)
        own = set(field_names(names.algorithms[name].Config))
        for k in sorted(set(algorithm) - own - {"name"}):
            if owners(names.algorithms, k):
                raise ConfigError(f"unknown key algorithm.{k} for algorithm {name!r} (a key of "
                                  f"{', '.join(owners(names.algorithms, k))}); valid keys: name, "
                                  f"{', '.join(sorted(own)) or '(none)'}")
    cfg.algorithm = namespaced_section("algorithm", names.algorithms, algorithm)
    return cfg


def _check_federation(f: Any) -> None:
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


def _check_run_settings(cfg: DictConfig) -> None:
    """``fabric``, ``tracking`` and ``metrics``."""
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
    check_range(tr.system_metrics_interval > 0, "tracking.system_metrics_interval", tr.system_metrics_interval,
                "a number of seconds > 0")
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


def apply_defaults(defaults: Any, values: Any, registry: dict, section: str = "algorithm") -> dict:
    """The section with ``<section>_defaults[<section>.name]`` filled in under its own keys: one config file (or one
    list of overrides) serves every entry of a comparison -- a paper's grid gives some of its methods the true number
    of clusters, a smaller scale sets a key of one of its partitions only -- while an explicit ``<section>.KEY``
    still wins."""
    per = OmegaConf.to_container(defaults) if isinstance(defaults, DictConfig) else dict(defaults or {})
    own = OmegaConf.to_container(values) if isinstance(values, DictConfig) else dict(values or {})
    for name, keys in per.items():
        check_choice(f"{section}_defaults key", name, registry)
        check_range(isinstance(keys, dict), f"{section}_defaults.{name}", keys, f"a mapping of that {section}'s keys")
    return {**per.get(own.get("name"), {}), **own}
