"""MLflow tracking as a round-loop callback: one run per experiment, one metric batch per round, from the loop's
records (:mod:`flplat.engine.events`).

Store: :mod:`flplat.tracking.store` (``tracking.uri``, ``$MLFLOW_TRACKING_URI`` or a SQLite database in
``tracking.store_dir``; ``flplat ui`` opens it).

Logged: params = the resolved config (dotted keys); run-level partition metrics ``wpsi``, ``hellinger``,
``jsd``, ``emd`` (FedArtML's multi-client definitions) and ``hellinger_to_global``, ``jsd_to_global``,
``emd_to_global`` (:func:`flplat.metrics.noniid.noniid_summary`); per round (step = round) every metric the
orchestrator reports (``global_accuracy``, ``ad``, ``sdad``, ``train_loss``, ``round_time_s``, ``bytes_up``,
``bytes_down``, ...); artifacts: the resolved ``config.yaml``, per-client label counts, the final per-client
accuracies (CSV) and plots, and the final models (:mod:`flplat.tracking.models`); tags say which model scored
the training and the unseen clients (``flplat.eval.seen_model``, ``flplat.eval.unseen_model``). Per round also the
process's
``cpu_time_s`` and ``peak_rss_mb`` (:class:`~flplat.tracking.meta.ResourceMeter`) and, with psutil installed,
MLflow's ``system/*`` metrics. Runs are named and tagged by what ran, in model-training experiments
(:mod:`flplat.tracking.meta`).
The run ends FINISHED, FAILED or KILLED (Ctrl-C, SIGTERM); a run killed outright (SIGKILL, power cut) stays
RUNNING but its heartbeat tag stops (:mod:`flplat.tracking.heartbeat`: ``flplat runs --stale``), and
``flplat run --resume`` continues it from its checkpoint (:func:`~flplat.tracking.store.checkpoint_dir`: beside the
store); studies continue or replace their own unfinished runs (:mod:`flplat.tracking.resume`).

This module is the callback; the store, the heartbeat and the resume of unfinished runs live in
:mod:`flplat.tracking.store`, :mod:`flplat.tracking.heartbeat` and :mod:`flplat.tracking.resume` (import their names
from there: reading one of them from this module, their old path, warns until flplat 0.3.0).
"""

from __future__ import annotations

import io
import time
from typing import Any

import numpy as np
import torch

from flplat.deprecation import moved
from flplat.engine.events import Callback, RoundEnd, RunEnd, RunStart
from flplat.tracking.heartbeat import Heartbeat, config_stale_after_s
from flplat.tracking.meta import ResourceMeter, ensure_experiment, run_name, run_tags
from flplat.tracking.resume import OWNER_TAG
from flplat.tracking.store import open_client, store_uris

# the names that moved to the store, heartbeat and resume modules: their old path warns until flplat 0.3.0
__getattr__ = moved(__name__, {
    **{n: "flplat.tracking.heartbeat" for n in ("HEARTBEAT_INTERVAL_TAG", "HEARTBEAT_TAG", "STALE_AFTER_TAG",
                                                "heartbeat_age", "is_stale", "stale_after", "stale_after_s",
                                                "stale_runs")},
    **{n: "flplat.tracking.resume" for n in ("CONFIG_KEY_TAG", "REPLACES_TAG", "STUDY_KEY_TAG", "SUPERSEDED_TAG",
                                             "alive_note", "claim_unfinished", "interrupted", "reopen_parent",
                                             "runs_by_key")},
    **{n: "flplat.tracking.store" for n in ("SQLITE_NAME", "checkpoint_dir", "checkpoint_path")}})

UNUSED_PREFIX = ("algorithm_unused.", "data_unused.", "partition_unused.")  # keys carried, not used (config.py)


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
                 label_counts: np.ndarray, client_meta: dict[str, np.ndarray] | None = None,
                 arch: dict[str, Any] | None = None):
        import mlflow  # noqa: F401  (import cost only when tracking is on)

        self.cfg = tracking_cfg
        self.uri, self.artifact_location = store_uris(tracking_cfg.uri, tracking_cfg.store_dir,
                                                      getattr(tracking_cfg, "artifact_root", None))
        self.client = None  # the store is opened when the run starts (on_start)
        self.experiment_id: str | None = None
        self.params = params
        self.config_yaml = config_yaml
        self.run_metrics = run_metrics
        self.label_counts = label_counts
        self.client_meta = client_meta or {}
        self.arch = arch or {}  # what rebuilds the network besides the model section: input_shape, num_classes
        self.run_id: str | None = None
        self.resume_run_id: str | None = None  # set: continue this run (flplat run --resume)
        self.extra_tags: dict[str, str] = {}  # tags of a new run (its config hash, the runs it replaces)
        self.logged_up_to = 0  # rounds <= this are in the store already (a resumed run skips them)
        self.heartbeat: Heartbeat | None = None
        self.monitor = None

    # ------------------------------------------------------------------------------------------------
    def on_start(self, start: RunStart) -> None:
        # opened here, after the strategy's init_state: an input error found there (a ConfigError: one line, exit 2)
        # leaves no store, experiment or run behind, like one found while the run is prepared
        self.client = open_client(self.uri)
        self.experiment_id = ensure_experiment(self.client, self.cfg.experiment, self.artifact_location)
        self.meter = ResourceMeter()
        if self.resume_run_id:
            self._resume(start)
        else:
            self._create(start)
        self.heartbeat = Heartbeat(self.client, [self.run_id, self.cfg.parent_run_id], float(self.cfg.heartbeat_s),
                                   config_stale_after_s(self.cfg))
        self.heartbeat.start()

    def _resume(self, start: RunStart) -> None:
        """Reopen the run: RUNNING again, log the checkpoint's rounds the store lacks (a kill between the
        checkpoint and the logging), and skip later rounds it already has (``checkpoint_every`` > 1)."""
        from mlflow.entities import Metric

        self.run_id = self.resume_run_id
        self.client.update_run(self.run_id, status="RUNNING")
        steps = [m.step for m in self.client.get_metric_history(self.run_id, "train_loss")]
        self.logged_up_to = max(steps, default=0)
        ts = int(time.time() * 1000)
        for t, metrics in enumerate(start.history, start=1):
            if t > self.logged_up_to:
                merged = {**self.run_metrics, **metrics}
                self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), ts, t) for k, v in merged.items()
                                                            if np.isfinite(v)])
        self.logged_up_to = max(self.logged_up_to, len(start.history))
        tags = self.client.get_run(self.run_id).data.tags
        n = int(tags.get("flplat.resumed", "0"))
        self.client.set_tag(self.run_id, "flplat.resumed", str(n + 1))
        self._mark_mixed(tags)
        self.client.set_tag(self.run_id, f"flplat.resumed_{n + 1}_at_round", str(start.start_round - 1))
        for key in (OWNER_TAG, "flplat.processes"):  # who runs it now (a retried task finds it by this), in how many
            if key in self.extra_tags:                 # processes (flplat.experiment.run)
                self.client.set_tag(self.run_id, key, self.extra_tags[key])

    def _mark_mixed(self, tags: dict[str, str]) -> None:
        """A run continued by other code than the one that made its earlier rounds records ``flplat.code=mixed``
        (no study reuses it as this code's: :mod:`flplat.tracking.provenance`) and says so in one line."""
        import sys

        from flplat.tracking.provenance import CODE_TAG, MIXED, CodeIdentity, code_identity

        now, before = code_identity(self.params), CodeIdentity.from_tags(tags)
        if before is not None and before.key == now.key:
            return
        was = before.describe() if before is not None else "code it did not record (an earlier flplat)"
        print(f"flplat: run {self.run_id} was started by other code ({was}); its rounds from here on run with "
              f"{now.describe()}, and it records {CODE_TAG}={MIXED}", file=sys.stderr, flush=True)
        self.client.set_tag(self.run_id, CODE_TAG, MIXED)
        self.client.set_tag(self.run_id, f"{CODE_TAG}.resumed_by", now.key)

    def _create(self, start: RunStart) -> None:
        from mlflow.entities import Metric, Param

        tags = {**run_tags(self.params), **self.extra_tags}
        unused = sorted(k for k in self.params if k.startswith(UNUSED_PREFIX))
        if unused:  # keys of other algorithms carried by the config but not used by this one (experiment.py)
            tags["flplat.unused_keys"] = ", ".join(unused)[:5000]
        if self.cfg.parent_run_id:
            tags["mlflow.parentRunId"] = self.cfg.parent_run_id
        if start.meta.get("client_state_dir"):
            tags["flplat.client_state_dir"] = str(start.meta["client_state_dir"])
        tags.update(start.tags)  # which models scored the clients; a shift without a test phase says why
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

    def on_round_end(self, end: RoundEnd) -> None:
        from mlflow.entities import Metric

        round, metrics = end.round, end.metrics
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

    def on_end(self, end: RunEnd) -> None:
        status = end.status
        if self.heartbeat is not None:
            self.heartbeat.stop()
        if self.run_id is None:
            return
        try:
            self._finish(end)
        except Exception:
            if status != "FAILED":
                raise
        finally:
            if self.monitor is not None:
                self.monitor.finish()
            try:
                if status == "FAILED" and end.error:
                    self.client.set_tag(self.run_id, "flplat.error", str(end.error))
                self.client.set_terminated(self.run_id, status)
            except Exception:  # a broken store: the run stays RUNNING there; `flplat runs --stale` finds it
                if status != "FAILED":
                    raise

    def _finish(self, end: RunEnd) -> None:
        """Final metrics, series, artifacts and plots."""
        final = {k: v for k, v in end.final.items() if np.isfinite(v)}
        if final:  # run-level summaries (best / windowed accuracy, last-rounds means, rounds to target)
            from mlflow.entities import Metric

            ts, step = int(time.time() * 1000), len(end.history)
            self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), ts, step) for k, v in final.items()])
            self._series(end.series)
        if end.client_table:
            self.client.log_text(self.run_id, _csv(end.client_table), "clients/final_client_metrics.csv")
        report = end.report
        if report is not None:
            for path, text in report.artifacts.items():
                self.client.log_text(self.run_id, text, path)
            self._series(report.series)
            if self.cfg.plots:
                self._scatter(report.scatter)
        if self.cfg.plots and end.history:
            self._plots(end)
        if end.status == "FINISHED" and self.cfg.log_models and report is not None:
            from flplat.tracking.models import log_models

            model_cfg = {k[len("model."):]: v for k, v in self.params.items() if k.startswith("model.")}
            log_models(self.client, self.run_id, report, model_cfg, self.arch, bool(self.cfg.log_personal_models),
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

    def _plots(self, end: RunEnd) -> None:
        from flplat.metrics.evaluation import ecdf

        plt = _pyplot()

        acc = end.client_table.get("accuracy")
        if acc is not None and np.isfinite(acc).any():
            x, f = ecdf(acc[np.isfinite(acc)])
            fig, ax = plt.subplots(figsize=(5, 3.5))
            ax.step(x, f, where="post")
            ax.set(xlabel="local test accuracy", ylabel="ECDF", xlim=(0, 1.01), ylim=(0, 1.01),
                   title=f"{self.params.get('algorithm.name')}: local accuracy ECDF")
            ax.grid(alpha=0.3)
            self.client.log_figure(self.run_id, fig, "plots/local_accuracy_ecdf.png")
            plt.close(fig)
        rounds = [i + 1 for i, m in enumerate(end.history) if "global_accuracy" in m]
        if rounds:
            fig, ax = plt.subplots(figsize=(5, 3.5))
            ax.plot(rounds, [end.history[r - 1]["global_accuracy"] for r in rounds], marker="o", ms=3)
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
