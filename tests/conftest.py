"""Shared fixtures: small, fast experiment configs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")


# the tiny synthetic federation and the built-ins' settings on it live in the library, so `flplat check` and these
# tests run the same federation (flplat/studies/conformance.py)
from flplat.studies.conformance import CHECK_OVERRIDES as ALGORITHM_OVERRIDES  # noqa: E402,F401
from flplat.studies.conformance import tiny_overrides  # noqa: E402,F401


@pytest.fixture
def tiny_cfg():
    from flplat.experiment import load_config

    def make(**extra):
        return load_config(None, tiny_overrides(**extra))

    return make


def pytest_configure(config):
    # Under pytest-xdist each worker gets one thread, so two workers share the 2 cores instead of fighting.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)
        os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every documented data location empty, so only the files a test writes exist (the papers' datasets' tests)."""
    from flplat.data import files as dfiles

    monkeypatch.delenv("FLPLAT_DATA", raising=False)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setattr(dfiles, "REPO_SHARED_DATA", tmp_path / "repo_shared" / "data")
    monkeypatch.setattr(dfiles, "CACHE_DIR", tmp_path / "cache")
    return tmp_path
