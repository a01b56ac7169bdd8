"""Concurrent runs on one store: four processes creating the same fresh SQLite store at once all succeed (the
first creation runs under a file lock); per-run client-state files; tune retries an interrupted grid point."""

from __future__ import annotations

import subprocess
import sys
import time

from conftest import REPO

WORKER = """
import sys, time
from pathlib import Path
from flplat.tracking.runs import ensure_experiment, open_client
store, go = sys.argv[1], Path(sys.argv[2])
print("ready", flush=True)
while not go.exists():
    time.sleep(0.005)
c = open_client(f"sqlite:///{store}/mlflow.db")
r = c.create_run(ensure_experiment(c, "x", None))
c.log_metric(r.info.run_id, "m", 1.0)
c.set_terminated(r.info.run_id, "FINISHED")
print("done", flush=True)
"""


def test_four_processes_create_one_fresh_store(tmp_path):
    from mlflow.tracking import MlflowClient

    store, go = tmp_path / "store", tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(store), str(go)], cwd=REPO, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(4)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    go.touch()  # all four start creating the store at the same moment
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [e[-2000:] for _, e in outs]
    c = MlflowClient(tracking_uri=f"sqlite:///{store}/mlflow.db")
    runs = c.search_runs([c.get_experiment_by_name("x").experiment_id])
    assert len(runs) == 4 and {r.info.status for r in runs} == {"FINISHED"}
