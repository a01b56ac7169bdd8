"""The benchmark scripts keep working with the platform's interfaces (a tiny run of each in-process one)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from conftest import REPO

TOOLS = REPO / "tools"


@pytest.mark.parametrize("script, args, expect", [
    ("bench_fedavg.py", ["--rounds", "1", "--repeats", "1", "--no-warmup"], "median"),
    ("bench_vectorized.py", ["--rounds", "2", "--repeats", "1", "--clients", "20"], "median"),
    ("bench_vec_bound.py", ["--dataset", "digits", "--clients", "20", "--hidden", "16", "--rounds", "1",
                            "--repeats", "1", "--profile"], "float rounding only"),
    ("bench_clustering.py", ["--clients", "30", "--repeats", "0"], "median"),
    ("bench_eval.py", ["--clients", "40", "--hidden", "16", "--repeats", "1", "--data-root", "{idx_data}"],
     "batched / lower bound"),
    pytest.param("bench_e2e.py", ["--clients", "20", "--hidden", "16", "--rounds", "2", "--repeats", "1",
                                  "--sides", "ref1,flplat1,ref2,flplat2", "--threads", "1",
                                  "--data-root", "{idx_data}"], "e2e target",
                 marks=pytest.mark.slow),
    pytest.param("bench_ray.py", ["--runs", "1"], "ratio Ray / local",
                 marks=[pytest.mark.slow, pytest.mark.skipif(not importlib.util.find_spec("ray"),
                                                             reason="Ray is not installed")]),
])
def test_benchmark_scripts_run(script, args, expect, idx_data, tmp_path):
    args = [a.format(idx_data=idx_data) for a in args]  # a script reading image files gets the test's small ones
    env = {**os.environ, "HOME": str(tmp_path)}  # its ~/.cache/flplat (the decoded-data cache) is the test's own
    res = subprocess.run([sys.executable, str(TOOLS / "benchmarks" / script), *args], cwd=REPO, capture_output=True,
                         text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert expect in res.stdout


def test_dapfl_reproduction_gives_ifca_the_papers_number_of_clusters():
    # DA-PFL §IV-D: "we set the number of clusters at 3 and 7 based on different client numbers (20 and 100 clients)"
    from flplat.studies.papers import dapfl

    ifca = next(m for m in dapfl.METHODS if m.name == "IFCA")
    assert "algorithm.num_clusters={k}" in ifca.overrides
    ks = {c.id: c.params["k"] for c in dapfl._cells("digits")}
    assert ks == {"digits_k20_low": 3, "digits_k20_high": 3, "digits_k100_low": 7, "digits_k100_high": 7}


def test_flplat_dirichlet_deals_fedartmls_partition_from_fedartmls_random_stream():
    """tools/investigations/compare_fedartml_partitions.py: fed FedArtML's own random stream, flplat's Dirichlet
    partition is FedArtML's ``dirichlet_method`` draw for draw (dealing and redraw rule: at α = 0.1 seeds 0 and 1
    redraw 4 and 2 times); skips without FedArtML."""
    import importlib.util

    if importlib.util.find_spec("fedartml") is None:
        pytest.skip("FedArtML is not installed (pip install 'flplat[fedartml]')")
    res = subprocess.run([sys.executable, str(TOOLS / "investigations/compare_fedartml_partitions.py"), "--dataset",
                          "digits", "--clients", "20", "--seeds", "3", "--alphas", "0.1", "--s-values", "0"],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "flplat's dirichlet(): 3 of 3 partitions identical" in res.stdout
    assert "| WPSI |" in res.stdout and "Similarity S=0 vs percent_noniid 100%" in res.stdout


def test_per_seed_values_of_reproduced_rows_come_from_the_store(tmp_path, small_mnist):
    """tools/scripts/reproduce_per_seed.py reads each seed's metrics of the finished runs (Flux, smoke) and marks a
    row the store lacks (FedAvg, not run) with "—"."""
    from flplat.cli import main

    store = str(tmp_path / "store")
    assert main(["reproduce", "flux", "known_association", "--scale", "smoke", "--cells", "label_l2", "--methods",
                 "Flux", "--seeds", "0", "--store-dir", store]) == 0
    spec = importlib.util.spec_from_file_location("per_seed", TOOLS / "scripts/reproduce_per_seed.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = mod.per_seed("flux", "known_association", "smoke", [0], ["Flux", "FedAvg"],
                        ["num_distributions", "known_association_accuracy", "ari"], store, [],
                        ["label_l2"])
    row = next(line for line in text.splitlines() if line.startswith("| label_l2"))
    flux, fedavg = [c.strip() for c in row.strip("|").split("|")[1:]]
    m, acc, ari = flux.split("; ")  # no clustering in 2 smoke rounds: no ARI logged
    assert int(m) >= 2 and 0 <= float(acc) <= 100 and ari == "—"
    assert fedavg == "—; —; —"


def _reference_module():
    spec = importlib.util.spec_from_file_location("reference_fedavg", TOOLS / "benchmarks" / "reference_fedavg.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["reference_fedavg"] = mod  # (dataclasses look their module up)
    spec.loader.exec_module(mod)
    return mod


def test_reference_fedavg_batches_and_splits_as_the_platform():
    from flplat.engine.client import batch_bounds

    ref = _reference_module()
    for n in range(1, 70):
        for b in (1, 2, 5, 32):
            assert ref.batch_bounds(n, b) == batch_bounds(n, b), (n, b)
    assert ref.batch_bounds(65, 32) == [(0, 32), (32, 65)]  # a trailing single sample joins the batch before it
    # largest first, each to the least-loaded process: 7 -> p0, 5 -> p1, 4 -> p1 (5 < 7), 3 -> p0 (7 < 9), 1 -> p1
    assert ref.split_by_size([0, 1, 2, 3, 4], [3, 7, 1, 5, 4], 2) == [[1, 0], [3, 4, 2]]
    assert ref.split_by_size([2, 0], [3, 7, 1], 1) == [[0, 2]]


def test_reference_fedavg_is_the_platforms_fedavg():
    """The benchmarks' hand-written FedAvg, given the platform's sampled clients and batch seeds, ends at the
    platform's global model (to float rounding) and takes as many steps: the benchmarks compare the same work. Each
    client starts from the round's global model (several clients per round and process)."""
    import numpy as np
    import torch

    from flplat.api import derive_seed
    from flplat.engine.executor import LocalExecutor
    from flplat.engine.orchestrator import Orchestrator
    from flplat.experiment import load_config, prepare
    from flplat.models import build_model
    from flplat.protocol.strategy import sample_uniform

    ref = _reference_module()
    seed, rounds = 3, 2
    cfg = load_config(None, [f"seed={seed}", "data.name=digits", "model.name=mlp", "model.hidden=[16]",
                             "algorithm.name=fedavg", "partition.name=dirichlet", "partition.num_clients=6",
                             f"federation.rounds={rounds}", "federation.client_fraction=0.5",
                             "federation.local_epochs=2", "federation.batch_size=16", "federation.optimizer.name=adam",
                             "federation.optimizer.lr=0.01", "fabric.accelerator=cpu", "fabric.precision=32-true",
                             "fabric.num_threads=1", "tracking.enabled=false"])
    p = prepare(cfg)
    d = p.data
    init_sd = {k: v.detach().clone() for k, v in p.trainer.net.state_dict().items()}
    summary = Orchestrator(p.strategy, LocalExecutor(p.trainer, d, seed), d, rounds, rounds, seed,
                           callbacks=[]).run(p.init_weights)
    rng = np.random.default_rng(derive_seed(seed, "server"))
    selections = [[int(k) for k in sample_uniform(d.num_clients, 0.5, rng)] for _ in range(rounds)]
    model = build_model(cfg.model, d.input_shape, d.num_classes)
    model.load_state_dict(init_sd)
    train = [torch.as_tensor(c.train, dtype=torch.long) for c in d.clients]
    trained = ref.fedavg(model, d.x, d.y, train, selections, epochs=2, batch_size=16, lr=0.01,
                         generator=lambda t, k: torch.Generator().manual_seed(derive_seed(seed, "train", t, k)))
    assert len(selections[0]) == 3 and len(trained.round_s) == rounds
    assert trained.steps == sum(-(-len(train[k]) // 16) * 2 for s in selections for k in s) - \
        2 * sum(len(train[k]) % 16 == 1 for s in selections for k in s)
    got = ref.FlatState(model).get()
    assert torch.allclose(got, summary.state.weights, atol=1e-5), float((got - summary.state.weights).abs().max())
    acc, glob = ref.evaluate(model, d.x, d.y, [torch.as_tensor(c.test) for c in d.clients])
    assert abs(acc - summary.metrics["global_accuracy"]) < 1e-6 and np.isnan(glob)
