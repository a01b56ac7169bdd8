"""`flplat run`: one experiment from a YAML config with dotted overrides, or ``--resume RUN_ID`` of an
unfinished run from its checkpoint (refused while the run still shows a live heartbeat)."""

from __future__ import annotations

import argparse
import sys

from flplat.errors import ConfigError

EPILOG_RUN = """examples:
  flplat run configs/quickstart.yaml
  flplat run configs/quickstart.yaml algorithm.name=fedprox algorithm.mu=0.01 federation.rounds=20
  flplat run configs/quickstart.yaml partition.name=similarity partition.similarity=0.0 seed=3

Override any key with dotted.key=value (see configs/quickstart.yaml for the sections: data, partition, model,
algorithm, federation, fabric, tracking). Runs are tracked in MLflow (default store: ./mlruns, see `flplat ui`)."""


def add_run(sub) -> None:
    r = sub.add_parser("run", help="run one experiment from a YAML config with dotted overrides",
                       description="Run one federated experiment and track it in MLflow.", epilog=EPILOG_RUN,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("config", nargs="?", help="YAML config file, e.g. configs/quickstart.yaml (none with --resume)")
    r.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted config overrides")
    r.add_argument("--resume", metavar="RUN_ID", default=None,
                   help="continue an unfinished (KILLED / FAILED / stale RUNNING) run from its last checkpoint, "
                        "in the same MLflow run; only tracking.* overrides (e.g. tracking.store_dir) are allowed")
    r.add_argument("--force", action="store_true", help="with --resume: even if the run still shows a heartbeat")
    r.add_argument("--no-progress", action="store_true", help="no progress display")
    r.add_argument("--print-config", action="store_true", help="print the resolved config and exit")


def cmd_run(args) -> int:
    from flplat.config_io import to_yaml
    from flplat.configure import load_config  # not flplat.experiment: the other processes start before Lightning

    if args.resume:
        return _resume(args)
    if args.config is None:
        raise ConfigError("flplat run needs a config file (e.g. configs/quickstart.yaml) or --resume RUN_ID")
    cfg = load_config(args.config, args.overrides)
    if args.print_config:
        print(to_yaml(cfg), end="")
        return 0
    from flplat.engine.launch import finish, launch_early

    procs = launch_early(cfg.fabric)  # the other local processes start importing now, in parallel
    rc = 1
    try:
        rc = _run_and_report(cfg, args)
    finally:
        rc = finish(procs, rc)
    return rc


def _resume(args) -> int:
    from flplat.experiment import resume_checkpoint
    from flplat.tracking.heartbeat import heartbeat_age, is_stale, process_gone, stale_after
    from flplat.tracking.store import reachable_uri

    if args.config and "=" not in args.config:  # (argparse puts a first KEY=VALUE override in `config`)
        raise ConfigError(f"--resume={args.resume} takes no config file ({args.config!r}): the run continues with "
                          "the config it started with; allowed after --resume: tracking.* overrides")
    overrides = ([args.config] if args.config else []) + list(args.overrides)
    cfg, data = resume_checkpoint(args.resume, overrides)
    if cfg.tracking.enabled and not args.force:
        from mlflow.tracking import MlflowClient

        uri = reachable_uri(cfg.tracking.uri, cfg.tracking.store_dir)
        run = MlflowClient(tracking_uri=uri).get_run(args.resume)
        if run.info.status == "RUNNING" and process_gone(run):
            tags = run.data.tags
            print(f"flplat: run {args.resume} was left RUNNING by process {tags.get('flplat.pid')} on this machine "
                  f"({tags.get('flplat.host')}), which is gone: resuming it", file=sys.stderr)
        elif run.info.status == "RUNNING" and not is_stale(run):  # the one stale rule (flplat.tracking.heartbeat)
            raise ConfigError(f"--resume={args.resume}: the run is still alive (heartbeat {heartbeat_age(run):.0f} s "
                              f"ago, stale after {stale_after(run):.0f} s); allowed: a KILLED / FAILED / stale run, "
                              "or add --force")
    print(f"flplat: resuming run {args.resume} after round {data['round']}", file=sys.stderr)
    return _run_and_report(cfg, args, resume=data)


def _run_and_report(cfg, args, resume=None) -> int:
    from flplat.experiment import run

    summary, run_id = run(cfg, progress=not args.no_progress, resume=resume)
    from flplat.engine.sharding import is_main_process

    if not is_main_process():
        return 0
    m = summary.metrics
    keys = ("global_accuracy", "ad", "sdad", "global_test_accuracy", "train_loss")
    print(" ".join(f"{k}={m[k]:.4f}" for k in keys if k in m))
    if run_id:
        print(f"mlflow run: {run_id} (experiment {cfg.tracking.experiment!r}; open with `flplat ui`)")
    return 0
