"""`flplat reproduce`: the five papers' tables and figures as grids of runs, with the papers' numbers beside ours.

A paper is a module in :mod:`flplat.studies.papers` that lists its :class:`Table` s; the numbers the paper reports
are data, ``configs/papers/<paper>.yaml`` (see :func:`load_paper_values`). A table is

* ``train``: cells (a ready config under ``configs/`` plus overrides) × methods (overrides) × seeds; each one run
  of :func:`flplat.experiment.run`, an MLflow run nested under one parent run per table and scale. A run is
  identified by the hash of its resolved config (without ``tracking.*`` and ``fabric.num_threads``, which do not
  change the result): re-running the command skips every run already FINISHED with the same hash, so an
  interrupted grid continues where it stopped (its interrupted run from its last checkpoint, in the same MLflow
  run: :func:`flplat.experiment.run_or_resume`), and two tables that share cells (Flux's known-association and
  test-phase tables) share runs. ``--jobs N`` runs cells in N worker processes with one thread each.
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
"""

from __future__ import annotations

import importlib
import math
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from flplat.config import config_key  # noqa: F401  (the hash that identifies a run; re-exported)
from flplat.errors import ConfigError

PAPERS = ("clust-psi-pfl", "cafa", "dapfl", "flux", "pqfed")
SCALES = ("smoke", "reduced", "paper")
REPO = Path(__file__).resolve().parents[2]
VALUES_DIR = REPO / "configs" / "papers"
NOT_REPORTED = "not reported"


@dataclass
class Method:
    """One row of a table: a name as in the paper's table and the config overrides that select it; ``{name}`` in an
    override is filled from the cell's ``params`` (e.g. IFCA's k, which DA-PFL sets per number of clients)."""

    name: str
    overrides: list[str] = field(default_factory=list)
    metric: str | None = None  # this row's run metric when it is not the table's (PQFed's IFCA: global_accuracy)
    config: str | None = None  # this row's ready config when it is not the cell's (PQFed's IFCA: the baseline one)


@dataclass
class Cell:
    """One column of a table: a ready config (relative to the repository) plus overrides, or, for an analysis
    table, just its parameters in ``params``."""

    id: str
    config: str | None = None
    overrides: list[str] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    substitute: str | None = None  # this cell runs another dataset than the paper's (see Table.substitute)
    metric: str | None = None  # this column's run metric when it is not the table's; ``NAME@STEP``: the value of the
    #                            metric NAME logged at step STEP (a series, e.g. CAFA's windowed accuracy)


@dataclass
class FigureContext:
    """What a table's figure is drawn from: our values, the runs behind them (train tables) and where to write."""

    ours: dict[tuple[str, str], list[float]]
    scale: str
    path: str
    client: Any = None  # an MlflowClient on the store
    runs: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # (cell, method) -> run ids

    def history(self, run_id: str, metric: str) -> list[tuple[int, float]]:
        return sorted((m.step, m.value) for m in self.client.get_metric_history(run_id, metric))


@dataclass
class Table:
    """A paper's table or figure reproduced as a grid (see the module docstring)."""

    id: str
    title: str
    cells: list[Cell]
    methods: list[Method]
    metric: str = "global_accuracy"  # a run metric (train tables)
    kind: str = "train"  # train | analysis
    reference: str | None = "FedAvg"  # the method every claim is measured against (None: no claim part)
    higher_is_better: bool = True
    scale_factor: float = 1.0  # ours × scale_factor is in the paper's unit (100 for percent)
    tie: float = 0.005  # in our unit: gaps within this count as ties; the tolerance when no std is known
    substitute: str | None = None  # the paper ran another dataset: values are not comparable, only the claim
    scales: dict[str, list[str]] = field(default_factory=dict)  # smoke / reduced overrides for every run
    notes: dict[str, str] = field(default_factory=dict)  # per scale: the reductions, stated in the header
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # the paper's seeds at scale paper
    analyze: Callable[[Cell, int, str], dict[str, float]] | None = None  # analysis: (cell, seed, scale) -> rows
    figure: Callable[[FigureContext], None] | None = None  # writes a PNG to ctx.path
    focus: list[str] | None = None  # the methods the paper's claim is about (default: the table's last method)

    def all_seeds(self, method: str) -> bool:
        """Whether ``method`` runs every seed under ``--baseline-seeds`` (the reference and the focus methods)."""
        return method == self.reference or method in (self.focus or [self.methods[-1].name])


def paper_module(paper: str):
    if paper not in PAPERS:
        raise ConfigError(f"paper {paper!r} is unknown; allowed: {', '.join(PAPERS)}")
    return importlib.import_module(f"flplat.studies.papers.{paper.replace('-', '_')}")


def paper_tables(paper: str) -> list[Table]:
    return list(paper_module(paper).TABLES)


# ---------------------------------------------------------------------------------------------------- paper values
def load_paper_values(paper: str, root: Path | None = None) -> dict[str, Any]:
    """``configs/papers/<paper>.yaml``: ``{paper, seed, tables: {table id: {source, values: {cell: {method: V}}}}}``
    where V is a number (no spread given), ``[mean, std]``, or a string saying why there is no number
    (``not reported``, ``infeasible`` ...); a table's ``default`` (a reason string) stands for every cell it does not
    list (a figure without numbers)."""
    path = (root or VALUES_DIR) / f"{paper}.yaml"
    if not path.is_file():
        raise ConfigError(f"no paper values file {path}")
    return OmegaConf.to_container(OmegaConf.load(path), resolve=True)


def paper_value(values: dict[str, Any], table: str, cell: str, method: str) -> tuple[float | None, float | None, str]:
    """(mean, std, text) of the paper's value; mean None with the reason in text when the paper gives none."""
    entry = values.get("tables", {}).get(table, {})
    v = (entry.get("values") or {}).get(cell, {}).get(method, entry.get("default", NOT_REPORTED))
    if isinstance(v, str):
        return None, None, v
    if isinstance(v, list):
        return float(v[0]), float(v[1]), f"{v[0]:g} ± {v[1]:g}"
    return float(v), None, f"{v:g}"


def check_paper_values(paper: str, root: Path | None = None) -> list[str]:
    """Problems in the paper's values file against its table definitions (empty when it is well formed): every
    (table, cell, method) of a definition has an entry (a number, [mean, std] or an explicit reason string)."""
    values = load_paper_values(paper, root)
    errs = []
    if values.get("paper") != paper:
        errs.append(f"{paper}: field 'paper' is {values.get('paper')!r}")
    tabs = values.get("tables") or {}
    for t in paper_tables(paper):
        entry = tabs.get(t.id)
        if entry is None:
            errs.append(f"{paper}: table {t.id} missing")
            continue
        if not entry.get("source"):
            errs.append(f"{paper}/{t.id}: no 'source' (the paper's table/figure id)")
        vals = entry.get("values") or {}
        for c in t.cells:
            for m in t.methods:
                v = (vals.get(c.id) or {}).get(m.name, entry.get("default"))
                ok = (isinstance(v, str) and v.strip()) or isinstance(v, (int, float)) and not isinstance(v, bool) \
                    or (isinstance(v, list) and len(v) == 2 and all(isinstance(x, (int, float)) for x in v))
                if not ok:
                    errs.append(f"{paper}/{t.id}: cell {c.id} method {m.name}: {v!r} is not a number, "
                                "[mean, std] or a reason")
    return errs


# ---------------------------------------------------------------------------------------------------- verdicts
def _sign(x: float, tie: float) -> int:
    return 0 if abs(x) <= tie else (1 if x > 0 else -1)


def verdict(paper_mean: float | None, paper_std: float | None, ours: Sequence[float], paper_ref: float | None,
            ours_ref: Sequence[float] | None, *, is_reference: bool, tie: float, higher_is_better: bool = True,
            comparable: bool = True) -> str:
    """The verdict text of one cell (all numbers in the paper's unit; see the module docstring)."""
    parts = []
    if not ours:
        return "not run"
    mean = statistics.fmean(ours)
    if is_reference:
        parts.append("reference")
    elif paper_mean is not None and paper_ref is not None and ours_ref:
        sp = _sign(paper_mean - paper_ref, tie)
        so = _sign(mean - statistics.fmean(ours_ref), tie)
        word = {1: "above", -1: "below", 0: "tied with"}
        if not higher_is_better:
            word = {1: "above (worse)", -1: "below (better)", 0: "tied with"}
        parts.append(f"claim holds ({word[so]} ref.)" if sp == so else
                     f"claim fails (paper {word[sp]} ref., ours {word[so]})")
    if comparable and paper_mean is not None:
        so = statistics.pstdev(ours) if len(ours) > 1 else 0.0
        tol = 2 * math.sqrt((paper_std or 0.0) ** 2 + so ** 2)
        tol = tol if tol > 0 else tie
        parts.append("within spread" if abs(mean - paper_mean) <= tol else "outside spread")
    elif not comparable:
        parts.append("other dataset")
    return "; ".join(parts) if parts else "no paper value"


def render_table(table: Table, paper_vals: dict[str, Any], ours: dict[tuple[str, str], list[float]],
                 header: str, cells: Sequence[str] | None = None, methods: Sequence[str] | None = None) -> str:
    """Markdown: one row per cell × method (of the selection): paper | ours mean ± std (n) | difference | verdict,
    then how many claims held and how many of our values were within the paper's spread."""
    f = table.scale_factor
    lines = [f"### {table.title}", "", header, "",
             "| cell | method | paper | ours (mean ± std, n) | difference | verdict |", "|---|---|---|---|---|---|"]
    verdicts = []
    for c in select(table.cells, cells, "cells", "id"):
        ref_vals = [v * f for v in ours.get((c.id, table.reference), [])] if table.reference else None
        pref = paper_value(paper_vals, table.id, c.id, table.reference)[0] if table.reference else None
        comparable = (c.substitute or table.substitute) is None
        for m in select(table.methods, methods, "methods", "name"):
            pm, ps, ptext = paper_value(paper_vals, table.id, c.id, m.name)
            vals = [v * f for v in ours.get((c.id, m.name), [])]
            if vals:
                mean = statistics.fmean(vals)
                sd = statistics.pstdev(vals) if len(vals) > 1 else 0.0
                otext = f"{mean:.4g} ± {sd:.2g} ({len(vals)})"
                diff = f"{mean - pm:+.3g}" if pm is not None and comparable else "—"
            else:
                otext, diff = "—", "—"
            v = verdict(pm, ps, vals, pref, ref_vals, is_reference=m.name == table.reference, tie=table.tie * f,
                        higher_is_better=table.higher_is_better, comparable=comparable)
            lines.append(f"| {c.id} | {m.name} | {ptext} | {otext} | {diff} | {v} |")
            verdicts.append(v)
    count = {k: sum(k in v for v in verdicts) for k in ("claim holds", "claim fails", "within spread",
                                                          "outside spread")}
    lines += ["", f"Claims: {count['claim holds']} hold, {count['claim fails']} fail. Values: {count['within spread']} "
                  f"within the paper's spread, {count['outside spread']} outside."]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------- the grid
@dataclass
class Job:
    table: str
    cell: str
    method: str
    seed: int
    config: str | None
    overrides: list[str]
    key: str  # hash of the resolved config


def run_params(cfg) -> dict[str, str]:
    """The config as the run logs it (MLflow params: dotted keys, string values), without what :func:`config_key`
    leaves out."""
    from flplat.config import flatten, loggable

    return {k: str(v)[:6000] for k, v in flatten(loggable(cfg)).items() if not _outside_key(k)}


def _outside_key(key: str) -> bool:
    return key.startswith(("tracking.", "algorithm_unused.")) or key == "fabric.num_threads"


def compatible(new: dict[str, str], old: dict[str, str], defaults: dict[str, str]) -> list[str] | None:
    """Whether a finished run with params ``old`` stands for a run of params ``new`` whose hash it lacks (it was
    made before flplat gained config keys): every key of ``old`` has the same value in ``new``, and the keys only
    ``new`` has hold their default values (``defaults``: the params of the default config of the same algorithm).
    Returns the added keys, or None when the run does not stand for it (a key changed, was removed, or a new key is
    set away from its default)."""
    new = {k: v for k, v in new.items() if not _outside_key(k)}
    old = {k: v for k, v in old.items() if not _outside_key(k)}
    if set(old) - set(new) or any(old[k] != new[k] for k in old):
        return None
    added = sorted(set(new) - set(old))
    if any(defaults.get(k) != new[k] for k in added):
        return None
    return added


def select(items, names: Sequence[str] | None, what: str, attr: str):
    if not names:
        return list(items)
    known = {getattr(i, attr): i for i in items}
    bad = [n for n in names if n not in known]
    if bad:
        raise ConfigError(f"--{what}={','.join(bad)} unknown; allowed: {', '.join(known)}")
    return [known[n] for n in names]


def _fill(text: str, params: dict[str, Any]) -> str:
    for k, v in params.items():
        text = text.replace("{" + k + "}", str(v))
    return text


def resolve_scale(table: Table, scale: str) -> tuple[list[str], str]:
    if scale not in SCALES:
        raise ConfigError(f"--scale={scale!r}; allowed: {', '.join(SCALES)}")
    over = [] if scale == "paper" else list(table.scales.get(scale, []))
    note = table.notes.get(scale) or ("the paper's setting (the ready configs as they are)" if scale == "paper"
                                      else "overrides: " + (" ".join(over) or "none"))
    return over, note


def plan(paper: str, table: Table, scale: str, seeds: Sequence[int], methods, cells, extra: Sequence[str],
         experiment: str, store_dir: str, baseline_seeds: int | None = None) -> list[Job]:
    """Every job of a train table, each config validated before anything runs (bad input: ConfigError). With
    ``baseline_seeds`` = n, methods other than the reference and the table's focus run only the first n seeds."""
    from flplat.experiment import load_config

    over_scale, _ = resolve_scale(table, scale)
    jobs = []
    for c in select(table.cells, cells, "cells", "id"):
        for m in select(table.methods, methods, "methods", "name"):
            for s in (seeds if baseline_seeds is None or table.all_seeds(m.name) else seeds[:baseline_seeds]):
                over = [*c.overrides, *(_fill(o, c.params) for o in m.overrides), *over_scale, *extra, f"seed={s}",
                        f"tracking.experiment={experiment}", f"tracking.store_dir={store_dir}",
                        f"tracking.run_name={table.id}/{c.id}/{m.name}/s{s}"]
                path = str(REPO / (m.config or c.config)) if (m.config or c.config) else None
                cfg = load_config(path, over)
                jobs.append(Job(table.id, c.id, m.name, s, path, over, config_key(cfg)))
    return jobs


def _run_job(job: Job, parent: str | None, threads: int | None) -> tuple[str, dict[str, float], str | None, float]:
    """One run (in this process or a worker); returns (key, metrics, run id, seconds). A run of the same config
    interrupted before (KILLED, FAILED, stale RUNNING) continues from its checkpoint (``run_or_resume``)."""
    from flplat.experiment import load_config, run_or_resume

    over = list(job.overrides)
    if threads:
        over.append(f"fabric.num_threads={threads}")
    if parent:
        over.append(f"tracking.parent_run_id={parent}")
    cfg = load_config(job.config, over)
    t0 = time.perf_counter()
    try:
        summary, run_id = run_or_resume(cfg, progress=False)
    except ConfigError as e:  # found while preparing the run, e.g. an infeasible partition: skip this run only
        return job.key, None, str(e), time.perf_counter() - t0
    # the last round's metrics and the run-level summaries (logged at the last step too), as Store.finished reads
    # them back: a table's metric such as mean_local_accuracy_last10 is there on the first run as on a re-run
    return job.key, {**summary.metrics, **summary.final}, run_id, time.perf_counter() - t0


class Store:
    """The MLflow side of a reproduction: the experiment, the parent run per table, finished runs by hash."""

    def __init__(self, experiment: str, store_dir: str):
        from mlflow.tracking import MlflowClient

        from flplat.tracking.runs import store_uris

        uri, artifacts = store_uris(None, store_dir)
        self.client = MlflowClient(tracking_uri=uri)
        exp = self.client.get_experiment_by_name(experiment)
        self.exp_id = exp.experiment_id if exp else self.client.create_experiment(experiment,
                                                                                 artifact_location=artifacts)

    def _search(self, filt: str) -> list:
        out, token = [], None
        while True:
            page = self.client.search_runs([self.exp_id], filt, max_results=1000, page_token=token)
            out += list(page)
            token = page.token
            if not token:
                return out

    def finished(self, paper: str) -> dict[str, tuple[str, dict[str, float]]]:
        """(run id, metrics) of the FINISHED runs of this paper's reproduction, by config hash (the newest wins)."""
        runs = self._search(f"attributes.status = 'FINISHED' and tags.`flplat.reproduce.paper` = '{paper}'")
        runs.sort(key=lambda r: r.info.start_time)
        return {r.data.tags["flplat.reproduce.key"]: (r.info.run_id, dict(r.data.metrics)) for r in runs
                if "flplat.reproduce.key" in r.data.tags}

    def match_older(self, paper: str, todo: list[Job], done: dict[str, tuple[str, dict[str, float]]]) -> list[Job]:
        """The jobs of ``todo`` that no finished run stands for. A FINISHED run of this paper whose hash no longer
        matches (made before flplat gained config keys) stands for a job when :func:`compatible` says so: it is
        re-tagged with the job's hash, added to ``done`` and reported in one line."""
        if not todo:
            return todo
        from flplat.experiment import load_config

        # a run of the current flplat with the same params has the job's hash (it would be in ``done``): only runs
        # of an earlier flplat can match here
        older = self._search(f"attributes.status = 'FINISHED' and tags.`flplat.reproduce.paper` = '{paper}'")
        if not older:
            return todo
        defaults: dict[str, dict[str, str]] = {}
        left = []
        for j in todo:
            params = run_params(load_config(j.config, list(j.overrides)))
            name = params.get("algorithm.name", "")
            if name not in defaults:
                defaults[name] = run_params(load_config(None, [f"algorithm.name={name}"]))
            match = None
            for r in older:
                if r.data.params.get("seed") == params.get("seed") and \
                        r.data.params.get("algorithm.name") == name:
                    added = compatible(params, r.data.params, defaults[name])
                    if added is not None:
                        match = (r, added)
                        break
            if match is None:
                left.append(j)
                continue
            r, added = match
            self.client.set_tag(r.info.run_id, "flplat.reproduce.key", j.key)
            older.remove(r)
            done[j.key] = (r.info.run_id, dict(r.data.metrics))
            print(f"{j.table} {j.cell} {j.method} s{j.seed}: finished run {r.info.run_id} of an earlier flplat "
                  f"stands for it (new keys at their defaults: {', '.join(added) or 'none'})", file=sys.stderr)
        return left

    def parent(self, paper: str, table: str, scale: str) -> str:
        name = f"{paper}/{table}@{scale}"
        found = self._search(f"tags.`flplat.reproduce.parent` = '{name}'")
        if found:
            run_id = found[0].info.run_id
            self.client.update_run(run_id, status="RUNNING")
            return run_id
        return self.client.create_run(self.exp_id, run_name=name, tags={
            "flplat.kind": "reproduce", "flplat.reproduce.parent": name, "flplat.reproduce.paper": paper}).info.run_id

    def value(self, run_id: str | None, metrics: dict[str, float], metric: str) -> float | None:
        """A run's final ``metric``, or with ``NAME@STEP`` the value of NAME logged at STEP (None: not there)."""
        name, _, step = metric.partition("@")
        if not step:
            return metrics.get(name)
        if run_id is None:
            return None
        hist = {m.step: m.value for m in self.client.get_metric_history(run_id, name)}
        return hist.get(int(step))

    def tag(self, run_id: str, paper: str, job: Job) -> None:
        for k, v in (("paper", paper), ("key", job.key), ("table", job.table), ("cell", job.cell),
                     ("method", job.method), ("seed", str(job.seed))):
            self.client.set_tag(run_id, f"flplat.reproduce.{k}", v)


class Progress:
    """One line per finished run on stderr: runs done / total, elapsed, an estimate of the rest."""

    def __init__(self, total: int, skipped: int, stream=None):
        self.total, self.done, self.t0, self.ran = total, skipped, time.perf_counter(), 0
        self.stream = stream or sys.stderr

    def step(self, job: Job, seconds: float, metric: float | None) -> str:
        self.done += 1
        self.ran += 1
        el = time.perf_counter() - self.t0
        left = (self.total - self.done) * el / self.ran
        m = f" {metric:.4f}" if metric is not None else ""
        line = (f"[{self.done}/{self.total}] {job.table} {job.cell} {job.method} s{job.seed}{m} ({seconds:.1f}s) "
                f"elapsed {el / 60:.1f} min, about {left / 60:.1f} min left")
        print(line, file=self.stream, flush=True)
        return line


def default_jobs() -> int:
    import os

    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


def run_grid(paper: str, table: Table, jobs: list[Job], store: Store, parent: str, n_jobs: int,
             render_only: bool = False) -> dict[str, tuple]:
    """Run the jobs not finished yet; returns (run id, metrics) by config hash for every job (run now or before).
    ``render_only``: run nothing; the jobs not finished are left out (the table shows them as not run)."""
    done = store.finished(paper)
    todo, seen = [], set()
    for j in jobs:
        if j.key not in done and j.key not in seen:
            todo.append(j)
            seen.add(j.key)
    todo = store.match_older(paper, todo, done)
    total = len({j.key for j in jobs})  # cells that read one run (PQFed's Table VIII stages) count it once
    prog = Progress(total, total - len(todo))
    if len(todo) < total:
        print(f"{table.id}: {total - len(todo)} of {total} runs already finished, skipped", file=sys.stderr)
    if render_only:
        if todo:
            print(f"{table.id}: {len(todo)} of {total} runs not finished, shown as not run (--render-only)",
                  file=sys.stderr)
        return done

    def finish(job: Job, res) -> None:
        key, metrics, run_id, secs = res
        if metrics is None:  # run_id holds the reason
            print(f"{job.table} {job.cell} {job.method} s{job.seed}: skipped ({run_id})", file=sys.stderr, flush=True)
            prog.done += 1
            return
        if run_id:
            store.tag(run_id, paper, job)
        done[key] = (run_id, metrics)
        prog.step(job, secs, metrics.get(table.metric))

    if n_jobs <= 1:
        for j in todo:
            finish(j, _run_job(j, parent, None))
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=n_jobs, mp_context=mp.get_context("spawn")) as ex:
            futs = {ex.submit(_run_job, j, parent, 1): j for j in todo}
            for fut in as_completed(futs):
                finish(futs[fut], fut.result())
    return done


def reproduce(paper: str, tables: Sequence[str] = (), scale: str = "reduced", seeds: Sequence[int] | None = None,
              methods: Sequence[str] | None = None, cells: Sequence[str] | None = None, n_jobs: int = 1,
              store_dir: str = "mlruns", overrides: Sequence[str] = (), out_dir: str | None = None,
              results: str | None = None, command: str = "", baseline_seeds: int | None = None,
              render_only: bool = False) -> str:
    """Run (or continue) the paper's tables and return their markdown (also logged to each table's parent run and,
    with ``out_dir``, written there with the figures; with ``results``, each table's block in that document is
    replaced, see :mod:`flplat.studies.results_doc`, with ``command`` as the line that made it)."""
    all_tables = paper_tables(paper)
    chosen = select(all_tables, list(tables), "tables", "id")
    if n_jobs > default_jobs():
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
    for t in chosen:
        sd = list(seeds) if seeds else ([0] if scale == "smoke" else t.seeds)
        if t.kind == "train":
            plans[t.id] = (sd, plan(paper, t, scale, sd, methods, cells, overrides, experiment, store_dir,
                                    baseline_seeds))
        else:
            select(t.cells, cells, "cells", "id")
            select(t.methods, methods, "methods", "name")
            plans[t.id] = (sd, None)
    store = Store(experiment, store_dir)
    texts = []
    for t in chosen:
        sd, jobs = plans[t.id]
        _, note = resolve_scale(t, scale)
        parent = store.parent(paper, t.id, scale)
        t_start = time.perf_counter()
        status = "FAILED"
        try:
            ours: dict[tuple[str, str], list[float]] = {}
            run_ids: dict[tuple[str, str], list[str]] = {}
            if t.kind == "train":
                metrics = run_grid(paper, t, jobs, store, parent, n_jobs, render_only)
                row_metric = {m.name: m.metric for m in t.methods}
                col_metric = {c.id: c.metric for c in t.cells}
                records = []
                for j in jobs:
                    run_id, m = metrics.get(j.key, (None, {}))
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
                    with open(Path(out_dir) / f"{paper}_{t.id}_runs.jsonl", "w") as fh:
                        fh.writelines(json.dumps(r, sort_keys=True) + "\n" for r in records)
            else:
                for s in sd:  # seeds outside: an analysis may cache per seed what its cells share
                    for c in select(t.cells, cells, "cells", "id"):
                        t0 = time.perf_counter()
                        for name, v in t.analyze(c, s, scale).items():
                            ours.setdefault((c.id, name), []).append(v)
                        print(f"{t.id} {c.id} seed {s} ({time.perf_counter() - t0:.1f}s)", file=sys.stderr,
                              flush=True)
                ours = {k: ours[k] for k in sorted(ours, key=lambda k: [c.id for c in t.cells].index(k[0]))}
                for (cid, name), vals in ours.items():
                    key = re.sub(r"[^\w\-. /]", "_", f"{cid}.{name}")[:250]  # MLflow's allowed characters
                    store.client.log_metric(parent, key, statistics.fmean(vals))
            src = values.get("tables", {}).get(t.id, {}).get("source", "")
            subs = [t.substitute] if t.substitute else [f"{c.id}: {c.substitute}" for c in t.cells if c.substitute]
            seeds_note = ", ".join(map(str, sd))
            if t.kind == "train" and baseline_seeds is not None and baseline_seeds < len(sd):
                full = [m.name for m in t.methods if t.all_seeds(m.name)]
                seeds_note += (f" for {', '.join(full)}; {', '.join(map(str, sd[:baseline_seeds]))} for the other "
                               "methods (CPU time)")
            header = (f"Paper: {src}. Scale `{scale}`: {note}. Seeds: {seeds_note}." +
                      (f" The paper's dataset differs ({'; '.join(subs)}): only its claim is judged." if subs else ""))
            text = render_table(t, values, ours, header, cells, methods)
            store.client.log_text(parent, text, f"reproduce/{t.id}.md")
            if t.figure and ours:
                import tempfile

                with tempfile.TemporaryDirectory() as tmp:
                    png = str(Path(out_dir or tmp) / f"{paper}_{t.id}.png")
                    Path(png).parent.mkdir(parents=True, exist_ok=True)
                    Path(png).unlink(missing_ok=True)  # never log an earlier command's figure
                    t.figure(FigureContext(ours, scale, png, store.client, run_ids))
                    if Path(png).is_file():
                        store.client.log_artifact(parent, png, "reproduce")
                    else:  # e.g. Fig. 5 before any Clust-PSI-PFL run has finished
                        print(f"{t.id}: no figure (nothing to draw from the runs finished so far)", file=sys.stderr)
            if out_dir:
                Path(out_dir).mkdir(parents=True, exist_ok=True)
                (Path(out_dir) / f"{paper}_{t.id}.md").write_text(text)
            if results:
                from flplat.studies.results_doc import run_seconds, timing_line, update_results

                n_runs, run_s = run_seconds(store.client, [r for ids in run_ids.values() for r in ids])
                png = Path(out_dir) / f"{paper}_{t.id}.png" if out_dir else None
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


def listing() -> str:
    """Every paper's tables, their cells and methods (``flplat reproduce --list``)."""
    lines = []
    for p in PAPERS:
        lines.append(f"{p}:")
        for t in paper_tables(p):
            lines.append(f"  {t.id} [{t.kind}] {t.title}")
            lines.append(f"    cells: {', '.join(c.id for c in t.cells)}")
            lines.append(f"    methods: {', '.join(m.name for m in t.methods)}")
    return "\n".join(lines)


def plot_cells(ours: dict[tuple[str, str], list[float]], title: str, ylabel: str, path: str) -> None:
    """A grouped bar chart of our means (± std over seeds): one group per cell, one bar per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    cells = list(dict.fromkeys(c for c, _ in ours))
    methods = list(dict.fromkeys(m for _, m in ours))
    w = 0.8 / max(len(methods), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(cells) * max(len(methods), 1) * w * 2.5), 4))
    for i, m in enumerate(methods):
        vals = [ours.get((c, m), []) for c in cells]
        mean = [statistics.fmean(v) if v else np.nan for v in vals]
        sd = [statistics.pstdev(v) if len(v) > 1 else 0.0 for v in vals]
        ax.bar(np.arange(len(cells)) + i * w, mean, w, yerr=sd, label=m)
    ax.set_xticks(np.arange(len(cells)) + 0.4 - w / 2)
    ax.set_xticklabels(cells, rotation=45, ha="right", fontsize=8)
    ax.set(ylabel=ylabel, title=title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_curves(ctx: FigureContext, metric: str, title: str, ylabel: str) -> None:
    """One panel per cell: the per-round ``metric`` of every method, mean over its seeds' runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    cells = list(dict.fromkeys(c for c, _ in ctx.runs))
    if not cells:
        return
    cols = min(len(cells), 2)
    rows = (len(cells) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 3.6 * rows), squeeze=False)
    for ax, c in zip(axes.flat, cells):
        for (cc, m), ids in ctx.runs.items():
            if cc != c:
                continue
            hists = [dict(ctx.history(r, metric)) for r in ids]
            steps = sorted(set().union(*hists)) if hists else []
            if steps:
                ax.plot(steps, [np.mean([h[s] for h in hists if s in h]) for s in steps], label=m, lw=1.2)
        ax.set(title=c, xlabel="round", ylabel=ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(cells):]:
        ax.set_visible(False)
    fig.suptitle(f"{title} (scale {ctx.scale})")
    fig.tight_layout()
    fig.savefig(ctx.path, dpi=110)
    plt.close(fig)
