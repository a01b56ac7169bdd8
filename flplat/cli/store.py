"""`flplat ui`, `flplat runs --stale`, `flplat evaluate`: the MLflow store itself -- open its UI, find (and
mark) runs left RUNNING by a kill, score a run's saved model on other data."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from flplat.errors import ConfigError


def add_ui(sub) -> None:
    u = sub.add_parser("ui", help="open the MLflow UI on the default store (./mlruns)",
                       description="Start `mlflow ui` on the flplat store (SQLite in ./mlruns unless "
                                   "MLFLOW_TRACKING_URI is set).")
    u.add_argument("--store-dir", default="mlruns", help="the store directory (default: mlruns)")
    u.add_argument("--host", default="127.0.0.1")
    u.add_argument("--port", type=int, default=5000)


def add_runs(sub) -> None:
    rs = sub.add_parser("runs", help="list runs left RUNNING by a kill or power cut (--stale), and mark them",
                        description="Find RUNNING runs whose heartbeat stopped (SIGKILL, power cut, lost node). "
                                    "Resume one with `flplat run --resume RUN_ID`.")
    rs.add_argument("--stale", action="store_true", required=True, help="list stale RUNNING runs")
    rs.add_argument("--mark", action="store_true", help="end them as KILLED (tag flplat.stale=true)")
    rs.add_argument("--experiment", default=None, help="only this experiment (default: all)")
    rs.add_argument("--store-dir", default="mlruns")


def add_evaluate(sub) -> None:
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


def ui_command(store_dir: str, host: str, port: int) -> list[str]:
    """The MLflow UI server, started with this interpreter (``sys.executable -m mlflow``): it works from
    ``.venv/bin/flplat ui`` without an activated virtualenv (nothing is looked up on PATH)."""
    from flplat.tracking.store import store_uris

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
    from flplat.tracking.store import store_uris

    uri, _ = store_uris(None, store_dir)
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).is_file():
        return []
    from mlflow.tracking import MlflowClient

    try:
        exps = MlflowClient(tracking_uri=uri).search_experiments(max_results=20, order_by=["last_update_time DESC"])
    except Exception:  # an unreachable server: the UI will say so
        return []
    return [f"  {e.name}: {experiment_url(base, e.experiment_id)}" for e in exps]


def _port_free(host: str, port: int) -> None:
    import socket

    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as e:
        raise ConfigError(f"--port={port} on {host} is not free ({e.strerror or e}); allowed: a free port (e.g. "
                          "--port 5001), or stop the server holding it") from None


def cmd_ui(args) -> int:
    """The MLflow UI, stopped with everything it started when flplat ends (:func:`flplat.cli.server.serve`: its
    own process group, a parent-death signal and a watchdog), not left holding the port."""
    from flplat.cli.server import serve
    from flplat.tracking.store import reachable_uri

    reachable_uri(None, args.store_dir)  # the experiment links and the server need the store: one short probe
    _port_free(args.host, args.port)
    cmd = ui_command(args.store_dir, args.host, args.port)
    print("running: " + " ".join(cmd), file=sys.stderr)
    links = _experiment_links(args.store_dir, f"http://{args.host}:{args.port}")
    if links:
        print("experiments (runs table and charts):\n" + "\n".join(links), file=sys.stderr)
    return serve(cmd)


def cmd_runs(args) -> int:
    from flplat.tracking.store import reachable_uri

    uri = reachable_uri(None, args.store_dir)
    from mlflow.tracking import MlflowClient

    from flplat.tracking.heartbeat import HEARTBEAT_TAG, stale_runs

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


def cmd_evaluate(args) -> int:
    from flplat.tracking.store import reachable_uri

    reachable_uri(None, args.store_dir)
    from flplat.studies.evaluate import evaluate_run

    over = list(args.overrides)
    if args.dataset:
        over.append(f"data.name={args.dataset}")
    if args.partition:
        over.append(f"partition.name={args.partition}")
    print(json.dumps(evaluate_run(args.run_id, args.which, args.index, over, store_dir=args.store_dir), indent=2))
    return 0
