"""MLflow tracking as an orchestrator callback: one run per experiment, one metric batch per round.

Store: ``tracking.uri`` if set, else ``$MLFLOW_TRACKING_URI``, else a SQLite database
``<store_dir>/mlflow.db`` with artifacts under ``<store_dir>/artifacts`` (MLflow >= 3.13 refuses the plain
file store without an opt-in; SQLite keeps everything inside ``mlruns/``). ``flplat ui`` opens that store.

Logged: params = the resolved config (dotted keys); run-level partition metrics ``wpsi``, ``hellinger``,
``jsd``, ``emd``; per round (step = round) every metric the orchestrator reports (``global_accuracy``,
``ad``, ``sdad``, ``train_loss``, ``round_time_s``, ``bytes_up``, ``bytes_down``, ...); artifacts: the
resolved ``config.yaml``, per-client label counts, the final per-client accuracies (CSV) and plots, and the
final models (:mod:`flplat.tracking.models`). Per round also the process's ``cpu_time_s`` and ``peak_rss_mb``
(:class:`~flplat.tracking.meta.ResourceMeter`) and, with psutil installed, MLflow's ``system/*`` metrics. Runs are
named and tagged by what ran, in model-training experiments (:mod:`flplat.tracking.meta`).
The run ends FINISHED, FAILED or KILLED (Ctrl-C, SIGTERM); a run killed outright (SIGKILL, power cut) stays
RUNNING but its heartbeat tag stops (:class:`Heartbeat`, :func:`stale_runs`, ``flplat runs --stale``), and
``flplat run --resume`` continues it from its checkpoint (:func:`checkpoint_dir`: beside the store). A new SQLite
store is created under a file lock (:func:`open_client`), so concurrent first runs do not break it.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flplat.engine.orchestrator import Callback, Orchestrator
from flplat.tracking.meta import ResourceMeter, ensure_experiment, run_name, run_tags

UNUSED_PREFIX = "algorithm_unused."

SQLITE_NAME = "mlflow.db"


def store_uris(uri: str | None, store_dir: str = "mlruns", artifact_root: str | None = None
               ) -> tuple[str, str | None]:
    """(tracking URI, artifact location for new experiments or None to let the server decide).

    Artifacts go to ``artifact_root`` (``tracking.artifact_root``) when given, else beside the store: a SQLite
    store's artifacts in ``artifacts/`` next to its database file (also for ``MLFLOW_TRACKING_URI`` =
    ``sqlite:////elsewhere/mlflow.db``, where MLflow alone would use ``./mlruns`` of the current directory); a
    server (http, databricks, ...) decides itself."""
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        if artifact_root:
            return uri, Path(artifact_root).resolve().as_uri()
        if uri.startswith("sqlite:///"):
            return uri, (Path(uri[len("sqlite:///"):]).resolve().parent / "artifacts").as_uri()
        return uri, None
    if artifact_root:
        root = Path(store_dir).resolve()
        root.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{root / SQLITE_NAME}", Path(artifact_root).resolve().as_uri()
    root = Path(store_dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{root / SQLITE_NAME}", (root / "artifacts").as_uri()


@contextlib.contextmanager
def _file_lock(path: Path):
    """An exclusive advisory lock on ``path`` (POSIX ``flock``; elsewhere no lock)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def open_client(uri: str):
    """An ``MlflowClient`` on ``uri`` whose store exists. A new SQLite store is created (tables, migrations) under
    a file lock beside the database, so several runs started together on a store that does not exist yet do not
    race in MLflow's table creation (which can leave the store broken: "table _alembic_tmp_tags already
    exists")."""
    from mlflow.tracking import MlflowClient

    if not uri.startswith("sqlite:///"):
        return MlflowClient(tracking_uri=uri)
    db = Path(uri[len("sqlite:///"):])
    with _file_lock(db.with_name(db.name + ".lock")):
        client = MlflowClient(tracking_uri=uri)
        client.search_experiments(max_results=1)  # creates / upgrades the tables, one process at a time
    return client


def checkpoint_dir(tracking_cfg) -> Path:
    """Where a run's checkpoints live: ``tracking.checkpoint_dir``, else beside the store: ``<dir of the SQLite
    file>/checkpoints`` for a ``sqlite:///`` URI (``tracking.uri`` or ``$MLFLOW_TRACKING_URI``), else
    ``<tracking.store_dir>/checkpoints`` (also for a remote server: checkpoints stay on this machine)."""
    if tracking_cfg.checkpoint_dir:
        return Path(tracking_cfg.checkpoint_dir)
    uri = tracking_cfg.uri or os.environ.get("MLFLOW_TRACKING_URI") or ""
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///"):]).parent / "checkpoints"
    return Path(tracking_cfg.store_dir) / "checkpoints"


def checkpoint_path(tracking_cfg, run_id: str) -> Path:
    return checkpoint_dir(tracking_cfg) / f"{run_id}.pt"


HEARTBEAT_TAG = "flplat.heartbeat"  # unix time (s) of the last sign of life of a RUNNING run
HEARTBEAT_INTERVAL_TAG = "flplat.heartbeat_s"


class Heartbeat:
    """A daemon thread refreshing the heartbeat tag of a run (and of its parent: a sweep or study parent then
    looks alive exactly while one of its children does) every ``interval`` seconds, whatever a round's length.
    A SIGKILL or a power cut stops it, so a RUNNING run whose heartbeat is older than a few intervals is stale
    (:func:`stale_runs`)."""

    def __init__(self, client, run_ids: list[str], interval: float):
        import threading

        self.client, self.run_ids, self.interval = client, [r for r in run_ids if r], float(interval)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="flplat-heartbeat", daemon=True)

    def beat(self) -> None:
        now = str(int(time.time()))
        for r in self.run_ids:
            self.client.set_tag(r, HEARTBEAT_TAG, now)
            self.client.set_tag(r, HEARTBEAT_INTERVAL_TAG, str(self.interval))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.beat()
            except Exception:  # a failing store is reported by the round's logging, not by this thread
                pass

    def start(self) -> None:
        self.beat()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()


def heartbeat_age(run, now: float | None = None) -> float:
    """Seconds since the run's last heartbeat (since its start when it has none)."""
    now = time.time() if now is None else now
    beat = run.data.tags.get(HEARTBEAT_TAG)
    return now - (float(beat) if beat is not None else run.info.start_time / 1000.0)


def stale_after(run, factor: float = 3.0) -> float:
    """The heartbeat age beyond which a RUNNING run counts as dead: ``factor`` × its interval + 60 s."""
    return factor * float(run.data.tags.get(HEARTBEAT_INTERVAL_TAG, 30.0)) + 60.0


def is_stale(run, now: float | None = None, factor: float = 3.0) -> bool:
    """A RUNNING run that shows no sign of life: heartbeat older than :func:`stale_after`, or no heartbeat at all
    (runs started before heartbeats existed, or parents whose children all died)."""
    return run.info.status == "RUNNING" and heartbeat_age(run, now) > stale_after(run, factor)


def stale_runs(client, experiment_ids: list[str], now: float | None = None, factor: float = 3.0) -> list:
    """The RUNNING runs of these experiments that are stale (:func:`is_stale`)."""
    runs = client.search_runs(experiment_ids, "attributes.status = 'RUNNING'", max_results=10000)
    return [r for r in runs if is_stale(r, now, factor)]


# ---------------------------------------------------------------------------------------------------------------
# Studies (sweep, tune, reproduce) continue their own interrupted runs: a run is found by a key tag, a child run
# by its config hash (flplat.config.config_key), a sweep / study parent by the hash of what defines the study.
CONFIG_KEY_TAG = "flplat.config_key"  # config_key(cfg) of the run (set when the run is created)
STUDY_KEY_TAG = "flplat.study_key"  # on a sweep / tune parent: what defines the study (its command)
SUPERSEDED_TAG = "flplat.superseded_by"  # an unfinished run another run replaced (resumed id, or why)
REPLACES_TAG = "flplat.replaces"  # on the new run: the unfinished runs it replaced (no checkpoint to resume)


def _say(line: str) -> None:
    import sys

    print(line, file=sys.stderr, flush=True)


def runs_by_key(client, experiment_id: str, tag: str, key: str, parent_run_id: str | None = None) -> list:
    """Runs of the experiment whose ``tag`` is ``key`` (and nested under ``parent_run_id`` when given), newest
    first."""
    filt = f"tags.`{tag}` = '{key}'"
    if parent_run_id:
        filt += f" and tags.`mlflow.parentRunId` = '{parent_run_id}'"
    runs = client.search_runs([experiment_id], filt, max_results=10000)
    return sorted(runs, key=lambda r: r.info.start_time, reverse=True)


def interrupted(run, now: float | None = None) -> bool:
    """A run that stopped before its end and can be continued: KILLED (Ctrl-C, SIGTERM, ``runs --stale
    --mark``), FAILED other than by divergence (a store failure, a crash: resuming a diverged run would diverge
    again), or RUNNING without a live heartbeat (SIGKILL, power cut); not one already replaced by another run."""
    if SUPERSEDED_TAG in run.data.tags:
        return False
    status = run.info.status
    if status == "FAILED":
        return not run.data.tags.get("flplat.error", "").startswith("diverged")
    return status == "KILLED" or is_stale(run, now)


def alive_note(run, what: str, now: float | None = None) -> str:
    """One line for an unfinished run that still shows a heartbeat (another process, or a kill moments ago)."""
    age, limit = heartbeat_age(run, now), stale_after(run)
    return (f"flplat: {what} {run.info.run_id} is RUNNING with a heartbeat {age:.0f} s old (stale after {limit:.0f} "
            "s): left alone, a new one starts; after a kill, re-run once it is stale to resume it")


def reopen_parent(client, experiment_id: str, study_key: str, what: str) -> str | None:
    """The newest interrupted parent run of the study ``study_key`` (a sweep or tune command run before),
    RUNNING again (tag ``flplat.resumed`` counts the re-openings); None when there is none to re-open."""
    runs = [r for r in runs_by_key(client, experiment_id, STUDY_KEY_TAG, study_key)
            if "mlflow.parentRunId" not in r.data.tags]
    for r in runs:
        if interrupted(r):
            n = int(r.data.tags.get("flplat.resumed", "0")) + 1
            client.update_run(r.info.run_id, status="RUNNING")
            client.set_tag(r.info.run_id, "flplat.resumed", str(n))
            _say(f"flplat: re-opening the {what} parent run {r.info.run_id} ({r.info.status}); its finished runs are "
                 "kept, its interrupted ones resumed")
            return r.info.run_id
        if r.info.status == "RUNNING":
            _say(alive_note(r, f"{what} parent run"))
    return None


def claim_unfinished(tracking_cfg, key: str) -> tuple[dict | None, list[str]]:
    """What a study does with the earlier runs of one config (``key``: its config hash) in the experiment of
    ``tracking_cfg`` and under its ``parent_run_id`` (any parent when None):

    * the newest interrupted one (:func:`interrupted`) that has a checkpoint is continued: returns its checkpoint
      payload (:func:`flplat.engine.checkpoint.load`), to pass to :func:`flplat.experiment.run` as ``resume``;
    * the other unfinished ones (interrupted, or FAILED by divergence) are marked (tag ``flplat.superseded_by``:
      the resumed run, or "a new run ..."); stale RUNNING ones end KILLED (tag ``flplat.stale``); with no
      checkpoint to resume, returns their ids (the new run tags them as ``flplat.replaces``);
    * RUNNING runs with a live heartbeat are left alone (another process trains them, or a kill was moments ago).

    Every decision is said in one line on stderr."""
    from flplat.engine import checkpoint

    uri, _ = store_uris(tracking_cfg.uri, tracking_cfg.store_dir, getattr(tracking_cfg, "artifact_root", None))
    client = open_client(uri)
    exp = client.get_experiment_by_name(tracking_cfg.experiment)
    if exp is None:
        return None, []
    runs = runs_by_key(client, exp.experiment_id, CONFIG_KEY_TAG, key, tracking_cfg.parent_run_id)
    resume, resume_id, others = None, None, []
    for r in runs:
        if SUPERSEDED_TAG in r.data.tags or r.info.status not in ("KILLED", "FAILED", "RUNNING"):
            continue
        if r.info.status == "RUNNING" and not is_stale(r):
            _say(alive_note(r, "run"))
            continue
        path = checkpoint_path(tracking_cfg, r.info.run_id)
        if resume is None and interrupted(r) and path.is_file():  # (not a diverged one: it would diverge again)
            try:
                resume, resume_id = checkpoint.load(path), r.info.run_id
                continue
            except Exception as e:  # unreadable (a disk that filled up mid-write, another version)
                _say(f"flplat: checkpoint {path} of run {r.info.run_id} is unreadable ({type(e).__name__}: "
                     f"{str(e).strip()[:200]}); not resumed")
        others.append(r)
    if resume_id:
        _say(f"flplat: resuming run {resume_id} of this config after round {resume['round']} (its checkpoint)")
    for r in others:
        why = resume_id or "a new run (no checkpoint to resume: restarted from round 0)"
        if resume_id:
            _say(f"flplat: older interrupted run {r.info.run_id} of this config is tagged {SUPERSEDED_TAG}="
                 f"{resume_id}")
        else:
            state = "was left RUNNING (stale)" if r.info.status == "RUNNING" else f"ended {r.info.status}"
            why_not = "diverged" if not interrupted(r) else "without a checkpoint to resume"
            _say(f"flplat: run {r.info.run_id} of this config {state} {why_not}: a new run starts from round 0 (the "
                 f"old one is tagged {SUPERSEDED_TAG})")
        client.set_tag(r.info.run_id, SUPERSEDED_TAG, why)
        if r.info.status == "RUNNING":
            client.set_tag(r.info.run_id, "flplat.stale", "true")
            client.set_terminated(r.info.run_id, "KILLED")
    return resume, ([] if resume_id else [r.info.run_id for r in others])


def start_system_metrics(client, run_id: str, uri: str, tracking_cfg):
    """MLflow's system metrics (``system/cpu_utilization_percentage``, ``system/system_memory_usage_megabytes``,
    ...; GPU ones with pynvml) sampled every ``tracking.system_metrics_interval`` s, when
    ``tracking.system_metrics`` is on and psutil (the optional ``[system]`` extra) is installed. Returns the
    running monitor, or None -- and then says why in the run's ``flplat.system_metrics`` tag."""
    if not tracking_cfg.system_metrics:
        client.set_tag(run_id, "flplat.system_metrics", "off (tracking.system_metrics=false)")
        return None
    try:
        import psutil  # noqa: F401
    except ImportError:
        client.set_tag(run_id, "flplat.system_metrics", "off: psutil is not installed (pip install 'flplat[system]')")
        return None
    import logging

    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)
    monitor = SystemMetricsMonitor(run_id, sampling_interval=float(tracking_cfg.system_metrics_interval),
                                   tracking_uri=uri)
    monitor.start()
    client.set_tag(run_id, "flplat.system_metrics", f"on (every {float(tracking_cfg.system_metrics_interval):g} s)")
    return monitor


def _csv(columns: dict[str, Any]) -> str:
    names = list(columns)
    rows = zip(*(np.asarray(columns[k]).tolist() for k in names))
    out = io.StringIO()
    out.write(",".join(names) + "\n")
    for row in rows:
        out.write(",".join("" if (isinstance(v, float) and np.isnan(v)) else str(v) for v in row) + "\n")
    return out.getvalue()


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


class MlflowCallback(Callback):
    """Creates the run on start, logs a metric batch per round, artifacts and the final status on end."""

    def __init__(self, tracking_cfg, params: dict[str, Any], config_yaml: str, run_metrics: dict[str, float],
                 label_counts: np.ndarray, client_meta: dict[str, np.ndarray] | None = None):
        import mlflow  # noqa: F401  (import cost only when tracking is on)

        self.cfg = tracking_cfg
        uri, artifact_location = store_uris(tracking_cfg.uri, tracking_cfg.store_dir,
                                            getattr(tracking_cfg, "artifact_root", None))
        self.client = open_client(uri)
        self.uri = uri
        self.experiment_id = ensure_experiment(self.client, tracking_cfg.experiment, artifact_location)
        self.params = params
        self.config_yaml = config_yaml
        self.run_metrics = run_metrics
        self.label_counts = label_counts
        self.client_meta = client_meta or {}
        self.run_id: str | None = None
        self.resume_run_id: str | None = None  # set: continue this run (flplat run --resume)
        self.extra_tags: dict[str, str] = {}  # tags of a new run (its config hash, the runs it replaces)
        self.logged_up_to = 0  # rounds <= this are in the store already (a resumed run skips them)
        self.heartbeat: Heartbeat | None = None
        self.monitor = None

    # ------------------------------------------------------------------------------------------------
    def on_start(self, orch: Orchestrator) -> None:
        self.meter = ResourceMeter()
        if self.resume_run_id:
            self._resume(orch)
        else:
            self._create(orch)
        orch.meta["run_id"] = self.run_id
        self.heartbeat = Heartbeat(self.client, [self.run_id, self.cfg.parent_run_id],
                                   float(getattr(self.cfg, "heartbeat_s", 30.0)))
        self.heartbeat.start()

    def _resume(self, orch: Orchestrator) -> None:
        """Reopen the run: RUNNING again, log the checkpoint's rounds the store lacks (a kill between the
        checkpoint and the logging), and skip later rounds it already has (``checkpoint_every`` > 1)."""
        from mlflow.entities import Metric

        self.run_id = self.resume_run_id
        self.client.update_run(self.run_id, status="RUNNING")
        steps = [m.step for m in self.client.get_metric_history(self.run_id, "train_loss")]
        self.logged_up_to = max(steps, default=0)
        ts = int(time.time() * 1000)
        for t, metrics in enumerate(orch.history, start=1):
            if t > self.logged_up_to:
                merged = {**self.run_metrics, **metrics}
                self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), ts, t) for k, v in merged.items()
                                                            if np.isfinite(v)])
        self.logged_up_to = max(self.logged_up_to, len(orch.history))
        n = int(self.client.get_run(self.run_id).data.tags.get("flplat.resumed", "0"))
        self.client.set_tag(self.run_id, "flplat.resumed", str(n + 1))
        self.client.set_tag(self.run_id, f"flplat.resumed_{n + 1}_at_round", str(orch.start_round - 1))

    def _create(self, orch: Orchestrator) -> None:
        from mlflow.entities import Metric, Param

        tags = {**run_tags(self.params), **self.extra_tags}
        unused = sorted(k for k in self.params if k.startswith(UNUSED_PREFIX))
        if unused:  # keys of other algorithms carried by the config but not used by this one (experiment.py)
            tags["flplat.unused_keys"] = ", ".join(unused)[:5000]
        if self.cfg.parent_run_id:
            tags["mlflow.parentRunId"] = self.cfg.parent_run_id
        if orch.meta.get("client_state_dir"):
            tags["flplat.client_state_dir"] = str(orch.meta["client_state_dir"])
        if "test_phase" in orch.data.meta:  # e.g. P(Y|X) shift: no test-phase accuracy is reported, and why
            tags["test_phase"] = str(orch.data.meta["test_phase"])
        run = self.client.create_run(self.experiment_id, run_name=self.cfg.run_name or run_name(self.params),
                                     tags=tags)
        self.run_id = run.info.run_id
        self.monitor = start_system_metrics(self.client, self.run_id, self.uri, self.cfg)
        params = [Param(k, str(v)[:6000]) for k, v in sorted(self.params.items())]
        for i in range(0, len(params), 100):
            self.client.log_batch(self.run_id, params=params[i:i + 100])
        ts = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), ts, 0) for k, v in self.run_metrics.items()])
        self.client.log_text(self.run_id, self.config_yaml, "config.yaml")
        counts = {"client": np.arange(len(self.label_counts)), **self.client_meta}
        counts.update({f"class_{c}": self.label_counts[:, c] for c in range(self.label_counts.shape[1])})
        self.client.log_text(self.run_id, _csv(counts), "partition/label_counts.csv")

    def on_round_end(self, orch: Orchestrator, round: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        if round <= self.logged_up_to:  # resumed: this round is in the store already (same values)
            return
        ts = int(time.time() * 1000)
        # the partition's non-IID metrics are constant, but logged every round too so they chart beside the rest
        merged = {**self.run_metrics, **metrics, **self.meter.round()}
        batch = [Metric(k, float(v), ts, round) for k, v in merged.items() if np.isfinite(v)]
        try:
            self.client.log_batch(self.run_id, metrics=batch)
        except Exception as e:  # the store went away / filled up / was locked for good: end FAILED, one line
            from flplat.errors import TrackingStoreError

            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
            raise TrackingStoreError(f"tracking store {self.uri} failed at round {round}: {first}") from None

    def on_end(self, orch: Orchestrator, status: str) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop()
        if self.run_id is None:
            return
        try:
            self._finish(orch, status)
        except Exception:
            if status != "FAILED":
                raise
        finally:
            if self.monitor is not None:
                self.monitor.finish()
            try:
                if status == "FAILED" and orch.meta.get("error"):
                    self.client.set_tag(self.run_id, "flplat.error", str(orch.meta["error"]))
                self.client.set_terminated(self.run_id, status)
            except Exception:  # a broken store: the run stays RUNNING there; `flplat runs --stale` finds it
                if status != "FAILED":
                    raise

    def _finish(self, orch: Orchestrator, status: str) -> None:
        """Final metrics, series, artifacts and plots."""
        final = {k: v for k, v in orch.final_metrics.items() if np.isfinite(v)}
        if final:  # run-level summaries (best / windowed accuracy, last-rounds means, rounds to target)
            from mlflow.entities import Metric

            ts, step = int(time.time() * 1000), len(orch.history)
            self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), ts, step) for k, v in final.items()])
            self._series(orch.final_series)
        if orch.client_table:
            self.client.log_text(self.run_id, _csv(orch.client_table), "clients/final_client_metrics.csv")
        if orch.state is not None:
            for path, text in orch.strategy.artifacts(orch.state).items():
                self.client.log_text(self.run_id, text, path)
            self._series(orch.strategy.series(orch.state))
            if self.cfg.plots:
                self._scatter(orch.strategy.scatter(orch.state))
        if self.cfg.plots and orch.history:
            self._plots(orch)
        if status == "FINISHED" and self.cfg.log_models and orch.state is not None:
            from flplat.tracking.models import log_models

            model_cfg = {k[len("model."):]: v for k, v in self.params.items() if k.startswith("model.")}
            log_models(self.client, self.run_id, orch, model_cfg, bool(self.cfg.log_personal_models),
                       getattr(torch, str(self.params.get("federation.client_state_dtype", "float32"))))

    def _series(self, series: dict[str, list[tuple[int, float]]]) -> None:
        """Log each curve as a metric with its own steps, plus a line plot."""
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        for name, points in series.items():
            batch = [Metric(name, float(v), ts, int(x)) for x, v in points if np.isfinite(v)]
            if batch:
                self.client.log_batch(self.run_id, metrics=batch)
            if self.cfg.plots and points:
                plt = _pyplot()
                fig, ax = plt.subplots(figsize=(5, 3.5))
                ax.plot([x for x, _ in points], [v for _, v in points], marker="o", ms=3)
                ax.set(xlabel="step", ylabel=name, title=name)
                ax.grid(alpha=0.3)
                self.client.log_figure(self.run_id, fig, f"plots/{name}.png")
                plt.close(fig)

    def _scatter(self, sets: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
        """A 2-D scatter per point set, coloured by label (e.g. descriptors by cluster)."""
        for name, (pts, labels) in sets.items():
            if len(pts) == 0:
                continue
            plt = _pyplot()
            fig, ax = plt.subplots(figsize=(5, 4))
            sc = ax.scatter(pts[:, 0], pts[:, 1], c=labels, cmap="tab20", s=18)
            ax.set(title=name, xlabel="component 1", ylabel="component 2")
            if len(np.unique(labels)) <= 20:
                ax.legend(*sc.legend_elements(), title="cluster", fontsize=7, loc="best")
            self.client.log_figure(self.run_id, fig, f"plots/{name}.png")
            plt.close(fig)

    def _plots(self, orch: Orchestrator) -> None:
        from flplat.metrics.evaluation import ecdf

        plt = _pyplot()

        acc = orch.client_table.get("accuracy")
        if acc is not None and np.isfinite(acc).any():
            x, f = ecdf(acc[np.isfinite(acc)])
            fig, ax = plt.subplots(figsize=(5, 3.5))
            ax.step(x, f, where="post")
            ax.set(xlabel="local test accuracy", ylabel="ECDF", xlim=(0, 1.01), ylim=(0, 1.01),
                   title=f"{self.params.get('algorithm.name')}: local accuracy ECDF")
            ax.grid(alpha=0.3)
            self.client.log_figure(self.run_id, fig, "plots/local_accuracy_ecdf.png")
            plt.close(fig)
        rounds = [i + 1 for i, m in enumerate(orch.history) if "global_accuracy" in m]
        if rounds:
            fig, ax = plt.subplots(figsize=(5, 3.5))
            ax.plot(rounds, [orch.history[r - 1]["global_accuracy"] for r in rounds], marker="o", ms=3)
            ax.set(xlabel="round", ylabel="global accuracy", title="global accuracy per round")
            ax.grid(alpha=0.3)
            self.client.log_figure(self.run_id, fig, "plots/global_accuracy.png")
            plt.close(fig)


def load_model(run_id: str, which: str = "global", index: int | None = None, tracking_uri: str | None = None,
               store_dir: str = "mlruns") -> torch.nn.Module:
    """The saved model of a run as a torch module: ``which`` = ``global`` (the final global model), ``cluster``
    (cluster ``index``) or ``personal`` (client ``index``'s model; logged with ``tracking.log_personal_models``).
    The store is ``tracking_uri`` or ``$MLFLOW_TRACKING_URI`` or the SQLite store in ``store_dir``."""
    from mlflow.tracking import MlflowClient

    from flplat.tracking.models import build_saved, load_weights

    uri, _ = store_uris(tracking_uri, store_dir)
    weights, arch = load_weights(MlflowClient(tracking_uri=uri), run_id, which, index)
    return build_saved(weights, arch)
