"""tools/benchmarks/bench_pfl.py: the pfl side gets the platform's data, partition and sampled clients; the flplat
sides run without pfl; a missing pfl is one line saying how to install it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import REPO

from flplat.experiment import load_config, prepare, run

SCRIPT = REPO / "tools" / "benchmarks" / "bench_pfl.py"
spec = importlib.util.spec_from_file_location("bench_pfl", SCRIPT)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

TINY = ["--clients", "6", "--hidden", "16", "--rounds", "3", "--fraction", "0.5"]


def test_the_pfl_side_reads_the_platforms_images(idx_data):
    x, y, xg, yg = bench.load_images(str(idx_data), "fmnist")
    args = bench.build_parser().parse_args([*TINY, "--data-root", str(idx_data)])
    data = prepare(load_config(None, bench.flplat_overrides(args))).data
    assert x.dtype == torch.float32 and y.dtype == torch.int64
    assert torch.equal(x.reshape(data.x.shape), data.x) and torch.equal(y, data.y)  # the same bits
    assert torch.equal(xg.reshape(data.x_global_test.shape), data.x_global_test)
    assert torch.equal(yg, data.y_global_test)


def test_the_plan_is_the_platforms_partition_and_sampled_clients(idx_data, tmp_path, monkeypatch):
    args = bench.build_parser().parse_args([*TINY, "--data-root", str(idx_data)])
    bench.write_plan(args, tmp_path / "plan.npz")
    plan = np.load(tmp_path / "plan.npz")
    cfg = load_config(None, bench.flplat_overrides(args))
    data = prepare(cfg).data
    for k in range(6):
        assert np.array_equal(plan[f"train{k}"], data.indices(k, "train"))
        assert np.array_equal(plan[f"test{k}"], data.indices(k, "test"))
    from flplat.protocol import strategy

    chosen, sample = [], strategy.sample_uniform
    monkeypatch.setattr(strategy, "sample_uniform", lambda *a: chosen.append(sample(*a)) or chosen[-1])
    run(cfg, progress=False)
    assert plan["selected"].shape == (3, 3)
    assert np.array_equal(plan["selected"], np.stack(chosen))  # the clients the platform trained, round by round


def test_flplat_sides_run_without_pfl(idx_data, tmp_path):
    res = subprocess.run([sys.executable, str(SCRIPT), *TINY, "--rounds", "2",
                          "--sides", "loop,vec", "--repeats", "1", "--no-warmup", "--data-root", str(idx_data)],
                         cwd=REPO, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr[-3000:]
    rows = {w[0]: w for w in map(str.split, res.stdout.splitlines()) if w[:1] in (["loop"], ["vec"])}
    assert set(rows) == {"loop", "vec"}
    assert abs(float(rows["loop"][-2]) - float(rows["vec"][-2])) < 0.05  # the same federation: the same accuracy


@pytest.mark.skipif(importlib.util.find_spec("pfl") is not None, reason="pfl is installed here")
def test_a_missing_pfl_says_how_to_install_it(capsys):
    with pytest.raises(SystemExit) as e:
        bench.main(["--pfl-python", sys.executable, "--sides", "pfl,vec"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "cannot import pfl" in err and "pip install 'flplat[pfl]'" in err


PFL = os.environ.get("PFL_PYTHON") or sys.executable


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("PFL_PYTHON") and importlib.util.find_spec("pfl") is None,
                    reason="pfl is not installed (pip install 'flplat[pfl]', or $PFL_PYTHON: an interpreter with it)")
def test_the_pfl_side_runs(idx_data, tmp_path):
    res = subprocess.run([sys.executable, str(SCRIPT), *TINY, "--rounds", "2",
                          "--sides", "pfl,vec", "--repeats", "1", "--no-warmup", "--data-root", str(idx_data),
                          "--pfl-python", PFL], cwd=REPO, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr[-3000:]
    assert "fastest flplat side: vec" in res.stdout and "pfl phases" in res.stdout
