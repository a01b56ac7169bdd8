"""The ``flplat`` command line: run an experiment, print partition statistics, open the MLflow UI.

Bad input (unknown names, out-of-range values, missing files, unknown override keys) prints one line
``flplat: error: ...`` naming the key and the allowed values, exits with status 2 and creates no MLflow run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from flplat.errors import ConfigError

EPILOG_RUN = """examples:
  flplat run configs/quickstart.yaml
  flplat run configs/quickstart.yaml algorithm.name=fedprox algorithm.mu=0.01 federation.rounds=20
  flplat run configs/quickstart.yaml partition.name=similarity partition.similarity=0.0 seed=3

Override any key with dotted.key=value (see configs/quickstart.yaml for the sections: data, partition, model,
algorithm, federation, fabric, tracking). Runs are tracked in MLflow (default store: ./mlruns, see `flplat ui`)."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flplat", description="Clustered and personalized federated learning experiments.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

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

    s = sub.add_parser("partition-stats", help="print per-client label counts and non-IID metrics",
                       description="Partition a dataset and print each client's label counts and the non-IID "
                                   "metrics (PSI/WPSI, Hellinger, JSD, EMD).")
    s.add_argument("--dataset", default="digits", help="dataset name (default: digits)")
    s.add_argument("--partition", default="dirichlet", help="iid | dirichlet | similarity (default: dirichlet)")
    s.add_argument("--alpha", type=float, default=0.3, help="Dirichlet concentration (default 0.3)")
    s.add_argument("--s", type=float, default=0.5, dest="similarity", help="Similarity S in [0,1] (default 0.5)")
    s.add_argument("--clients", type=int, default=10, help="number of clients (default 10)")
    s.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    s.add_argument("--data-root", default=None, help="directory holding the dataset files")
    s.add_argument("--json", action="store_true", help="print JSON (default: a readable table)")

    u = sub.add_parser("ui", help="open the MLflow UI on the default store (./mlruns)",
                       description="Start `mlflow ui` on the flplat store (SQLite in ./mlruns unless "
                                   "MLFLOW_TRACKING_URI is set).")
    u.add_argument("--store-dir", default="mlruns", help="the store directory (default: mlruns)")
    u.add_argument("--host", default="127.0.0.1")
    u.add_argument("--port", type=int, default=5000)

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

    w = sub.add_parser("sweep", help="run one config for several seeds (nested MLflow runs, mean/std on the parent)",
                       description="Run the same config for several seeds.")
    w.add_argument("config")
    w.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    w.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds (default 0,1,2,3,4)")
    w.add_argument("--progress", action="store_true")

    tb = sub.add_parser("table", help="paper-style tables (Table III accuracy / Table IV AD±SDAD) from MLflow runs",
                        description="Aggregate the FINISHED runs of an MLflow experiment into a markdown table: "
                                    "rows = algorithms, columns = partition settings, cells over seeds.")
    tb.add_argument("--experiment", required=True, help="MLflow experiment name")
    tb.add_argument("--kind", choices=("accuracy", "fairness", "best", "window"), default="accuracy",
                    help="accuracy: global accuracy mean ± std; fairness: AD ± SDAD; best / window: best and "
                         "last-window mean global test accuracy (CAFA Tables V / IV; window: "
                         "federation.accuracy_window)")
    tb.add_argument("--metric", default="global_accuracy",
                    help="for --kind accuracy: the run metric shown, e.g. mean_local_accuracy_last10, acc_few_last10, "
                         "rounds_to_acc70 (DA-PFL Tables I, IV, VI)")
    tb.add_argument("--group-by", default="", help="comma-separated params that split rows, e.g. "
                                                   "partition.num_clients")
    tb.add_argument("--store-dir", default="mlruns")
    tb.add_argument("--silhouette-plot", default=None, metavar="PNG",
                    help="also write Fig. 5 (silhouette vs τ of the Clust-PSI-PFL runs) to this file")

    npl = sub.add_parser("noniid-plot", help="Fig. 3: WPSI / HD / JSD / EMD against Dirichlet α and Similarity S",
                         description="Partition a dataset for several α and S values and plot the non-IID metrics "
                                     "(means over seeds); also prints them as JSON.")
    npl.add_argument("--dataset", default="digits")
    npl.add_argument("--clients", type=int, default=10)
    npl.add_argument("--alphas", default="50,5,1,0.7,0.5,0.3,0.2,0.1,0.09,0.07,0.05")
    npl.add_argument("--s-values", default="1,0.9,0.7,0.5,0.3,0.2,0.1,0.07,0.05,0.03,0")
    npl.add_argument("--seeds", default="0,1,2,3,4")
    npl.add_argument("--data-root", default=None)
    npl.add_argument("--out", default="noniid.png", help="output image (default noniid.png)")

    rs = sub.add_parser("runs", help="list runs left RUNNING by a kill or power cut (--stale), and mark them",
                        description="Find RUNNING runs whose heartbeat stopped (SIGKILL, power cut, lost node). "
                                    "Resume one with `flplat run --resume RUN_ID`.")
    rs.add_argument("--stale", action="store_true", required=True, help="list stale RUNNING runs")
    rs.add_argument("--mark", action="store_true", help="end them as KILLED (tag flplat.stale=true)")
    rs.add_argument("--experiment", default=None, help="only this experiment (default: all)")
    rs.add_argument("--store-dir", default="mlruns")

    rp = sub.add_parser("reproduce", help="reproduce a paper's tables: runs nested per table, paper vs ours, verdicts",
                        description="Run (or continue) a paper's tables and figures as grids of runs (cell x method x "
                                    "seed, each an MLflow run nested under one parent per table) and print the "
                                    "paper's value beside ours with a verdict per cell. Finished runs with the same "
                                    "resolved config are skipped, so an interrupted grid continues.",
                        epilog="examples:\n  flplat reproduce --list\n  flplat reproduce dapfl table3_digits "
                               "--scale smoke\n  flplat reproduce clust-psi-pfl table3 --scale reduced --seeds 0,1,2 "
                               "--jobs 2 --cells similarity_0,dirichlet_0.3 --methods FedAvg,Clust-PSI-PFL",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    rp.add_argument("paper", nargs="?", help="clust-psi-pfl | cafa | dapfl | flux | pqfed")
    rp.add_argument("tables", nargs="*", help="table ids (default: all of the paper's; see --list)")
    rp.add_argument("--list", action="store_true", help="list every paper's tables, cells and methods")
    rp.add_argument("--scale", default="reduced", help="smoke | reduced | paper (default: reduced)")
    rp.add_argument("--seeds", default=None, help="comma-separated seeds (default: 0 at smoke, else the table's)")
    rp.add_argument("--methods", default=None, help="comma-separated method names of the table (default: all)")
    rp.add_argument("--cells", default=None, help="comma-separated cell ids of the table (default: all)")
    rp.add_argument("--jobs", type=int, default=1, help="runs in parallel processes, one thread each (<= cores)")
    rp.add_argument("--store-dir", default="mlruns", help="MLflow store directory (default: mlruns)")
    rp.add_argument("--out", default=None, help="also write each table's markdown and figure into this directory")
    rp.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="overrides for every run (last)")
    rp.add_argument("--baseline-seeds", type=int, default=None, metavar="N",
                    help="methods other than the reference (FedAvg) and the paper's own run only the first N seeds")
    rp.add_argument("--render-only", action="store_true",
                    help="train nothing: render the tables from the runs already finished (the others: not run)")
    rp.add_argument("--results", default=None, metavar="MD",
                    help="write each table into this markdown document (e.g. docs/results.md), replacing its block "
                         "there, with the command and the run time under it")

    c = sub.add_parser("compare", help="final metric mean ± std over seeds per algorithm, and per-round curves "
                                       "with a band over seeds (logged to a parent run)",
                       description="Compare the FINISHED runs of an experiment over seeds: a table of the final "
                                   "metric (mean ± std, n = seeds) per algorithm and partition setting, and a PNG "
                                   "of the per-round curves (mean, ± std band). Both are printed/written and logged "
                                   "to a parent run of the experiment (flplat.kind=compare).",
                       epilog="example:\n  flplat compare --experiment quickstart --metric global_accuracy",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--experiment", required=True, help="MLflow experiment name")
    c.add_argument("--metric", default="global_accuracy", help="per-round run metric (default global_accuracy)")
    c.add_argument("--by", default="algorithm",
                   help="rows: algorithm (default), dataset, model, partition or comma-separated config keys, "
                        "e.g. algorithm,federation.local_epochs")
    c.add_argument("--out", default=None, metavar="PNG", help="also write the curves here (default: "
                                                              "compare_<experiment>_<metric>.png)")
    c.add_argument("--no-log", action="store_true", help="do not log the comparison to a parent run")
    c.add_argument("--store-dir", default="mlruns")

    e = sub.add_parser("evaluate", help="score a run's saved model on other data (no training, no new run)",
                       description="Load a run's saved model (models/ artifacts) and score it on the data of the "
                                   "run's config with --dataset/--partition/KEY=VALUE changes.",
                       epilog="example:\n  flplat evaluate RUN_ID --partition iid\n"
                              "  flplat evaluate RUN_ID partition.alpha=0.1 seed=3",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("run_id", metavar="RUN_ID")
    e.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides of the run's config")
    e.add_argument("--which", default="global", choices=("global", "cluster", "personal"))
    e.add_argument("--index", type=int, default=None, help="cluster or client index (for --which cluster/personal)")
    e.add_argument("--dataset", default=None, help="data.name to score on")
    e.add_argument("--partition", default=None, help="partition.name to score on")
    e.add_argument("--store-dir", default="mlruns")

    sub.add_parser("list", help="list datasets, partitions, models and algorithms",
                   description="List the registered datasets, partitions, models and algorithms.")
    return p


def cmd_run(args) -> int:
    from flplat.config import to_yaml
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
    from flplat.tracking.runs import HEARTBEAT_INTERVAL_TAG, HEARTBEAT_TAG, store_uris

    if args.config and "=" not in args.config:  # (argparse puts a first KEY=VALUE override in `config`)
        raise ConfigError(f"--resume={args.resume} takes no config file ({args.config!r}): the run continues with "
                          "the config it started with; allowed after --resume: tracking.* overrides")
    overrides = ([args.config] if args.config else []) + list(args.overrides)
    cfg, data = resume_checkpoint(args.resume, overrides)
    if cfg.tracking.enabled and not args.force:
        import time

        from mlflow.tracking import MlflowClient

        uri, _ = store_uris(cfg.tracking.uri, cfg.tracking.store_dir)
        run = MlflowClient(tracking_uri=uri).get_run(args.resume)
        beat, interval = run.data.tags.get(HEARTBEAT_TAG), float(run.data.tags.get(HEARTBEAT_INTERVAL_TAG, 30))
        if run.info.status == "RUNNING" and beat and time.time() - float(beat) < 2 * interval + 10:
            age = time.time() - float(beat)
            raise ConfigError(f"--resume={args.resume}: the run is still alive (heartbeat {age:.0f} s ago); "
                              "allowed: a KILLED / FAILED / stale run, or add --force")
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


def cmd_partition_stats(args) -> int:
    from flplat.data.datasets import load_dataset
    from flplat.data.partitions import build_federation
    from flplat.engine.state import derive_seed
    from flplat.experiment import load_config
    from flplat.metrics.noniid import client_metrics, noniid_summary

    overrides = [f"data.name={args.dataset}", f"partition.name={args.partition}", f"partition.alpha={args.alpha}",
                 f"partition.similarity={args.similarity}", f"partition.num_clients={args.clients}",
                 f"seed={args.seed}"]
    if args.data_root:
        overrides.append(f"data.root={args.data_root}")
    cfg = load_config(None, overrides)
    dataset = load_dataset(cfg.data, derive_seed(cfg.seed, "data"))
    fed = build_federation(dataset, cfg.partition, derive_seed(cfg.seed, "partition"))
    counts = fed.label_counts("all")
    per = client_metrics(counts)
    out = {
        "dataset": cfg.data.name, "partition": cfg.partition.name, "num_clients": fed.num_clients,
        "num_classes": fed.num_classes, "seed": cfg.seed,
        "params": {"alpha": cfg.partition.alpha} if cfg.partition.name == "dirichlet" else
                  ({"s": cfg.partition.similarity} if cfg.partition.name == "similarity" else {}),
        "summary": {k: float(v) for k, v in noniid_summary(counts).items()},
        "clients": [{"client": k, "num_samples": int(counts[k].sum()), "label_counts": counts[k].tolist(),
                     **{m: float(per[m][k]) for m in per}} for k in range(fed.num_clients)],
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{out['dataset']} / {out['partition']} {out['params']} / {fed.num_clients} clients / seed {cfg.seed}")
    print("  " + "  ".join(f"{k}={v:.4f}" for k, v in out["summary"].items()))
    for c in out["clients"]:
        print(f"  client {c['client']:>4} n={c['num_samples']:>6} psi={c['psi']:.4f} counts={c['label_counts']}")
    return 0


def ui_command(store_dir: str, host: str, port: int) -> list[str]:
    """The MLflow UI server, started with this interpreter (``sys.executable -m mlflow``): it works from
    ``.venv/bin/flplat ui`` without an activated virtualenv (nothing is looked up on PATH)."""
    from flplat.tracking.runs import store_uris

    uri, artifacts = store_uris(None, store_dir)
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", host, "--port", str(port)]
    if artifacts:
        cmd += ["--default-artifact-root", artifacts]
    return cmd


def experiment_url(base: str, experiment_id: str) -> str:
    """An experiment's page in the model-training view (MLflow >= 3.x otherwise opens its GenAI view, whatever
    the experiment's kind tag says, until "Model training" is clicked once in the sidebar)."""
    return f"{base}/#/experiments/{experiment_id}?workflowType=machine_learning"


def _experiment_links(store_dir: str, base: str) -> list[str]:
    from flplat.tracking.runs import store_uris

    uri, _ = store_uris(None, store_dir)
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).is_file():
        return []
    from mlflow.tracking import MlflowClient

    try:
        exps = MlflowClient(tracking_uri=uri).search_experiments(max_results=20, order_by=["last_update_time DESC"])
    except Exception:  # an unreachable server: the UI will say so
        return []
    return [f"  {e.name}: {experiment_url(base, e.experiment_id)}" for e in exps]


def cmd_ui(args) -> int:
    cmd = ui_command(args.store_dir, args.host, args.port)
    print("running: " + " ".join(cmd), file=sys.stderr)
    links = _experiment_links(args.store_dir, f"http://{args.host}:{args.port}")
    if links:
        print("experiments (runs table and charts):\n" + "\n".join(links), file=sys.stderr)
    os.execv(cmd[0], cmd)
    return 0  # not reached


def cmd_compare(args) -> int:
    from flplat.tracking.compare import compare
    from flplat.tracking.runs import store_uris

    uri, _ = store_uris(None, args.store_dir)
    out = args.out or f"compare_{args.experiment}_{args.metric}.png".replace("/", "_")
    res = compare(args.experiment, uri, args.metric, args.by, out, log=not args.no_log)
    print(res["table"])
    print(f"wrote {out} ({res['runs']} runs)" + (f"; logged to run {res['run_id']}" if res["run_id"] else ""),
          file=sys.stderr)
    return 0


def cmd_evaluate(args) -> int:
    from flplat.studies.evaluate import evaluate_run

    over = list(args.overrides)
    if args.dataset:
        over.append(f"data.name={args.dataset}")
    if args.partition:
        over.append(f"partition.name={args.partition}")
    print(json.dumps(evaluate_run(args.run_id, args.which, args.index, over, store_dir=args.store_dir), indent=2))
    return 0


def cmd_tune(args) -> int:
    from flplat.studies.tuning import tune

    if args.n_trials is not None and args.n_trials < 1:
        raise ConfigError(f"--n-trials={args.n_trials} is out of range; allowed: an integer >= 1 (or omit it)")

    out = tune(args.config, args.overrides, args.space, args.storage, args.study_name, args.n_trials, args.progress)
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
    rows = sweep_seeds(args.config, args.overrides, seeds, args.progress)
    for r in rows:
        shown = [f"{k}={r[k]:.4f}" for k in ("global_accuracy", "ad", "sdad") if k in r]
        print(" ".join([f"seed={r['seed']}", *shown]))
    return 0


def _floats(text: str, flag: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{flag}={text!r} must be comma-separated numbers") from None


def cmd_table(args) -> int:
    from flplat.tracking.reports import collect_runs, runs_table
    from flplat.tracking.runs import store_uris

    uri, _ = store_uris(None, args.store_dir)
    rows = collect_runs(args.experiment, uri)
    if not rows:
        raise ConfigError(f"--experiment={args.experiment!r} has no finished runs in {uri}")
    group = [g for g in args.group_by.split(",") if g]
    params = sorted({k for r in rows for k in r["params"]})
    for g in group:
        if g not in params:
            raise ConfigError(f"--group-by={g!r} is not a param of the runs of {args.experiment!r}; allowed: "
                              + ", ".join(p for p in params if p.startswith(("partition.", "algorithm.", "seed"))))
    metrics = sorted({k for r in rows for k in r["metrics"]})
    if args.kind == "accuracy" and args.metric not in metrics:
        raise ConfigError(f"--metric={args.metric!r} is not a metric of the runs of {args.experiment!r}; allowed: "
                          + ", ".join(metrics))
    print(runs_table(rows, args.kind, group, args.metric))
    if args.silhouette_plot:
        from flplat.tracking.reports import plot_silhouette_curves, silhouette_curves

        curves = silhouette_curves(args.experiment, uri)
        if not curves:
            raise ConfigError(f"--experiment={args.experiment!r} has no Clust-PSI-PFL run with a silhouette curve")
        plot_silhouette_curves(curves, args.silhouette_plot)
        print(f"wrote {args.silhouette_plot}", file=sys.stderr)
    return 0


def cmd_noniid_plot(args) -> int:
    from flplat.data.datasets import load_dataset
    from flplat.engine.state import derive_seed
    from flplat.experiment import load_config
    from flplat.tracking.reports import noniid_curves, plot_noniid_curves

    over = [f"data.name={args.dataset}"] + ([f"data.root={args.data_root}"] if args.data_root else [])
    cfg = load_config(None, over)
    seeds = [int(x) for x in _floats(args.seeds, "--seeds")]
    alphas, s_values = _floats(args.alphas, "--alphas"), _floats(args.s_values, "--s-values")
    if not seeds:
        raise ConfigError(f"--seeds={args.seeds!r} names no seed; allowed: comma-separated integers, e.g. 0,1,2")
    if any(not (a > 0) or a == float("inf") for a in alphas):
        raise ConfigError(f"--alphas={args.alphas!r} is out of range; allowed: finite numbers > 0")
    if any(not (0.0 <= v <= 1.0) for v in s_values):
        raise ConfigError(f"--s-values={args.s_values!r} is out of range; allowed: numbers in [0, 1]")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir):
        raise ConfigError(f"--out={args.out!r}: directory {out_dir} does not exist; allowed: a path in an existing "
                          "directory")
    dataset = load_dataset(cfg.data, derive_seed(0, "data"))
    curves = noniid_curves(dataset, args.clients, alphas, s_values, seeds)
    plot_noniid_curves(curves, args.out)
    print(json.dumps(curves, indent=2))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def cmd_runs(args) -> int:
    from mlflow.tracking import MlflowClient

    from flplat.tracking.runs import HEARTBEAT_TAG, stale_runs, store_uris

    uri, _ = store_uris(None, args.store_dir)
    client = MlflowClient(tracking_uri=uri)
    if args.experiment:
        exp = client.get_experiment_by_name(args.experiment)
        if exp is None:
            raise ConfigError(f"--experiment={args.experiment!r} does not exist in {uri}")
        ids = [exp.experiment_id]
    else:
        ids = [e.experiment_id for e in client.search_experiments()]
    runs = stale_runs(client, ids)
    import time

    for r in runs:
        beat = r.data.tags.get(HEARTBEAT_TAG)
        age = f"{time.time() - float(beat):.0f} s" if beat else "never"
        print(f"{r.info.run_id}  {r.info.run_name or '-':30s}  last heartbeat: {age}")
        if args.mark:
            client.set_tag(r.info.run_id, "flplat.stale", "true")
            client.set_terminated(r.info.run_id, "KILLED")
    print(f"{len(runs)} stale run(s)" + (" marked KILLED" if args.mark and runs else ""), file=sys.stderr)
    return 0


def _reproduce_command(args) -> str:
    """The `flplat reproduce` command line that ``args`` stand for (shown under each table of --results): the one
    that trains the table's runs, so ``--render-only`` and ``--results`` are left out."""
    import shlex

    words = ["flplat", "reproduce", args.paper, *args.tables, "--scale", args.scale]
    for flag in ("seeds", "methods", "cells", "store_dir", "out"):
        v = getattr(args, flag)
        if v and not (flag == "store_dir" and v == "mlruns"):
            words += [f"--{flag.replace('_', '-')}", str(v)]
    if args.jobs != 1:
        words += ["--jobs", str(args.jobs)]
    if args.baseline_seeds is not None:
        words += ["--baseline-seeds", str(args.baseline_seeds)]
    if args.set:
        words += ["--set", *args.set]
    return shlex.join(words)


def cmd_reproduce(args) -> int:
    from flplat.studies.reproduce import PAPERS, listing, reproduce

    if args.list:
        print(listing())
        return 0
    if not args.paper:
        raise ConfigError(f"give a paper ({', '.join(PAPERS)}) or --list")

    def names(text):
        return [x.strip() for x in text.split(",") if x.strip()] if text else None

    seeds = None
    if args.seeds:
        try:
            seeds = [int(x) for x in names(args.seeds)]
        except ValueError:
            raise ConfigError(f"--seeds={args.seeds!r} must be comma-separated integers, e.g. 0,1,2") from None
    print(reproduce(args.paper, args.tables, args.scale, seeds, names(args.methods), names(args.cells), args.jobs,
                    args.store_dir, args.set, args.out, args.results, _reproduce_command(args), args.baseline_seeds,
                    args.render_only))
    return 0


def cmd_list(args) -> int:
    from flplat.algorithms import ALGORITHMS
    from flplat.data.datasets import DATASETS
    from flplat.data.partitions import PARTITIONS
    from flplat.models import MODELS

    for title, reg in (("datasets", DATASETS), ("partitions", PARTITIONS), ("models", MODELS),
                       ("algorithms", ALGORITHMS)):
        print(f"{title}: {', '.join(sorted(reg))}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    # overrides may also follow options (flplat tune CONFIG --space S key=value)
    if extra and hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    handler = {"run": cmd_run, "partition-stats": cmd_partition_stats, "ui": cmd_ui, "list": cmd_list,
               "tune": cmd_tune, "sweep": cmd_sweep, "reproduce": cmd_reproduce, "table": cmd_table,
               "noniid-plot": cmd_noniid_plot, "runs": cmd_runs, "compare": cmd_compare,
               "evaluate": cmd_evaluate}[args.command]
    from flplat.errors import RunFailed, Terminated

    previous = _on_sigterm()
    try:
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
    in the main thread, so a run ends like Ctrl-C: KILLED, artifacts and a checkpoint written, exit 143."""
    import signal
    import threading

    from flplat.errors import Terminated

    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM kills at once
        raise Terminated()

    return signal.signal(signal.SIGTERM, handler)


def _restore_sigterm(previous) -> None:
    if previous is not None:
        import signal

        signal.signal(signal.SIGTERM, previous)


FULL_EXIT_ENV = "FLPLAT_FULL_EXIT"


def exit_now(rc: int) -> None:
    """End the process with status ``rc`` without the interpreter's teardown.

    After a run, Python's finalisation (clearing the modules of torch, lightning, scikit-learn, MLflow one object at
    a time) takes 1-2 s here (measured: ``import torch, lightning`` alone leaves 1.2 s between its last line and the
    process's end), which every ``flplat`` command, grid cell and rank of a sharded run would pay. This does what
    the interpreter's exit does that matters, then ``os._exit``: waits for non-daemon threads, runs the ``atexit``
    handlers (logging, MLflow, multiprocessing, weakref finalizers and temporary directories), flushes stdout and
    stderr. ``FLPLAT_FULL_EXIT=1`` in the environment keeps the normal exit (e.g. for tools that hook the
    interpreter's shutdown)."""
    import os

    if os.environ.get(FULL_EXIT_ENV, "") not in ("", "0"):
        sys.exit(rc)
    import atexit
    import threading

    for t in threading.enumerate():
        if t is not threading.current_thread() and not t.daemon:
            t.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (flplat ... | head) or stream
            pass
    os._exit(rc)


def entry() -> None:
    """The ``flplat`` command (and ``python -m flplat.cli``): :func:`main`, then :func:`exit_now`."""
    exit_now(main())


if __name__ == "__main__":
    entry()
