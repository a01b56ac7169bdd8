"""Ctrl-C at many points of a run: `flplat run` of the quick start, SIGINT after each delay, and how long the
process takes to end, its exit status and the run's status in the store (the interrupt checks of docs/reliability.md).

    python tools/scripts/sigint_stress.py [--delays 0.2,0.5,1,2,3,4,6] [--after-round 0] [--repeat 1] [--limit 60]

`--after-round K`: the delays count from the line of round K (0: from the start), so that small delays land at
different points of a round (training, evaluation, the tracking writes, the checkpoint).

Prints `| delay s | exit | ended after s | run status |`; a row with exit `hung` means the process had not ended
`--limit` seconds after the signal (it is then killed). The run status is RUNNING only when the signal came before
the run existed in the store (then there is no run: `-`) or was lost.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def one(delay: float, limit: float, sig: int, workdir: Path, after_round: int = 0) -> tuple[str, float, str]:
    store = workdir / "mlruns"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.Popen([sys.executable, "-m", "flplat.cli", "run", str(REPO / "configs/quickstart.yaml"),
                             f"tracking.store_dir={store}", "federation.rounds=10000", "fabric.num_threads=1",
                             "federation.local_epochs=1"],
                            cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if after_round:
        for line in proc.stderr:
            if f"[round {after_round}/" in line:
                break
    time.sleep(delay)
    proc.send_signal(sig)
    t0 = time.perf_counter()
    try:
        proc.communicate(timeout=limit)
        rc = str(proc.returncode)
    except subprocess.TimeoutExpired:
        rc = "hung"
        proc.kill()
        proc.wait()
    took = time.perf_counter() - t0
    status = "-"
    if (store / "mlflow.db").is_file():
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")
        runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
        status = ",".join(r.info.status for r in runs) or "-"
    return rc, took, status


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--delays", default="0.2,0.5,1,2,3,4,6")
    ap.add_argument("--after-round", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--limit", type=float, default=60.0)
    ap.add_argument("--signal", default="INT", choices=("INT", "TERM"))
    a = ap.parse_args()
    sig = signal.SIGINT if a.signal == "INT" else signal.SIGTERM
    print("| delay s | exit | ended after s | run status |\n|---|---|---|---|", flush=True)
    bad = 0
    for _ in range(a.repeat):
        for d in (float(x) for x in a.delays.split(",")):
            with tempfile.TemporaryDirectory() as tmp:
                rc, took, status = one(d, a.limit, sig, Path(tmp), a.after_round)
            bad += rc == "hung" or "RUNNING" in status
            print(f"| {d:g} | {rc} | {took:.2f} | {status} |", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
