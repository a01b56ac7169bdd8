"""``flplat reproduce --import PATH``: run records (:mod:`flplat.studies.reproduction.records`, written by another
machine's ``--out``) turned into FINISHED (or FAILED) runs of this store, so that ``reproduce`` skips them as finished,
renders them, and extends the tables with new seeds, cells or methods instead of training them again
(:func:`import_records`).

What was decided and why:

* **Keyed by what the run computed.** A record with its config is keyed by that config as this flplat reads it: an
  older form upgraded (:func:`flplat.data.legacy.upgrade_config`), a key the record lacks set to the value the
  earlier flplat ran with where that differs from today's default (:func:`~.store.legacy_overrides`), then loaded
  and hashed like any run (:func:`flplat.config_io.config_key`). Where the inputs were (``data.root``, the
  :data:`~flplat.config_io.LOCATION_KEYS`) is the importing command's (its ``--set``, else the default): the same
  files under another directory of another machine are the same run. So the key is the job's key exactly when the run
  computed what the job asks for; the record's own key is kept as a tag. Its code identity is kept too: a run of
  other code is counted and marked, and ``--rerun-stale`` trains it again, as any run of other code.
* **Records without a config** (written before records carried it) are matched to the jobs the table defines now
  (with the import's ``--set``) at the record's scale, by table, cell, member of a pooled cell, method and seed. The
  job whose config hash is the record's ``config_key`` (the job's own, or the job's with ``data.root`` unset: a run
  made without it) is the config it ran, to the hash: it is keyed as that job,
  with the code the record gave (unknown code when none). Otherwise the record is taken for its job only when these
  name exactly one job; such a run is tagged ``flplat.import.no_config`` and counts as unknown code
  (:data:`~.store.NO_CONFIG`: the tables say how many of their runs are such), since nothing says it ran that
  config. A record that matches no
  job (a table, cell or method renamed, an added method, a config that no longer loads) is reported in one line and
  not imported, never dropped silently.
* **Idempotent.** A record whose key has a FINISHED run in the store already (made here, or imported before) adds
  nothing; a FAILED record only where no run of its key exists. Records of one key (tables that share runs, a run
  read at several steps) become one run with what they carry together.
* **Nothing half-written.** Every file is read and checked before anything is written (bad input: one line, exit
  2), and a run whose import fails midway is deleted.

An imported run carries what a run made here carries for ``reproduce``: the run params (its config, without
``tracking``), the tags that find it (``flplat.config_key``, ``flplat.reproduce.*``), its code identity, its final
metrics and the histories and artifacts its record holds, its start and end times (a table's run time), nested under
its table's parent run; plus where it came from: ``flplat.import.file`` (the file, relative to its git checkout),
``flplat.import.commit`` (the commit that last changed it, ``+modified`` when it has changes since),
``flplat.import.run_id`` (the run on the machine that made it).
"""

from __future__ import annotations

import functools
import math
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from flplat.errors import ConfigError
from flplat.studies.reproduction.grid import PAPERS, Job, paper_tables, plan
from flplat.studies.reproduction.records import SUFFIX, name_parts, read_records
from flplat.studies.reproduction.store import NO_CONFIG_TAG, Store, legacy_overrides
from flplat.tracking.provenance import CodeIdentity

FILE_TAG = "flplat.import.file"
COMMIT_TAG = "flplat.import.commit"
RUN_TAG = "flplat.import.run_id"
RECORDED_KEY_TAG = "flplat.import.config_key"  # the key the record gave (its grid's flplat computed it)
#: a record without its run's start and end times (records written before records carried them): the run is made
#: with the import's time for both, so --results leaves it out of the run time it sums and --out writes no times
UNTIMED_TAG = "flplat.import.untimed"


@dataclass
class Item:
    """One run to import: the records of one config key, and what they say together."""

    paper: str
    key: str
    params: dict[str, str]
    parent: str  # the table's parent run, ``<paper>/<table>@<scale>``
    no_config: bool
    source: tuple[str, str | None]  # (file, commit) of the first record
    records: list[dict] = field(default_factory=list)
    points: dict[str, dict[int, float]] = field(default_factory=dict)  # metric -> step -> value (from the values)
    member: str | None = None  # the member of a pooled cell its job runs


@dataclass
class Imported:
    """What an import did: runs written, records whose run was in the store already, the lines of the records not
    imported, and one summary line per file."""

    runs: int = 0
    existing: int = 0
    unmatched: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def record_files(paths: Sequence[str]) -> list[Path]:
    """The records files that ``paths`` name: a file as it is, a directory's ``*_runs.jsonl`` files (recursively);
    a path that does not exist or a directory without any is a ConfigError."""
    files = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.rglob(f"*{SUFFIX}"))
            if not found:
                raise ConfigError(f"--import={p}: no *{SUFFIX} file in it; allowed: a directory of flplat reproduce "
                                  "--out records, or such a file")
            files += found
        elif p.is_file():
            files.append(p)
        else:
            raise ConfigError(f"--import={p}: no such file or directory; allowed: a *{SUFFIX} file of flplat "
                              "reproduce --out, or a directory holding them")
    return list(dict.fromkeys(files))


def import_records(paths: Sequence[str], store_dir: str = "mlruns", overrides: Sequence[str] = (),
                   first: Sequence[str] = ()) -> Imported:
    """Import the run records of ``paths`` (files or directories, :func:`record_files`) into the store of
    ``store_dir`` (see the module's docstring); ``overrides``: the ``--set`` of the grid that wrote the records
    without a config (their jobs are matched with it); ``first``: the file stems (:func:`record_stem`) read before
    the others, the tables a command renders, whose own records win where records without a config disagree.
    Returns what was done, with one line per record not imported and one summary line per file."""
    order = record_files(paths)
    order.sort(key=lambda f: f.name[:-len(SUFFIX)] not in first)  # stable: otherwise as found
    files = [(f, read_records(f)) for f in order]  # every file checked before anything is written
    out, items, jobs = Imported(), {}, _Jobs(overrides)
    matched: dict[tuple[str, str], tuple[str | None, str]] = {}  # a key of records without a config: (hash, where)
    outcome: list[tuple[Path, list]] = []  # per file, per record: its (paper, key), or the line saying why not
    for path, recs in files:
        source, got = (str(path), _commit(path)), []
        for n, rec in enumerate(recs, 1):
            where = f"{path}:{n}: {rec['table']} {rec['cell']} {rec['method']} s{rec.get('seed')}"
            try:
                item, metric = _keyed(rec, path, jobs)
                if item.no_config:
                    _check_same(matched.setdefault((item.paper, item.key), (rec.get("config_key"), where)), rec)
            except _Unmatched as e:
                got.append(f"{where}: not imported: {e}")
                continue
            item.source = source
            _merge(items, item, rec, metric)
            got.append((item.paper, item.key, item.no_config, bool(rec.get("config")) and
                        rec.get("config_key") not in (None, item.key)))
        outcome.append((path, got))
    new: set[tuple[str, str]] = set()
    refused: dict[tuple[str, str], str] = {}
    for paper in dict.fromkeys(p for p, _ in items):
        written, not_written = _write(paper, [i for (p, _), i in items.items() if p == paper], store_dir)
        new |= written
        refused.update(not_written)
    seen: set[tuple[str, str]] = set()
    for path, got in outcome:
        counts = dict.fromkeys(("new", "shared", "existing", "unmatched", "no_config", "rekeyed"), 0)
        for r in got:
            if isinstance(r, str) or r[:2] in refused:
                counts["unmatched"] += 1
                out.unmatched.append(r if isinstance(r, str) else f"{path}: a record of {r[1]}: not imported: "
                                                                   f"{refused[r[:2]]}")
                continue
            counts["new" if r[:2] in new and r[:2] not in seen else "shared" if r[:2] in new else "existing"] += 1
            counts["no_config"] += r[2]
            counts["rekeyed"] += r[3]
            seen.add(r[:2])
        out.existing += counts["existing"]
        out.lines.append(_summary(path, len(got), counts))
    out.runs = len(new)
    out.lines = [*out.unmatched, *out.lines]
    return out


def _check_same(first: tuple[str | None, str], rec: dict) -> None:
    """A record without a config matched to the job of an earlier one: both must have recorded one config hash (a
    table's records that share a run do); different hashes mean their grids ran different settings."""
    key, where = first
    if rec.get("config_key") != key:
        raise _Unmatched(f"it matches the job that {where} matched, but their recorded config hashes differ "
                         f"({rec.get('config_key')} and {key}): other runs, of other settings or of a flplat with "
                         "another config form; the first is kept (a command's own tables are read first; import a "
                         "file of another --set with that --set)")


def _summary(path: Path, n: int, c: dict[str, int]) -> str:
    """One line per file: what became of its records."""
    parts = [f"{c['new']} imported"]
    parts += [text for k, text in (("shared", f"{c['shared']} the same runs as records before them"),
                                   ("existing", f"{c['existing']} already in the store"),
                                   ("unmatched", f"{c['unmatched']} not imported (listed above)")) if c[k]]
    marks = [text for k, text in (("no_config", f"{c['no_config']} without their config (unknown code)"),
                                  ("rekeyed", f"{c['rekeyed']} keyed again from an older config form")) if c[k]]
    return f"{path}: {n} records: {', '.join(parts)}" + (f"; {', '.join(marks)}" if marks else "")


class _Unmatched(Exception):
    """A record that stands for no run this flplat can key (the message says why)."""


class _Jobs:
    """The jobs the tables define now, planned once per (paper, table, scale, cell, method, seed)."""

    def __init__(self, overrides: Sequence[str] = ()):
        self.cache: dict[tuple, list[Job]] = {}
        self.overrides = list(overrides)

    def find(self, paper: str, table: str, scale: str, cell: str, method: str, seed: int | None,
             member: str | None = None) -> tuple[list[Job], str]:
        """The jobs of (table, cell, ``member`` of a pooled cell, method, seed) at ``scale`` (one but in a pooled
        cell when the record names no member) and the metric the table reads of them."""
        from flplat.studies.reproduction.collect import job_metric

        t = next((t for t in paper_tables(paper) if t.id == table), None)
        if t is None or t.kind != "train":
            raise _Unmatched(f"{paper} has no train table {table!r} now" if t is None else
                             f"{table} is a {t.kind} table (its runs are its parts')")
        if cell in t.undefined:
            raise _Unmatched(f"cell {cell} of {table} runs nothing now ({t.undefined[cell]})")
        for what, name, known in (("cell", cell, [c.id for c in t.cells]), ("method", method,
                                                                            [m.name for m in t.methods])):
            if name not in known:
                raise _Unmatched(f"{table} has no {what} {name!r} now (an added method, or renamed)")
        key = (paper, table, scale, cell, method, seed)
        if key not in self.cache:
            seeds = [seed] if seed is not None else ([0] if scale == "smoke" else t.seeds)
            try:
                self.cache[key] = plan(paper, t, scale, seeds, [method], [cell], self.overrides,
                                       f"reproduce-{paper}", "mlruns")
            except ConfigError as e:
                raise _Unmatched(f"its job's config does not load now ({e})") from None
        found = [j for j in self.cache[key] if member is None or j.member == member]
        if not found:
            raise _Unmatched(f"{cell} has no member {member!r} at the {scale} scale now")
        return found, job_metric(t, cell, method)


def _keyed(rec: dict, path: Path, jobs: _Jobs) -> tuple[Item, str | None]:
    """The run a record stands for (its paper, key, params, parent; not yet its records) and the metric its value
    is of."""
    from flplat.config_io import config_key

    file_paper, file_table, file_scale = name_parts(path)
    paper, scale = rec.get("paper") or file_paper, rec.get("scale") or file_scale
    if paper not in PAPERS:
        raise _Unmatched(f"no paper: the record names none and the file name is not <paper>_<table>[_<scale>]{SUFFIX}"
                         f" (papers: {', '.join(PAPERS)})")
    parent = rec.get("parent") or f"{paper}/{file_table or rec['table']}@{scale}"
    if rec.get("config"):
        try:
            cfg = record_cfg(rec["config"], jobs.overrides)
        except ConfigError as e:
            raise _Unmatched(f"its config does not load now ({e})") from None
        resolved = _resolved(cfg)
        return Item(paper, config_key(cfg), _params(resolved), parent, bool(rec.get("config_inferred")),
                    (str(path), None), member=rec.get("member")), rec.get("metric")
    found, metric = jobs.find(paper, rec["table"], scale, rec["cell"], rec["method"], rec.get("seed"),
                              rec.get("member"))
    # the config it ran is the job's, to the hash (wherever its inputs were: the job's keys at the default location)
    key = rec.get("config_key")
    same = [j for j in found if key == j.key or key == _key_at_default_location(j)]  # the second hash only if needed
    if not same and len(found) != 1:
        names = sorted(f"s{j.seed}" + (f" {j.member}" if j.member else "") for j in found)
        raise _Unmatched(f"table, cell, method and scale name {len(found)} jobs ({', '.join(names)}) and its config "
                         "hash is none of theirs: the record gives no seed or member to tell them apart")
    job = (same or found)[0]
    return Item(paper, job.key, _params(job.resolved), parent, not same, (str(path), None), member=job.member), metric


def _key_at_default_location(job: Job) -> str:
    """``job``'s config hash with its :data:`~flplat.config_io.LOCATION_KEYS` at their defaults: the key of a run of
    that job made without them set (a record without a config carries only its hash)."""
    from omegaconf import OmegaConf

    from flplat.config_io import LOCATION_KEYS, config_key

    d = OmegaConf.create(job.resolved)
    defaults = _location_defaults()
    for key in LOCATION_KEYS:
        OmegaConf.update(d, key, defaults[key], merge=False)
    return config_key(d)


@functools.cache
def _location_defaults() -> dict:
    from omegaconf import OmegaConf

    from flplat.config_io import LOCATION_KEYS
    from flplat.configure import load_config

    cfg = load_config(None, [])
    return {key: OmegaConf.select(cfg, key) for key in LOCATION_KEYS}


def record_cfg(config: dict, overrides: Sequence[str] = ()):
    """A record's config as this flplat reads it: upgraded from an older form (:func:`upgrade_config`), the keys it
    lacks that an earlier flplat ran with another value than today's default set to that value
    (:func:`legacy_overrides`), where its inputs were (:data:`~flplat.config_io.LOCATION_KEYS`) taken from
    ``overrides`` (the importing command's ``--set``; else the default), loaded and validated (a ConfigError when it
    no longer loads)."""
    from omegaconf import OmegaConf

    from flplat.config_io import LOCATION_KEYS, flatten
    from flplat.configure import load_config
    from flplat.data.legacy import upgrade_config

    d = upgrade_config(config)
    d.pop("tracking", None)
    for key in LOCATION_KEYS:
        *path, name = key.split(".")
        node = d
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(name, None)
    extra = legacy_overrides({k: str(v) for k, v in flatten(d).items()})
    extra += [o for o in overrides if o.split("=", 1)[0].lstrip("+") in LOCATION_KEYS]
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as fh:
        fh.write(OmegaConf.to_yaml(OmegaConf.create(d)))
        fh.flush()
        return load_config(fh.name, extra)


def _resolved(cfg) -> dict:
    from flplat.studies.reproduction.grid import record_config

    return record_config(cfg)


def _params(resolved: dict) -> dict[str, str]:
    """The run params of a resolved config (as :func:`~.store.run_params`)."""
    from flplat.config_io import flatten
    from flplat.studies.reproduction.store import _outside_key

    return {k: str(v)[:6000] for k, v in flatten(resolved).items() if not _outside_key(k)}


def _merge(items: dict[tuple[str, str], Item], item: Item, rec: dict, metric: str | None) -> None:
    """Add a record to the run of its key: the first record of a key makes the run, and one with its config takes
    the place of one without (its params and code are the run's). A FINISHED record goes before the FAILED ones (the
    first record gives the run's status and tags); a value read at a step (``NAME@STEP``) of a record without that
    history becomes a point of NAME."""
    have = items.setdefault((item.paper, item.key), item)
    if have is not item and have.no_config and not item.no_config and rec.get("status", "FINISHED") == "FINISHED":
        item.records, item.points = have.records, have.points
        items[(item.paper, item.key)] = have = item
        have.records.insert(0, rec)
    elif rec.get("status", "FINISHED") == "FINISHED":
        have.records.insert(sum(r.get("status", "FINISHED") == "FINISHED" for r in have.records), rec)
    else:
        have.records.append(rec)
    name, _, step = (metric or "").partition("@")
    v = rec.get("value")
    if step.isdigit() and isinstance(v, (int, float)) and name not in (rec.get("history") or {}):
        have.points.setdefault(name, {})[int(step)] = float(v)


def _commit(path: Path) -> str | None:
    """The commit that last changed ``path`` in its git checkout (``+modified`` when it changed since), or None."""
    try:
        log = subprocess.run(["git", "log", "-1", "--format=%H", "--", path.name], cwd=path.parent,
                             capture_output=True, text=True, timeout=10)
        if log.returncode != 0 or not log.stdout.strip():
            return None
        st = subprocess.run(["git", "status", "--porcelain", "--", path.name], cwd=path.parent, capture_output=True,
                            text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return log.stdout.strip() + ("+modified" if st.stdout.strip() else "")


def _write(paper: str, items: list[Item], store_dir: str) -> tuple[set[tuple[str, str]], dict[tuple[str, str], str]]:
    """Write the runs of ``items`` that the store lacks (module docstring); returns their (paper, key), and why the
    items not written were not where that is not because their run is there already."""
    store = Store(f"reproduce-{paper}", store_dir)
    finished, failed = store.finished(paper), store.failed()
    parents: dict[str, str] = {}
    new, refused = set(), {}
    for item in items:
        status = item.records[0].get("status", "FINISHED")
        if item.key in finished or (status != "FINISHED" and item.key in failed):
            why = _other_grid(store, item, finished.get(item.key, (None,))[0])
            if why:
                refused[(paper, item.key)] = why
            continue
        if item.parent not in parents:
            p, _, scale = item.parent.partition("/")[2].rpartition("@")
            parents[item.parent] = store.parent(paper, p, scale, claim=False)
        _write_run(store, item, parents[item.parent])
        new.add((paper, item.key))
    return new, refused


def _other_grid(store: Store, item: Item, run_id: str | None) -> str | None:
    """Why a record without a config does not stand for the run of its job imported before from another such
    record: they recorded different config hashes (their grids ran different settings); None when it does."""
    if not item.no_config or run_id is None:
        return None
    tags = store.client.get_run(run_id).data.tags
    before, now = tags.get(RECORDED_KEY_TAG), item.records[0].get("config_key")
    if tags.get(NO_CONFIG_TAG) != "true" or before is None or now is None or before == now:
        return None
    return (f"its job's run {run_id} was imported from {tags.get(FILE_TAG)}, whose recorded config hash differs "
            f"({now} and {before}): their grids ran different settings; import it with the --set its grid ran with")


def _tags(item: Item, parent: str) -> dict[str, str]:
    from flplat.tracking.meta import entry_tags
    from flplat.tracking.resume import CONFIG_KEY_TAG

    rec = item.records[0]
    tags = {**entry_tags(item.params), CONFIG_KEY_TAG: item.key, "mlflow.parentRunId": parent,
            FILE_TAG: _relative(item.source[0]), COMMIT_TAG: item.source[1] or "not in a git checkout",
            **{f"flplat.reproduce.{k}": str(v) for k, v in (
                ("paper", item.paper), ("key", item.key), ("table", rec["table"]), ("cell", rec["cell"]),
                ("method", rec["method"]), ("seed", rec.get("seed")))}}
    if item.no_config:
        tags[NO_CONFIG_TAG] = "true"
    elif rec.get("code"):
        tags.update(CodeIdentity.from_dict(rec["code"]).to_tags())
    if rec.get("run_id"):
        tags[RUN_TAG] = str(rec["run_id"])
    if not all(isinstance(rec.get(k), int) for k in ("start_time", "end_time")):
        tags[UNTIMED_TAG] = "true"
    if rec.get("config_key"):
        tags[RECORDED_KEY_TAG] = str(rec["config_key"])
    if rec.get("status", "FINISHED") != "FINISHED":
        tags["flplat.error"] = str(rec.get("error") or "no error recorded")[:5000]
    return tags


def _metrics(item: Item, ts: int) -> list:
    """The run's metrics: each history point (the records', then those from values read at a step) and, for a
    metric without a history, its final value at the last round (as runs log their summaries)."""
    from mlflow.entities import Metric

    points: dict[str, dict[int, float]] = {}
    finals: dict[str, float] = {}
    for rec in reversed(item.records):  # the first record's values win
        for name, pts in (rec.get("history") or {}).items():
            points.setdefault(name, {}).update({int(s): v for s, v in pts if isinstance(v, (int, float))})
        finals.update({k: v for k, v in (rec.get("metrics") or {}).items() if isinstance(v, (int, float))})
        name, _, step = (rec.get("metric") or "").partition("@")
        if name and not step and name not in finals and isinstance(rec.get("value"), (int, float)):
            finals[name] = rec["value"]
    for name, pts in item.points.items():
        points.setdefault(name, {}).update({s: v for s, v in pts.items() if s not in points.get(name, {})})
    rounds = item.params.get("federation.rounds", "")
    last = int(rounds) if rounds.isdigit() else 0
    out = [Metric(n, float(v), ts, s) for n, pts in points.items() for s, v in sorted(pts.items())
           if math.isfinite(v)]
    return out + [Metric(n, float(v), ts, last) for n, v in finals.items() if n not in points and math.isfinite(v)]


def _write_run(store: Store, item: Item, parent: str) -> None:
    """One imported run; deleted again when writing it fails midway (no half-imported run is left)."""
    from mlflow.entities import Param

    rec, client = item.records[0], store.client
    now = int(time.time() * 1000)
    start = rec.get("start_time") if isinstance(rec.get("start_time"), int) else now
    cell = f"{rec['cell']}/{item.member}" if item.member else rec["cell"]  # as the run that made it was named
    run_id = client.create_run(store.exp_id, start_time=start, tags=_tags(item, parent), run_name=
                               f"{rec['table']}/{cell}/{rec['method']}/s{rec.get('seed')}").info.run_id
    try:
        params = [Param(k, v) for k, v in sorted(item.params.items())]
        for i in range(0, len(params), 100):
            client.log_batch(run_id, params=params[i:i + 100])
        metrics = _metrics(item, start)
        for i in range(0, len(metrics), 1000):
            client.log_batch(run_id, metrics=metrics[i:i + 1000])
        for path, text in (rec.get("artifacts") or {}).items():
            client.log_text(run_id, text, path)
        end = rec.get("end_time") if isinstance(rec.get("end_time"), int) else now
        client.set_terminated(run_id, rec.get("status", "FINISHED"), end_time=end)
    except BaseException:
        client.delete_run(run_id)
        raise


def _relative(path: str) -> str:
    """``path`` relative to the top of its git checkout, else as given."""
    p = Path(path).resolve()
    for d in p.parents:
        if (d / ".git").exists():
            return p.relative_to(d).as_posix()
    return path
