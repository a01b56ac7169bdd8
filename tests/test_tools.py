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
