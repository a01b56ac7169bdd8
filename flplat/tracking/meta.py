"""What makes a run readable in the MLflow UI: experiment kind, run names, tags, per-round resource use.

* Experiments are created (or tagged, when they exist without it) as *model-training* experiments: MLflow 3.x
  reads the experiment tag ``mlflow.experimentKind`` (values of its UI: ``custom_model_development``,
  ``genai_development``, ...) and, without it, may open an experiment on the GenAI traces overview instead of
  the runs table and the metric charts.
* Run names say what ran: ``<algorithm> <dataset> <partition>[ <param>=<value>] seed=<seed>``, e.g.
  ``fedavg digits dirichlet α=0.3 seed=0`` (``tracking.run_name`` overrides). Tags carry the same fields
  (``algorithm``, ``dataset``, ``partition``, ``partition_param``, ``seed``) -- so the runs table can be filtered
  and grouped by algorithm without opening runs -- plus the code that made the run (``flplat.version``,
  ``flplat.git_commit`` in a git checkout, ``flplat.code``: :mod:`flplat.tracking.provenance`).
* :class:`ResourceMeter`: the process's CPU time spent in each round and its peak resident memory so far
  (``resource.getrusage``), logged per round as ``cpu_time_s`` and ``peak_rss_mb``.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from flplat.deprecation import moved
from flplat.tracking.provenance import code_identity

__getattr__ = moved(__name__, {"git_commit": "flplat.tracking.provenance"})  # its old path, warns until 0.3.0

EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
MODEL_TRAINING_KIND = "custom_model_development"

# the partition parameter that distinguishes settings of a partition family (shown in run names)
PARTITION_PARAM = {"dirichlet": ("alpha", "α"), "similarity": ("similarity", "S"), "cafa": ("iid_fraction", "iid"),
                   "pqfed": ("rates", "r"), "shift": ("level", "level")}


def ensure_experiment(client, name: str, artifact_location: str | None = None) -> str:
    """The id of experiment ``name``, created if missing; tagged as a model-training experiment either way."""
    exp = client.get_experiment_by_name(name)
    if exp is None:
        try:
            return client.create_experiment(name, artifact_location=artifact_location,
                                            tags={EXPERIMENT_KIND_TAG: MODEL_TRAINING_KIND})
        except Exception:  # created concurrently by another process
            exp = client.get_experiment_by_name(name)
            if exp is None:
                raise
    if exp.tags.get(EXPERIMENT_KIND_TAG) != MODEL_TRAINING_KIND:
        client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING_KIND)
    return exp.experiment_id


def partition_setting(params: dict[str, Any]) -> tuple[str, str] | None:
    """(label, value) of the partition's distinguishing parameter, e.g. ("α", "0.3"), or None."""
    name = str(params.get("partition.name"))
    if name not in PARTITION_PARAM:
        return None
    key, label = PARTITION_PARAM[name]
    value = params.get(f"partition.{key}")
    if name == "shift":
        return f"{params.get('partition.type')} {label}", str(value)
    if isinstance(value, (list, tuple)):
        value = ",".join(f"{float(v):g}" for v in value)
    elif isinstance(value, float):
        value = f"{value:g}"
    return label, str(value)


def run_name(params: dict[str, Any]) -> str:
    """``<algorithm> <dataset> <partition>[ <param>=<value>] seed=<seed>`` from the flattened config."""
    parts = [str(params.get("algorithm.name")), str(params.get("data.name")), str(params.get("partition.name"))]
    setting = partition_setting(params)
    if setting:
        parts.append(f"{setting[0]}={setting[1]}")
    parts.append(f"seed={params.get('seed')}")
    return " ".join(parts)


def provenance_tags(params: dict[str, Any] | None = None) -> dict[str, str]:
    """The code identity of a run of ``params`` as tags (``flplat.version``, ``flplat.git_commit`` when in a git
    checkout, ``flplat.code``, ``flplat.code.source``, ``flplat.code.plugins``: :mod:`flplat.tracking.provenance`);
    without ``params``, flplat's own (no plugin)."""
    return code_identity(params).to_tags()


def entry_tags(params: dict[str, Any]) -> dict[str, str]:
    """The fields of the run name as tags (``algorithm``, ``dataset``, ``partition``, ``partition_param``,
    ``seed``)."""
    tags = {"algorithm": str(params.get("algorithm.name")), "dataset": str(params.get("data.name")),
            "partition": str(params.get("partition.name")), "seed": str(params.get("seed"))}
    setting = partition_setting(params)
    if setting:
        tags["partition_param"] = f"{setting[0]}={setting[1]}"
    return tags


def run_tags(params: dict[str, Any]) -> dict[str, str]:
    """The fields of the run name as tags, plus the provenance tags."""
    return {**entry_tags(params), **provenance_tags(params)}


class ResourceMeter:
    """CPU time per round and peak memory so far of this process (``resource.getrusage``; on platforms without
    the ``resource`` module only the CPU time, from ``time.process_time``)."""

    def __init__(self):
        self.last = self._cpu()

    @staticmethod
    def _cpu() -> float:
        return time.process_time()

    @staticmethod
    def peak_rss_mb() -> float | None:
        try:
            import resource
        except ImportError:  # Windows
            return None
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / (1024.0 * 1024.0) if sys.platform == "darwin" else peak / 1024.0  # bytes on macOS, KiB else

    def round(self) -> dict[str, float]:
        now = self._cpu()
        out = {"cpu_time_s": now - self.last}
        self.last = now
        peak = self.peak_rss_mb()
        if peak is not None:
            out["peak_rss_mb"] = peak
        return out
