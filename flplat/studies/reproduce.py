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
  stands against the table's reference. ``--jobs N`` runs cells in N worker processes with one thread each. A
  *pooled cell* (``Cell.members``: a paper's mean over shift types or levels, e.g. Flux's Tables 8, 51 and 63) is
  one run per member, method and seed, its value over all of them; with ``Cell.per_seed`` its value for a seed is
  the mean of its members' values (none, with the first missing member's reason, while a member has none), the std
  then over the seeds. Its members are the runs of the per-member cells of other tables when their configs resolve
  the same. A cell's metric ``NAME@sum`` is the sum of NAME over the run's rounds (a run's time).
* ``analysis``: no training (CBCC's IID detection, PQFed's EMD curve); a function of (cell, seed) that returns
  one number per row ("method"), logged on the parent run.
* ``derived``: no runs of its own; each cell is, per seed and method, the mean of other tables' cells (``parts``:
  Flux's Tables 10/11 average its per-shift tables per level, its Table 1 over shifts and levels). Its jobs are its
  parts' jobs (the same hashes, so the same runs as the component tables'); a seed where some part has no value is
  "incomplete" with a note naming the missing parts, never a mean of the parts that are there
  (:mod:`flplat.studies.reproduction.derived`).

Runs of other code. A run's config hash says what it computes, not which code computed it: every run also records
its code identity (flplat's source hash, the plugins' hashes: :mod:`flplat.tracking.provenance`). A finished run
whose identity differs from the one its job would have now (or that recorded none, "unknown code") is *used, counted
and marked*: one line on stderr and one in the table's header say how many of the table's runs come from other
code, each cell that holds such runs says how many, and ``--rerun-stale`` trains them again (the old run is tagged
``flplat.superseded_by`` the new one). Used rather than re-trained by default because any change to flplat's Python
code changes the identity: re-training every grid after each commit would cost hours for numbers that mostly do not
move, while the marks say which numbers a change could have moved and one flag makes them current.

Exit status: 0 when every table was rendered and every row has a value or a run; 1 when a run failed (after the
others finished) or when every run of some row of a train table was refused before it started (skipped with a
reason: its config failed while its run was prepared, e.g. a value only the method's ``init_state`` checks, or its
data are absent; :class:`RowsRefused`: the tables are printed, then one line per such row); 2 for bad input.

Scales: ``smoke`` (seconds per cell: tiny data, 2 rounds, the MLP; for CI), ``reduced`` (a whole table in hours on
2 CPU cores; the table's ``reduced`` overrides, stated in the output's header) and ``paper`` (the ready config as
is: the paper's model, rounds, epochs, clients). Overrides given on the command line come last.

The output per table (markdown, logged to the parent run as ``reproduce/<table>.md``): a header (the paper's
source, the scale, the seeds, which number a cell holds derived from the table's metrics:
:func:`~flplat.studies.reproduction.render.value_note`, and the runs of other code), then per cell and method, the
paper's value | ours mean ± std (n seeds) | difference | verdict. A seed without a value is "not run" (no run
exists), "skipped" (refused before it started, with the reason), "failed" (the run ended with an error) or
"finished without a value" / "finished, clustering never started" (for τ and ARI: a clustered method that formed no
clusters), each with a numbered note. The verdict has two parts:

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

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from flplat.config_io import config_key  # the hash that identifies a run
from flplat.errors import ConfigError, RunFailed
from flplat.studies.reproduction.collect import Collected, collect_analysis, collect_train
from flplat.studies.reproduction.derived import collect_derived, derive, derived_plan
from flplat.studies.reproduction.execute import (
    Backend,
    LocalBackend,
    Progress,
    RayBackend,
    default_jobs,
    make_backend,
    run_grid,
)
from flplat.studies.reproduction.figures import plot_cells, plot_curves, plot_series
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
from flplat.studies.reproduction.importing import import_records
from flplat.studies.reproduction.jobs import job_commands
from flplat.studies.reproduction.records import complete, record_stem, write_records
from flplat.studies.reproduction.render import describe_metric, render_table, table_header, value_note, verdict
from flplat.studies.reproduction.store import NO_CONFIG, Store, compatible, run_params
from flplat.studies.reproduction.values import (
    NOT_REPORTED,
    VALUES_DIR,
    check_paper_values,
    load_paper_values,
    paper_value,
)

__all__ = [
    "PAPERS", "REPO", "SCALES", "NOT_REPORTED", "VALUES_DIR", "Backend", "Cell", "FigureContext", "Job", "LocalBackend",
    "Method", "Progress", "RayBackend", "RowsRefused", "Store", "Table", "check_paper_values", "compatible",
    "config_key", "default_jobs", "derive", "derived_plan", "describe_metric", "import_records", "job_commands",
    "listing", "load_paper_values", "make_backend", "out_stem", "paper_module", "paper_tables", "paper_value",
    "parse_added_method", "per_table", "plan", "plot_cells", "plot_curves", "plot_series", "render_table", "reproduce",
    "resolve_scale", "run_grid", "run_params", "select", "table_header", "value_note", "verdict", "with_added",
]


class RowsRefused(RunFailed):
    """Every run of some row of a train table was refused before it started (skipped with a reason: its config
    failed while the run was prepared, e.g. a value only the method's ``init_state`` checks, or its data are
    absent). ``text``: the tables, rendered as usual; ``rows``: one line per such row with the reason (the CLI
    prints the tables, then the lines on stderr, and exits 1)."""

    def __init__(self, text: str, rows: list[str]):
        super().__init__(f"{len(rows)} row(s) without any run: " + " | ".join(rows))
        self.text, self.rows = text, rows


def reproduce(paper: str, tables: Sequence[str] = (), scale: str = "reduced", seeds: Sequence[int] | None = None,
              methods: Sequence[str] | None = None, cells: Sequence[str] | None = None, n_jobs: int = 1,
              store_dir: str = "mlruns", overrides: Sequence[str] = (), out_dir: str | None = None,
              results: str | None = None, command: str = "", baseline_seeds: int | None = None,
              render_only: bool = False, added: Sequence[str] = (), backend: Backend | None = None,
              rerun_stale: bool = False, records: Sequence[str] = ()) -> str:
    """Run (or continue) the paper's tables and return their markdown (also logged to each table's parent run and,
    with ``out_dir``, written there with the figures; with ``results``, each table's block in that document is
    replaced, see :mod:`flplat.studies.results_doc`, with ``command`` as the line that made it). ``added``: the
    user's methods, ``"NAME=key=value,..."`` each (:func:`parse_added_method`), run beside the paper's in every
    train table. ``backend``: where the runs run (default: :class:`LocalBackend` with ``n_jobs``;
    :class:`RayBackend`: Ray tasks). ``rerun_stale``: train again the jobs whose finished run comes from other code
    (by default such runs are used, counted and marked). ``records``: run records (files or directories of
    ``--out``'s ``*_runs.jsonl``) imported into the store once the grid is checked, before it runs
    (:func:`import_records`). Raises :class:`RowsRefused` (with the tables) when every run of some row of a train
    table was refused before it started."""
    all_tables = paper_tables(paper)
    chosen = select(all_tables, list(tables), "tables", "id")
    extra = [parse_added_method(a) for a in added]
    if extra:
        trains = [t for t in chosen if t.kind == "train"]
        if not trains:
            raise ConfigError(f"--add-method: {', '.join(t.id for t in chosen)} train nothing of their own "
                              "(analysis or derived tables); allowed: a train table (see flplat reproduce --list)")
        chosen = [with_added(t, extra) if t.kind == "train" else t for t in chosen]
        if methods:
            methods = [*methods, *(m.name for m in extra if m.name not in methods)]
    _check_options(backend, n_jobs, baseline_seeds, results, rerun_stale, render_only)
    values = load_paper_values(paper)
    experiment = f"reproduce-{paper}"
    # validate every table's grid before any run exists
    sel = per_table(chosen, methods, cells)
    chosen = [t for t in chosen if t.id in sel]
    plans = {t.id: _plan_table(paper, t, scale, seeds, sel[t.id], overrides, experiment, store_dir, baseline_seeds,
                               extra) for t in chosen}
    if records:  # the chosen tables' own records first (and a derived table's parts'): they win disagreements
        own = [*(t.id for t in chosen), *(p.id for t in chosen if t.kind == "derived"
                                          for comps in t.parts_at(scale).values() for p, _ in comps)]
        for line in import_records(records, store_dir, overrides, [record_stem(paper, i, scale) for i in own]).lines:
            print(line, file=sys.stderr)
    backend = backend or LocalBackend(n_jobs)
    first = next((jobs[0] for _, jobs, *_ in plans.values() if jobs), None)
    if first is not None and not render_only:  # a cluster's workers must all see the store and the checkpoints
        from flplat.experiment import load_config

        backend.check_shared(load_config(first.config, list(first.overrides)).tracking)
    store = Store(experiment, store_dir)
    opts = _Options(scale, baseline_seeds, render_only, out_dir, results, command, rerun_stale)
    refused: list[str] = []
    with backend:
        text = _reproduce_tables(paper, chosen, plans, values, store, backend, opts, {e.name for e in extra},
                                 refused)
    if refused:
        raise RowsRefused(text, refused)
    return text


def _check_options(backend, n_jobs: int, baseline_seeds: int | None, results: str | None, rerun_stale: bool,
                   render_only: bool) -> None:
    """One-line errors for :func:`reproduce`'s options, before anything is planned."""
    if backend is None and n_jobs > default_jobs():
        raise ConfigError(f"--jobs={n_jobs} is more than the {default_jobs()} cores here; allowed: 1..{default_jobs()}")
    if n_jobs < 1:
        raise ConfigError(f"--jobs={n_jobs}; allowed: 1..{default_jobs()}")
    if baseline_seeds is not None and baseline_seeds < 1:
        raise ConfigError(f"--baseline-seeds={baseline_seeds}; allowed: an integer >= 1")
    if results and not Path(results).resolve().parent.is_dir():
        raise ConfigError(f"--results={results}: its directory does not exist; allowed: a file in an existing "
                          "directory")
    if rerun_stale and render_only:
        raise ConfigError("--rerun-stale trains, --render-only trains nothing; allowed: one of them")


def _plan_table(paper: str, t: Table, scale: str, seeds: Sequence[int] | None, selected: tuple, overrides,
                experiment: str, store_dir: str, baseline_seeds: int | None, extra: list) -> tuple:
    """``(seeds, jobs or None, methods, cells)`` of one chosen table, its grid validated before any run exists."""
    sd = list(seeds) if seeds else ([0] if scale == "smoke" else t.seeds)
    t_methods, t_cells = selected
    if t.kind in ("train", "derived"):
        planner = plan if t.kind == "train" else derived_plan
        jobs = planner(paper, t, scale, sd, t_methods, t_cells, overrides, experiment, store_dir, baseline_seeds)
        if extra and t.kind == "derived":
            print(f"{t.id}: a derived table (means of other tables' cells): the added methods are not in it",
                  file=sys.stderr)
        return (sd, jobs, t_methods, t_cells)
    select(t.cells, t_cells, "cells", "id")
    select(t.methods, [m for m in t_methods or [] if m not in {e.name for e in extra}], "methods", "name")
    if extra:
        print(f"{t.id}: an analysis table (no training): the added methods are not in it", file=sys.stderr)
    return (sd, None, t_methods, t_cells)


@dataclass
class _Options:
    """What the command asked for beyond the grid (see :func:`reproduce`)."""

    scale: str
    baseline_seeds: int | None
    render_only: bool
    out_dir: str | None
    results: str | None
    command: str
    rerun_stale: bool


def _reproduce_tables(paper, chosen, plans, values, store, backend, o: _Options, added_names=frozenset(),
                      refused: list[str] | None = None) -> str:
    """Each table in turn: run (or read) its values, render it and log it to its parent run, write its files; the
    rows of train tables without any run (every run refused) are added to ``refused``."""
    texts = []
    for t in chosen:
        sd, jobs, methods, cells = plans[t.id]
        _, note = resolve_scale(t, o.scale)
        parent = store.parent(paper, t.id, o.scale)
        t_start = time.perf_counter()
        status = "FAILED"
        try:
            got = Collected()
            if t.kind == "train":
                got = collect_train(paper, t, jobs, store, parent, backend, o.render_only, o.rerun_stale)
            elif t.kind == "derived":
                got = collect_derived(paper, t, jobs, store, parent, backend, o.scale, sd, methods, cells,
                                      o.render_only, o.rerun_stale)
            else:
                got.ours, got.skips = collect_analysis(t, sd, cells, o.scale, store, parent)
            header = table_header(t, values, o.scale, note, sd, cells, methods, o.baseline_seeds,
                                  (len(got.stale_ids), got.n_runs,
                                   sum(why == NO_CONFIG for why in got.stale_ids.values())))
            sel = methods if t.kind != "analysis" else [m for m in methods or [] if m not in added_names]
            text = render_table(t, values, got.ours, header, cells, sel or None, got.skips, got.stale)
            store.client.log_text(parent, text, f"reproduce/{t.id}.md")
            _publish(paper, t, text, got, store, parent, o, t_start, list(sd), jobs or [], values)
            texts.append(text)
            if refused is not None:
                refused += got.refused
            status = "FINISHED"
        except KeyboardInterrupt:
            status = "KILLED"
            raise
        finally:
            store.client.set_terminated(parent, status)
    return "\n".join(texts)


def _publish(paper: str, t: Table, text: str, got: Collected, store: Store, parent: str, o: _Options,
             t_start: float, seeds: list, jobs: list, values: dict | None = None) -> None:
    """A table's figure (logged to ``parent``; with ``--out`` written there beside the markdown and the run records,
    which carry what the figure read; drawn from our values, with the paper's numbers where it shows them) and its
    block in the ``--results`` document."""
    stem = out_stem(paper, t.id, o.scale)
    ctx = None
    if t.figure and got.ours:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            png = str(Path(o.out_dir or tmp) / f"{stem}.png")
            Path(png).parent.mkdir(parents=True, exist_ok=True)
            Path(png).unlink(missing_ok=True)  # never log an earlier command's figure
            reported = {(c.id, m.name): paper_value(values or {}, t.id, c.id, m.name)[0] for c in t.cells
                        for m in t.methods}
            ctx = FigureContext(got.ours, o.scale, png, store.client, got.run_ids, seeds, jobs,
                                {k: v for k, v in reported.items() if v is not None})
            t.figure(ctx)
            if Path(png).is_file():
                store.client.log_artifact(parent, png, "reproduce")
            else:  # e.g. Fig. 5 before any Clust-PSI-PFL run has finished
                print(f"{t.id}: no figure (nothing to draw from the runs finished so far)", file=sys.stderr)
    if o.out_dir:
        Path(o.out_dir).mkdir(parents=True, exist_ok=True)
        (Path(o.out_dir) / f"{stem}.md").write_text(text)
        if t.kind != "analysis":
            write_records(o.out_dir, stem, complete(got.records, store.client, paper, o.scale,
                                                    f"{paper}/{t.id}@{o.scale}", ctx.read if ctx else None,
                                                    ctx.read_artifacts if ctx else None))
    if o.results:
        from flplat.studies.results_doc import run_seconds, timing_line, update_results

        n_runs, run_s, untimed = run_seconds(store.client, [r for ids in got.run_ids.values() for r in ids])
        png = Path(o.out_dir) / f"{stem}.png" if o.out_dir else None
        update_results(o.results, paper, t.id, o.scale, text,
                       timing_line(o.command or f"flplat reproduce {paper} {t.id} --scale {o.scale}", n_runs,
                                   run_s, None if o.render_only else time.perf_counter() - t_start, untimed),
                       figure=png if png is not None and png.is_file() else None)


def out_stem(paper: str, table: str, scale: str) -> str:
    """File name (without suffix) of a table's records under ``--out``: ``<paper>_<table>`` at the default scale
    (reduced), ``<paper>_<table>_<scale>`` at another, so one directory holds a table at several scales."""
    return record_stem(paper, table, scale)


def listing() -> str:
    """Every paper's tables, their datasets, where the paper's numbers come from, the tables a derived table
    averages, cells and methods, and the cells that run nothing with the reason (``flplat reproduce --list``)."""
    lines = []
    for p in PAPERS:
        lines.append(f"{p}:")
        sources = load_paper_values(p).get("tables", {})
        for t in paper_tables(p):
            lines.append(f"  {t.id} [{t.kind}] {t.title}")
            lines.append(f"    datasets: {', '.join(t.data_names())}")
            lines.append(f"    paper: {sources.get(t.id, {}).get('source') or 'no values file entry'}")
            if t.kind == "derived":
                n = {}
                for part in t.parts.values():
                    for tbl, cid in part:
                        n.setdefault(tbl.id, set()).add(cid)
                lines.append(f"    means of: {', '.join(f'{tid} ({len(c)} cells)' for tid, c in n.items())}")
            lines.append(f"    cells: {', '.join(c.id for c in t.cells)}")
            lines.append(f"    methods: {', '.join(m.name for m in t.methods)}")
            waiting: dict[str, list[str]] = {}
            for cid, why in t.undefined.items():
                waiting.setdefault(why, []).append(cid)
            for why, cids in waiting.items():
                lines.append(f"    no run for {', '.join(cids)}: {why}")
    return "\n".join(lines + _item_checklist())


def _item_checklist() -> list[str]:
    """The papers' numbered items (flplat.studies.papers.items) against the tables defined above."""
    from flplat.studies.papers.items import coverage_lines, item_lines

    known = {p: {t.id: {c.id for c in t.cells} for t in paper_tables(p)} for p in PAPERS}
    lines = ["", "numbered items:"]
    for p in PAPERS:
        lines += [f"{p}:", *item_lines(p)]
    return lines + ["", *coverage_lines(known)]
