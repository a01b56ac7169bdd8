"""Concurrent runs on one store: four processes creating the same fresh SQLite store at once all succeed (the
first creation runs under a file lock); per-run client-state files; tune retries an interrupted grid point."""

from __future__ import annotations

import subprocess
import sys

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


def test_client_state_files_are_per_run_and_removed(tiny_cfg, tmp_path):
    """Two runs sharing federation.client_state_dir write to their own files (a personalised method's models
    on disk), get the results they get alone, and leave nothing behind unless asked to keep it."""
    from flplat.experiment import run

    over = {"algorithm.name": "ditto", "federation.rounds": 2}
    alone, _ = run(tiny_cfg(**over), progress=False)
    shared = {**over, "federation.client_state_dir": str(tmp_path)}
    seen = []

    from flplat.engine.events import Callback

    class Interleave(Callback):  # while run A is between rounds, run B runs completely on the same directory
        def on_round_end(self, end):
            seen.append(end.state.personal.path)
            if end.round == 1:
                b, _ = run(tiny_cfg(**shared, seed=1), progress=False)
                seen.append(b.state.personal.path)

    a, _ = run(tiny_cfg(**shared), callbacks=[Interleave()], progress=False)
    assert seen[0] != seen[1] and str(tmp_path) in seen[0]
    assert [{k: v for k, v in h.items() if k != "round_time_s"} for h in a.history] == \
        [{k: v for k, v in h.items() if k != "round_time_s"} for h in alone.history]
    assert list(tmp_path.iterdir()) == []  # removed at the end
    run(tiny_cfg(**shared, **{"federation.keep_client_state": "true"}), progress=False)
    (kept,) = tmp_path.iterdir()
    assert kept.name.startswith("run-") and any(kept.iterdir())


def test_artifacts_beside_a_sqlite_store_named_by_env(tmp_path, monkeypatch):
    from flplat.tracking.store import store_uris

    db = tmp_path / "elsewhere" / "mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    uri, artifacts = store_uris(None, "mlruns")
    assert uri == f"sqlite:///{db}" and artifacts == (tmp_path / "elsewhere" / "artifacts").as_uri()
    assert store_uris(None, "mlruns", str(tmp_path / "a"))[1] == (tmp_path / "a").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert store_uris(None)[1] is None


def test_environment_lookups_are_logged_unresolved(monkeypatch):
    from flplat.config_io import flatten, loggable, loggable_yaml
    from flplat.experiment import load_config

    monkeypatch.setenv("FLPLAT_TEST_SECRET", "hunter2")
    cfg = load_config(None, ["tracking.run_name=${oc.env:FLPLAT_TEST_SECRET}", "seed=3"])
    assert cfg.tracking.run_name == "hunter2"  # the run itself uses the value
    params = flatten(loggable(cfg))
    assert params["tracking.run_name"] == "${oc.env:FLPLAT_TEST_SECRET}" and params["seed"] == 3
    assert "hunter2" not in loggable_yaml(cfg)


def test_one_node_rendezvous_listens_on_no_network_port(tmp_path, monkeypatch):
    """A one-node sharded run started by flplat meets through a private file store (torch's env:// TCP store
    would listen on every interface) and binds gloo to the loopback interface."""
    import importlib

    from torch.distributed import FileStore

    from flplat.engine.launch import RDZV_ENV
    from flplat.engine.sharding import loopback_rendezvous

    rdzv = importlib.import_module("torch.distributed.rendezvous")
    monkeypatch.setitem(rdzv._rendezvous_handlers, "env", rdzv._rendezvous_handlers["env"])
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    monkeypatch.delenv(RDZV_ENV, raising=False)
    assert not loopback_rendezvous()  # not started by flplat (torchrun, SLURM): untouched
    monkeypatch.setenv(RDZV_ENV, str(tmp_path / "store"))
    assert loopback_rendezvous()
    store, rank, world = next(rdzv.rendezvous("env://", rank=0, world_size=1))
    assert isinstance(store, FileStore) and (rank, world) == (0, 1)
    import os

    assert os.environ["GLOO_SOCKET_IFNAME"].startswith("lo")
