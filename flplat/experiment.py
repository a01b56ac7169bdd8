"""One experiment: load and validate its config, assemble it, run it with tracking.

This is the assembly layer above the engine: it is where the registries (datasets, partitions, models,
algorithms) meet the config (:func:`load_config`, the one validation entry point), where a launched Fabric, the
federated data, the model, the client trainer and the strategy are built (:func:`prepare`) and where the round
loop runs with its callbacks, MLflow's among them (:func:`run`). Studies (tuning, sweeps) and the CLI sit above it.

Everything that can fail because of the input (data files, an infeasible partition, a precision the device
lacks) happens in :func:`prepare`, before any MLflow run exists; :func:`run` then trains and tracks.
"""

from __future__ import annotations

import copy
import logging
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from flplat.algorithms import ALGORITHMS
from flplat.config import validate
from flplat.config_io import config_key, flatten, loggable, loggable_yaml
from flplat.config_load import dotlist, parse_config
from flplat.configure import load_config, registries  # noqa: F401  (load_config: re-exported)
from flplat.data.containers import FederatedData
from flplat.data.datasets import load_dataset
from flplat.data.partitions import build_federation
from flplat.engine.callbacks import ClientStateCleanup, ProgressCallback, eta  # noqa: F401  (eta: re-exported)
from flplat.engine.client import ClientTrainer
from flplat.engine.events import Callback
from flplat.engine.orchestrator import Orchestrator, RunSummary
from flplat.engine.sharding import default_threads, is_main_process, make_executor
from flplat.errors import ConfigError, first_line
from flplat.metrics.noniid import noniid_summary
from flplat.models import build_model
from flplat.protocol.seeding import derive_seed
from flplat.protocol.strategy import FederationInfo, Strategy

log = logging.getLogger("flplat")
PROCESSES_TAG = "flplat.processes"  # on every run: the processes that trained it (fabric.devices x num_nodes)


def is_multi_process(fcfg) -> bool:
    """Whether the ``fabric`` section starts several processes (sharded rounds)."""
    devices = fcfg.devices
    if isinstance(devices, str) and devices.isdigit():
        devices = int(devices)
    return fcfg.num_nodes > 1 or devices not in (1, "1") or "WORLD_SIZE" in os.environ


def build_fabric(fcfg):
    """A launched Lightning Fabric: one process, or several (``fabric.devices`` × ``fabric.num_nodes``) that
    shard each round's clients (see :mod:`flplat.engine.sharding`)."""
    from lightning.fabric import Fabric

    accel = fcfg.accelerator
    if accel in ("cuda", "gpu") and not torch.cuda.is_available():
        raise ConfigError(f"fabric.accelerator={accel!r} but no CUDA device is visible; allowed here: cpu, auto")
    devices = fcfg.devices
    if isinstance(devices, str) and devices.isdigit():
        devices = int(devices)
    if isinstance(devices, int) and devices < 1:
        raise ConfigError(f"fabric.devices={devices!r} is out of range; allowed: an integer >= 1, a list or 'auto'")
    multi = is_multi_process(fcfg)
    if multi:
        from flplat.engine.sharding import close_process_group_at_exit, loopback_rendezvous

        loopback_rendezvous()
        close_process_group_at_exit()
    from flplat.engine.launch import cluster_environment, fabric_processes

    env = cluster_environment(fcfg)  # a one-task SLURM job is not a world of one (ConfigError: tasks mismatched)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            fabric = Fabric(accelerator=accel, devices=devices, num_nodes=fcfg.num_nodes,
                            strategy="ddp" if multi else "auto", precision=str(fcfg.precision),
                            plugins=[env] if env is not None else None)
        except (ValueError, RuntimeError, TypeError) as e:
            msg = str(e).strip().splitlines()[0]
            raise ConfigError(f"fabric.precision={fcfg.precision!r} / fabric.devices={devices!r} not usable on "
                              f"{accel}: {msg}") from None
        fabric.launch()
    world = fabric_processes(fcfg)
    if world is not None and fabric.world_size != world:  # never train in fewer processes than the run records
        raise ConfigError(f"fabric.devices={devices!r} x fabric.num_nodes={fcfg.num_nodes} asks for {world} "
                          f"processes, but the launcher started {fabric.world_size}; allowed: flplat's own launch "
                          f"(one command), or a launcher that starts {world} (torchrun --nproc-per-node, srun "
                          "--ntasks-per-node; docs/scaling.md)")
    threads = fcfg.num_threads or (default_threads(fabric.world_size) if fabric.world_size > 1 else 0)
    if threads > 0:
        torch.set_num_threads(threads)
    return fabric


@dataclass
class Prepared:
    cfg: DictConfig
    data: FederatedData
    strategy: Strategy
    trainer: ClientTrainer
    init_weights: torch.Tensor
    partition_metrics: dict[str, float]


def check_token_inputs(dataset, model_name: str) -> None:
    """Data a model cannot take, refused by name before it fails deep inside: a text dataset gives int64 token ids
    (flplat/data/text.py), which a model without an embedding (no ``vocab_size`` in its Config) would meet with a
    dtype error in its first layer; a model with an embedding needs token ids. Multi-label data (CheXpert, y
    (N, C) of 0/1) is taken: BCE training and macro ROC AUC (see :func:`prepare` and the README)."""
    import dataclasses

    from flplat.models.base import MODELS

    spec = MODELS.get(model_name)
    takes_tokens = spec is not None and "vocab_size" in {f.name for f in dataclasses.fields(spec.Config)}
    if dataset.vocab is None or dataset.x_train.is_floating_point():
        if takes_tokens:
            raise ConfigError(f"model.name={model_name!r} embeds token ids, but data.name={dataset.name!r} gives "
                              f"float features {tuple(dataset.x_train.shape)}; allowed: a text dataset (sent140, "
                              "amazon_reviews)")
        return
    if spec is None or takes_tokens:
        return
    text_models = sorted(n for n, s in MODELS.items() if "vocab_size" in {f.name for f in dataclasses.fields(s.Config)})
    raise ConfigError(f"model.name={model_name!r} takes float features, but data.name={dataset.name!r} gives int64 "
                      f"token ids {tuple(dataset.x_train.shape)} over {len(dataset.vocab)} words; allowed: a model "
                      f"with an embedding ({', '.join(text_models) or 'none is registered yet'})")


def check_multilabel(dataset, algorithm: str) -> None:
    """Multi-label data with a method whose own mechanism needs one class per sample (its
    ``Strategy.multilabel_unsupported`` says why), refused by name; every other method trains with binary
    cross-entropy through the one loss (:func:`flplat.maths.losses.task_loss`)."""
    why = getattr(ALGORITHMS.get(algorithm), "multilabel_unsupported", None)
    if dataset.multilabel and why:
        raise ConfigError(f"algorithm.name={algorithm!r} cannot train on multi-label data.name={dataset.name!r}: "
                          f"{why}; allowed: another algorithm")


def fill_vocab_size(cfg: DictConfig, dataset) -> DictConfig:
    """``cfg`` with ``model.vocab_size`` set to the dataset's vocabulary size where the model has the key and it is 0
    (the default: "the dataset's"), as a copy -- the returned config is what the run logs (``model.vocab_size`` is
    then visible in its params), while the config hash (studies' resume key) stays that of the config as written.
    A value set by hand must equal the vocabulary size (a smaller embedding would fail on the first large id)."""
    if dataset.vocab is None or "vocab_size" not in cfg.model:
        return cfg
    n = len(dataset.vocab)
    given = int(cfg.model.vocab_size)
    if given not in (0, n):
        raise ConfigError(f"model.vocab_size={given} does not match data.name={dataset.name!r}'s vocabulary of {n} "
                          f"words; allowed: 0 (filled from the data) or {n}")
    out = copy.deepcopy(cfg)
    with open_dict(out):
        out.model.vocab_size = n
    if given == 0:
        log.info("model.vocab_size=%d (the vocabulary of data.name=%s, built on its training split)", n,
                 dataset.name)
    return out


REQUESTED_CLIENTS_TAG = "flplat.requested.partition.num_clients"  # the written value, where the partition differs


def fill_num_clients(cfg: DictConfig, data: FederatedData) -> DictConfig:
    """``cfg`` with ``partition.num_clients`` set to the number of clients the partition produced, where that differs
    from the written value (``natural``: the dataset's own clients decide, after ``partition.min_samples`` /
    ``max_clients``; a plugin's partition), as a copy. As with :func:`fill_vocab_size`, the returned config
    is what the run logs (params, ``config.yaml``), so ``partition.num_clients`` shows the real federation; the
    written value goes to the run's tag ``flplat.requested.partition.num_clients``, and the config hash stays that
    of the config as written (a re-run of the same command finds its run)."""
    written, real = int(cfg.partition.num_clients), int(data.num_clients)
    if written == real:
        return cfg
    out = copy.deepcopy(cfg)
    with open_dict(out):
        out.partition.num_clients = real
    log.info("partition.num_clients=%d: the clients partition.name=%s produced (%d written, not used)", real,
             cfg.partition.name, written)
    return out


def prepare(cfg: DictConfig) -> Prepared:
    """Load data, partition, build model, trainer and strategy. Raises ConfigError on bad input."""
    seed = int(cfg.seed)
    # launch first: with several processes the others start (imports, data) while this one loads the data
    fabric = build_fabric(cfg.fabric)
    dataset = load_dataset(cfg.data, derive_seed(seed, "data"))
    check_token_inputs(dataset, cfg.model.name)
    check_multilabel(dataset, cfg.algorithm.name)
    cfg = fill_vocab_size(cfg, dataset)
    data = build_federation(dataset, cfg.partition, derive_seed(seed, "partition"))
    cfg = fill_num_clients(cfg, data)
    if cfg.partition.test_fraction == 0 and data.x_global_test is None:
        raise ConfigError("partition.test_fraction=0.0 leaves no test data to evaluate on; allowed: a number in (0, 1)")
    torch.manual_seed(derive_seed(seed, "init"))
    net = build_model(cfg.model, data.input_shape, data.num_classes)
    f = cfg.federation
    trainer = ClientTrainer(fabric, net, data.x, data.y, f.optimizer, f.batch_size, f.local_epochs, f.eval_batch_size)
    train_counts = data.label_counts("train")
    info = FederationInfo(
        num_clients=data.num_clients, num_classes=data.num_classes, num_samples=data.num_samples("train"),
        label_counts=train_counts, client_fraction=f.client_fraction, local_epochs=f.local_epochs,
        layout=trainer.layout, all_train_indices=np.concatenate([c.train for c in data.clients]),
        state_dtype=getattr(torch, f.client_state_dtype), state_dir=run_state_dir(f.client_state_dir),
        public_x=public_inputs(data), rounds=int(f.rounds),
        num_distributions=int(data.meta.get("num_distributions", 0)),
        true_iid=data.meta.get("iid"),
        split_samples={split: data.num_samples(split) for split in ("val", "test")},
    )
    if cfg.partition.test_fraction > 0 and data.num_samples("test").sum() == 0:  # rounding left no test sample
        raise ConfigError(f"partition.test_fraction={cfg.partition.test_fraction} leaves no client any test sample "
                          f"({data.num_clients} clients); allowed: a larger partition.test_fraction")
    algo = ALGORITHMS[cfg.algorithm.name]
    algo_cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(algo.Config),
                                                   {k: v for k, v in cfg.algorithm.items() if k != "name"}))
    strategy = algo(algo_cfg, info)
    pm = noniid_summary(data.label_counts("all"))
    return Prepared(cfg, data, strategy, trainer, trainer.initial_weights(), {k: float(v) for k, v in pm.items()})


def run_state_dir(root: str | None) -> str | None:
    """This run's own directory for memory-mapped client state under ``federation.client_state_dir``: two runs
    sharing the setting never overwrite each other's files (the key is tagged on the MLflow run)."""
    if root is None:
        return None
    import uuid

    return os.path.join(root, f"run-{uuid.uuid4().hex[:12]}")


def public_inputs(data: FederatedData) -> torch.Tensor | None:
    """The server's public unlabeled inputs: the partition's public sample (rows of the global test set) when it
    defines one, else the global test set's inputs (None without one)."""
    if data.x_global_test is None:
        return None
    return data.x_global_test if data.public_indices is None else data.x_global_test[data.public_indices]


def run(cfg: DictConfig, callbacks: Sequence[Callback] = (), progress: bool = True,
        resume: dict | None = None, tags: dict[str, str] | None = None,
        decide: Callable[[], tuple[dict | None, dict[str, str] | None]] | None = None) -> tuple[RunSummary, str | None]:
    """Run the experiment; returns the summary and the MLflow run id (None when tracking is off). ``resume``: a
    checkpoint payload (:func:`resume_checkpoint`) to continue in its MLflow run after its round. A new run is
    tagged with its config hash (``flplat.config_key``: how studies find it again), ``tags`` and
    ``flplat.processes`` (the processes that trained it). ``decide``: returns ``(resume, tags)`` once the processes
    are up, taken by rank 0 alone and followed by every process (:func:`flplat.tracking.resume.agree`; a
    study's sharded run)."""
    if cfg.tracking.enabled:
        check_tracking(cfg.tracking)  # fail fast, before the data are loaded and before any run exists
    p = prepare(cfg)
    if decide is not None:
        from flplat.tracking.resume import agree

        resume, tags = agree(cfg.tracking, decide)
    tags = {**(tags or {}), PROCESSES_TAG: str(p.trainer.fabric.world_size)}
    cbs = list(callbacks)
    tracker = None
    main = is_main_process()  # with sharded execution only global rank 0 shows progress and tracks
    if progress and main:
        cbs.append(ProgressCallback(int(cfg.federation.rounds), f"{cfg.algorithm.name}/{cfg.data.name}"))
    if cfg.tracking.enabled and main:
        tracker = _tracking_callbacks(cfg, p, resume, tags, cbs)
    f = cfg.federation
    if p.strategy.info.state_dir is not None:
        cbs.append(ClientStateCleanup(p.strategy.info.state_dir, bool(f.keep_client_state)))
    executor = make_executor(p.trainer, p.data, int(cfg.seed), bool(f.vectorize), int(f.vectorize_group),
                             int(f.eval_group_size), int(f.vectorize_keep_mib))
    from flplat.engine.failures import FailureModel

    meta = {"config_yaml": loggable_yaml(cfg)}
    if p.strategy.info.state_dir is not None:  # (a resumed run keeps writing to its first one: meta restored)
        meta["client_state_dir"] = p.strategy.info.state_dir
    orch = Orchestrator(p.strategy, executor, p.data,
                        int(cfg.federation.rounds), int(cfg.federation.eval_every), int(cfg.seed), cbs,
                        int(cfg.federation.accuracy_window), metrics_cfg=cfg.metrics,
                        batched_eval=bool(f.batched_eval),
                        failures=FailureModel(f.failures, int(cfg.seed), int(f.local_epochs)), meta=meta)
    if resume is not None:
        from flplat.engine.checkpoint import resumer

        summary = orch.run(p.init_weights, resume=resumer(resume))
    else:
        summary = orch.run(p.init_weights)
    return summary, (tracker.run_id if tracker else None)


def _tracking_callbacks(cfg: DictConfig, p, resume: dict | None, tags: dict[str, str], cbs: list) -> Callback:
    """The MLflow tracker (first in ``cbs``) and, when checkpoints are on, the checkpoint callback before it (a
    round is saved before it is logged); returns the tracker."""
    from flplat.tracking.resume import CONFIG_KEY_TAG
    from flplat.tracking.runs import MlflowCallback

    sizes = {"num_train": p.data.num_samples("train"), "num_test": p.data.num_samples("test")}
    # p.cfg: the config with what the data fill in (model.vocab_size, partition.num_clients); the hash below
    # stays the written one's
    tracker = MlflowCallback(cfg.tracking, flatten(loggable(p.cfg)), loggable_yaml(p.cfg), p.partition_metrics,
                             p.data.label_counts("all"), sizes,
                             {"input_shape": list(p.data.input_shape), "num_classes": int(p.data.num_classes)})
    if resume is not None:
        tracker.resume_run_id = resume["meta"]["run_id"]
    tracker.extra_tags = {CONFIG_KEY_TAG: config_key(cfg), **(tags or {})}
    if int(p.cfg.partition.num_clients) != int(cfg.partition.num_clients):
        tracker.extra_tags[REQUESTED_CLIENTS_TAG] = str(cfg.partition.num_clients)
    cbs.insert(0, tracker)
    if int(cfg.tracking.checkpoint_every) > 0:
        from flplat.engine.checkpoint import CheckpointCallback
        from flplat.tracking.store import checkpoint_dir

        cbs.insert(0, CheckpointCallback(checkpoint_dir(cfg.tracking), int(cfg.tracking.checkpoint_every),
                                         bool(cfg.tracking.keep_checkpoint), run_id=lambda: tracker.run_id))
    return tracker


def check_tracking(tcfg) -> None:
    """One-line errors for a tracking store that cannot work: a server that does not answer (MLflow alone retries
    for minutes, then prints a long traceback), a store directory that cannot be created or written."""
    from flplat.tracking.store import store_uris

    uri = tcfg.uri or os.environ.get("MLFLOW_TRACKING_URI") or ""
    key = "tracking.uri" if tcfg.uri else ("$MLFLOW_TRACKING_URI" if uri else "tracking.store_dir")
    if uri and not uri.startswith("sqlite:///"):
        from flplat.tracking.store import check_reachable

        check_reachable(uri, key)  # a server (http, a database): one short probe
        return
    try:
        _, artifacts = store_uris(tcfg.uri, tcfg.store_dir, tcfg.artifact_root)
        db = uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else os.path.join(tcfg.store_dir, "mlflow.db")
        folder = os.path.dirname(os.path.abspath(db))
        os.makedirs(folder, exist_ok=True)
        if not os.access(folder, os.W_OK):
            raise PermissionError(f"{folder} is not writable")
    except OSError as e:
        raise ConfigError(f"{key}: the tracking store cannot be created ({first_line(e)}); allowed: a writable "
                          "directory (tracking.store_dir) or tracking.enabled=false") from None


def resume_checkpoint(run_id: str, overrides: Sequence[str] = ()) -> tuple[DictConfig, dict]:
    """The config and checkpoint payload to continue MLflow run ``run_id`` (``flplat run --resume``).

    The checkpoint is looked up where this config would write it (``tracking.*`` overrides, e.g.
    ``tracking.store_dir``, say where); the experiment's own config comes from the checkpoint, so only
    ``tracking.*`` keys may be overridden (anything else would not continue the same run)."""
    from flplat.engine import checkpoint
    from flplat.tracking.store import checkpoint_path

    bad = [o for o in overrides if not o.split("=", 1)[0].strip().startswith("tracking.")]
    if bad:
        raise ConfigError(f"{bad[0]!r}: only tracking.* keys may be overridden with --resume (the run continues "
                          "with the config it started with)")
    where = load_config(None, overrides).tracking
    path = checkpoint_path(where, run_id)
    if not path.is_file():
        raise ConfigError(f"--resume={run_id!r}: no checkpoint {path}; allowed: the id of an unfinished run "
                          f"with tracking.checkpoint_every > 0 (set tracking.store_dir / checkpoint_dir to its store)")
    try:
        data = checkpoint.load(path)
    except ValueError as e:  # another version's checkpoint
        raise ConfigError(f"--resume={run_id!r}: {first_line(e)}") from None
    from flplat.data.legacy import upgrade_config
    from flplat.plugins import load_plugins

    base = OmegaConf.create(upgrade_config(OmegaConf.create(data["meta"]["config_yaml"])))  # an older run's too

    load_plugins(base.get("plugins"))  # the run's own plugins (its config recorded them)
    cfg = validate(OmegaConf.merge(parse_config(None, ()), base,
                                   dotlist(overrides)), registries())
    return cfg, data


def run_or_resume(cfg: DictConfig, callbacks: Sequence[Callback] = (), progress: bool = True
                  ) -> tuple[RunSummary, str | None]:
    """:func:`run` for a run of a study (``flplat sweep`` / ``tune`` / ``reproduce``): when an earlier run of the
    same config (same config hash, experiment, and parent run when ``tracking.parent_run_id`` is set) was
    interrupted -- KILLED, FAILED other than by divergence, or RUNNING without a live heartbeat -- and has a
    checkpoint, it continues in that MLflow run from its last checkpoint, exactly as ``flplat run --resume``
    (same metrics as an uninterrupted run); one without a checkpoint is tagged as replaced and a new run starts
    from round 0 (:func:`flplat.tracking.runs.claim_unfinished`; each decision is one line on stderr).

    A sharded run (several processes) decides once its processes are up: rank 0 alone looks the run up (it
    changes the store) and the others follow its decision (:func:`flplat.tracking.resume.agree`), reading the
    same checkpoint."""
    if not cfg.tracking.enabled:
        return run(cfg, callbacks=callbacks, progress=progress)
    check_tracking(cfg.tracking)
    # set by a scheduler's task (flplat.studies.reproduction.execute: a Ray task's id): a retry after its worker died
    # takes over the run its earlier attempt left RUNNING
    owner = os.environ.get("FLPLAT_RUN_OWNER") or None

    def decide() -> tuple[dict | None, dict[str, str] | None]:
        from flplat.tracking.resume import OWNER_TAG, REPLACES_TAG, claim_unfinished

        data, replaced = claim_unfinished(cfg.tracking, config_key(cfg), owner)
        tags = {OWNER_TAG: owner} if owner else {}
        if data is None and replaced:
            tags[REPLACES_TAG] = ",".join(replaced)
        return data, tags or None

    if is_multi_process(cfg.fabric):
        return run(cfg, callbacks=callbacks, progress=progress, decide=decide)
    data, tags = decide()
    return run(cfg, callbacks=callbacks, progress=progress, resume=data, tags=tags)
