"""Derived tables of ``flplat reproduce`` (``Table.kind == "derived"``): a table whose cells are means over other
tables' cells, as a paper's summary tables are (Flux's Tables 10/11 average its per-shift Tables 12-19 per level;
its Table 1 averages every shift and level). A derived cell lists its *parts*, (train table, cell) pairs
(``Table.parts``, per scale ``Table.scale_parts``); its value for a method at a seed is the mean of the parts' values
of that method at that seed, each read with its own table's metric. So a derived table trains nothing of its own:
its jobs are its parts' jobs, planned by their tables (:func:`derived_plan`: the same configs and hashes, hence the
same runs as the component tables'), and ours is then the mean ± std over the seeds of these per-seed means, as in
any cell.

Decided: a seed where some part has no value (not run, skipped, failed, finished without it, or the method is not a
row of the part's table) has no mean. The cell says "incomplete" and its note names the missing parts and why,
instead of averaging the parts that happen to be there: a partial mean would silently stand for a different
quantity than the paper's (:func:`derive`). A cell where a component table's metric does not exist
(``Table.undefined``) is not a part: the paper module leaves it out and says so in the derived cell's note."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from flplat.studies.reproduction.collect import Collected, job_metric, refused_rows
from flplat.studies.reproduction.execute import run_grid, stale_runs
from flplat.studies.reproduction.grid import Job, Table, plan, select
from flplat.studies.reproduction.records import failed_record, run_record
from flplat.studies.reproduction.store import FAILED, INCOMPLETE, Store

NOT_RUN = "not run"


def derived_plan(paper: str, t: Table, scale: str, seeds: Sequence[int], methods, cells, extra: Sequence[str],
                 experiment: str, store_dir: str, baseline_seeds: int | None = None) -> list[Job]:
    """The jobs behind the chosen cells and methods of derived table ``t``: per component table, :func:`plan` of the
    parts' cells and the chosen methods that are rows of it (each job keeps its component table's id)."""
    chosen = [m.name for m in select(t.methods, methods, "methods", "name")]
    need: dict[str, tuple[Table, list[str]]] = {}
    for c in select(t.cells, cells, "cells", "id"):
        for tbl, cid in t.parts_at(scale).get(c.id, []):
            need.setdefault(tbl.id, (tbl, []))[1].append(cid)
    jobs = []
    for tbl, cids in need.values():
        rows = [name for name in chosen if name in {m.name for m in tbl.methods}]
        if rows:
            jobs += plan(paper, tbl, scale, seeds, rows, list(dict.fromkeys(cids)), extra, experiment, store_dir,
                         baseline_seeds)
    return jobs


def derive(parts: dict[str, list[tuple[str, str]]], seeds: dict[str, Sequence[int]],
           values: dict[tuple[str, str, str], dict[int, float]], why: dict[tuple[str, str, str, int], str]
           ) -> tuple[dict[tuple[str, str], list[float]], dict[tuple[str, str], list[tuple[int, str]]]]:
    """Per derived cell and method, the per-seed means of its parts' values and the seeds without one with the
    reason. ``parts``: derived cell -> [(table id, cell id)]; ``seeds``: method -> its seeds; ``values``: (table,
    cell, method) -> {seed: value}; ``why``: (table, cell, method, seed) -> why that part has no value (default
    "not run"). A seed with a part missing gets :data:`INCOMPLETE` and the missing parts, never a partial mean."""
    ours: dict[tuple[str, str], list[float]] = {}
    skips: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for cid, comps in parts.items():
        for method, sd in seeds.items():
            for s in sd:
                got = [values.get((tid, pc, method), {}).get(s) for tid, pc in comps]
                if comps and all(v is not None for v in got):
                    ours.setdefault((cid, method), []).append(statistics.fmean(got))
                    continue
                missing = [(tid, pc, why.get((tid, pc, method, s), NOT_RUN))
                           for (tid, pc), v in zip(comps, got) if v is None]
                skips.setdefault((cid, method), []).append((s, incomplete(missing, len(comps))))
    return ours, skips


def incomplete(missing: list[tuple[str, str, str]], n: int) -> str:
    """The reason of a seed without a mean: how many of the ``n`` parts lack a value, which (grouped by table and
    reason) and why."""
    if not n:
        return f"{INCOMPLETE}the cell has no parts at this scale"
    groups: dict[tuple[str, str], list[str]] = {}
    for tid, cid, reason in missing:
        groups.setdefault((tid, " ".join(reason.split())), []).append(cid)
    listed = "; ".join(f"{tid} {', '.join(cids)} ({reason})" for (tid, reason), cids in groups.items())
    return f"{INCOMPLETE}{len(missing)} of {n} parts without a value: {listed}"


def collect_derived(paper: str, t: Table, jobs: list[Job], store: Store, parent: str, backend, scale: str,
                    seeds: Sequence[int], methods: Sequence[str] | None, cells: Sequence[str] | None,
                    render_only: bool, rerun_stale: bool) -> Collected:
    """Run (or find) the parts' jobs (:func:`run_grid`, under ``t``'s parent run) and collect what the derived table
    shows: per (cell, method) the per-seed means (:func:`derive`), the incomplete seeds with the missing parts, the
    parts' runs and how many come from other code, and the parts' run records."""
    got, reasons = Collected(), {}
    metrics = run_grid(paper, t, jobs, store, parent, backend, render_only, reasons, rerun_stale)
    got.stale_ids = stale_runs(jobs, metrics, store)
    parts = {c.id: t.parts_at(scale).get(c.id, []) for c in select(t.cells, cells, "cells", "id")}
    tables = {tbl.id: tbl for comps in parts.values() for tbl, _ in comps}
    values, why, runs, got.records = _read_parts(jobs, metrics, reasons, tables, store, got.stale_ids)
    names = [m.name for m in select(t.methods, methods, "methods", "name")]
    by_method = {n: sorted({j.seed for j in jobs if j.method == n}) or list(seeds) for n in names}
    for comps in parts.values():  # a method that is not a row of a part's table: that part has no value
        for tbl, pc in comps:
            for n in set(names) - {m.name for m in tbl.methods}:
                why.update({(tbl.id, pc, n, s): f"not a row of {tbl.id}" for s in by_method[n]})
    ids = {cid: [(tbl.id, pc) for tbl, pc in comps] for cid, comps in parts.items()}
    got.ours, got.skips = derive(ids, by_method, values, why)
    for cid, comps in ids.items():
        for n in names:
            behind = {s: [runs[(tid, pc, n)][s] for tid, pc in comps if s in runs.get((tid, pc, n), {})]
                      for s in by_method[n]}
            if any(behind.values()):
                got.run_ids[(cid, n)] = list(dict.fromkeys(r for rs in behind.values() for r in rs))
            # the seeds whose mean reads a run of other code
            incomplete_seeds = {s for s, _ in got.skips.get((cid, n), [])}
            got.stale[(cid, n)] = sum(any(r in got.stale_ids for r in rs) for s, rs in behind.items()
                                      if s not in incomplete_seeds)
    got.n_runs = len({r for rs in runs.values() for r in rs.values()})
    got.refused = refused_rows(t, jobs, metrics, reasons)
    return got


def _read_parts(jobs: list[Job], metrics: dict, reasons: dict[str, str], tables: dict[str, Table], store: Store,
                stale_ids: dict[str, str]):
    """Per part (table, cell, method) its values by seed, why a seed has none, its runs by seed; and the run
    records. Each part's value is read with its own table's metric (a row's, else a cell's, else the table's)."""
    values: dict[tuple[str, str, str], dict[int, float]] = {}
    why: dict[tuple[str, str, str, int], str] = {}
    runs: dict[tuple[str, str, str], dict[int, str]] = {}
    records = []
    for j in jobs:
        tbl, where = tables[j.table], (j.table, j.cell, j.method)
        metric = job_metric(tbl, j.cell, j.method)
        run_id, m = metrics.get(j.key, (None, {}))
        if not run_id:
            why[(*where, j.seed)] = reasons.get(j.key, NOT_RUN)
            if why[(*where, j.seed)].startswith(FAILED):
                records.append((j, failed_record(j, metric, why[(*where, j.seed)][len(FAILED):])))
            continue
        runs.setdefault(where, {})[j.seed] = run_id
        v = store.value(run_id, m, metric)
        if v is None:
            why[(*where, j.seed)] = store.no_value(run_id, metric)
        else:
            values.setdefault(where, {})[j.seed] = v
        records.append((j, run_record(j, run_id, metric, v, m, store, stale_ids)))
    return values, why, runs, records
