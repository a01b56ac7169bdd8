"""The run records of ``flplat reproduce --out``: ``<paper>_<table>[_<scale>]_runs.jsonl`` (:func:`record_stem`), one
JSON object per line and job of the table, enough to render the table again and to skip its finished runs on another
machine once imported into a store (:mod:`flplat.studies.reproduction.importing`).

A record (``"record": 2``) holds the job (``paper``, ``table``, ``cell``, ``member`` in a pooled cell, ``method``,
``seed``, ``scale``, the ``parent`` run it was nested under: ``<paper>/<table>@<scale>``), its run (``run_id``,
``status`` FINISHED or FAILED with its ``error``, ``start_time`` / ``end_time`` in ms), what identifies it
(``config_key`` and ``config``, the resolved config as runs log it without ``tracking``; ``config_inferred`` when the
run itself was imported from a record without a config), the code that made it (``code``:
:class:`~flplat.tracking.provenance.CodeIdentity` as a dict, None when not recorded; ``stale``: why it is another code
than its job's now, or None) and what the table and its figure read (``metric`` and ``value``; ``metrics``: the run's
final metrics; ``history``: per metric the ``[step, value]`` points; ``artifacts``: path -> text).

What was decided and why:

* **The config, not only its hash.** The hash changes whenever the config's form changes (a key added or renamed);
  the config itself can be keyed again by the code that reads it (:func:`flplat.data.legacy.upgrade_config`), so a
  record outlives the form it was written in. Records written before this format (``config_key`` only) are keyed by
  matching their job by table, cell, method, seed and scale, and marked.
* **Histories only where read.** Per-round values are what makes records large (a metric per round per run); a
  record carries the history of the table's own metric when the table reads it at a step (``NAME@STEP``) and of
  each metric its figure read of that run (:attr:`~flplat.studies.reproduction.grid.FigureContext.read`), and the
  artifacts the figure read, nothing else: the table and the figure can be made again, the rest of the run is in the
  store that made it.
* **No machine samples.** MLflow's ``system/*`` metrics describe the machine, and no table reads them.
* **Refused jobs have no record.** A job skipped before it started (e.g. its data were absent) may run elsewhere; a
  failed run has one (its error shows in the table until a later run of its config finishes).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

from flplat.errors import ConfigError
from flplat.studies.reproduction.grid import PAPERS, SCALES, Job

RECORD_VERSION = 2
SUFFIX = "_runs.jsonl"
REQUIRED = ("table", "cell", "method")


def record_stem(paper: str, table: str, scale: str) -> str:
    """File name (without suffix) of a table's files under ``--out``: ``<paper>_<table>`` at the default scale
    (reduced), ``<paper>_<table>_<scale>`` at another, so one directory holds a table at several scales."""
    return f"{paper}_{table}" if scale == "reduced" else f"{paper}_{table}_{scale}"


def name_parts(path: str | Path) -> tuple[str | None, str | None, str]:
    """(paper, table, scale) that a records file's name says (:func:`record_stem`); (None, None, reduced) when the
    name does not follow it."""
    name = Path(path).name
    if not name.endswith(SUFFIX):
        return None, None, "reduced"
    stem = name[:-len(SUFFIX)]
    paper = next((p for p in sorted(PAPERS, key=len, reverse=True) if stem.startswith(p + "_")), None)
    if paper is None:
        return None, None, "reduced"
    rest = stem[len(paper) + 1:]
    for scale in SCALES:
        if scale != "reduced" and rest.endswith("_" + scale):
            return paper, rest[:-len(scale) - 1], scale
    return paper, rest, "reduced"


def final_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """A run's final metrics as the store holds them: finite values (a run logs no NaN), no ``system/*``."""
    return {k: v for k, v in metrics.items() if not k.startswith("system/") and
            not (isinstance(v, float) and not math.isfinite(v))}


def run_record(j: Job, run_id: str, metric: str, value: float | None, metrics: dict[str, float], store,
               stale_ids: dict[str, str]) -> dict:
    """The record of one job's finished run (the paper, scale, config, times, histories and artifacts are added when
    the records are written: :func:`complete`)."""
    code = store.codes.get(run_id)
    rec = {"record": RECORD_VERSION, "table": j.table, "cell": j.cell, "method": j.method, "seed": j.seed,
           "run_id": run_id, "status": "FINISHED", "error": None, "config_key": j.key, "metric": metric,
           "value": value, "metrics": final_metrics(metrics), "code": code.to_dict() if code else None,
           "stale": stale_ids.get(run_id)}
    if run_id in store.no_config:
        rec["config_inferred"] = True
    return _with_member(rec, j)


def _with_member(rec: dict, j: Job) -> dict:
    """``rec`` with the member of a pooled cell its job runs (``member``; absent in a plain cell)."""
    return {**rec, "member": j.member} if j.member else rec


def failed_record(j: Job, metric: str, error: str) -> dict:
    """The record of a job whose run ended with an error (no finished run of its config exists)."""
    return _with_member({"record": RECORD_VERSION, "table": j.table, "cell": j.cell, "method": j.method,
                         "seed": j.seed, "run_id": None, "status": "FAILED", "error": error, "config_key": j.key,
                         "metric": metric, "value": None, "metrics": {}, "code": j.code.to_dict() if j.code else None,
                         "stale": None}, j)


def complete(pairs: Iterable[tuple[Job, dict]], client, paper: str, scale: str, parent: str,
             reads: dict[str, set[str]] | None = None, artifacts: dict[str, set[str]] | None = None) -> list[dict]:
    """The records of ``pairs`` (job, record) as written: with the paper, the scale, the ``parent`` run's name, the
    jobs' configs, the runs' times, the histories the table reads (its metric at a step) and those its figure read
    (``reads``: run id -> metrics), and the figure's ``artifacts`` (run id -> paths)."""
    out = []
    for j, rec in pairs:
        rec = {**rec, "paper": paper, "scale": scale, "parent": parent, "config": _config(j)}
        run_id = rec.get("run_id")
        if run_id:
            run = client.get_run(run_id)
            untimed = run.data.tags.get("flplat.import.untimed") == "true"  # importing.UNTIMED_TAG: no times known
            rec["start_time"], rec["end_time"] = (None, None) if untimed else (run.info.start_time, run.info.end_time)
            # an imported run's record names the run on the machine that made it (importing.RUN_TAG), not the copy
            rec["run_id"] = run.data.tags.get("flplat.import.run_id", run_id)
            names = set((reads or {}).get(run_id, ()))
            if "@" in (rec.get("metric") or ""):
                names.add(rec["metric"].partition("@")[0])
            hist = {n: sorted([m.step, m.value] for m in client.get_metric_history(run_id, n)) for n in sorted(names)}
            rec["history"] = {n: pts for n, pts in hist.items() if pts}
            texts = {p: _artifact(client, run_id, p) for p in sorted((artifacts or {}).get(run_id, ()))}
            rec["artifacts"] = {p: t for p, t in texts.items() if t is not None}
        out.append(rec)
    return out


def _config(j: Job) -> dict:
    from flplat.studies.reproduction.grid import record_config

    if j.resolved is not None:
        return j.resolved
    from flplat.experiment import load_config

    return record_config(load_config(j.config, list(j.overrides)))


def _artifact(client, run_id: str, path: str) -> str | None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        try:
            return Path(client.download_artifacts(run_id, path, tmp)).read_text()
        except Exception:  # noqa: BLE001 - an absent artifact: MLflow raises several kinds
            return None


def write_records(out_dir: str, stem: str, records: list[dict]) -> None:
    """``records`` as JSON lines in ``<out_dir>/<stem>_runs.jsonl`` (non-finite numbers as null)."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    with open(Path(out_dir) / f"{stem}{SUFFIX}", "w") as fh:
        fh.writelines(json.dumps(_finite(r), sort_keys=True, separators=(",", ":")) + "\n" for r in records)


def _finite(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def read_records(path: str | Path) -> list[dict]:
    """The records of one file, each checked for the fields every format has (a JSON object with ``table``,
    ``cell``, ``method``; ``metrics`` an object where given); bad input: a ConfigError naming the file and line."""
    out = []
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"--import: cannot read {path} ({e}); allowed: a *{SUFFIX} file of flplat reproduce "
                          "--out") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"--import: {path}:{n} is not a JSON line ({e.msg}); allowed: the *{SUFFIX} records "
                              "of flplat reproduce --out") from None
        if not _is_record(rec):
            raise ConfigError(f"--import: {path}:{n} is not a run record (needs {', '.join(REQUIRED)} as text, "
                              "seed an integer, member text; metrics, config, history, artifacts objects); allowed: "
                              "the records of flplat reproduce --out")
        out.append(rec)
    return out


def _is_record(rec) -> bool:
    """Whether a JSON value has the fields every record format has, of their types."""
    return isinstance(rec, dict) and all(isinstance(rec.get(k), str) for k in REQUIRED) and \
        isinstance(rec.get("seed"), (int, type(None))) and isinstance(rec.get("member"), (str, type(None))) and \
        all(isinstance(rec.get(k) or {}, dict) for k in ("metrics", "config", "history", "artifacts"))
