"""Every shipped config validates, and every search-space file names valid keys."""

from __future__ import annotations

import pytest
from conftest import REPO

from flplat.experiment import load_config

CONFIGS = sorted(p for p in (REPO / "configs").rglob("*.yaml") if not {"search_spaces", "papers"} & set(p.parts))
SPACES = sorted((REPO / "configs" / "search_spaces").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[str(p.relative_to(REPO / "configs")) for p in CONFIGS])
def test_config_validates(path):
    """... in the current form: no key older versions spelled otherwise (that would warn), none set aside."""
    import warnings

    from flplat.data import legacy

    legacy._WARNED.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        cfg = load_config(path)
    assert cfg.federation.rounds >= 1
    assert not cfg.data_unused and not cfg.partition_unused and not cfg.algorithm_unused


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


def test_yaml_boolean_words_in_overrides_stay_strings_for_string_keys():
    """YAML 1.1 reads off/on/yes/no as booleans: ``algorithm.knee_guard=off`` used to reach the check as 'False'.
    The word is kept as typed (the error names it); a boolean key still takes it."""
    from flplat.errors import ConfigError

    with pytest.raises(ConfigError, match="algorithm.knee_guard='off' is not valid; choose one of: noise, none"):
        load_config(None, ["algorithm.name=flux", "algorithm.knee_guard=off"])
    cfg = load_config(None, ["algorithm.name=apfl", "algorithm.adaptive_alpha=off", "tracking.log_models=No"])
    assert cfg.algorithm.adaptive_alpha is False and cfg.tracking.log_models is False
    assert load_config(None, ["algorithm.name=flux", "algorithm.knee_guard=none"]).algorithm.knee_guard == "none"


def test_a_yaml_boolean_word_in_a_config_file_gets_a_hint(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("algorithm:\n  name: flux\n  knee_guard: off\n")
    from flplat.errors import ConfigError

    with pytest.raises(ConfigError, match="knee_guard='False' is not valid; choose one of: noise, none "
                                          "\\(YAML reads off/no/on/yes as booleans: quote the word\\)"):
        load_config(str(f), [])
