"""`flplat tune`, `flplat sweep`, `flplat reproduce`: many runs nested under parent runs
(:mod:`flplat.studies.tuning`, :mod:`flplat.studies.reproduce`)."""

from __future__ import annotations

import argparse
import json
import sys

from flplat.errors import ConfigError


def add_backend(p, jobs: bool = True) -> None:
    """Where a study's runs run: --jobs (local worker processes) or --backend ray (Ray tasks) with its resources."""
    if jobs:
        p.add_argument("--jobs", type=int, default=None,
                       help="runs at once: local worker processes with one thread each (<= cores); with --backend ray "
                            "the CPUs of the local Ray instance (default: the cores)")
    p.add_argument("--backend", default="local", choices=("local", "ray"),
                   help='local (this machine, --jobs) or ray: each run a Ray task (pip install -e ".[ray]")')
    p.add_argument("--address", default=None,
                   help="--backend ray: a running Ray cluster (ray://HEAD:10001, HEAD:6379 or auto; default: a local "
                        "instance)")
    p.add_argument("--gpus-per-run", type=float, default=None,
                   help="--backend ray: GPUs per run (default: the run's fabric.devices on a GPU, else 0)")
    p.add_argument("--cpus-per-run", type=float, default=None,
                   help="--backend ray: CPUs per run (default: the run's fabric.devices on CPU, else 1)")


def backend_of(args):
    """The :class:`~flplat.studies.reproduction.execute.Backend` the options of ``args`` ask for."""
    from flplat.studies.reproduction.execute import make_backend

    return make_backend(args.backend, args.jobs, args.address, args.gpus_per_run, args.cpus_per_run)


def add_tune(sub) -> None:
    t = sub.add_parser("tune", help="Optuna study over config keys (grid or free search), trials as nested MLflow runs",
                       description="Run or resume an Optuna study. The objective is the validation accuracy of the "
                                   "final models (set partition.val_fraction > 0).",
                       epilog="example:\n  flplat tune configs/quickstart.yaml --space configs/search_spaces/"
                              "table2.yaml algorithm.name=fedprox partition.train_fraction=0.7 "
                              "partition.val_fraction=0.1", formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("config", help="base YAML config")
    t.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides of the base config")
    t.add_argument("--space", required=True, help="search-space YAML (configs/search_spaces/...)")
    t.add_argument("--storage", default="sqlite:///mlruns/optuna.db",
                   help="Optuna storage: an RDB URL or journal:PATH (default sqlite:///mlruns/optuna.db)")
    t.add_argument("--study-name", default=None, help="default: <experiment>-<algorithm>-<space file>")
    t.add_argument("--n-trials", type=int, default=None,
                   help="trials to run now (default: the rest of the grid, or 20 for free search)")
    t.add_argument("--progress", action="store_true", help="show each trial's round progress")
    t.add_argument("--rerun-stale", action="store_true",
                   help="run again the params of completed trials made by other code (another flplat source or "
                        "plugin code); without it they count, and the output says how many")
    add_backend(t)


def add_sweep(sub) -> None:
    w = sub.add_parser("sweep", help="run one config for several seeds (nested MLflow runs, mean/std on the parent)",
                       description="Run the same config for several seeds.")
    w.add_argument("config")
    w.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    w.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds (default 0,1,2,3,4)")
    w.add_argument("--progress", action="store_true")
    w.add_argument("--rerun-stale", action="store_true",
                   help="train again the seeds whose finished run (of an interrupted sweep) was made by other code; "
                        "without it they are used and marked")
    add_backend(w)


def add_reproduce(sub) -> None:
    rp = sub.add_parser("reproduce", help="reproduce a paper's tables: runs nested per table, paper vs ours, verdicts",
                        description="Run (or continue) a paper's tables and figures as grids of runs (cell x method x "
                                    "seed, each an MLflow run nested under one parent per table) and print the "
                                    "paper's value beside ours with a verdict per cell. Finished runs with the same "
                                    "resolved config are skipped, so an interrupted grid continues.",
                        epilog="examples:\n  flplat reproduce --list\n  flplat reproduce dapfl table3_digits "
                               "--scale smoke\n  flplat reproduce clust-psi-pfl table3 --scale reduced --seeds 0,1,2 "
                               "--jobs 2 --cells similarity_0,dirichlet_0.3 --methods FedAvg,Clust-PSI-PFL\n"
                               "  flplat reproduce dapfl table3_digits --scale smoke --add-method "
                               "\"MyProx=algorithm.name=fedprox,algorithm.mu=0.1\"",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    rp.add_argument("paper", nargs="?", help="clust-psi-pfl | cafa | dapfl | flux | pqfed")
    rp.add_argument("tables", nargs="*", help="table ids (default: all of the paper's; see --list)")
    rp.add_argument("--list", action="store_true", help="list every paper's tables, their datasets, cells and methods")
    rp.add_argument("--scale", default="reduced", help="smoke | reduced | paper (default: reduced)")
    rp.add_argument("--seeds", default=None, help="comma-separated seeds (default: 0 at smoke, else the table's)")
    rp.add_argument("--methods", default=None, help="comma-separated method names of the table (default: all)")
    rp.add_argument("--cells", default=None, help="comma-separated cell ids of the table (default: all)")
    rp.add_argument("--store-dir", default="mlruns", help="MLflow store directory (default: mlruns)")
    rp.add_argument("--out", default=None, help="also write each table's markdown and figure into this directory")
    rp.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="overrides for every run (last)")
    rp.add_argument("--baseline-seeds", type=int, default=None, metavar="N",
                    help="methods other than the reference (FedAvg) and the paper's own run only the first N seeds")
    rp.add_argument("--add-method", action="append", default=[], metavar='"NAME=key=value,..."',
                    help="add your method as a row of every train table (repeatable): NAME is the row label, the "
                         "overrides select it, e.g. \"MyAlgo=algorithm.name=myalgo,algorithm.mu=0.1\" (without "
                         "algorithm.name, NAME must be a registered algorithm); same scale, seeds, cache and verdict "
                         "against the reference as the paper's methods, no paper value")
    rp.add_argument("--render-only", action="store_true",
                    help="train nothing: render the tables from the runs already finished (the others: not run)")
    rp.add_argument("--results", default=None, metavar="MD",
                    help="write each table into this markdown document (e.g. docs/results.md), replacing its block "
                         "there, with the command and the run time under it")
    rp.add_argument("--rerun-stale", action="store_true",
                    help="train again the runs whose finished run was made by other code (another flplat source or "
                         "plugin code, or before runs recorded their code); without it such runs are used, counted "
                         "and marked in the tables")
    rp.add_argument("--import", dest="import_paths", action="append", default=[], metavar="PATH",
                    help="first import the run records of PATH (a *_runs.jsonl file of --out, or a directory of them, "
                         "e.g. docs/results/cafa/reproduce; repeatable) into the store as finished runs, so the grid "
                         "skips and renders them; without PAPER only import")
    add_backend(rp)
    rp.add_argument("--print-jobs", nargs="?", const="lines", default=None, choices=("lines", "array"),
                    help="run nothing: print one command per unfinished run (e.g. for SLURM), or with 'array' a SLURM "
                         "job array script running them; re-running prints only what is still unfinished")


def cmd_tune(args) -> int:
    from flplat.studies.tuning import tune

    if args.n_trials is not None and args.n_trials < 1:
        raise ConfigError(f"--n-trials={args.n_trials} is out of range; allowed: an integer >= 1 (or omit it)")

    backend = backend_of(args)
    out = tune(args.config, args.overrides, args.space, args.storage, args.study_name, args.n_trials, args.progress,
               backend, args.rerun_stale)
    print(json.dumps(out, indent=2))
    return 0


def cmd_sweep(args) -> int:
    from flplat.studies.tuning import sweep_seeds

    try:
        seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--seeds={args.seeds!r} must be comma-separated integers, e.g. 0,1,2") from None
    if not seeds:
        raise ConfigError(f"--seeds={args.seeds!r} names no seed; allowed: comma-separated integers, e.g. 0,1,2")
    rows = sweep_seeds(args.config, args.overrides, seeds, args.progress, backend_of(args), args.rerun_stale)
    for r in rows:
        shown = [f"{k}={r[k]:.4f}" for k in ("global_accuracy", "ad", "sdad") if k in r]
        print(" ".join([f"seed={r['seed']}", *shown, *(["(run from other code)"] if "stale" in r else [])]))
    return 0


def _reproduce_command(args) -> str:
    """The `flplat reproduce` command line that ``args`` stand for (shown under each table of --results): the one
    that trains the table's runs, so ``--render-only`` and ``--results`` are left out; ``--import`` stays (on another
    machine the table's runs come from those records, and the command trains only what they do not stand for)."""
    import shlex

    words = ["flplat", "reproduce", args.paper, *args.tables, "--scale", args.scale]
    for flag in ("seeds", "methods", "cells", "store_dir", "out"):
        v = getattr(args, flag)
        if v and not (flag == "store_dir" and v == "mlruns"):
            words += [f"--{flag.replace('_', '-')}", str(v)]
    if args.jobs not in (None, 1):
        words += ["--jobs", str(args.jobs)]
    if args.baseline_seeds is not None:
        words += ["--baseline-seeds", str(args.baseline_seeds)]
    for spec in args.add_method:
        words += ["--add-method", spec]
    for path in args.import_paths or ():
        words += ["--import", path]
    if args.set:
        words += ["--set", *args.set]
    return shlex.join(words)


def _import(paths, store_dir: str, overrides) -> None:
    from flplat.studies.reproduce import import_records

    for line in import_records(paths, store_dir, overrides).lines:
        print(line, file=sys.stderr)


def cmd_reproduce(args) -> int:
    from flplat.studies.reproduce import PAPERS, RowsRefused, listing, reproduce

    if args.list:
        print(listing())
        return 0
    if not args.paper and args.import_paths:  # only import (with a paper: after the grid's checks, then the grid)
        _import(args.import_paths, args.store_dir, args.set)
        return 0
    if not args.paper:
        raise ConfigError(f"give a paper ({', '.join(PAPERS)}), --list or --import PATH")

    def names(text):
        return [x.strip() for x in text.split(",") if x.strip()] if text else None

    seeds = None
    if args.seeds:
        try:
            seeds = [int(x) for x in names(args.seeds)]
        except ValueError:
            raise ConfigError(f"--seeds={args.seeds!r} must be comma-separated integers, e.g. 0,1,2") from None
    if args.print_jobs:
        from flplat.studies.reproduce import job_commands

        if args.import_paths:  # the jobs printed are those no imported record stands for
            _import(args.import_paths, args.store_dir, args.set)
        print(job_commands(args.paper, args.tables, args.scale, seeds, names(args.methods), names(args.cells),
                           args.store_dir, args.set, args.print_jobs, args.baseline_seeds, _reproduce_command(args),
                           args.add_method, args.rerun_stale))
        return 0
    backend = backend_of(args)  # (checks the flags of either backend)
    backend = None if backend.name == "local" else backend
    try:
        print(reproduce(args.paper, args.tables, args.scale, seeds, names(args.methods), names(args.cells),
                        args.jobs or 1, args.store_dir, args.set, args.out, args.results, _reproduce_command(args),
                        args.baseline_seeds, args.render_only, args.add_method, backend, args.rerun_stale,
                        args.import_paths))
    except RowsRefused as e:  # the tables, then one line per row without any run, exit 1
        print(e.text)
        for line in e.rows:
            print(f"flplat: error: {line}", file=sys.stderr)
        return 1
    return 0
