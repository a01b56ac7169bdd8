"""Where a study's runs run (flplat/studies/reproduction/execute.py): the local backend and Ray (``--backend ray``).

Without Ray installed the Ray tests skip; everything else here runs without it: the one-line errors (Ray missing,
a cluster with a local store / checkpoints), the retry of a task taking over its own RUNNING run, and
``--print-jobs`` (one command per unfinished run, or a SLURM array script)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import REPO

from flplat.cli import main
from flplat.errors import ConfigError

SMOKE = ["reproduce", "dapfl", "table3_digits", "--scale", "smoke", "--cells", "digits_k20_low"]


def _client(store):
    from mlflow.tracking import MlflowClient

    from flplat.tracking.store import store_uris

    return MlflowClient(tracking_uri=store_uris(None, str(store))[0])


def _children(store) -> list:
    client = _client(store)
    exp = client.get_experiment_by_name("reproduce-dapfl")
    return [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("mlflow.parentRunId")]


def _stable(metrics: dict[str, float]) -> dict[str, float]:
    """The metrics without the measured times and memory (they differ from run to run)."""
    return {k: v for k, v in metrics.items() if not k.startswith(("system/", "cpu_time", "peak_rss")) and
            "time" not in k}


def _metrics(store) -> dict[str, dict[str, float]]:
    return {r.data.tags["flplat.reproduce.method"]: _stable(r.data.metrics) for r in _children(store)}


# ---------------------------------------------------------------------------------------------- without Ray
def test_backend_ray_without_ray_says_how_to_install(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    assert main([*SMOKE, "--methods", "FedAvg", "--store-dir", str(tmp_path), "--backend", "ray"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ('flplat: error: --backend ray needs Ray, which is not installed; install it with: '
                       'pip install -e ".[ray]"')
    assert not (tmp_path / "mlflow.db").exists()  # nothing created


@pytest.mark.parametrize("args, msg", [
    (["--address", "ray://head:10001"], "--address needs --backend ray"),
    (["--gpus-per-run", "1"], "--gpus-per-run needs --backend ray"),
])
def test_ray_options_need_the_ray_backend(tmp_path, capsys, args, msg):
    assert main([*SMOKE, "--methods", "FedAvg", "--store-dir", str(tmp_path), *args]) == 2
    assert msg in capsys.readouterr().err


def test_a_cluster_needs_a_shared_store_and_checkpoints(tmp_path, monkeypatch):
    """With --address, a local SQLite store or a checkpoint dir that is not an absolute existing path is refused
    (one line, exit 2, before any run); a server / shared database and an absolute shared dir pass; a local Ray
    instance accepts local paths."""
    from flplat.config import TrackingConfig
    from flplat.studies.reproduction import execute as ex

    monkeypatch.setattr(ex, "ray_module", lambda: object())  # no Ray needed to check the paths
    monkeypatch.setattr(ex.RayBackend, "check_cluster", lambda self: None)  # no cluster needed either
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cluster = ex.RayBackend(address="ray://head:10001")
    with pytest.raises(ConfigError, match=r"tracking.store_dir: the tracking store 'sqlite:///.*' is a local path"):
        cluster.check_shared(TrackingConfig(store_dir=str(tmp_path)))
    with pytest.raises(ConfigError, match="tracking.checkpoint_dir=None: with a Ray cluster"):
        cluster.check_shared(TrackingConfig(uri="postgresql://db/mlflow"))
    with pytest.raises(ConfigError, match="tracking.checkpoint_dir='rel/ckpt'"):
        cluster.check_shared(TrackingConfig(uri="http://head:5000", checkpoint_dir="rel/ckpt"))
    cluster.check_shared(TrackingConfig(uri="http://head:5000", checkpoint_dir=str(tmp_path)))
    cluster.check_shared(TrackingConfig(uri="mysql://db/mlflow", checkpoint_every=0))
    ex.RayBackend().check_shared(TrackingConfig(store_dir=str(tmp_path)))  # a local instance: local paths are fine
    assert ex.is_local_uri("file:///x") and ex.is_local_uri("/x/mlruns") and not ex.is_local_uri("https://h")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_cluster_is_one_line_exit_2_in_seconds_before_any_run(tmp_path, capsys):
    """``--address`` of a cluster nothing answers at: Ray alone retries for minutes (then a 20-line ConnectionError);
    here one short probe, one line naming the address and what to try, exit 2, no MLflow store or run."""
    pytest.importorskip("ray")
    port = _free_port()
    store = tmp_path / "store"
    t0 = time.perf_counter()
    rc = main(["sweep", str(REPO / "configs/quickstart.yaml"), "--seeds", "0,1", "--backend", "ray", "--address",
               f"127.0.0.1:{port}", f"tracking.store_dir={store}", "federation.rounds=1"])
    seconds = time.perf_counter() - t0
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"flplat: error: --address=127.0.0.1:{port}: no Ray cluster answers at ")
    assert "`ray status`" in err[0] and "--address auto" in err[0] and "HEAD_IP:6379" in err[0]
    assert seconds < 15, seconds
    assert not (store / "mlflow.db").exists()


def test_the_probe_goes_where_ray_dials_and_names_a_loopback_head(monkeypatch):
    """Ray replaces a loopback host by this machine's IP: a head listening on 127.0.0.1 only is not reached by
    ``--address 127.0.0.1:PORT``; the error says where Ray dialled and that ``--address auto`` finds that head. A
    cluster that answers where Ray dials passes."""
    import socket

    services = pytest.importorskip("ray._private.services")
    from flplat.studies.reproduction.ray_address import check_cluster, dialled

    with socket.socket() as head:
        head.bind(("127.0.0.1", 0))
        head.listen()
        port = head.getsockname()[1]
        monkeypatch.setattr(services, "get_node_ip_address", lambda *a: "127.0.0.2")  # "this machine's IP"
        assert dialled(f"127.0.0.1:{port}") == ("127.0.0.2", port)
        with pytest.raises(ConfigError) as e:
            check_cluster(f"127.0.0.1:{port}", timeout=2.0)
        msg = str(e.value)
        assert f"no Ray cluster answers at 127.0.0.2:{port}" in msg and "Ray dials 127.0.0.2" in msg
        assert f"something listens on 127.0.0.1:{port} itself" in msg and "--address auto" in msg
        assert "\n" not in msg
        monkeypatch.setattr(services, "get_node_ip_address", lambda *a: "127.0.0.1")
        check_cluster(f"127.0.0.1:{port}", timeout=2.0)  # a head where Ray dials: no error
    with pytest.raises(ConfigError, match="--address=garbage: not a Ray address; allowed: HOST:PORT"):
        check_cluster("garbage")


def test_a_clusters_optuna_storage_must_be_shared():
    from flplat.studies.tuning import check_shared_storage

    check_shared_storage("sqlite:///mlruns/optuna.db", remote=False)  # one machine: SQLite is fine
    with pytest.raises(ConfigError, match="SQLite is a local file the nodes of a Ray cluster cannot share"):
        check_shared_storage("sqlite:////shared/optuna.db", remote=True)
    with pytest.raises(ConfigError, match="must be an absolute path"):
        check_shared_storage("journal:study.log", remote=True)
    check_shared_storage("journal:/shared/study.log", remote=True)
    check_shared_storage("postgresql://db/optuna", remote=True)


def test_a_retried_task_takes_over_its_own_running_run(tmp_path, tiny_cfg):
    """A task whose worker died left its run RUNNING with a fresh heartbeat; the retry (same owner id) resumes it
    from its checkpoint at once; another owner (or none) leaves it alone as before."""
    from flplat.config_io import config_key
    from flplat.engine import checkpoint  # noqa: F401  (the checkpoint format the resume reads)
    from flplat.experiment import run
    from flplat.tracking.resume import OWNER_TAG, claim_unfinished

    cfg = tiny_cfg(**{"tracking.enabled": "true", "tracking.store_dir": str(tmp_path), "federation.rounds": 2,
                      "tracking.keep_checkpoint": "true", "tracking.experiment": "own"})
    _, run_id = run(cfg, progress=False, tags={OWNER_TAG: "ray:abc"})
    client = _client(tmp_path)
    client.set_terminated(run_id, "RUNNING")  # as a SIGKILL leaves it (its heartbeat still fresh)
    client.set_tag(run_id, "flplat.heartbeat", str(int(time.time())))
    data, replaced = claim_unfinished(cfg.tracking, config_key(cfg), owner="ray:other")
    assert data is None and replaced == []  # not its own: alive, left alone
    data, replaced = claim_unfinished(cfg.tracking, config_key(cfg))
    assert data is None
    data, _ = claim_unfinished(cfg.tracking, config_key(cfg), owner="ray:abc")
    assert data is not None and data["meta"]["run_id"] == run_id and data["round"] == 2


def test_print_jobs_lists_the_unfinished_runs_and_an_array_script(tmp_path, capsys):
    store = str(tmp_path / "store")
    base = [*SMOKE, "--methods", "FedAvg,DA-PFL", "--store-dir", store, "--set", "federation.rounds=1"]
    assert main([*base, "--print-jobs"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(" -m flplat.cli ", 1)[1] for line in lines] == [
        f"reproduce dapfl table3_digits --scale smoke --cells digits_k20_low --methods {m} --seeds 0 --store-dir "
        f"{store} --set federation.rounds=1 tracking.checkpoint_dir={store}/checkpoints" for m in ("FedAvg", "DA-PFL")]
    assert all(line.startswith(f"cd {os.getcwd()} && env ") for line in lines)  # where and with what (jobs.py)
    assert _children(store) == []  # nothing ran
    # the printed command runs exactly its run, where the grid expects it; then only the other one is printed
    assert main(lines[0].split(" -m flplat.cli ", 1)[1].split()) == 0
    capsys.readouterr()
    kids = _children(store)
    assert len(kids) == 1 and kids[0].data.tags["flplat.reproduce.method"] == "FedAvg"
    assert main([*base, "--print-jobs", "array"]) == 0
    script = capsys.readouterr().out
    assert script.startswith("#!/bin/bash\n") and "#SBATCH --array=0-0\n" in script
    assert "--methods DA-PFL --seeds 0" in script and "--methods FedAvg --seeds" not in script
    assert 'eval "${CMDS[$SLURM_ARRAY_TASK_ID]}"' in script
    # the grid's own command sees the printed run as finished
    assert main([*base, "--render-only"]) == 0
    assert "1 of 2 runs already finished" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- with Ray
@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _kill_when_checkpointed(store: Path, killed: list, stop: threading.Event) -> None:
    """SIGKILL the Ray worker of the first run that has written a checkpoint (mid-run): its process title is
    ``ray::<task name>``, the task name the run's name with spaces (flplat/studies/reproduction/execute.py)."""
    client = None
    while not stop.is_set():
        for pt in (store / "checkpoints").glob("*.pt"):
            client = client or _client(store)
            try:
                title = ("ray::" + client.get_run(pt.stem).info.run_name.replace("/", " ")).encode()
            except Exception:
                continue
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as fh:
                        cmd = fh.read()
                except OSError:
                    continue
                if cmd.startswith(title):
                    os.kill(int(pid), signal.SIGKILL)
                    killed.append((pt.stem, int(pid)))
                    return
        time.sleep(0.02)


def test_ray_backend_runs_tasks_with_their_resources_and_reports_a_runs_own_failure(ray_local, tiny_cfg):
    """The fast variant: two runs as Ray tasks on the local instance give the metrics of the same runs in this
    process; a run that fails for its own reasons (an infeasible partition) comes back as its exception (not
    retried), the other run is unaffected."""
    from flplat.experiment import run
    from flplat.studies.reproduction import execute as ex
    from flplat.studies.tuning import _sweep_run

    ok = tiny_cfg(seed=3)
    bad = tiny_cfg(**{"partition.min_samples": 500, "partition.max_retries": 1})
    backend = ex.RayBackend()
    assert backend.resources(ex.Task(_sweep_run, (), "x", devices=2)) == {"num_cpus": 2, "num_gpus": 0}
    assert backend.resources(ex.Task(_sweep_run, (), "x", accelerator="cuda")) == {"num_cpus": 1, "num_gpus": 1}
    with pytest.raises(ConfigError, match="--gpus-per-run=0.5 is less than the run's fabric.devices=2"):
        ex.RayBackend(gpus_per_run=0.5).resources(ex.Task(_sweep_run, (), "x", devices=2, accelerator="cuda"))
    with backend:
        out = {t.label: (res, err) for t, res, err in backend.run([ex.Task(_sweep_run, (ok, False), "ok"),
                                                                   ex.Task(_sweep_run, (bad, False), "bad")])}
    here = run(tiny_cfg(seed=3), progress=False)[0].metrics
    assert out["ok"][1] is None and _stable(out["ok"][0][0]) == _stable(here)
    assert isinstance(out["bad"][1], ConfigError) and "infeasible" in str(out["bad"][1])


@pytest.mark.slow  # about 2 min on the shared 2-core machine (a Ray instance, worker start-ups, the retry)
def test_ray_grid_survives_a_killed_task_with_the_numbers_of_jobs_1(tmp_path, capsys, ray_local):
    """A smoke table through --backend ray on a local Ray instance (2 CPUs): one run's worker is SIGKILLed after its
    first checkpoint; Ray retries the task, which resumes that run from its checkpoint (in the same MLflow run); the
    grid completes with exactly the numbers of --jobs 1, and a re-run trains nothing."""
    base = [*SMOKE, "--methods", "FedAvg,DA-PFL", "--set", "federation.rounds=4"]
    store = tmp_path / "ray"
    killed, stop = [], threading.Event()
    killer = threading.Thread(target=_kill_when_checkpointed, args=(store, killed, stop), daemon=True)
    killer.start()
    try:
        assert main([*base, "--store-dir", str(store), "--backend", "ray"]) == 0
    finally:
        stop.set()
        killer.join(5)
    err = capsys.readouterr().err
    assert "[2/2] table3_digits digits_k20_low" in err and "about 0.0 min left" in err  # progress as with --jobs
    assert len(killed) == 1, "no run was killed mid-run"
    kids = {r.info.run_id: r for r in _children(store)}
    assert len(kids) == 2 and all(r.info.status == "FINISHED" for r in kids.values())
    victim = kids[killed[0][0]]  # the killed run continued in the same MLflow run, from its checkpoint
    assert victim.data.tags.get("flplat.resumed") == "1" and victim.data.tags[OWNER].startswith("ray:")
    assert main([*base, "--store-dir", str(tmp_path / "local"), "--jobs", "1"]) == 0
    capsys.readouterr()
    got, want = _metrics(store), _metrics(tmp_path / "local")
    assert set(got) == {"FedAvg", "DA-PFL"} and got == want
    assert main([*base, "--store-dir", str(store), "--backend", "ray"]) == 0
    assert "2 of 2 runs already finished, skipped" in capsys.readouterr().err


OWNER = "flplat.owner"
