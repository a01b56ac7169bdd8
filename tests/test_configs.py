"""Every shipped config validates, and every search-space file names valid keys."""

from __future__ import annotations

import pytest
from conftest import REPO

from flplat.experiment import load_config

CONFIGS = sorted(p for p in (REPO / "configs").rglob("*.yaml") if not {"search_spaces", "papers"} & set(p.parts))
SPACES = sorted((REPO / "configs" / "search_spaces").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[str(p.relative_to(REPO / "configs")) for p in CONFIGS])
def test_config_validates(path):
    cfg = load_config(path)
    assert cfg.federation.rounds >= 1


@pytest.mark.parametrize("path", SPACES, ids=[p.name for p in SPACES])
def test_search_space_keys_are_valid_overrides(path):
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(OmegaConf.load(path))
    common = raw.get("common") or {}
    for algo, keys in raw.items():
        if algo == "common":
            continue
        for key, spec in {**common, **(keys or {})}.items():
            first = spec[0] if isinstance(spec, list) else spec["low"]
            load_config(REPO / "configs/quickstart.yaml", [f"algorithm.name={algo}", f"{key}={first}"])
