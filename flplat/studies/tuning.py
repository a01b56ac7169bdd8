"""Optuna studies over config keys, and seed sweeps, each trial/seed an MLflow run nested under a parent run.

Search-space files (``configs/search_spaces/*.yaml``) map an algorithm name (or ``common`` for keys every
algorithm shares) to ``{dotted.config.key: spec}``. A spec is a list of values (a grid: Clust-PSI-PFL Table II)
or a mapping ``{low, high, log?, step?}`` (a range for free search with TPE). A grid study uses Optuna's
GridSampler over exactly the listed values; the objective is the validation accuracy of the final models
(``val_accuracy``: configure ``partition.val_fraction`` > 0) and falls back to ``global_accuracy`` (test)
with a warning when there is no validation split.

Storage: ``sqlite:///mlruns/optuna.db`` by default; any RDB URL, or ``journal:PATH`` for Optuna's journal
file storage, lets several workers share a study. Re-running the same command resumes the study. Grid
workers running concurrently can draw the same point (Optuna's GridSampler documents this): a trial whose
params were already completed reuses the stored value instead of training again, and one whose params another
worker is training right now is pruned. A trial interrupted by Ctrl-C / SIGTERM (FAIL) is queued again by the
next invocation (:func:`retry_interrupted`); one whose worker was killed outright is failed by its RDB heartbeat
and retried by Optuna's ``RetryFailedTrialCallback``.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from flplat.config_io import flatten
from flplat.engine.failures import Diverged
from flplat.errors import ConfigError, first_line
from flplat.experiment import check_tracking, load_config
from flplat.studies.study_plots import log_study_plots
from flplat.tracking.meta import ensure_experiment, run_name, run_tags
from flplat.tracking.provenance import CODE_TAG, CodeIdentity, code_identity, other_code


def load_space(path: str | Path, algorithm: str) -> dict[str, Any]:
    """The search space for ``algorithm``: its own keys plus the ``common`` ones."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"search-space file {str(path)!r} does not exist; see configs/search_spaces/")
    raw = OmegaConf.to_container(OmegaConf.load(p), resolve=True) or {}
    if algorithm not in raw and "common" not in raw:
        raise ConfigError(f"search space {str(path)!r} has no section {algorithm!r}; sections: {', '.join(raw)}")
    space = dict(raw.get("common") or {})
    space.update(raw.get(algorithm) or {})
    if not space:
        raise ConfigError(f"search space {str(path)!r} is empty for algorithm {algorithm!r}")
    for key, spec in space.items():
        ok = (isinstance(spec, list) and spec) or (isinstance(spec, dict) and {"low", "high"} <= set(spec))
        if not ok:
            raise ConfigError(f"search space key {key!r}: give a non-empty list of values or {{low, high[, log]}}")
        if isinstance(spec, dict):
            try:
                low, high = float(spec["low"]), float(spec["high"])
            except (TypeError, ValueError):
                raise ConfigError(f"search space key {key!r}: low / high must be numbers") from None
            if not low <= high:
                raise ConfigError(f"search space key {key!r}: low={spec['low']} > high={spec['high']}; allowed: "
                                  "low <= high")
            if spec.get("log") and low <= 0:
                raise ConfigError(f"search space key {key!r}: log=true needs low > 0")
    return space


def is_grid(space: dict[str, Any]) -> bool:
    return all(isinstance(v, list) for v in space.values())


def grid_size(space: dict[str, Any]) -> int:
    return math.prod(len(v) for v in space.values())


def make_storage(url: str, tracking_cfg=None):
    """The study's Optuna storage; an RDB one beats for its running trials at ``tracking.heartbeat_s`` and fails
    them after the runs' stale rule (:func:`flplat.tracking.heartbeat.optuna_heartbeat`; ``tracking_cfg`` None: the
    defaults)."""
    import optuna

    from flplat.tracking.heartbeat import optuna_heartbeat

    if url.startswith("journal:"):
        path = Path(url[len("journal:"):])
        path.parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
    if url.startswith("sqlite:///"):
        Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    try:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError

        make_url(url).get_dialect()
    except (ArgumentError, NoSuchModuleError, ValueError) as e:
        raise ConfigError(f"--storage={url!r} is not usable ({first_line(e)}); allowed: an RDB URL such as "
                          "sqlite:///mlruns/optuna.db or postgresql://..., or journal:PATH") from None
    # a heartbeat per running trial: a worker killed with SIGKILL leaves its trial RUNNING; once its heartbeat is
    # stale (the same rule as the runs') Optuna marks it FAIL and the next worker retries its point
    interval, grace = optuna_heartbeat(tracking_cfg)
    # several processes on one SQLite file (--jobs, a local Ray instance) wait for its lock instead of failing
    engine = {"connect_args": {"timeout": 60}} if url.startswith("sqlite:") else None
    return optuna.storages.RDBStorage(url, engine_kwargs=engine, heartbeat_interval=interval, grace_period=grace,
                                      failed_trial_callback=optuna.storages.RetryFailedTrialCallback(max_retry=3))


def retry_interrupted(study, space: dict[str, Any]) -> int:
    """Queue again the grid points / parameter sets of trials that ended FAIL (a Ctrl-C, SIGTERM or crash
    inside a trial) and that no other trial has completed, is running or has queued; returns how many. Optuna's
    GridSampler counts a failed point as visited, so without this a re-run would skip it silently."""
    import optuna

    S = optuna.trial.TrialState
    trials = study.get_trials(deepcopy=False)
    covered = [t.params or t.system_attrs.get("fixed_params", {}) for t in trials
               if t.state in (S.COMPLETE, S.RUNNING, S.WAITING)]
    queued = 0
    for t in trials:
        if t.state == S.FAIL and t.params and set(t.params) == set(space) and t.params not in covered:
            _requeue(study, t, "retry_of")
            covered.append(t.params)
            queued += 1
    return queued


def _requeue(study, t, why: str) -> None:
    """Queue trial ``t``'s params again (user attribute ``why`` = its number)."""
    import optuna

    study.enqueue_trial(dict(t.params), user_attrs={why: t.number})
    if "grid_id" in t.system_attrs:  # the same grid point for GridSampler's bookkeeping (it needs one)
        waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))[-1]
        for key in ("grid_id", "search_space"):
            study._storage.set_trial_system_attr(waiting._trial_id, key, t.system_attrs[key])


def stale_trials(study, code: str) -> list:
    """The completed trials that another code made (their ``flplat.code`` user attribute is not ``code``, or they
    have none: made before trials recorded it) and that no trial of ``code`` has run again (same params)."""
    import optuna

    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    current = [t.params for t in done if t.user_attrs.get(CODE_TAG) == code]
    return [t for t in done if t.user_attrs.get(CODE_TAG) != code and t.params not in current]


def best_trial(study, code: str):
    """The best completed trial, a trial of other code counting only where no trial of ``code`` ran its params
    (None: no completed trial)."""
    import optuna

    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    stale = {t.number for t in stale_trials(study, code)}
    usable = [t for t in done if t.user_attrs.get(CODE_TAG) == code or t.number in stale]
    return max(usable, key=lambda t: t.value, default=None)


def _optimize(study, objective, n_trials: int, callbacks=()) -> None:
    """``study.optimize`` for ``n_trials``, again while queued trials wait: GridSampler stops a study once every
    grid point has a finished trial, which leaves the points queued again (:func:`retry_interrupted`, stale
    trials) waiting."""
    import optuna

    def finished() -> int:  # a queued trial becomes a trial by running: count those that ended
        return sum(t.state.is_finished() for t in study.get_trials(deepcopy=False))

    left = n_trials
    while left > 0:
        before = finished()
        study.optimize(objective, n_trials=left, callbacks=list(callbacks))
        ran = finished() - before
        left -= ran
        if ran == 0 or not study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
            return


def _suggest(trial, key: str, spec) -> Any:
    if isinstance(spec, list):
        return trial.suggest_categorical(key, spec)
    low, high = spec["low"], spec["high"]
    if isinstance(low, int) and isinstance(high, int) and not spec.get("log") and "step" not in spec:
        return trial.suggest_int(key, low, high)
    return trial.suggest_float(key, float(low), float(high), log=bool(spec.get("log", False)),
                               step=spec.get("step"))


def _fmt(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


class _Objective:
    """A trial: the config with the trial's values, run (or resumed) as a nested run; its objective value. A class,
    not a closure, so that worker processes and Ray tasks can run trials of the same study."""

    def __init__(self, config: str, overrides: list[str], space: dict[str, Any], name: str, parent: str | None,
                 objective_key: str, progress: bool, threads: int | None = None, rerun_stale: bool = False):
        self.config, self.overrides, self.space, self.name = config, overrides, space, name
        self.parent, self.objective_key, self.progress, self.threads = parent, objective_key, progress, threads
        self.rerun_stale, self.code = rerun_stale, None

    def __call__(self, trial):
        import optuna

        from flplat.experiment import run_or_resume

        study = trial.study
        values = {k: _suggest(trial, k, spec) for k, spec in self.space.items()}
        if self.code is None:  # once per process (a worker's objective is a copy)
            self.code = code_identity(load_config(self.config, self.overrides)).key
        code = self.code
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            made_by = t.user_attrs.get(CODE_TAG)
            if t.params == values and (made_by == code or not self.rerun_stale):  # a concurrent grid worker ran it
                if made_by:  # the value is that trial's: so is its code
                    trial.set_user_attr(CODE_TAG, made_by)
                return t.value
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            if t.number != trial.number and t.params == values:  # another worker is training it right now
                raise optuna.TrialPruned(f"point trained by trial {t.number}")
        over = [*self.overrides, *(f"{k}={_fmt(v)}" for k, v in values.items()),
                f"tracking.run_name={self.name}-trial{trial.number}"]
        if self.threads:
            over.append(f"fabric.num_threads={self.threads}")
        if self.parent:
            over.append(f"tracking.parent_run_id={self.parent}")
        trial.set_user_attr(CODE_TAG, code)  # the code that makes its value (flplat.tracking.provenance)
        try:
            summary, run_id = run_or_resume(load_config(self.config, over), progress=self.progress)  # continues one
        except Diverged as e:  # a result of the point (the grid goes on, nothing to retry): pruned, never the best
            trial.set_user_attr("diverged", first_line(e))
            raise optuna.TrialPruned(f"diverged: {first_line(e)}") from None
        if run_id:  # interrupted before
            trial.set_user_attr("mlflow_run_id", run_id)
        return summary.metrics[self.objective_key]


def _sampler(space: dict[str, Any], seed: int):
    import optuna

    return optuna.samplers.GridSampler(space, seed=seed) if is_grid(space) else optuna.samplers.TPESampler(seed=seed)


def _tune_worker(storage: str, name: str, space: dict[str, Any], seed: int, objective: _Objective, n_trials: int,
                 threads: int | None = None) -> int:
    """One worker of a study (a process or a Ray task): ``n_trials`` trials on the shared storage; returns how many
    it ran."""
    import warnings

    import optuna

    objective.threads = threads or objective.threads
    base = load_config(objective.config, objective.overrides)
    with warnings.catch_warnings():  # the storage's experimental / deprecated arguments: said once by the driver
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.simplefilter("ignore", FutureWarning)
        study = optuna.load_study(study_name=name, storage=make_storage(storage, base.tracking),
                                  sampler=_sampler(space, seed))
    ran: list[int] = []
    _optimize(study, objective, n_trials, [lambda _study, trial: ran.append(trial.number)])
    return len(ran)


def check_shared_storage(storage: str, remote: bool) -> None:
    """With a Ray cluster the study's storage must be one every node reaches: an RDB server (postgresql://,
    mysql://) or Optuna's journal file on a shared filesystem (``journal:/abs/path``), not SQLite (a local file;
    SQLite over a network filesystem is not safe for concurrent writers)."""
    if not remote:
        return
    if storage.startswith("sqlite:"):
        raise ConfigError(f"--storage={storage!r}: SQLite is a local file the nodes of a Ray cluster cannot share; "
                          "allowed: an RDB server (postgresql://..., mysql://...) or journal:/shared/path/study.log "
                          "(a journal file on a filesystem every node mounts)")
    if storage.startswith("journal:") and not Path(storage[len("journal:"):]).is_absolute():
        raise ConfigError(f"--storage={storage!r}: a journal file of a Ray cluster's study must be an absolute path on "
                          "a filesystem every node mounts; allowed: journal:/shared/path/study.log or an RDB server")


def tune(config: str, overrides: list[str], space_path: str, storage: str, study_name: str | None,
         n_trials: int | None, progress: bool = False, backend=None, rerun_stale: bool = False) -> dict[str, Any]:
    """Run (or resume) a study; returns the best params and value. ``backend``
    (:mod:`flplat.studies.reproduction.execute`): default one worker in this process; ``--jobs N``: N worker
    processes, ``--backend ray``: Ray tasks, each a worker running its share of the trials on the shared storage
    (SQLite for workers on one machine; an RDB server or a journal file on a shared filesystem for a cluster).

    Each trial records the code that made its value (user attribute ``flplat.code``,
    :mod:`flplat.tracking.provenance`). Completed trials of other code stay in the study and count (said on stderr;
    ``stale_trials`` and ``best_from_other_code`` in the result); with ``rerun_stale`` their params are queued and
    run again, and the new trial's value replaces theirs (:func:`best_trial`)."""
    import optuna

    from flplat.studies.reproduction.execute import LocalBackend

    backend = backend or LocalBackend(1)
    base = load_config(config, overrides)  # validates the base config before anything is created
    if base.tracking.enabled:
        check_tracking(base.tracking)  # an unreachable server: one line, before the study exists
    algo = base.algorithm.name
    space = load_space(space_path, algo)
    _check_space(config, overrides, space)
    backend.check_shared(base.tracking)
    check_shared_storage(storage, getattr(backend, "remote", False))
    storage_obj = make_storage(storage, base.tracking)
    grid = is_grid(space)
    objective_key = "val_accuracy" if base.partition.val_fraction > 0 else "global_accuracy"
    name = study_name or f"{base.tracking.experiment}-{algo}-{Path(space_path).stem}"
    study = optuna.create_study(study_name=name, storage=storage_obj, sampler=_sampler(space, int(base.seed)),
                                direction="maximize", load_if_exists=True)
    retried = retry_interrupted(study, space)
    if retried:
        print(f"flplat tune: retrying {retried} interrupted trial(s)", file=sys.stderr)
    code = code_identity(base).key
    requeued = _stale_note(study, code, rerun_stale)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if n_trials is None:
        n_trials = max(grid_size(space) - len(done), 0) + requeued if grid else 20
    what = f"{config} {' '.join(overrides)}".strip()
    desc = (f"Optuna study {name!r} ({'grid' if grid else 'TPE'} over {', '.join(space)} from {space_path}) on "
            f"`{what}`; storage {storage}. Trials are the nested runs; objective {objective_key}, maximised. "
            "Best params in best_params.yaml; optimisation history and parameter importances under plots/. "
            f"Browse the study: optuna-dashboard {storage}")
    parent = _parent_run(base, name, space_path, desc, f"tune {name} {storage}") if base.tracking.enabled else None
    if objective_key != "val_accuracy":
        print("flplat tune: partition.val_fraction is 0; optimising test accuracy (set a validation split)",
              file=sys.stderr)
    objective = _Objective(config, list(overrides), space, name, parent, objective_key, progress,
                           rerun_stale=rerun_stale)

    with _ending(lambda status: parent and _finish_parent(base, parent, study, status, code)), backend:
        if n_trials > 0 and backend.name == "local" and backend.workers == 1:
            _optimize_here(study, objective, n_trials)
        elif n_trials > 0:
            _optimize_on_workers(backend, base, storage, name, space, objective, n_trials)
    study = optuna.load_study(study_name=name, storage=storage_obj)  # what every worker added
    return _tune_result(study, name, code, objective_key)


def _check_space(config: str, overrides: list[str], space: dict[str, Any]) -> None:
    """Every value of the search space (each grid value, each range's ends) must be a valid override of the base
    config, before any trial: a bad one is one line naming the key."""
    for key, spec in space.items():
        for value in spec if isinstance(spec, list) else (spec["low"], spec["high"]):
            try:
                load_config(config, [*overrides, f"{key}={_fmt(value)}"])
            except ConfigError as e:
                raise ConfigError(f"search space {key}={_fmt(value)}: {e}") from None


def _optimize_here(study, objective, n_trials: int) -> None:
    """The trials in this process, one progress line per trial: done / total, elapsed, an estimate of the rest."""
    from flplat.studies.reproduction.execute import Progress

    prog = Progress(n_trials, 0)

    def trial_done(study, trial) -> None:
        secs = trial.duration.total_seconds() if trial.duration else 0.0
        prog.line(f"tune trial {trial.number} {trial.state.name.lower()}", secs, trial.value)

    _optimize(study, objective, n_trials, [trial_done])


def _optimize_on_workers(backend, base, storage: str, name: str, space: dict[str, Any], objective,
                         n_trials: int) -> None:
    """The trials on the backend's workers over the shared storage, each worker its share of the trials and its
    own sampler seed (the base seed + its index)."""
    from flplat.studies.reproduction.execute import Task

    objective.progress = False
    n_workers = min(n_trials, backend.slots() if hasattr(backend, "slots") else backend.workers)
    shares = [n_trials // n_workers + (i < n_trials % n_workers) for i in range(n_workers)]
    devices = int(base.fabric.devices) if str(base.fabric.devices).isdigit() else 1
    tasks = [Task(_tune_worker, (storage, name, space, int(base.seed) + i, objective, k),
                  f"tune worker {i}", i, devices, str(base.fabric.accelerator)) for i, k in enumerate(shares)]
    for task, res, err in backend.run(tasks):
        if err is not None:
            backend.report(task, err)
        else:
            print(f"flplat tune: {task.label} ran {res} trial(s)", file=sys.stderr, flush=True)
    backend.raise_failures()


def _tune_result(study, name: str, code: str, objective_key: str) -> dict[str, Any]:
    """What :func:`tune` returns: the best trial of this code (or of other code when none), and the stale count."""
    best = best_trial(study, code)
    stale = stale_trials(study, code)
    return {"study": name, "trials": len(study.trials), "best_params": best.params if best else None,
            "best_value": best.value if best else None, "objective": objective_key, "stale_trials": len(stale),
            "best_from_other_code": best is not None and best.number in {t.number for t in stale},
            "diverged": [t.params for t in study.trials if "diverged" in t.user_attrs]}


def _stale_note(study, code: str, rerun_stale: bool) -> int:
    """Say how many completed trials other code made; with ``rerun_stale`` queue their params again. Returns how
    many were queued."""
    stale = stale_trials(study, code)
    if not stale:
        return 0
    import optuna

    n_done = len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))
    if not rerun_stale:
        print(f"flplat tune: {len(stale)} of {n_done} completed trials come from other code than this command's (or "
              "from before trials recorded their code): they count; --rerun-stale runs their params again",
              file=sys.stderr)
        return 0
    for t in stale:
        _requeue(study, t, "rerun_of")
    print(f"flplat tune: {len(stale)} completed trial(s) of other code queued again (--rerun-stale)", file=sys.stderr)
    return len(stale)


@contextlib.contextmanager
def _ending(finish):
    """Call ``finish(status)`` on exit with FINISHED, FAILED (an exception) or KILLED (Ctrl-C)."""
    status = "FAILED"
    try:
        yield
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        finish(status)


def _client(cfg):
    from flplat.tracking.store import open_client, store_uris

    uri, artifacts = store_uris(cfg.tracking.uri, cfg.tracking.store_dir, cfg.tracking.artifact_root)
    client = open_client(uri)
    return client, ensure_experiment(client, cfg.tracking.experiment, artifacts)


def study_key(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _parent_run(cfg, name: str, kind: str, description: str = "", identity: str = "") -> str:
    """A parent run for a study or sweep, tagged like its children (algorithm, dataset, partition, provenance)
    with ``description`` shown in the MLflow UI (``mlflow.note.content``). ``identity`` says what defines the
    study (tag ``flplat.study_key``: its hash): the same command run again after an interruption re-opens the
    interrupted parent (KILLED, FAILED, or RUNNING without heartbeat) instead of creating one, so its finished
    runs are kept and its interrupted ones resumed (:func:`flplat.experiment.run_or_resume`)."""
    from flplat.tracking.resume import STUDY_KEY_TAG, reopen_parent

    client, exp_id = _client(cfg)
    key = study_key(identity) if identity else None
    if key:
        reopened = reopen_parent(client, exp_id, key, kind)
        if reopened:
            return reopened
    from flplat.tracking.heartbeat import process_tags

    tags = {**run_tags(flatten(cfg)), "flplat.kind": kind, **({STUDY_KEY_TAG: key} if key else {}),
            **process_tags()}  # this process owns the parent: once it is gone here, the parent is re-opened at once
    tags.pop("seed", None)
    if description:
        tags["mlflow.note.content"] = description
    run = client.create_run(exp_id, run_name=name, tags=tags)
    return run.info.run_id


def _finish_parent(cfg, run_id: str, study, status: str, code: str) -> None:
    client, _ = _client(cfg)
    try:
        best = best_trial(study, code)
        if best is not None:
            client.log_metric(run_id, "best_value", best.value)
            client.log_text(run_id, OmegaConf.to_yaml(OmegaConf.create(best.params)), "best_params.yaml")
        log_study_plots(client, run_id, study)
    finally:
        client.set_terminated(run_id, status)


def _sweep_run(cfg, progress: bool, threads: int | None = None) -> tuple[dict[str, float], str | None, float]:
    """One seed of a sweep (in this process, a worker process or a Ray task): its last round's metrics, run id and
    seconds."""
    import time

    from flplat.experiment import run_or_resume

    if threads:
        cfg.fabric.num_threads = threads
    t0 = time.perf_counter()
    summary, run_id = run_or_resume(cfg, progress=progress)
    return dict(summary.metrics), run_id, time.perf_counter() - t0


def sweep_seeds(config: str, overrides: list[str], seeds: list[int], progress: bool = False,
                backend=None, rerun_stale: bool = False) -> list[dict]:
    """Run the same config for several seeds, nested under one parent run; returns each seed's last metrics.

    The same sweep run again after an interruption (Ctrl-C, SIGTERM, a kill: its parent is KILLED, FAILED or
    stale) continues it: the parent is re-opened, seeds whose run FINISHED are not trained again (their last
    round's metrics are read back from the store), an interrupted seed continues from its checkpoint in its run
    (:func:`flplat.experiment.run_or_resume`), and the parent ends with the mean / std over every seed.
    ``backend`` (:mod:`flplat.studies.reproduction.execute`): where the seeds run (default: one after the other in
    this process; ``--jobs N``: worker processes; ``--backend ray``: Ray tasks), one progress line per seed.

    A finished seed whose run was made by other code (:mod:`flplat.tracking.provenance`) is used as the other
    finished seeds, and said: one line per seed, its row's ``stale`` (why), a count on stderr and the parent's tag
    ``flplat.stale_runs``; with ``rerun_stale`` it is trained again (the old run is tagged
    ``flplat.superseded_by`` the new one)."""
    from flplat.config_io import config_key
    from flplat.studies.reproduction.execute import LocalBackend, Task

    backend = backend or LocalBackend(1)
    base = load_config(config, overrides)
    if base.tracking.enabled:
        check_tracking(base.tracking)  # an unreachable server: one line, before the sweep's parent run
    cfgs = [load_config(config, [*overrides, f"seed={s}"]) for s in seeds]  # validate all before running
    backend.check_shared(base.tracking)
    what = f"{config} {' '.join(overrides)}".strip()
    name = f"{run_name(flatten(base)).rsplit(' seed=', 1)[0]} seeds={','.join(map(str, seeds))}"
    desc = (f"Seed sweep of `{what}` over seeds {', '.join(map(str, seeds))}: one nested run per seed; mean and "
            "std over the seeds of the final metrics logged here (<metric>_mean, <metric>_std).")
    identity = f"sweep {config_key(base)} seeds={','.join(map(str, seeds))}"
    parent = _parent_run(base, name, "seed-sweep", desc, identity) if base.tracking.enabled else None
    out: list[dict] = []
    replaced: dict[int, str] = {}  # seed -> its finished run of other code, trained again (--rerun-stale)
    with _ending(lambda status: parent and _finish_sweep(base, parent, out, status)), backend:
        show = progress and backend.name == "local" and backend.workers == 1
        tasks = []
        for s, cfg in zip(seeds, cfgs):
            if parent and _seed_finished(base, parent, s, cfg, rerun_stale, out, replaced):
                continue
            devices = int(cfg.fabric.devices) if str(cfg.fabric.devices).isdigit() else 1
            tasks.append(Task(_sweep_run, (cfg, show), f"seed {s}", s, devices, str(cfg.fabric.accelerator)))
        _run_seeds(backend, tasks, base, seeds, out, replaced)
        out.sort(key=lambda o: seeds.index(o["seed"]))
        _note_stale_seeds(base, parent, seeds, out)
        backend.raise_failures()
    return out


def _finish_sweep(cfg, parent: str, out: list[dict], status: str) -> None:
    """End the sweep's parent run with ``status``, after logging the mean / std over the seeds of its metrics."""
    client, _ = _client(cfg)
    for key in ("global_accuracy", "ad", "sdad", "global_test_accuracy", "val_accuracy"):
        vals = [o[key] for o in out if key in o]
        if vals:
            client.log_metric(parent, f"{key}_mean", statistics.fmean(vals))
            client.log_metric(parent, f"{key}_std", statistics.pstdev(vals))
    client.set_terminated(parent, status)


def _seed_finished(base, parent: str, seed: int, cfg, rerun_stale: bool, out: list[dict],
                   replaced: dict[int, str]) -> bool:
    """Put the seed's run under ``parent``; True when a finished run of it is there and used (its metrics added to
    ``out``). A finished run of other code is used and said, or with ``rerun_stale`` noted in ``replaced`` and
    trained again."""
    cfg.tracking.parent_run_id = parent
    done = _finished_child(base, parent, cfg)
    why = done and other_code(CodeIdentity.from_tags(done[2]), code_identity(cfg))
    if done is not None and why and rerun_stale:
        print(f"flplat sweep: seed {seed}: its finished run {done[0]} came from {why}: trained again "
              "(--rerun-stale)", file=sys.stderr)
        replaced[seed] = done[0]
    elif done is not None:
        print(f"flplat sweep: seed {seed} already finished (run {done[0]}), not trained again" +
              (f"; it came from {why}: --rerun-stale trains it again" if why else ""), file=sys.stderr)
        out.append({"seed": seed, **done[1], **({"stale": why} if why else {})})
        return True
    return False


def _run_seeds(backend, tasks: list, base, seeds: list[int], out: list[dict], replaced: dict[int, str]) -> None:
    """Run the seeds' tasks on the backend, adding each one's last metrics to ``out`` (a failure is reported and
    counted); a run that replaces one of other code tags the old run ``flplat.superseded_by`` the new one."""
    from flplat.studies.reproduction.execute import Progress

    prog = Progress(len(seeds), len(seeds) - len(tasks))
    for task, res, err in backend.run(tasks):
        if err is not None:
            backend.report(task, err)
            prog.done += 1
            continue
        metrics, run_id, secs = res
        out.append({"seed": task.item, **metrics})
        if task.item in replaced and run_id:
            _client(base)[0].set_tag(replaced[task.item], "flplat.superseded_by", run_id)
        if len(seeds) > 1:
            prog.line(f"sweep {task.label}", secs, metrics.get("global_accuracy"))


def _note_stale_seeds(base, parent: str | None, seeds: list[int], out: list[dict]) -> None:
    """Say how many seeds' runs came from other code (stderr) and tag the parent ``flplat.stale_runs``."""
    stale = [o["seed"] for o in out if "stale" in o]
    if stale:
        print(f"flplat sweep: {len(stale)} of {len(seeds)} seeds' runs come from other code than this command's "
              f"(seeds {', '.join(map(str, stale))}): used; --rerun-stale trains them again", file=sys.stderr)
    if parent:
        _client(base)[0].set_tag(parent, "flplat.stale_runs", str(len(stale)))


def _finished_child(base, parent: str, cfg) -> tuple[str, dict[str, float], dict[str, str]] | None:
    """(run id, last round's metrics as logged, tags) of the newest FINISHED run of ``cfg`` under ``parent``, or
    None."""
    from flplat.config_io import config_key
    from flplat.tracking.resume import CONFIG_KEY_TAG, runs_by_key

    client, exp_id = _client(base)
    done = [r for r in runs_by_key(client, exp_id, CONFIG_KEY_TAG, config_key(cfg), parent)
            if r.info.status == "FINISHED"]
    if not done:
        return None
    run_id, last = done[0].info.run_id, int(cfg.federation.rounds)
    metrics = {}
    for key in done[0].data.metrics:
        if not key.startswith("system/"):
            at = [m.value for m in client.get_metric_history(run_id, key) if m.step == last]
            if at:
                metrics[key] = at[-1]
    return run_id, metrics, dict(done[0].data.tags)
