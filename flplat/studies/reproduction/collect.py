"""What a table of ``flplat reproduce`` shows, collected from its runs: a train table's jobs run (or found) through
:func:`~flplat.studies.reproduction.execute.run_grid`, then per (cell, method) our values over the seeds, the run
ids, the seeds without a value with their reason (skipped, failed, finished without the value), how many runs come
from other code (:mod:`flplat.tracking.provenance`), and the rows whose every run was refused before it started
(:func:`refused_rows`: the command exits 1 with them); an analysis table's values per (cell, row) over the seeds
(:func:`collect_analysis`)."""

from __future__ import annotations

import re
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from flplat.data.files import DataUnavailableError
from flplat.data.splits import InfeasiblePartitionError
from flplat.studies.reproduction.execute import run_grid, skip_reason, stale_runs
from flplat.studies.reproduction.grid import Job, Table, select
from flplat.studies.reproduction.records import failed_record, run_record
from flplat.studies.reproduction.store import FAILED, NO_CLUSTERS, NO_VALUE, Store


@dataclass
class Collected:
    """A table's values and what stands behind them, by (cell, method): our values over the seeds, the run ids, the
    seeds without a value with the reason (prefixed by its kind, :data:`flplat.studies.reproduction.render.KINDS`),
    how many of the runs come from other code; the runs of other code (run id -> why), the number of distinct runs,
    the lines of the rows every run of which was refused, and the run records behind the table, (job, record) pairs
    (:mod:`flplat.studies.reproduction.records`; written with ``--out`` once the figure has been drawn)."""

    ours: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    run_ids: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    skips: dict[tuple[str, str], list[tuple[int, str]]] = field(default_factory=dict)
    stale: dict[tuple[str, str], int] = field(default_factory=dict)
    stale_ids: dict[str, str] = field(default_factory=dict)
    n_runs: int = 0
    refused: list[str] = field(default_factory=list)
    records: list[tuple[Job, dict]] = field(default_factory=list)


def job_metric(t: Table, cell: str, method: str) -> str:
    """The metric a table reads of a job: its row's, else its cell's, else the table's."""
    return next(m.metric for m in t.methods if m.name == method) or \
        next(c.metric for c in t.cells if c.id == cell) or t.metric


def collect_train(paper: str, t: Table, jobs: list[Job], store: Store, parent: str, n_jobs, render_only: bool,
                  rerun_stale: bool) -> Collected:
    """Run (or find) a train table's jobs (:func:`run_grid`) and collect what the table shows (:class:`Collected`),
    with a run record per job that has a finished or failed run."""
    got = Collected()
    reasons: dict[str, str] = {}
    metrics = run_grid(paper, t, jobs, store, parent, n_jobs, render_only, reasons, rerun_stale)
    got.stale_ids = stale_runs(jobs, metrics, store)
    runs = set()
    per_seed = {c.id for c in t.cells if c.per_seed}
    members: dict[tuple[str, str, int], list[tuple[str, float | None, str | None]]] = {}  # per-seed pooled cells
    stale_seeds: set[tuple[str, str, int]] = set()  # such a cell's seed with a member of other code
    for j in jobs:
        run_id, m = metrics.get(j.key, (None, {}))
        where, metric = (j.cell, j.method), job_metric(t, j.cell, j.method)
        v = store.value(run_id, m, metric) if run_id else None
        why = (store.no_value(run_id, metric) if v is None else None) if run_id else reasons.get(j.key)
        seed_mean = bool(j.member) and j.cell in per_seed
        if run_id is None and why and why.startswith(FAILED):
            got.records.append((j, failed_record(j, metric, why[len(FAILED):])))
        if run_id:
            runs.add(run_id)
            got.run_ids.setdefault(where, []).append(run_id)
            if run_id in got.stale_ids and seed_mean:
                stale_seeds.add((*where, j.seed))
            elif run_id in got.stale_ids and v is not None:
                got.stale[where] = got.stale.get(where, 0) + 1
            got.records.append((j, run_record(j, run_id, metric, v, m, store, got.stale_ids)))
        if seed_mean:
            members.setdefault((*where, j.seed), []).append((j.member, v, why))
        elif v is not None:
            got.ours.setdefault(where, []).append(v)
        elif why:  # skipped, failed, or finished without the value (e.g. clustering never started): say why
            got.skips.setdefault(where, []).append((j.seed, why))
    for (cell, method, seed), got_members in members.items():
        value, why = mean_of_members(got_members)
        if value is not None:
            got.ours.setdefault((cell, method), []).append(value)
            got.stale[(cell, method)] = got.stale.get((cell, method), 0) + ((cell, method, seed) in stale_seeds)
        elif why:
            got.skips.setdefault((cell, method), []).append((seed, why))
    got.n_runs = len(runs)
    got.refused = refused_rows(t, jobs, metrics, reasons)
    return got


def mean_of_members(members: Sequence[tuple[str, float | None, str | None]]) -> tuple[float | None, str | None]:
    """A per-seed pooled cell's value for one seed (``Cell.per_seed``) from its members' ``(member, value, why it
    has none)``: the mean when every member has a value; else None and the reason of the first member without one,
    prefixed with the member (its kind's prefix, e.g. "failed: ", kept first so that the table names it), or None
    when that member was simply not run."""
    missing = [(p, why) for p, v, why in members if v is None]
    if not missing:
        return statistics.fmean(v for _, v, _ in members), None
    member, why = missing[0]
    if why is None:
        return None, None
    prefix = next((p for p in (FAILED, NO_CLUSTERS, NO_VALUE) if why.startswith(p)), "")
    more = f" ({len(missing) - 1} more member(s) without a value)" if len(missing) > 1 else ""
    return None, f"{prefix}member {member}: {why[len(prefix):]}{more}"


def refused_rows(t: Table, jobs: list[Job], metrics: dict, reasons: dict[str, str]) -> list[str]:
    """One line per row (method) of the table whose every run was refused before it started (skipped with a
    reason, no run exists; a run that ended FAILED started, and is not counted here), with the reasons."""
    lines = []
    for name in dict.fromkeys(j.method for j in jobs):
        keys = list(dict.fromkeys(j.key for j in jobs if j.method == name))
        if all(metrics.get(k, (None,))[0] is None and k in reasons and not reasons[k].startswith(FAILED)
               for k in keys):
            why = " / ".join(dict.fromkeys(" ".join(reasons[k].split()) for k in keys))
            lines.append(f"{t.id}: row {name!r}: all {len(keys)} of its runs were refused before they started: {why}")
    return lines


def collect_analysis(t: Table, sd: Sequence[int], cells, scale: str, store: Store, parent: str):
    """An analysis table's values per (cell, row) over the seeds (each mean logged to ``parent``) and the cells
    skipped because the data cannot meet them, with the reason."""
    ours: dict[tuple[str, str], list[float]] = {}
    skips: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for s in sd:  # seeds outside: an analysis may cache per seed what its cells share
        for c in select(t.cells, cells, "cells", "id"):
            t0 = time.perf_counter()
            try:
                rows = t.analyze(c, s, scale)
            except (InfeasiblePartitionError, DataUnavailableError) as e:  # the data cannot meet this cell or
                why = skip_reason(e)                                            # are absent: skip it, say why
                print(f"{t.id} {c.id} seed {s}: skipped ({e})", file=sys.stderr, flush=True)
                for m in t.methods:
                    skips.setdefault((c.id, m.name), []).append((s, why))
                continue
            for name, v in rows.items():
                ours.setdefault((c.id, name), []).append(v)
            print(f"{t.id} {c.id} seed {s} ({time.perf_counter() - t0:.1f}s)", file=sys.stderr, flush=True)
    ours = {k: ours[k] for k in sorted(ours, key=lambda k: [c.id for c in t.cells].index(k[0]))}
    for (cid, name), vals in ours.items():
        key = re.sub(r"[^\w\-. /]", "_", f"{cid}.{name}")[:250]  # MLflow's allowed characters
        store.client.log_metric(parent, key, statistics.fmean(vals))
    return ours, skips
