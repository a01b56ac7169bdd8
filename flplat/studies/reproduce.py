"""`flplat reproduce`: the five papers' tables and figures as grids of runs, with the papers' numbers beside ours.

A paper is a module in :mod:`flplat.studies.papers` that lists its :class:`Table` s; the numbers the paper reports
are data, ``configs/papers/<paper>.yaml`` (see :func:`load_paper_values`). A table is

* ``train``: cells (a ready config under ``configs/`` plus overrides) × methods (overrides) × seeds; each one run
  of :func:`flplat.experiment.run`, an MLflow run nested under one parent run per table and scale. A run is
  identified by the hash of its resolved config (without ``tracking.*`` and ``fabric.num_threads``, which do not
  change the result): re-running the command skips every run already FINISHED with the same hash, so an
  interrupted grid continues where it stopped (its interrupted run from its last checkpoint, in the same MLflow
  run: :func:`flplat.experiment.run_or_resume`), and two tables that share cells (Flux's known-association and
  test-phase tables) share runs. ``--add-method "NAME=key=value,..."`` adds a user's method (any registered
  algorithm, plugins included, with its overrides; see :func:`parse_added_method`) as a row of every train table,
  run at the same scale and seeds and cached the same way; it has no paper value, and its verdict says where it
  stands against the table's reference. ``--jobs N`` runs cells in N worker processes with one thread each.
* ``analysis``: no training (CBCC's IID detection, PQFed's EMD curve); a function of (cell, seed) that returns
  one number per row ("method"), logged on the parent run.

Scales: ``smoke`` (seconds per cell: tiny data, 2 rounds, the MLP; for CI), ``reduced`` (a whole table in hours on
2 CPU cores; the table's ``reduced`` overrides, stated in the output's header) and ``paper`` (the ready config as
is: the paper's model, rounds, epochs, clients). Overrides given on the command line come last.

The output per table (markdown, logged to the parent run as ``reproduce/<table>.md``): per cell and method, the
paper's value | ours mean ± std (n seeds) | difference | verdict. The verdict has two parts:

* claim: the sign of (method − reference) in the paper and here (the reference is the table's ``reference``
  method, FedAvg in most tables; for the reference row itself the claim part is "reference"). "holds" when the
  signs agree; "ties" count as agreeing when both gaps are within the table's ``tie`` (default 0.5 points);
* spread: ours is "within the paper's spread" when |ours − paper| ≤ 2·sqrt(std_paper² + std_ours²) (both
  standard deviations over seeds; a missing one counts as 0, and with neither given the table's ``tie`` is the
  tolerance). Where the table runs a different dataset than the paper's (``substitute``, e.g. DA-PFL on digits
  for CIFAR-10), values are not comparable and only the claim is judged.

The parts live in :mod:`flplat.studies.reproduction` (the table model and plan, the papers' values, the store,
the execution, the jobs printed for a scheduler, the rendering and the figures); this module runs a paper's tables
with them and re-exports their public names (the paper modules, the CLI and the tests import them from here).
"""

from __future__ import annotations

import re
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from flplat.config_io import config_key  # the hash that identifies a run
from flplat.data.files import DataUnavailableError
from flplat.data.splits import InfeasiblePartitionError
from flplat.errors import ConfigError
from flplat.studies.reproduction.execute import (
    Backend,
    LocalBackend,
    Progress,
    RayBackend,
    default_jobs,
    make_backend,
    run_grid,
    skip_reason,
)
from flplat.studies.reproduction.figures import plot_cells, plot_curves
from flplat.studies.reproduction.grid import (
    PAPERS,
    REPO,
    SCALES,
    Cell,
    FigureContext,
    Job,
    Method,
    Table,
    paper_module,
    paper_tables,
    parse_added_method,
    per_table,
    plan,
    resolve_scale,
    select,
    with_added,
)
from flplat.studies.reproduction.jobs import job_commands
from flplat.studies.reproduction.render import render_table, verdict
from flplat.studies.reproduction.store import Store, compatible, run_params
from flplat.studies.reproduction.values import (
    NOT_REPORTED,
    VALUES_DIR,
    check_paper_values,
    load_paper_values,
    paper_value,
)

__all__ = [
    "PAPERS", "REPO", "SCALES", "NOT_REPORTED", "VALUES_DIR", "Backend", "Cell", "FigureContext", "Job", "LocalBackend",
    "Method", "Progress", "RayBackend", "Store", "Table", "check_paper_values", "compatible", "config_key",
    "default_jobs", "job_commands", "listing", "load_paper_values", "make_backend", "out_stem", "paper_module",
    "paper_tables", "paper_value", "parse_added_method", "per_table", "plan", "plot_cells", "plot_curves",
    "render_table", "reproduce", "resolve_scale", "run_grid", "run_params", "select", "verdict", "with_added",
]


def reproduce(paper: str, tables: Sequence[str] = (), scale: str = "reduced", seeds: Sequence[int] | None = None,
              methods: Sequence[str] | None = None, cells: Sequence[str] | None = None, n_jobs: int = 1,
              store_dir: str = "mlruns", overrides: Sequence[str] = (), out_dir: str | None = None,
              results: str | None = None, command: str = "", baseline_seeds: int | None = None,
              render_only: bool = False, added: Sequence[str] = (), backend: Backend | None = None) -> str:
    """Run (or continue) the paper's tables and return their markdown (also logged to each table's parent run and,
    with ``out_dir``, written there with the figures; with ``results``, each table's block in that document is
    replaced, see :mod:`flplat.studies.results_doc`, with ``command`` as the line that made it). ``added``: the
    user's methods, ``"NAME=key=value,..."`` each (:func:`parse_added_method`), run beside the paper's in every
    train table. ``backend``: where the runs run (default: :class:`LocalBackend` with ``n_jobs``;
    :class:`RayBackend`: Ray tasks)."""
    all_tables = paper_tables(paper)
    chosen = select(all_tables, list(tables), "tables", "id")
    extra = [parse_added_method(a) for a in added]
    if extra:
        trains = [t for t in chosen if t.kind == "train"]
        if not trains:
            raise ConfigError(f"--add-method: {', '.join(t.id for t in chosen)} train nothing (analysis tables); "
                              "allowed: a train table (see flplat reproduce --list)")
        chosen = [with_added(t, extra) if t.kind == "train" else t for t in chosen]
        if methods:
            methods = [*methods, *(m.name for m in extra if m.name not in methods)]
    if backend is None and n_jobs > default_jobs():
        raise ConfigError(f"--jobs={n_jobs} is more than the {default_jobs()} cores here; allowed: 1..{default_jobs()}")
    if n_jobs < 1:
        raise ConfigError(f"--jobs={n_jobs}; allowed: 1..{default_jobs()}")
    if baseline_seeds is not None and baseline_seeds < 1:
        raise ConfigError(f"--baseline-seeds={baseline_seeds}; allowed: an integer >= 1")
    if results and not Path(results).resolve().parent.is_dir():
        raise ConfigError(f"--results={results}: its directory does not exist; allowed: a file in an existing "
                          "directory")
    values = load_paper_values(paper)
    experiment = f"reproduce-{paper}"
    # validate every table's grid before any run exists
    plans = {}
    sel = per_table(chosen, methods, cells)
    chosen = [t for t in chosen if t.id in sel]
    for t in chosen:
        sd = list(seeds) if seeds else ([0] if scale == "smoke" else t.seeds)
        t_methods, t_cells = sel[t.id]
        if t.kind == "train":
            plans[t.id] = (sd, plan(paper, t, scale, sd, t_methods, t_cells, overrides, experiment, store_dir,
                                    baseline_seeds), t_methods, t_cells)
        else:
            select(t.cells, t_cells, "cells", "id")
            select(t.methods, [m for m in t_methods or [] if m not in {e.name for e in extra}], "methods", "name")
            if extra:
                print(f"{t.id}: an analysis table (no training): the added methods are not in it", file=sys.stderr)
            plans[t.id] = (sd, None, t_methods, t_cells)
    backend = backend or LocalBackend(n_jobs)
    first = next((jobs[0] for _, jobs, *_ in plans.values() if jobs), None)
    if first is not None and not render_only:  # a cluster's workers must all see the store and the checkpoints
        from flplat.experiment import load_config

        backend.check_shared(load_config(first.config, list(first.overrides)).tracking)
    store = Store(experiment, store_dir)
    with backend:
        return _reproduce_tables(paper, chosen, plans, values, store, scale, baseline_seeds, backend,
                                 render_only, out_dir, results, command, {e.name for e in extra})


def _reproduce_tables(paper, chosen, plans, values, store, scale, baseline_seeds, backend,
                      render_only, out_dir, results, command, added_names=frozenset()) -> str:
    texts = []
    for t in chosen:
        sd, jobs, methods, cells = plans[t.id]
        _, note = resolve_scale(t, scale)
        parent = store.parent(paper, t.id, scale)
        t_start = time.perf_counter()
        status = "FAILED"
        try:
            run_ids: dict[tuple[str, str], list[str]] = {}
            if t.kind == "train":
                ours, run_ids, skips = _collect_train(paper, t, jobs, store, parent, backend, render_only, out_dir,
                                                      out_stem(paper, t.id, scale))
            else:
                ours, skips = _collect_analysis(t, sd, cells, scale, store, parent)
            header = _header(t, values, scale, note, sd, cells, baseline_seeds)
            sel = methods if t.kind == "train" else [m for m in methods or [] if m not in added_names]
            text = render_table(t, values, ours, header, cells, sel or None, skips)
            store.client.log_text(parent, text, f"reproduce/{t.id}.md")
            if t.figure and ours:
                import tempfile

                with tempfile.TemporaryDirectory() as tmp:
                    png = str(Path(out_dir or tmp) / f"{out_stem(paper, t.id, scale)}.png")
                    Path(png).parent.mkdir(parents=True, exist_ok=True)
                    Path(png).unlink(missing_ok=True)  # never log an earlier command's figure
                    t.figure(FigureContext(ours, scale, png, store.client, run_ids, list(sd), jobs or []))
                    if Path(png).is_file():
                        store.client.log_artifact(parent, png, "reproduce")
                    else:  # e.g. Fig. 5 before any Clust-PSI-PFL run has finished
                        print(f"{t.id}: no figure (nothing to draw from the runs finished so far)", file=sys.stderr)
            if out_dir:
                Path(out_dir).mkdir(parents=True, exist_ok=True)
                (Path(out_dir) / f"{out_stem(paper, t.id, scale)}.md").write_text(text)
            if results:
                from flplat.studies.results_doc import run_seconds, timing_line, update_results

                n_runs, run_s = run_seconds(store.client, [r for ids in run_ids.values() for r in ids])
                png = Path(out_dir) / f"{out_stem(paper, t.id, scale)}.png" if out_dir else None
                update_results(results, paper, t.id, scale, text,
                               timing_line(command or f"flplat reproduce {paper} {t.id} --scale {scale}", n_runs,
                                           run_s, None if render_only else time.perf_counter() - t_start),
                               figure=png if png is not None and png.is_file() else None)
            texts.append(text)
            status = "FINISHED"
        except KeyboardInterrupt:
            status = "KILLED"
            raise
        finally:
            store.client.set_terminated(parent, status)
    return "\n".join(texts)


def out_stem(paper: str, table: str, scale: str) -> str:
    """File name (without suffix) of a table's records under ``--out``: ``<paper>_<table>`` at the default scale
    (reduced), ``<paper>_<table>_<scale>`` at another, so one directory holds a table at several scales."""
    return f"{paper}_{table}" if scale == "reduced" else f"{paper}_{table}_{scale}"


def _collect_train(paper: str, t: Table, jobs: list[Job], store: Store, parent: str, n_jobs, render_only: bool,
                   out_dir: str | None, stem: str):
    """Run (or find) a train table's jobs: our values and run ids per (cell, method), the skipped seeds with their
    reasons, and (``out_dir``) the raw per-run records behind the table as JSON lines."""
    ours: dict[tuple[str, str], list[float]] = {}
    run_ids: dict[tuple[str, str], list[str]] = {}
    skips: dict[tuple[str, str], list[tuple[int, str]]] = {}  # (cell, method) -> [(seed, why not run)]
    reasons: dict[str, str] = {}
    metrics = run_grid(paper, t, jobs, store, parent, n_jobs, render_only, reasons)
    row_metric = {m.name: m.metric for m in t.methods}
    col_metric = {c.id: c.metric for c in t.cells}
    records = []
    for j in jobs:
        run_id, m = metrics.get(j.key, (None, {}))
        if run_id is None and j.key in reasons:
            skips.setdefault((j.cell, j.method), []).append((j.seed, reasons[j.key]))
        if run_id:
            run_ids.setdefault((j.cell, j.method), []).append(run_id)
        v = store.value(run_id, m, row_metric[j.method] or col_metric[j.cell] or t.metric)
        if v is not None:
            ours.setdefault((j.cell, j.method), []).append(v)
        if run_id:
            records.append({"table": t.id, "cell": j.cell, "method": j.method, "seed": j.seed,
                            "run_id": run_id, "config_key": j.key, "value": v, "metrics": m})
    if out_dir:  # the raw per-run records behind the table
        import json

        Path(out_dir).mkdir(parents=True, exist_ok=True)
        with open(Path(out_dir) / f"{stem}_runs.jsonl", "w") as fh:
            fh.writelines(json.dumps(r, sort_keys=True) + "\n" for r in records)
    return ours, run_ids, skips


def _collect_analysis(t: Table, sd: Sequence[int], cells, scale: str, store: Store, parent: str):
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


def _header(t: Table, values: dict, scale: str, note: str, sd: Sequence[int], cells,
            baseline_seeds: int | None) -> str:
    """The line above a table: the paper's source, the scale's reductions, the seeds, substitutes and cell notes."""
    src = values.get("tables", {}).get(t.id, {}).get("source", "")
    subs = [t.substitute] if t.substitute else [f"{c.id}: {c.substitute}" for c in t.cells if c.substitute]
    seeds_note = ", ".join(map(str, sd))
    if t.kind == "train" and baseline_seeds is not None and baseline_seeds < len(sd):
        full = [m.name for m in t.methods if t.all_seeds(m.name)]
        seeds_note += (f" for {', '.join(full)}; {', '.join(map(str, sd[:baseline_seeds]))} for the other "
                       "methods (CPU time)")
    cell_notes = [f"{c.id}: {c.note}" for c in select(t.cells, cells, "cells", "id") if c.note]
    added = [f"{m.name} ({' '.join(m.overrides)})" for m in t.methods if m.added]
    return (f"Paper: {src}. Scale `{scale}`: {note}. Seeds: {seeds_note}." +
            (f" The paper's dataset differs ({'; '.join(subs)}): only its claim is judged." if subs else "") +
            (f" Per cell: {'; '.join(cell_notes)}." if cell_notes else "") +
            (f" Added methods (not in the paper, no paper value): {'; '.join(added)}." if added else ""))


def listing() -> str:
    """Every paper's tables, their datasets, cells and methods, and the cells that run nothing with the reason
    (``flplat reproduce --list``)."""
    lines = []
    for p in PAPERS:
        lines.append(f"{p}:")
        for t in paper_tables(p):
            lines.append(f"  {t.id} [{t.kind}] {t.title}")
            lines.append(f"    datasets: {', '.join(t.data_names())}")
            lines.append(f"    cells: {', '.join(c.id for c in t.cells)}")
            lines.append(f"    methods: {', '.join(m.name for m in t.methods)}")
            waiting: dict[str, list[str]] = {}
            for cid, why in t.undefined.items():
                waiting.setdefault(why, []).append(cid)
            for why, cids in waiting.items():
                lines.append(f"    no run for {', '.join(cids)}: {why}")
    return "\n".join(lines)
