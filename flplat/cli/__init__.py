"""The ``flplat`` command line: run an experiment, print partition statistics, open the MLflow UI.

Bad input (unknown names, out-of-range values, missing files, unknown override keys) prints one line
``flplat: error: ...`` naming the key and the allowed values, exits with status 2 and creates no MLflow run.

This module assembles the parser and dispatches (:func:`main`), and ends the process (:func:`entry`,
:func:`exit_now`); each command family lives in its own module: :mod:`~flplat.cli.run` (run, --resume),
:mod:`~flplat.cli.studies` (tune, sweep, reproduce), :mod:`~flplat.cli.data` (partition-stats, noniid-plot,
list), :mod:`~flplat.cli.reports` (table, compare), :mod:`~flplat.cli.store` (ui, runs, evaluate),
:mod:`~flplat.cli.check` (check). They import
only the standard library and :mod:`flplat.errors` at the top, so ``flplat --help`` stays light; each command
imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from flplat.cli import check, data, reports, run, store, studies
from flplat.cli.data import cmd_list, cmd_noniid_plot, cmd_partition_stats
from flplat.cli.reports import cmd_compare, cmd_table
from flplat.cli.run import EPILOG_RUN, cmd_run
from flplat.cli.store import cmd_evaluate, cmd_runs, cmd_ui, experiment_url, ui_command
from flplat.cli.studies import cmd_reproduce, cmd_sweep, cmd_tune
from flplat.errors import ConfigError

__all__ = ["EPILOG_RUN", "FULL_EXIT_ENV", "COMMANDS", "cmd_compare", "cmd_evaluate", "cmd_list", "cmd_noniid_plot",
           "cmd_partition_stats", "cmd_reproduce", "cmd_run", "cmd_runs", "cmd_sweep", "cmd_table", "cmd_tune",
           "cmd_ui", "entry", "exit_now", "experiment_url", "main", "ui_command"]

# command -> (adds its sub-parser, runs it); in the order `flplat --help` lists them
COMMANDS = {
    "run": (run.add_run, cmd_run),
    "partition-stats": (data.add_partition_stats, cmd_partition_stats),
    "ui": (store.add_ui, cmd_ui),
    "tune": (studies.add_tune, cmd_tune),
    "sweep": (studies.add_sweep, cmd_sweep),
    "table": (reports.add_table, cmd_table),
    "noniid-plot": (data.add_noniid_plot, cmd_noniid_plot),
    "runs": (store.add_runs, cmd_runs),
    "reproduce": (studies.add_reproduce, cmd_reproduce),
    "compare": (reports.add_compare, cmd_compare),
    "evaluate": (store.add_evaluate, cmd_evaluate),
    "list": (data.add_list, cmd_list),
    "check": (check.add_check, check.cmd_check),
}


# commands that read no config and import no plugin (every other command takes --plugin MODULE)
NO_PLUGINS = ("ui", "runs", "table", "compare")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flplat", description="Clustered and personalized federated learning experiments.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (add, _) in COMMANDS.items():
        add(sub)
        if name not in NO_PLUGINS:
            sub.choices[name].add_argument(
                "--plugin", action="append", default=[], metavar="MODULE",
                help="import this module first (it registers your algorithms, datasets, models or partitions; "
                     "repeatable; every process the command starts imports it too); see docs/extending.md")
    return p


def _load_plugins(args) -> None:
    """Every command that takes ``--plugin`` imports its plugins before it runs: the entry points of installed
    distributions, ``$FLPLAT_PLUGINS`` and ``--plugin MODULE`` (added to ``$FLPLAT_PLUGINS``, which every process
    the command starts inherits). A command may look a name up before it reads any config (``flplat check NAME``,
    ``reproduce --add-method NAME``): an installed plugin's name is registered by then. A failing plugin is one
    line and exit 2 before anything else happens."""
    if args.command in NO_PLUGINS:
        return
    from flplat.plugins import add_to_env, load_plugins

    if args.plugin:
        add_to_env(args.plugin)
    load_plugins()


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    # overrides may also follow options (flplat tune CONFIG --space S key=value)
    if extra and hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    handler = COMMANDS[args.command][1]
    from flplat.errors import RunFailed, Terminated

    previous = _on_sigterm()
    try:
        _load_plugins(args)
        return handler(args)
    except RunFailed as e:  # tracking store lost, training diverged: one line, the run ended FAILED
        print(f"flplat: error: {e}", file=sys.stderr)
        return 1
    except Terminated:
        print("flplat: terminated (SIGTERM)", file=sys.stderr)
        return 143
    except ConfigError as e:
        from flplat.engine.sharding import is_main_process

        if is_main_process():  # in a sharded run every process meets the same error: one line, from rank 0
            print(f"flplat: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("flplat: interrupted", file=sys.stderr)
        return 130
    finally:
        _restore_sigterm(previous)


def _on_sigterm():
    """SIGTERM (kill, timeout, SLURM preemption) raises :class:`~flplat.errors.Terminated` (a KeyboardInterrupt)
    in the main thread, so a run ends like Ctrl-C: KILLED, artifacts and a checkpoint written, exit 143. A second
    SIGINT / SIGTERM ends the process at once; a swallowed or stuck first one still ends it
    (:mod:`flplat.cli.signals`). Returns the function that puts the previous handlers back."""
    from flplat.cli.signals import install

    return install()


def _restore_sigterm(previous) -> None:
    if previous is not None:
        previous()


FULL_EXIT_ENV = "FLPLAT_FULL_EXIT"


def exit_now(rc: int) -> None:
    """End the process with status ``rc`` without the interpreter's teardown.

    After a run, Python's finalisation (clearing the modules of torch, lightning, scikit-learn, MLflow one object at
    a time) takes 1-2 s here (measured: ``import torch, lightning`` alone leaves 1.2 s between its last line and the
    process's end), which every ``flplat`` command, grid cell and rank of a sharded run would pay. This does what
    the interpreter's exit does that matters, in its order, then ``os._exit``: ``threading._shutdown`` (the
    threading module's exit hooks, then waiting for the non-daemon threads), the ``atexit`` handlers (logging, MLflow,
    multiprocessing, weakref finalizers and temporary directories), flushing stdout and stderr.

    The hooks must run before the join: an idle :class:`~concurrent.futures.ThreadPoolExecutor` worker is a
    non-daemon thread that ends only when its hook (``concurrent.futures.thread._python_exit``) wakes it. MLflow
    keeps one such pool per artifact repository and never shuts it down, so joining the threads first waited
    forever after any artifact download (``flplat evaluate`` after its result or its error).
    ``FLPLAT_FULL_EXIT=1`` in the environment keeps the normal exit (e.g. for tools that hook the interpreter's
    shutdown)."""
    import os
    import threading

    shutdown = getattr(threading, "_shutdown", None)  # (CPython 3.10-3.13; otherwise the interpreter's own exit)
    if shutdown is None or os.environ.get(FULL_EXIT_ENV, "") not in ("", "0"):
        sys.exit(rc)
    import atexit

    shutdown()  # what the interpreter's finalisation does first (main thread only: entry() runs there)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (flplat ... | head) or stream
            pass
    os._exit(rc)


def entry() -> None:
    """The ``flplat`` command (and ``python -m flplat.cli``): :func:`main`, then :func:`exit_now`. A reader that
    stops early (``flplat list | head -1``) ends the command quietly: stdout goes to devnull (as the Python docs
    advise for SIGPIPE) and the status is 141, the shell's for a process killed by SIGPIPE."""
    try:
        rc = main()
    except BrokenPipeError:
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        rc = 141
    exit_now(rc)
