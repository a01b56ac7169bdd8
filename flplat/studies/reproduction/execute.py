"""Running a study's runs: those not finished yet run through one of two backends behind one interface
(:class:`Backend`): :class:`LocalBackend` (this process, or ``--jobs N`` worker processes with one thread each) and
:class:`RayBackend` (``--backend ray``: each run one Ray task with its resources, on a running cluster or a local
instance). Both yield ``(task, result, error)`` as runs finish, so the grid loop of ``flplat reproduce``
(:func:`run_grid`), the seeds of ``flplat sweep`` and the trial workers of ``flplat tune`` are written once. A run
does the same thing in every backend: :func:`flplat.experiment.run_or_resume` (an interrupted run continues from its
checkpoint); a job whose config fails while its run is prepared (e.g. an infeasible partition) is skipped with its
reason, a job whose dataset's files are absent with "data not found: <where to get them>" (:func:`skip_reason`); a
run that fails for its own reasons (an exception) is reported in one line and the others go on (the command
then exits 1; a re-run resumes it); one progress line per finished run (:class:`Progress`). A finished run of other
code than its job's now (:meth:`Store.stale`) stands for its job, said in one line (:func:`stale_line`), unless
``--rerun-stale`` asks to train it again.

Ray: a task whose worker or node dies (killed, preempted, lost) is retried by Ray (``max_retries``, system failures
only; ``retry_exceptions=False``: a run's own exception is not retried) and continues from the checkpoint its earlier
attempt wrote: the attempt tags its MLflow run with the task's id (``flplat.owner``; the same id on every retry) and
the retry takes over the RUNNING run of its own id at once instead of waiting for its heartbeat to go stale
(:func:`flplat.tracking.resume.claim_unfinished`)."""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from flplat.data.files import DataUnavailableError
from flplat.errors import ConfigError, RunFailed
from flplat.studies.reproduction.grid import Job, Table
from flplat.studies.reproduction.store import NO_CONFIG, OTHER_CODE, UNKNOWN_CODE, Store

OWNER_ENV = "FLPLAT_RUN_OWNER"  # set while a Ray task runs: the owner tag of its MLflow run (flplat.owner)
RAY_INSTALL = 'pip install -e ".[ray]"'
LOCAL_SCHEMES = ("file:", "sqlite:")


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


def _run_job(job: Job, parent: str | None, threads: int | None = None
             ) -> tuple[str, dict[str, float] | None, str | None, float]:
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
        return self.line(job.label, seconds, metric)

    def line(self, label: str, seconds: float, metric: float | None) -> str:
        self.done += 1
        self.ran += 1
        el = time.perf_counter() - self.t0
        left = (self.total - self.done) * el / self.ran
        m = f" {metric:.4f}" if metric is not None else ""
        line = (f"[{self.done}/{self.total}] {label}{m} ({seconds:.1f}s) "
                f"elapsed {el / 60:.1f} min, about {left / 60:.1f} min left")
        print(line, file=self.stream, flush=True)
        return line


def default_jobs() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


@dataclass
class Task:
    """One run for a backend: ``fn(*args, threads=T)`` (a module-level function: worker processes and Ray tasks
    import it), what it asks for (``devices``: its ``fabric.devices``, on ``accelerator``) and the caller's item."""

    fn: Callable
    args: tuple
    label: str
    item: Any = None
    devices: int = 1
    accelerator: str = "cpu"


@dataclass
class Backend:
    """Runs tasks and yields ``(task, result, error)`` as each ends: ``error`` is the run's own exception (the
    result is then None). Use as a context manager (a Ray backend connects on entry)."""

    name: str = "local"
    workers: int = 1  # runs at once (local: processes; Ray: what the local instance or the cluster holds)
    failures: list = field(default_factory=list)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def check_shared(self, tracking_cfg) -> None:
        """Whether the tracking store and checkpoints are seen by every worker (only a cluster needs a check)."""

    def run(self, tasks: Iterable[Task]) -> Iterator[tuple[Task, Any, BaseException | None]]:
        """Run ``tasks`` and yield ``(task, result, error)`` as each ends: each backend's own (abstract here;
        :class:`LocalBackend` and :class:`RayBackend` implement it)."""
        raise NotImplementedError

    def report(self, task: Task, error: BaseException) -> None:
        """One line for a run that failed for its own reasons; :meth:`raise_failures` ends the command with them."""
        self.failures.append((task, error))
        print(f"{task.label}: failed ({type(error).__name__}: {_first_line(error)})", file=sys.stderr, flush=True)

    def raise_failures(self) -> None:
        if self.failures:
            task, error = self.failures[0]
            raise RunFailed(f"{len(self.failures)} run(s) failed, the others finished (first: {task.label}: "
                            f"{type(error).__name__}: {_first_line(error)}); run the command again to resume them")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return (text.splitlines() or [""])[0][:300]


class LocalBackend(Backend):
    """``--jobs 1``: in this process (the config's own threads); ``--jobs N``: N spawned worker processes with one
    thread each."""

    def __init__(self, n_jobs: int = 1):
        super().__init__("local", max(1, int(n_jobs)))

    def run(self, tasks):
        tasks = list(tasks)
        if self.workers <= 1:
            for t in tasks:
                try:
                    res = t.fn(*t.args, threads=None)
                except Exception as e:  # the run's own failure: reported, the grid goes on
                    yield t, None, e
                    continue
                yield t, res, None
            return
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=self.workers, mp_context=mp.get_context("spawn")) as ex:
            futs = {ex.submit(t.fn, *t.args, threads=1): t for t in tasks}
            try:
                for fut in as_completed(futs):
                    err = fut.exception()
                    yield futs[fut], (None if err else fut.result()), err
            except BaseException:
                for f in futs:
                    f.cancel()
                raise


def _ray_call(fn: Callable, args: tuple, threads: int | None):
    """A run inside a Ray task: its MLflow run is owned by the task's id (the same on every retry of the task)."""
    import ray

    os.environ[OWNER_ENV] = f"ray:{ray.get_runtime_context().get_task_id()}"
    try:
        return fn(*args, threads=threads)
    finally:
        os.environ.pop(OWNER_ENV, None)


def ray_module():
    """``ray``, or a one-line ConfigError saying how to install it (exit 2)."""
    try:
        import ray
    except ImportError:
        raise ConfigError(f"--backend ray needs Ray, which is not installed; install it with: {RAY_INSTALL}") from None
    return ray


def is_local_uri(uri: str) -> bool:
    """A tracking URI only this machine sees: a path, ``file:``, or SQLite (a file)."""
    return "://" not in uri or uri.startswith(LOCAL_SCHEMES)


class RayBackend(Backend):
    """``--backend ray``: each run is a Ray task asking for its resources: ``num_gpus`` = ``--gpus-per-run``
    (default: the run's ``fabric.devices`` when it runs on a GPU, else 0), ``num_cpus`` = ``--cpus-per-run``
    (default: its ``fabric.devices`` on CPU -- one thread per process --, else 1). ``--address``: a running cluster
    (``ray start --head`` ...; every node with this flplat installed and the data); without it a local instance
    with ``--jobs`` CPUs (default: the cores). An instance already started in this process (``ray.init``) is used
    as it is. A task whose worker or node dies is retried ``max_retries`` times and resumes from its checkpoint; a
    run's own exception is not retried (``retry_exceptions=False``)."""

    def __init__(self, address: str | None = None, n_jobs: int | None = None, gpus_per_run: float | None = None,
                 cpus_per_run: float | None = None, max_retries: int = 3):
        super().__init__("ray", n_jobs or default_jobs())
        if gpus_per_run is not None and gpus_per_run < 0:
            raise ConfigError(f"--gpus-per-run={gpus_per_run}; allowed: a number >= 0")
        if cpus_per_run is not None and cpus_per_run <= 0:
            raise ConfigError(f"--cpus-per-run={cpus_per_run}; allowed: a number > 0")
        self.address, self.gpus, self.cpus, self.max_retries = address, gpus_per_run, cpus_per_run, max_retries
        self.ray = ray_module()
        self._started = False
        self._probed = False

    @property
    def remote(self) -> bool:
        """A cluster (``--address``) whose other nodes cannot see this machine's files."""
        return self.address not in (None, "", "local")

    def check_cluster(self) -> None:
        """With ``--address``: one short probe of the cluster, a one-line ConfigError (exit 2) when it does not
        answer, instead of Ray's minutes of retries and its traceback (:mod:`.ray_address`); once."""
        if self.remote and not self._probed:
            from flplat.studies.reproduction.ray_address import check_cluster

            check_cluster(str(self.address))
            self._probed = True

    def connect(self) -> None:
        """Connect on the first runs (nothing to run: no Ray start-up): to ``--address``, else a local instance."""
        ray = self.ray
        if not ray.is_initialized():
            self.check_cluster()
            passed = ("MLFLOW_TRACKING_URI", "PYTHONPATH", "FLPLAT_PLUGINS")  # the store, the code, --plugin modules
            env = {k: os.environ[k] for k in passed if os.environ.get(k)}
            kw: dict[str, Any] = {"runtime_env": {"env_vars": env}} if env else {}
            if self.remote:
                ray.init(address=self.address, **kw)
            else:
                ray.init(num_cpus=self.workers, include_dashboard=False, **kw)
            self._started = True

    def slots(self) -> int:
        """How many runs of one CPU / ``--gpus-per-run`` GPUs the instance or cluster holds at once (connects)."""
        self.connect()
        res = self.ray.cluster_resources()
        n = res.get("CPU", 1) / (self.cpus or 1)
        if self.gpus:
            n = min(n, res.get("GPU", 0) / self.gpus)
        return max(1, int(n))

    def __exit__(self, *exc):
        if self._started:
            self.ray.shutdown()
            self._started = False
        return False

    def check_shared(self, tracking_cfg) -> None:
        """With a cluster (``--address``): the tracking store must be a server (http/https) or a shared database
        (postgresql://, mysql://, ...), and the checkpoints (``tracking.checkpoint_dir``) an absolute path of a
        directory every node mounts; a local path would leave each node its own record (exit 2). First of all the
        cluster must answer (:meth:`check_cluster`): every study calls this before its first MLflow run."""
        self.check_cluster()
        if not self.remote or not tracking_cfg.enabled:
            return
        from flplat.tracking.store import store_uris

        uri, _ = store_uris(tracking_cfg.uri, tracking_cfg.store_dir)
        key = "tracking.uri" if tracking_cfg.uri else ("$MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI")
                                                        else "tracking.store_dir")
        if is_local_uri(uri):
            raise ConfigError(f"{key}: the tracking store {uri!r} is a local path the nodes of the Ray cluster "
                              f"{self.address} cannot see; allowed: an MLflow server (http://, https://) or a shared "
                              "database (postgresql://, mysql://) every node reaches, e.g. MLFLOW_TRACKING_URI="
                              "http://HEAD:5000 (docs/scaling.md)")
        if int(tracking_cfg.checkpoint_every) > 0:
            d = tracking_cfg.checkpoint_dir
            if not d or not os.path.isabs(str(d)) or not os.path.isdir(str(d)):
                raise ConfigError(f"tracking.checkpoint_dir={d!r}: with a Ray cluster the checkpoints must go to a "
                                  "directory every node mounts; allowed: the absolute path of an existing shared "
                                  "directory (e.g. tracking.checkpoint_dir=/shared/ckpt), or "
                                  "tracking.checkpoint_every=0")

    def resources(self, task: Task) -> dict[str, float]:
        gpu = task.accelerator in ("cuda", "gpu")
        gpus = self.gpus if self.gpus is not None else (task.devices if gpu else 0)
        cpus = self.cpus if self.cpus is not None else (1 if gpu else task.devices)
        if gpu and gpus < task.devices:
            raise ConfigError(f"--gpus-per-run={self.gpus} is less than the run's fabric.devices={task.devices}; "
                              f"allowed: >= {task.devices}")
        return {"num_cpus": cpus, "num_gpus": gpus}

    def run(self, tasks):
        tasks = list(tasks)
        if not tasks:
            return
        self.connect()
        ray = self.ray
        from ray.exceptions import RayError, RayTaskError

        call = ray.remote(_ray_call)
        refs = {}
        for t in tasks:
            res = self.resources(t)
            threads = max(1, int(res["num_cpus"] // max(1, t.devices)))
            ref = call.options(**res, max_retries=self.max_retries, retry_exceptions=False,
                               name=t.label[:100]).remote(t.fn, t.args, threads)
            refs[ref] = t
        pending = list(refs)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                for ref in ready:
                    try:
                        out = ray.get(ref)
                    except RayTaskError as e:  # the run's own exception (not retried)
                        yield refs[ref], None, e.as_instanceof_cause()
                        continue
                    except RayError as e:  # its worker / node died more than max_retries times
                        yield refs[ref], None, e
                        continue
                    yield refs[ref], out, None
        finally:
            for ref in pending:  # Ctrl-C / an error here: the runs in flight end KILLED (resumed by a re-run)
                ray.cancel(ref)


def make_backend(name: str | None, n_jobs: int | None = None, address: str | None = None,
                 gpus_per_run: float | None = None, cpus_per_run: float | None = None) -> Backend:
    """The backend a command asked for (``--backend local|ray``); bad input: ConfigError."""
    name = name or "local"
    if name == "local":
        for flag, v in (("--address", address), ("--gpus-per-run", gpus_per_run), ("--cpus-per-run", cpus_per_run)):
            if v is not None:
                raise ConfigError(f"{flag} needs --backend ray; allowed with --backend local: --jobs")
        if n_jobs is not None and not 1 <= n_jobs <= default_jobs():
            raise ConfigError(f"--jobs={n_jobs}; allowed: 1..{default_jobs()} (the cores here)")
        return LocalBackend(n_jobs or 1)
    if name == "ray":
        if n_jobs is not None and n_jobs < 1:
            raise ConfigError(f"--jobs={n_jobs}; allowed: an integer >= 1")
        return RayBackend(address, n_jobs, gpus_per_run, cpus_per_run)
    raise ConfigError(f"--backend={name!r}; allowed: local, ray")


def job_task(job: Job, parent: str | None) -> Task:
    """A grid job as a backend task (its ``fabric.devices`` / ``accelerator`` say what it asks for)."""
    from flplat.experiment import load_config

    fab = load_config(job.config, list(job.overrides)).fabric
    return Task(_run_job, (job, parent), job.label, job,
                int(fab.devices) if str(fab.devices).isdigit() else 1, str(fab.accelerator))


def unfinished(paper: str, jobs: list[Job], store: Store, rerun_stale: bool = False
               ) -> tuple[list[Job], dict[str, tuple], int]:
    """(the jobs no finished run stands for, one per config hash; the finished runs by hash; the number of
    distinct runs of the grid). With ``rerun_stale``, a job whose finished run comes from other code
    (:meth:`Store.stale`) is among the jobs to run, and its run is left out of the finished ones."""
    done = store.finished(paper)
    todo, seen = [], set()
    for j in jobs:
        if rerun_stale and j.key in done and store.stale(done[j.key][0], j.code):
            store.replaced[j.key] = done.pop(j.key)[0]
        if j.key not in done and j.key not in seen:
            todo.append(j)
            seen.add(j.key)
    todo = store.match_older(paper, todo, done, rerun_stale)
    return todo, done, len({j.key for j in jobs})  # cells that read one run (PQFed's Table VIII stages) count once


def stale_runs(jobs: list[Job], done: dict[str, tuple], store: Store) -> dict[str, str]:
    """Why each finished run of ``jobs`` that comes from other code does (:meth:`Store.stale`), by run id."""
    out = {}
    for j in jobs:
        run_id = done.get(j.key, (None,))[0]
        why = store.stale(run_id, j.code) if run_id else None
        if why:
            out[run_id] = why
    return out


def stale_line(table: str, stale: dict[str, str], total: int) -> str:
    """The line that says how many of a table's ``total`` finished runs come from other code."""
    kinds = {k: sum(v == k for v in stale.values()) for k in (OTHER_CODE, UNKNOWN_CODE, NO_CONFIG)}
    parts = [f"{n} {what}" for n, what in ((kinds[OTHER_CODE], "made by another flplat source or plugin code"),
                                          (kinds[UNKNOWN_CODE], "made before runs recorded their code"),
                                          (kinds[NO_CONFIG], "imported from records without their config, matched "
                                                             "to their job by table, cell, method, seed and scale"))
             if n]
    return (f"{table}: {len(stale)} of {total} runs come from other code than this command's ({', '.join(parts)}): "
            "shown, marked in their cells; --rerun-stale trains them again")


def run_grid(paper: str, table: Table, jobs: list[Job], store: Store, parent: str, n_jobs: int | Backend,
             render_only: bool = False, skipped: dict[str, str] | None = None, rerun_stale: bool = False
             ) -> dict[str, tuple]:
    """Run the jobs not finished yet through ``n_jobs`` (a :class:`Backend`, or N for :class:`LocalBackend`);
    returns (run id, metrics) by config hash for every job (run now or before). ``render_only``: run nothing; the
    jobs not finished are left out (the table shows them as not run). ``skipped`` (filled in): the reason of every
    job skipped now or by an earlier command (recorded on ``parent``), by hash. Runs that failed for their own
    reasons are reported as they end; after the others finished, :class:`RunFailed` names them. A finished run of
    other code is used and said in one line (:func:`stale_line`); with ``rerun_stale`` its job runs again (the old
    run is tagged ``flplat.superseded_by`` the new one)."""
    backend = n_jobs if isinstance(n_jobs, Backend) else LocalBackend(n_jobs)
    skipped = {} if skipped is None else skipped
    skipped.update(store.skipped(parent))
    todo, done, total = unfinished(paper, jobs, store, rerun_stale)
    prog = Progress(total, total - len(todo))
    if len(todo) < total:
        print(f"{table.id}: {total - len(todo)} of {total} runs already finished, skipped", file=sys.stderr)
    stale = stale_runs(jobs, done, store)
    if stale:
        print(stale_line(table.id, stale, len({done[j.key][0] for j in jobs if j.key in done})), file=sys.stderr)
    replaced = [k for k in store.replaced if k in {j.key for j in todo}]
    if replaced:
        print(f"{table.id}: {len(replaced)} run(s) from other code trained again (--rerun-stale)", file=sys.stderr)
    if render_only:
        if todo:
            print(f"{table.id}: {len(todo)} of {total} runs not finished, shown as not run (--render-only)",
                  file=sys.stderr)
        _note_failures(store, jobs, done, skipped)
        return done

    for task, res, err in backend.run([job_task(j, parent) for j in todo]):
        job = task.item
        if err is not None:
            backend.report(task, err)
            prog.done += 1
            continue
        key, metrics, run_id, secs = res
        if metrics is None:  # run_id holds the reason
            print(f"{task.label}: skipped ({run_id})", file=sys.stderr, flush=True)
            skipped[key] = run_id
            store.skip(parent, key, run_id)
            prog.done += 1
            continue
        if run_id:
            store.tag(run_id, paper, job)
            store.codes[run_id] = job.code
            if key in store.replaced:
                store.client.set_tag(store.replaced.pop(key), "flplat.superseded_by", run_id)
        done[key] = (run_id, metrics)
        prog.step(job, secs, metrics.get(table.metric))
    _note_failures(store, jobs, done, skipped)
    backend.raise_failures()
    return done


def _note_failures(store: Store, jobs: list[Job], done: dict, skipped: dict[str, str]) -> None:
    """A job with no finished run whose last run failed gets that run's error as its reason (the tables say
    "failed, see note N" instead of "not run")."""
    keys = {j.key for j in jobs} - set(done) - set(skipped)
    if keys:
        skipped.update({k: why for k, why in store.failed().items() if k in keys})
