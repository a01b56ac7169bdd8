"""End-to-end runs of the `flplat` command and its bad-input contract (exit 2, one line, no MLflow run)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO

FLPLAT = [sys.executable, "-m", "flplat.cli"]


def _flplat(args, cwd, timeout=300, **kw):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(FLPLAT + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, **kw)


def _runs(store: Path):
    from mlflow.tracking import MlflowClient

    db = store / "mlflow.db"
    if not db.exists():
        return []
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    return client.search_runs([e.experiment_id for e in client.search_experiments()]), client


def test_quickstart_end_to_end(tmp_path):
    store = tmp_path / "mlruns"
    res = _flplat(["run", str(REPO / "configs/quickstart.yaml"),
                  f"tracking.store_dir={store}"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "global_accuracy=" in res.stdout and "[round 20/20]" in res.stderr
    runs, client = _runs(store)
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.params["algorithm.name"] == "fedavg" and run.data.params["partition.alpha"] == "0.3"
    for key in ("wpsi", "hellinger", "jsd", "emd", "hellinger_to_global", "jsd_to_global", "emd_to_global"):
        assert key in run.data.metrics
    hist = client.get_metric_history(run.info.run_id, "global_accuracy")
    assert [m.step for m in hist] == list(range(1, 21))
    assert hist[-1].value > 0.75  # digits, 20 rounds of FedAvg
    for key in ("ad", "sdad", "train_loss", "round_time_s", "bytes_up", "bytes_down"):
        assert len(client.get_metric_history(run.info.run_id, key)) == 20, key
    assert [m.step for m in client.get_metric_history(run.info.run_id, "wpsi")] == list(range(21))
    arts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "clients", "plots", "partition"} <= arts
    plots = {a.path for a in client.list_artifacts(run.info.run_id, "plots")}
    assert "plots/local_accuracy_ecdf.png" in plots
    csv = Path(client.download_artifacts(run.info.run_id, "clients/final_client_metrics.csv", str(tmp_path)))
    lines = csv.read_text().splitlines()
    assert lines[0].startswith("client,num_train,num_test,correct,accuracy") and len(lines) == 11


BAD = [
    (["data.name=nope"], "data.name", "digits"),
    (["partition.alpha=0"], "partition.alpha", "> 0"),
    (["partition.alpha=-1"], "partition.alpha", "> 0"),
    (["partition.name=similarity", "partition.similarity=1.5"], "partition.similarity", "[0, 1]"),
    (["federation.client_fraction=0"], "federation.client_fraction", "(0, 1]"),
    (["federation.client_fraction=1.2"], "federation.client_fraction", "(0, 1]"),
    (["federation.local_epochs=0"], "federation.local_epochs", ">= 1"),
    (["partition.num_clients=5000"], "partition.num_clients", ""),
    (["algorithm.name=nope"], "algorithm.name", "fedavg"),
    (["model.name=nope"], "model.name", "mlp"),
    (["partition.name=nope"], "partition.name", "dirichlet"),
    (["federation.nope=1"], "federation.nope", ""),
    (["algorithm.mu=0.1"], "algorithm.mu", "valid keys"),
    (["algorithm.name=fedprox", "algorithm.mu=-1"], "algorithm.mu", ">= 0"),
    (["fabric.precision=8-bit"], "fabric.precision", "32-true"),
    (["partition.num_clients=100", "partition.alpha=0.01", "partition.min_samples=30"], "partition.", ""),
    # checks that need the federation (raised while the strategy is built, before any run exists)
    (["algorithm.name=cafa", "partition.val_fraction=0"], "algorithm.abfa_split", "partition.val_fraction > 0"),
    (["algorithm.name=poc", "algorithm.d=2"], "algorithm.d=2 is below m=5", "[5, 10]"),
]


@pytest.mark.parametrize("overrides,key,allowed", BAD, ids=[b[1] + "=" + b[0][-1].split("=")[1] for b in BAD])
def test_bad_input_exits_2_with_one_line_and_no_run(tmp_path, overrides, key, allowed):
    store = tmp_path / "mlruns"
    res = _flplat(["run", str(REPO / "configs/quickstart.yaml"), f"tracking.store_dir={store}", *overrides],
                  cwd=tmp_path, timeout=120)
    assert res.returncode == 2, (res.stdout, res.stderr)
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("flplat: error:"), err
    assert key in err and allowed in err, err
    assert not store.exists() or not _runs(store) or not _runs(store)[0]


def test_missing_config_file(tmp_path):
    res = _flplat(["run", "nope.yaml"], cwd=tmp_path)
    assert res.returncode == 2 and "nope.yaml" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "mlruns").exists()


def test_help_everywhere(tmp_path):
    for args in (["--help"], ["run", "--help"], ["partition-stats", "--help"], ["ui", "--help"], ["list", "--help"]):
        res = _flplat(args, cwd=tmp_path)
        assert res.returncode == 0 and "usage:" in res.stdout


def test_python_dash_m_flplat_is_the_command(tmp_path):
    """``python -m flplat`` is the same command as ``flplat`` (and ``python -m flplat.cli``)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-m", "flplat", "--help"], cwd=tmp_path, capture_output=True, text=True,
                         env=env, timeout=120)
    assert res.returncode == 0 and "usage: flplat" in res.stdout


def test_partition_stats_json(tmp_path):
    res = _flplat(["partition-stats", "--dataset", "digits", "--partition", "similarity", "--s", "0",
                   "--clients", "10", "--seed", "1", "--json"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["num_clients"] == 10 and len(out["clients"]) == 10
    assert set(out["summary"]) == {"wpsi", "hellinger", "jsd", "emd", "hellinger_to_global", "jsd_to_global",
                                   "emd_to_global"}
    assert {"psi", "hellinger_to_global"} <= set(out["clients"][0])
    sizes = {c["num_samples"] for c in out["clients"]}
    assert len(sizes) == 1  # Similarity gives equal client sizes
    # S = 0: labels sorted and dealt -> each client holds at most 2 classes
    assert all(sum(1 for v in c["label_counts"] if v) <= 2 for c in out["clients"])
    assert out["summary"]["wpsi"] > 1.0


def test_partition_stats_bad_alpha(tmp_path):
    res = _flplat(["partition-stats", "--alpha", "0", "--json"], cwd=tmp_path)
    assert res.returncode == 2 and "partition.alpha" in res.stderr


def test_interrupt_marks_run_killed(tmp_path):
    store = tmp_path / "mlruns"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.Popen(FLPLAT + ["run", str(REPO / "configs/quickstart.yaml"), f"tracking.store_dir={store}",
                                      "federation.rounds=10000"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    for line in proc.stderr:  # wait for the first finished round
        if "[round 1/" in line or time.time() > deadline:
            break
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    runs, _ = _runs(store)
    assert len(runs) == 1 and runs[0].info.status == "KILLED"


def _py(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


EXIT_PROBE = """
import atexit, sys, threading, time
from flplat.cli import exit_now
atexit.register(lambda: print("atexit ran", flush=True))
def late():
    time.sleep(0.3)
    print("thread done", flush=True)
threading.Thread(target=late).start()
sys.stdout.write("unflushed ")
class Noisy:
    def __del__(self):
        print("finalised", flush=True)
keep = Noisy()
exit_now(3)
"""


def test_exit_now_keeps_what_the_normal_exit_does_but_skips_the_teardown():
    # the status, buffered output, non-daemon threads and atexit handlers as with sys.exit; a module-level object's
    # __del__ (run only by the interpreter's module teardown) is skipped, which is the point
    p = _py(EXIT_PROBE)
    assert p.returncode == 3
    assert p.stdout == "unflushed thread done\natexit ran\n"
    full = _py(EXIT_PROBE, {"FLPLAT_FULL_EXIT": "1"})  # the opt-out: the interpreter's own exit
    assert full.returncode == 3 and full.stdout.endswith("atexit ran\nfinalised\n")


def test_exit_now_ends_with_an_idle_thread_pool_nobody_shut_down():
    """MLflow keeps a ThreadPoolExecutor per artifact repository and never shuts it down; its idle workers are
    non-daemon threads that end only when the interpreter's thread exit hooks wake them. exit_now runs those hooks
    before it waits for the threads (joining first waited forever: `flplat evaluate` after its output)."""
    p = _py("from concurrent.futures import ThreadPoolExecutor\nfrom flplat.cli import exit_now\n"
            "pool = ThreadPoolExecutor(2)\nprint(pool.submit(sum, [1, 2]).result())\nexit_now(0)")
    assert p.returncode == 0 and p.stdout == "3\n", p.stderr[-2000:]


def test_the_flplat_command_ends_through_exit_now():
    import tomllib

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["flplat"] == "flplat.cli:entry"
    p = _py("import flplat.cli as c, sys; c.exit_now = lambda rc: print('exit_now', rc); "
            "sys.argv = ['flplat', 'list']; c.entry()")
    assert p.returncode == 0 and p.stdout.rstrip().endswith("exit_now 0")


def test_a_reader_that_stops_early_ends_the_command_quietly():
    """``flplat list | head -1``: the closed pipe gives no traceback, only the SIGPIPE status 141."""
    import os
    import subprocess
    import sys

    r, w = os.pipe()
    os.close(r)  # the reader is gone before the command writes its first line
    try:
        p = subprocess.run([sys.executable, "-m", "flplat.cli", "list"], stdout=w, stderr=subprocess.PIPE,
                           text=True, timeout=120)
    finally:
        os.close(w)
    assert "Traceback" not in p.stderr and "BrokenPipeError" not in p.stderr, p.stderr
    assert p.returncode == 141
