"""Sharded execution: 2 CPU processes (gloo) give the same per-round metrics as 1 process, for every algorithm (the
``sharded`` property of ``flplat check``: FedAvg by default, every registered algorithm under ``-m slow``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import REPO, tiny_overrides

from flplat.algorithms import ALGORITHMS
from flplat.engine.sharding import balance
from flplat.experiment import load_config, run
from flplat.studies.conformance import Target, check_sharded, compare_histories, run_sharded


def test_balance_is_greedy_and_complete():
    parts = balance([10, 1, 7, 3, 3], 2)
    assert sorted(i for p in parts for i in p) == [0, 1, 2, 3, 4]
    loads = [sum([10, 1, 7, 3, 3][i] for i in p) for p in parts]
    assert max(loads) - min(loads) <= 2  # {10, 1} vs {7, 3, 3}
    assert balance([5], 3) == [[0], [], []]


# batch norm (cifar_cnn: statistics per client) in float64, where the two paths give the same float32 results, for
# one round: from round 2 on this tiny network is chaotic -- a 1e-7 relative change of the start weights (the float
# rounding of a sharded all-reduce) changes round 3's training loss by 1e-2 in the per-client loop alone, in one
# process as in two
BN = {"data.name": "digits", "model.name": "cifar_cnn", "model.widths": "[8]", "model.block_dropout": "[0.0]",
      "model.dense": 16, "model.dense_dropout": 0.0, "federation.optimizer.name": "sgd",
      "federation.optimizer.lr": 0.01, "federation.batch_size": 32, "fabric.precision": "64-true",
      "federation.rounds": 1}


def _multi_label(path) -> dict:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(240, 12)).astype(np.float32)
    np.savez(path, x=x, y=(x[:, :3] + 0.3 * rng.normal(size=(240, 3)) > 0).astype(np.int64))
    return {"data.name": "npz", "data.path": str(path), "partition.name": "iid"}


def _fedavg(**extra) -> list[str]:
    over = tiny_overrides(**{"algorithm.name": "fedavg", "federation.rounds": 3, "federation.local_epochs": 2,
                             "federation.eval_every": 1, **extra})
    return [o for o in over if not (extra.get("model.name") and o.startswith("model.hidden"))]


def test_two_processes_match_one_for_fedavg_and_with_vectorized_clients(tmp_path):
    """The `sharded` property of `flplat check` for FedAvg, and with ``federation.vectorize=true`` (each process
    trains its shard of the round's clients as one stacked group) for FedAvg and FedProx, a batch-norm model and
    multi-label data against the per-client loop in one process (the tolerance of tests/test_vectorized.py's
    whole-run comparison: float rounding); one launch."""
    targets = {name: Target(name) for name in ("fedavg", "fedprox")}
    more = {"bn": _fedavg(**BN), "multilabel": _fedavg(**_multi_label(tmp_path / "ml.npz"))}
    specs = {"fedavg": targets["fedavg"].overrides_with(),
             **{f"{n}:vec": t.overrides_with("federation.vectorize=true") for n, t in targets.items()},
             **{f"{n}:vec": [*over, "federation.vectorize=true"] for n, over in more.items()}}
    sharded = run_sharded(specs, devices=2)
    r = check_sharded(targets["fedavg"], sharded=sharded["fedavg"])
    assert r.ok, r.line()
    loop = {name: t.reference().history for name, t in targets.items()}
    loop.update({name: run(load_config(None, over), progress=False)[0].history for name, over in more.items()})
    for name, history in loop.items():
        diff = compare_histories(sharded[f"{name}:vec"], history, rel=1e-4, abs_=1e-6)
        assert diff is None, (name, diff)


@pytest.fixture(scope="module")
def sharded_results():
    from flplat.studies.conformance import run_sharded

    return run_sharded({name: Target(name).overrides_with() for name in sorted(ALGORITHMS)}, devices=2)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_two_processes_match_one(name, sharded_results):
    """Registry-wide, the `sharded` property of `flplat check` (every algorithm in one 2-process launch)."""
    r = check_sharded(Target(name), sharded=sharded_results[name])
    assert r.ok, r.line()


def test_mean_groups_opt_in_is_not_inherited_by_an_overridden_aggregate(tiny_cfg):
    """Weighted-mean strategies let the sharded executor all-reduce; a subclass that reads individual client
    models in its own ``aggregate`` must fall back to gathering them."""
    from flplat.api import ClientPlan, FedAvgStrategy
    from flplat.experiment import prepare

    p = prepare(tiny_cfg(**{"algorithm.name": "fedavg"}))
    state = p.strategy.init_state(p.init_weights, None, None)
    plans = [(0, ClientPlan(weights=state.weights)), (3, ClientPlan(weights=state.weights))]
    assert p.strategy.mean_groups(state, plans) == [0, 0]

    class ReadsEachModel(FedAvgStrategy):
        def aggregate(self, state, results, ops):
            state.method = [float(r.weights.norm()) for r in results]
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
