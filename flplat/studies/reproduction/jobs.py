"""``flplat reproduce ... --print-jobs``: the unfinished runs of a grid as shell commands (``lines``) or a SLURM
job-array script (``array``), for a scheduler to run (:func:`job_commands`).

What was decided and why:

* **Only the script on stdout.** Printing plans the grid against the MLflow store and marks the tables' parent
  runs SCHEDULED. With a tracking server MLflow prints "View run ..." lines to stdout whenever a run's status is
  set; ``> grid.sh`` put them above ``#!/bin/bash`` and sbatch refused the script. Everything the planning does
  runs with stdout sent to stderr; only the returned text is printed.
* **Self-contained.** A task runs what the grid's own command would, whatever the shell that submits it has (no
  virtualenv on PATH, another directory, nothing exported): the absolute interpreter of this flplat (``python -m
  flplat.cli``; a bare ``flplat`` is found only with the virtualenv on PATH), the directory the grid was printed
  in (``cd``: relative paths of the overrides resolve as they did), the tracking store (``--store-dir`` as an
  absolute path, and ``$MLFLOW_TRACKING_URI`` exported as it was -- a relative SQLite or file path made absolute
  -- or unset when it was not, so a task never logs into a ``./mlruns`` of its own or a store the job's
  environment names), the checkpoint directory (``tracking.checkpoint_dir``, absolute: a killed task resumes from
  it), the plugins (``$FLPLAT_PLUGINS`` with every ``--plugin`` module, exported or unset) and ``$PYTHONPATH``
  (as it was, absolute, plus the directories the plugins were imported from when outside the interpreter's
  installation). :func:`pinned` collects them; the lines form puts them before each command (``cd DIR && env
  ...``), the array script once above its commands.
* **One node per task.** A task asks for ``--cpus-per-task`` = the largest ``fabric.devices`` x
  ``max(1, fabric.num_threads)`` of its runs and, for runs on ``cuda``, ``--gres=gpu:<fabric.devices>``; a run
  with ``fabric.devices=N`` is N processes of that one task, started by flplat as on any machine
  (:func:`flplat.engine.launch.cluster_environment`), and resumed from its checkpoint like a one-process run
  (:func:`flplat.experiment.run_or_resume`). ``fabric.num_nodes`` > 1 is refused when the script is written (a
  one-line error, nothing marked SCHEDULED): a task of a job array runs on one node.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from flplat.engine.launch import fabric_processes
from flplat.errors import ConfigError
from flplat.studies.reproduction.derived import derived_plan
from flplat.studies.reproduction.execute import unfinished
from flplat.studies.reproduction.grid import paper_tables, parse_added_method, per_table, plan, select, with_added
from flplat.studies.reproduction.store import Store

MODULE = "flplat.cli"  # ``python -m flplat.cli`` is the ``flplat`` command


@dataclass
class Pinned:
    """What a printed job carries with it: the directory, the interpreter and the environment variables
    (``None``: unset)."""

    cwd: str
    python: str
    env: dict[str, str | None]

    def prefix(self) -> list[str]:
        """``env`` words that set (and unset) the variables for one command (the lines form)."""
        unset = [w for k, v in self.env.items() if v is None for w in ("-u", k)]
        return ["env", *unset, *(f"{k}={v}" for k, v in self.env.items() if v is not None)]

    def exports(self) -> list[str]:
        """The same as shell lines (the array script)."""
        return [f"unset {k}" if v is None else f"export {k}={shlex.quote(v)}" for k, v in self.env.items()]


def absolute_uri(uri: str) -> str:
    """A tracking URI that names the same store from any directory: a relative SQLite file, ``file:`` path or plain
    path made absolute; a server's or database's URI as it is."""
    if uri.startswith("sqlite:///") and not uri[len("sqlite:///"):].startswith("/"):
        return "sqlite:///" + os.path.abspath(uri[len("sqlite:///"):])
    if uri.startswith("file:") and not uri.startswith("file:/"):
        return Path(uri[len("file:"):]).resolve().as_uri()
    if "://" not in uri and not uri.startswith(("file:", "sqlite:")):
        return os.path.abspath(uri)
    return uri


def _module_root(name: str) -> str | None:
    """The directory ``name`` was imported from (the ``sys.path`` entry), or None when unknown."""
    import importlib.util

    mod = sys.modules.get(name)
    path = getattr(mod, "__file__", None)
    if path is None:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return None
        path = spec.origin if spec is not None else None
    if not path or not os.path.isfile(path):
        return None
    p = Path(path).resolve()
    if p.name == "__init__.py":
        p = p.parent
    return str(p.parents[len(name.split(".")) - 1])


def pinned(plugins: Sequence[str] = ()) -> Pinned:
    """The directory, interpreter and environment of this process that a printed job needs (see the module's
    docstring); ``plugins``: the modules the jobs' configs name (``plugins:``) besides ``$FLPLAT_PLUGINS``."""
    from flplat.plugins import ENV, env_plugins

    uri = os.environ.get("MLFLOW_TRACKING_URI") or None
    modules = list(dict.fromkeys([*env_plugins(), *plugins]))
    paths = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    installed = [Path(p).resolve() for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}]
    for m in modules:
        root = _module_root(m)
        if root and root not in paths and not any(Path(root).is_relative_to(i) for i in installed):
            paths.append(root)
    env_list = env_plugins()
    return Pinned(os.getcwd(), os.path.abspath(sys.executable), {
        "MLFLOW_TRACKING_URI": absolute_uri(uri) if uri else None,
        ENV: ",".join(env_list) or None,
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)) or None,
    })


def resources(cfgs: Sequence[tuple[str, object]]) -> tuple[int, int]:
    """(CPUs, GPUs) one array task asks for: the most any of the runs ``(label, config)`` needs; a run over
    several nodes is a ConfigError."""
    cpus, gpus = 1, 0
    for label, cfg in cfgs:
        fab = cfg.fabric
        if int(fab.num_nodes) > 1:
            raise ConfigError(f"fabric.num_nodes={fab.num_nodes} ({label}): a task of a SLURM job array runs on one "
                              "node; allowed: fabric.num_nodes=1 (fabric.devices processes on the task's node), or "
                              "run it over nodes with srun (docs/scaling.md)")
        n = fabric_processes(fab)
        if n is None:
            raise ConfigError(f"fabric.devices={fab.devices!r} ({label}): a job array asks SLURM for each task's "
                              "CPUs / GPUs when the script is written; allowed: an integer >= 1 or a list of devices")
        cpus = max(cpus, n * max(1, int(fab.num_threads)))
        if str(fab.accelerator) in ("cuda", "gpu"):
            gpus = max(gpus, n)
    return cpus, gpus


def _unfinished_runs(paper, tables, scale, seeds, methods, cells, store_dir, overrides, baseline_seeds, added,
                     rerun_stale=False):
    """(table id, job, its config, its --add-method spec or None, whether it re-runs a finished run of other code)
    per run no finished run stands for (with ``rerun_stale``, also per run whose finished run comes from other code;
    a run two tables share once); the checks come before the tables' parent runs are marked SCHEDULED."""
    from flplat.experiment import load_config

    chosen = [t for t in select(paper_tables(paper), list(tables), "tables", "id") if t.kind in ("train", "derived")]
    extra = {m.name: spec for spec in added for m in [parse_added_method(spec)]}  # --add-method: label -> spec
    if extra:
        chosen = [with_added(t, [parse_added_method(a) for a in added]) if t.kind == "train" else t for t in chosen]
        if methods:
            methods = [*methods, *(name for name in extra if name not in methods)]
    experiment = f"reproduce-{paper}"
    sel = per_table(chosen, methods, cells)
    chosen = [t for t in chosen if t.id in sel]
    store = Store(experiment, store_dir)
    runs, seen = [], set()
    for t in chosen:
        sd = list(seeds) if seeds else ([0] if scale == "smoke" else t.seeds)
        # a derived table's runs are its parts' (each job keeps its component table: its command runs that table)
        planner = plan if t.kind == "train" else derived_plan
        jobs = planner(paper, t, scale, sd, *sel[t.id], overrides, experiment, store_dir, baseline_seeds)
        for j in unfinished(paper, jobs, store, rerun_stale)[0]:
            if j.key not in seen:
                seen.add(j.key)
                runs.append((j.table, j, load_config(j.config, list(j.overrides)), extra.get(j.method),
                             j.key in store.replaced))
    cpus_gpus = resources([(j.label, cfg) for _, j, cfg, *_ in runs])
    for tid in dict.fromkeys([*(t.id for t in chosen if t.kind == "train"), *(t for t, *_ in runs)]):
        store.client.set_terminated(store.parent(paper, tid, scale), "SCHEDULED")
    return runs, cpus_gpus


def job_commands(paper: str, tables: Sequence[str] = (), scale: str = "reduced", seeds: Sequence[int] | None = None,
                 methods: Sequence[str] | None = None, cells: Sequence[str] | None = None, store_dir: str = "mlruns",
                 overrides: Sequence[str] = (), form: str = "lines", baseline_seeds: int | None = None,
                 command: str = "", added: Sequence[str] = (), rerun_stale: bool = False) -> str:
    """``flplat reproduce ... --print-jobs``: one command per run of the grid that no finished run stands for yet
    (``form`` lines), or a SLURM job-array script that runs them (``form`` array). Each command runs exactly that
    run (its table, ``--cells``, ``--methods``, ``--seeds``) into the same store, so the run lands where the grid
    expects it (same config hash, nested under the table's parent, tagged); afterwards the grid's own command (with
    ``--render-only``) renders the tables. Re-running prints only what is still unfinished. The tables' parent runs
    are created here (status SCHEDULED), so that the array's tasks do not race to create them. Every command
    carries what it needs to run from anywhere (:func:`pinned`); only the returned text is meant for stdout. With
    ``rerun_stale`` the runs whose finished run comes from other code are printed too, each command with
    ``--rerun-stale``."""
    with contextlib.redirect_stdout(sys.stderr):  # MLflow's "View run ..." lines (a server) must not reach stdout
        runs, (cpus, gpus) = _unfinished_runs(paper, tables, scale, seeds, methods, cells, store_dir, overrides,
                                              baseline_seeds, added, rerun_stale)
        pin = pinned([m for _, _, cfg, *_ in runs for m in (cfg.get("plugins") or [])])
    lines = list(dict.fromkeys(  # the members of a pooled cell share one command (it runs them all)
        shlex.join(_words(pin, paper, t, scale, j, cfg, spec, store_dir, overrides, stale))
        for t, j, cfg, spec, stale in runs))
    if form == "lines":
        return "\n".join(f"cd {shlex.quote(pin.cwd)} && {shlex.join(pin.prefix())} {x}" for x in lines)
    grid = command or f"flplat reproduce {paper} {' '.join(tables)} --scale {scale}".replace("  ", " ")
    if not lines:
        return "\n".join(["#!/bin/bash", f"# nothing to run: every run of `{grid}` is finished"])
    head = ["#!/bin/bash", f"#SBATCH --job-name=flplat-{paper}", f"#SBATCH --array=0-{len(lines) - 1}",
            "#SBATCH --ntasks=1", f"#SBATCH --cpus-per-task={cpus}", *([f"#SBATCH --gres=gpu:{gpus}"] if gpus else []),
            f"# {len(lines)} unfinished run(s) of: {grid}",
            "# one array task each; afterwards render the tables with that command plus --render-only, and print",
            "# this script again (--print-jobs array) for what is still unfinished. A killed task's run continues",
            "# from its checkpoint when the script is printed and submitted again (after scancel at once, after",
            "# kill -9 or a lost node once its heartbeat is stale: 150 s by default).",
            "# Pinned when printed: the directory, the interpreter, the tracking store, the plugins, PYTHONPATH.",
            "set -euo pipefail",
            ': "${SLURM_ARRAY_TASK_ID:?submit this script with sbatch: each task of the job array runs one run}"',
            f"cd {shlex.quote(pin.cwd)}", *pin.exports()]
    return "\n".join([*head, "CMDS=(", *(shlex.quote(x) for x in lines), ")",
                      'eval "${CMDS[$SLURM_ARRAY_TASK_ID]}"'])


def _words(pin: Pinned, paper: str, table: str, scale: str, job, cfg, spec: str | None, store_dir: str,
           overrides: Sequence[str], rerun_stale: bool = False) -> list[str]:
    """The command of one run: this interpreter's ``flplat reproduce`` for exactly that run, into the absolute
    store, with its checkpoint directory made absolute (``--rerun-stale``: its finished run is of other code)."""
    from flplat.tracking.store import checkpoint_dir

    words = [pin.python, "-m", MODULE, "reproduce", paper, table, "--scale", scale, "--cells", job.cell,
             "--methods", job.method, "--seeds", str(job.seed), "--store-dir", os.path.abspath(store_dir)]
    if spec is not None:
        words += ["--add-method", spec]
    if rerun_stale:
        words.append("--rerun-stale")
    sets = list(overrides)
    if cfg.tracking.enabled:
        sets.append(f"tracking.checkpoint_dir={os.path.abspath(checkpoint_dir(cfg.tracking))}")
    return [*words, "--set", *sets] if sets else words
