"""Sharded execution: 2 CPU processes (gloo) give the same per-round metrics as 1 process, for every algorithm."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import ALGORITHM_OVERRIDES, REPO, tiny_overrides

from flplat.algorithms import ALGORITHMS
from flplat.engine.sharding import balance
from flplat.experiment import load_config, run


def test_balance_is_greedy_and_complete():
    parts = balance([10, 1, 7, 3, 3], 2)
    assert sorted(i for p in parts for i in p) == [0, 1, 2, 3, 4]
    loads = [sum([10, 1, 7, 3, 3][i] for i in p) for p in parts]
    assert max(loads) - min(loads) <= 2  # {10, 1} vs {7, 3, 3}
    assert balance([5], 3) == [[0], [], []]


VECTORIZED = ["fedavg:vec", "fedprox:vec"]  # federation.vectorize=true with fabric.devices=2 (issue 15, item 5)


@pytest.fixture(scope="module")
def sharded_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("shard") / "out.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for k in ("LOCAL_RANK", "WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT", "PYTEST_XDIST_WORKER"):
        env.pop(k, None)
    res = subprocess.run([sys.executable, str(REPO / "tests" / "sharded_runner.py"), str(out), "2",
                          *sorted(ALGORITHMS), *VECTORIZED], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(out.read_text())


def _one_process(name):
    """The reference: the tiny 3-round run of ``name`` in this process, one thread, the per-client loop."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cfg = load_config(None, tiny_overrides(**{"algorithm.name": name, "fabric.num_threads": 1,
                                                  "federation.rounds": 3, **ALGORITHM_OVERRIDES.get(name, {})}))
        return run(cfg, progress=False)[0]
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_two_processes_match_one(name, sharded_results):
    single = _one_process(name)
    sharded = sharded_results[name]
    assert len(sharded) == len(single.history)
    for a, b in zip(single.history, sharded):
        a = {k: v for k, v in a.items() if k != "round_time_s"}
        assert a.keys() == b.keys()
        for k in a:
            assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-6), (name, k)


@pytest.mark.parametrize("item", VECTORIZED)
def test_two_processes_with_vectorized_clients_match_one_process_loop(item, sharded_results):
    # each process trains its shard of the round's clients as one stacked group; the per-client loop in one
    # process is the reference (the tolerance of tests/test_vectorized.py's whole-run comparison: float rounding)
    single = _one_process(item.split(":")[0])
    sharded = sharded_results[item]
    assert len(sharded) == len(single.history)
    for a, b in zip(single.history, sharded):
        for k in a.keys() - {"round_time_s"}:
            assert a[k] == pytest.approx(b[k], rel=1e-4, abs=1e-6), (item, k)


def test_mean_groups_opt_in_is_not_inherited_by_an_overridden_aggregate(tiny_cfg):
    """Weighted-mean strategies let the sharded executor all-reduce; a subclass that reads individual client
    models in its own ``aggregate`` must fall back to gathering them."""
    from flplat.algorithms.base import ClientPlan
    from flplat.algorithms.fedavg import FedAvg
    from flplat.experiment import prepare

    p = prepare(tiny_cfg(**{"algorithm.name": "fedavg"}))
    state = p.strategy.init_state(p.init_weights, None, None)
    plans = [(0, ClientPlan(weights=state.weights)), (3, ClientPlan(weights=state.weights))]
    assert p.strategy.mean_groups(state, plans) == [0, 0]

    class ReadsEachModel(FedAvg):
        def aggregate(self, state, results, ops):
            state.extra["norms"] = [float(r.weights.norm()) for r in results]
            return super().aggregate(state, results, ops)

    assert ReadsEachModel(p.strategy.cfg, p.strategy.info).mean_groups(state, plans) is None

    psi = prepare(tiny_cfg(**{"algorithm.name": "clust_psi_pfl"}))
    st = psi.strategy.init_state(psi.init_weights, np.random.default_rng(0), None)
    assert psi.strategy.mean_groups(st, plans) == [int(st.assignment[0]), int(st.assignment[3])]


def test_two_nodes_through_torchrun_match_one_process(tmp_path):
    """The multi-node path: two torchrun "nodes" of one process each on this machine (what a SLURM/torchrun
    launch on two machines does), ``fabric.num_nodes=2``, give the single-process result."""
    import shutil
    import socket

    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    for k in ("LOCAL_RANK", "WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT", "PYTEST_XDIST_WORKER"):
        env.pop(k, None)
    over = tiny_overrides(**{"algorithm.name": "fedavg", "fabric.num_threads": 1, "federation.rounds": 3})
    script = ("import json, sys; from flplat.experiment import load_config, run; "
              "from flplat.engine.sharding import is_main_process; "
              "s, _ = run(load_config(None, sys.argv[2:]), progress=False); "
              "is_main_process() and open(sys.argv[1], 'w').write(json.dumps(s.metrics))")
    (tmp_path / "node.py").write_text(script)
    procs = [subprocess.Popen([torchrun, "--nnodes=2", "--nproc-per-node=1", f"--node-rank={r}",
                               "--master-addr=127.0.0.1", f"--master-port={port}", str(tmp_path / "node.py"),
                               str(tmp_path / "out.json"), *over, "fabric.num_nodes=2", "fabric.devices=1"],
                              cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in (0, 1)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs[0][-2000:] + outs[1][-2000:]
    two = json.loads((tmp_path / "out.json").read_text())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one, _ = run(load_config(None, over), progress=False)
    finally:
        torch.set_num_threads(threads)
    for k in ("global_accuracy", "train_loss", "test_loss", "bytes_up"):
        assert two[k] == pytest.approx(one.metrics[k], rel=1e-5, abs=1e-6), k


def test_launch_early_only_for_one_node_integer_devices_without_external_launcher(monkeypatch):
    from types import SimpleNamespace

    from flplat.engine.launch import launch_early

    for k in ("LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    boom = ["/nonexistent-python-that-must-not-start"]
    assert launch_early(SimpleNamespace(devices=1, num_nodes=1), boom) == []
    assert launch_early(SimpleNamespace(devices="auto", num_nodes=1), boom) == []
    assert launch_early(SimpleNamespace(devices=2, num_nodes=2), boom) == []  # several nodes: torchrun / SLURM
    monkeypatch.setenv("LOCAL_RANK", "1")  # started by an external launcher (or by us)
    assert launch_early(SimpleNamespace(devices=2, num_nodes=1), boom) == []


def test_flplat_run_with_two_devices_starts_both_processes_early_and_matches_one_process(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    for k in ("LOCAL_RANK", "WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "PYTEST_XDIST_WORKER"):
        env.pop(k, None)
    over = tiny_overrides(**{"algorithm.name": "fedavg", "fabric.num_threads": 1, "federation.rounds": 3})
    res = subprocess.run([sys.executable, "-m", "flplat.cli", "run", str(REPO / "configs" / "quickstart.yaml"), *over,
                          "fabric.devices=2", "--no-progress"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one, _ = run(load_config(str(REPO / "configs" / "quickstart.yaml"), over), progress=False)
    finally:
        torch.set_num_threads(threads)
    assert f"global_accuracy={one.metrics['global_accuracy']:.4f}" in res.stdout
    assert res.stdout.count("global_accuracy=") == 1  # only rank 0 reports


def test_process_group_is_destroyed_at_exit(tmp_path):
    """A sharded process destroys its process group in an atexit handler (before the interpreter's teardown, where
    gloo's destructor aborted a rank of a two-node run)."""
    code = f"""
import atexit, torch.distributed as dist
atexit.register(lambda: print("initialized at the end:", dist.is_initialized(), flush=True))  # runs last (LIFO)
dist.init_process_group("gloo", init_method="file://{tmp_path}/store", rank=0, world_size=1)
from flplat.engine.sharding import close_process_group_at_exit
close_process_group_at_exit()
close_process_group_at_exit()  # once per process
print("initialized:", dist.is_initialized(), flush=True)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split("\n")[:2] == ["initialized: True", "initialized at the end: False"]
