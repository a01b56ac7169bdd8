"""PlainFabric: the one-process fp32 CPU case without Lightning gives the same results as Lightning Fabric."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from omegaconf import OmegaConf

from flplat.engine import plain_fabric
from flplat.engine.plain_fabric import PlainFabric, plain_fabric_applies
from flplat.experiment import build_fabric, run
from tests.conftest import REPO


def _fabric(**kw):
    base = {"accelerator": "cpu", "devices": 1, "num_nodes": 1, "precision": "32-true", "num_threads": 0}
    return OmegaConf.create({**base, **kw})


@pytest.mark.parametrize(("kw", "expected"), [
    ({}, True), ({"precision": "32"}, True), ({"devices": "1"}, True),
    ({"precision": "bf16-mixed"}, False), ({"precision": "16-mixed"}, False), ({"precision": "64-true"}, False),
    ({"devices": 2}, False), ({"devices": "auto"}, False), ({"devices": [0]}, False), ({"num_nodes": 2}, False),
])
def test_applies_only_to_one_cpu_process_at_full_precision(kw, expected, monkeypatch):
    for var in ("WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID", "SLURM_NTASKS"):
        monkeypatch.delenv(var, raising=False)
    assert plain_fabric_applies(_fabric(**kw)) is expected


def test_a_launcher_in_the_environment_keeps_lightning(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert not plain_fabric_applies(_fabric())


def test_build_fabric_picks_plain_or_lightning(monkeypatch):
    for var in ("WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(var, raising=False)
    assert isinstance(build_fabric(_fabric()), PlainFabric)
    from lightning.fabric import Fabric

    assert isinstance(build_fabric(_fabric(precision="bf16-mixed")), Fabric)


def _history(summary):
    return [{k: v for k, v in h.items() if k != "round_time_s"} for h in summary.history]


@pytest.mark.parametrize("extra", [{}, {"federation.vectorize": "true"},
                                   {"algorithm.name": "ditto", "federation.optimizer.name": "sgd",
                                    "federation.optimizer.momentum": 0.9, "model.dropout": 0.2}])
def test_same_results_as_lightning_fabric(tiny_cfg, monkeypatch, extra):
    cfg = tiny_cfg(**extra)
    plain, _ = run(cfg, progress=False)
    monkeypatch.setattr(plain_fabric, "plain_fabric_applies", lambda fcfg: False)
    lightning, _ = run(cfg, progress=False)
    assert _history(plain) == _history(lightning)  # to the last bit
    assert torch.equal(plain.state.weights, lightning.state.weights)


def test_a_cpu_run_does_not_import_lightning():
    code = ("import sys\nfrom flplat.experiment import load_config, run\nfrom flplat.studies.conformance import "
            "tiny_overrides\nrun(load_config(None, tiny_overrides()), progress=False)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'torchmetrics')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
