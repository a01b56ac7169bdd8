"""Running a train table's jobs: those not finished yet run in this process or in ``--jobs N`` worker processes
(one thread each), each with :func:`flplat.experiment.run_or_resume` (an interrupted run continues from its
checkpoint); a job whose config fails while its run is prepared (e.g. an infeasible partition) is skipped with its
reason, a job whose dataset's files are absent with "data not found: <where to get them>" (:func:`skip_reason`);
one progress line per finished run (:class:`Progress`)."""

from __future__ import annotations

import re
import sys
import time

from flplat.data.files import DataUnavailableError
from flplat.errors import ConfigError
from flplat.studies.reproduction.grid import Job, Table
from flplat.studies.reproduction.store import Store


def skip_reason(e: ConfigError) -> str:
    """Why a job was skipped, as the table says it: the error's line, or for a dataset whose files are absent
    "data not found: <where to get them>" (the loaders' messages also list the directories looked in, which belong
    on the console, not in the table)."""
    msg = str(e)
    if not isinstance(e, DataUnavailableError):
        return msg
    m = re.search(r"data not found: (.*?); need ", msg)  # flplat.data.sources.find_data (files only, no download)
    if m:
        return f"data not found: {m.group(1)} (then data.root=DIR or $FLPLAT_DATA)"
    m = re.search(r"(\w+) data not found \(need (.*?)\)", msg)  # torchvision's datasets (flplat.data.files)
    if m:
        return (f"data not found: the {m.group(1)} files ({m.group(2)}) from torchvision (data.download=true) or "
                "its site, then data.root=DIR or $FLPLAT_DATA")
    return f"data not found: {msg}"


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
    except ConfigError as e:  # found while preparing the run, e.g. an infeasible partition or absent data files:
        return job.key, None, skip_reason(e), time.perf_counter() - t0  # skip this run only
    # the last round's metrics and the run-level summaries (logged at the last step too), as Store.finished reads
    # them back: a table's metric such as mean_local_accuracy_last10 is there on the first run as on a re-run
    return job.key, {**summary.metrics, **summary.final}, run_id, time.perf_counter() - t0


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
             render_only: bool = False, skipped: dict[str, str] | None = None) -> dict[str, tuple]:
    """Run the jobs not finished yet; returns (run id, metrics) by config hash for every job (run now or before).
    ``render_only``: run nothing; the jobs not finished are left out (the table shows them as not run). ``skipped``
    (filled in): the reason of every job skipped now or by an earlier command (recorded on ``parent``), by hash."""
    skipped = {} if skipped is None else skipped
    skipped.update(store.skipped(parent))
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
            skipped[key] = run_id
            store.skip(parent, key, run_id)
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
