"""One contract for the four registries: ``data.*`` and ``partition.*`` are checked against the chosen entry's own
keys as ``model.*`` and ``algorithm.*`` are; a plugin dataset / partition declares its keys; switching an entry by
override sets the file's keys aside; the keys older versions spelled otherwise keep working with one deprecation
warning each (flplat/data/legacy.py); config.py holds the run frame only."""

from __future__ import annotations

import ast
import logging
import sys
import textwrap
import warnings

import pytest
from conftest import REPO

from flplat.config_io import to_yaml
from flplat.data import legacy
from flplat.data.datasets import load_dataset
from flplat.data.partitions import build_federation
from flplat.errors import ConfigError
from flplat.experiment import load_config


@pytest.fixture(autouse=True)
def fresh_warnings():
    legacy._WARNED.clear()  # each deprecation notice is given once per process
    yield
    legacy._WARNED.clear()


# ---- the keys of the chosen entry ------------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides,msg", [
    (["data.name=digits", "data.samples=10"],
     "unknown key data.samples for dataset 'digits' (a key of synthetic); valid keys: name, root, download, cache, "
     "cache_dir, max_train_samples, max_test_samples"),
    (["data.name=synthetic", "data.sample=10"],
     "unknown key data.sample for dataset 'synthetic'; valid keys: name, root, download, cache, cache_dir, "
     "max_train_samples, max_test_samples, samples, features, classes, separation"),
    (["partition.name=iid", "partition.alpha=0.5"],
     "unknown key partition.alpha for partition 'iid' (a key of dirichlet); valid keys: name, num_clients, "
     "train_fraction, val_fraction, test_fraction"),
    (["partition.name=natural", "partition.samples_per_client=3"],
     "unknown key partition.samples_per_client for partition 'natural' (a key of drift, metadata, mixed_shift, "
     "shift); valid keys: name, num_clients, train_fraction, val_fraction, test_fraction, min_samples, max_clients, "
     "test"),
    (["partition.name=shift", "partition.type=rotation"],
     "partition.type='rotation' is not valid; choose one of: concept_xy, concept_yx, feature, label"),
    (["partition.name=pqfed", "partition.rates=[0.5,2]"],
     "partition.rates=[0.5, 2.0] is out of range; allowed: a list of numbers in [0, 1]"),
    (["data.name=synthetic", "data.samples=1"], "data.samples=1 is out of range; allowed: an integer >= 2"),
    (["data.name=acs_income", "data.states=[CA,XX]"], "data.states=['CA', 'XX'] is out of range; allowed: a "
                                                      "non-empty list of: AL, AK"),
    (["partition.name=dirichlet", "partition.alpha=fast"],
     "partition.alpha: Value 'fast' of type 'str' could not be converted to Float"),
    (["data.name=imagenet"], "data.name='imagenet' is not valid; choose one of: acs_income, amazon_reviews"),
])
def test_keys_are_checked_against_the_chosen_entry(overrides, msg):
    with pytest.raises(ConfigError) as e:
        load_config(None, overrides)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_the_resolved_sections_hold_the_shared_keys_then_the_entry_keys():
    cfg = load_config(None, ["data.name=synthetic", "data.samples=100", "partition.name=shift", "partition.level=3"])
    assert list(cfg.data) == ["name", "root", "download", "cache", "cache_dir", "max_train_samples",
                              "max_test_samples", "samples", "features", "classes", "separation"]
    assert cfg.data.samples == 100 and cfg.partition.level == 3 and cfg.partition.type == "feature"
    assert "alpha" not in cfg.partition and "synthetic_samples" not in cfg.data


def test_entry_defaults_apply_to_the_named_entry_only():
    over = ["partition_defaults.dirichlet.alpha=0.9", "data_defaults.synthetic.samples=50"]
    cfg = load_config(None, [*over, "partition.name=dirichlet", "data.name=synthetic"])
    assert cfg.partition.alpha == 0.9 and cfg.data.samples == 50
    cfg = load_config(None, [*over, "partition.name=iid", "data.name=digits"])  # not theirs: not applied, no error
    assert "alpha" not in cfg.partition and "samples" not in cfg.data
    assert load_config(None, [*over, "partition.alpha=0.2"]).partition.alpha == 0.2  # an explicit key wins
    with pytest.raises(ConfigError, match="partition_defaults key='dirichlt' is not valid"):
        load_config(None, ["partition_defaults.dirichlt.alpha=1"])


# ---- switching an entry on a file written for another -----------------------------------------------------------

def test_switching_data_and_partition_by_override_sets_the_files_keys_aside(tmp_path, caplog):
    f = tmp_path / "shift.yaml"
    f.write_text("data: {name: synthetic, samples: 300, max_train_samples: 200}\n"
                 "partition: {name: shift, type: label, level: 4, num_clients: 5}\n")
    with caplog.at_level(logging.WARNING, logger="flplat"):
        cfg = load_config(str(f), ["data.name=digits", "partition.name=dirichlet", "partition.alpha=0.7"])
    assert cfg.partition.name == "dirichlet" and cfg.partition.alpha == 0.7 and cfg.partition.num_clients == 5
    assert cfg.data.max_train_samples == 200  # a shared key stays
    assert dict(cfg.partition_unused) == {"type": "label", "level": 4} and dict(cfg.data_unused) == {"samples": 300}
    assert "partition.name=dirichlet does not use the config's partition.type, partition.level" in caplog.text
    assert "data.name=digits does not use the config's data.samples" in caplog.text
    assert "partition_unused:" in to_yaml(cfg)
    with pytest.raises(ConfigError, match="unknown key partition.type for partition 'dirichlet'"):
        load_config(str(f), ["partition.name=dirichlet", "partition.type=label"])  # an override stays an error
    assert load_config(str(f)).partition_unused == {}


# ---- the keys older versions spelled otherwise -------------------------------------------------------------------

def test_old_overrides_work_with_one_deprecation_warning_each(caplog):
    with caplog.at_level(logging.WARNING, logger="flplat"), pytest.warns(DeprecationWarning) as rec:
        cfg = load_config(None, ["data.name=synthetic", "data.synthetic_samples=120", "partition.name=shift",
                                 "partition.shift_type=label", "partition.shift_level=2", "partition.train_copies=3"])
    assert cfg.data.samples == 120 and (cfg.partition.type, cfg.partition.level) == ("label", 2)
    assert cfg.partition.train_copies == 3
    messages = [str(w.message) for w in rec if issubclass(w.category, DeprecationWarning)]
    assert messages == [
        "data.synthetic_samples is deprecated and goes in the next minor version: it is data.samples (with "
        "data.name=synthetic); see CHANGELOG.md",
        "partition.shift_type is deprecated and goes in the next minor version: it is partition.type (with "
        "partition.name=shift); see CHANGELOG.md",
        "partition.shift_level is deprecated and goes in the next minor version: it is partition.level (with "
        "partition.name=shift); see CHANGELOG.md"]
    assert caplog.text.count("is deprecated") == 3  # the line the user sees (Python hides DeprecationWarning)
    with warnings.catch_warnings(record=True) as again:  # once per key and process
        warnings.simplefilter("always")
        load_config(None, ["data.name=synthetic", "data.synthetic_samples=120"])
    assert not [w for w in again if issubclass(w.category, DeprecationWarning)]


def test_an_old_config_file_with_nested_groups_works(tmp_path):
    f = tmp_path / "old.yaml"
    f.write_text("data:\n  name: sent140\n  text: {max_length: 12, padding: post}\n  sent140: {labels: binary}\n"
                 "  acs: {year: 2016}\n"
                 "partition:\n  name: natural\n  natural_test: split\n  natural_min_samples: 3\n  alpha: 0.5\n")
    with pytest.warns(DeprecationWarning):
        cfg = load_config(str(f))
    assert (cfg.data.max_length, cfg.data.padding, cfg.data.labels) == (12, "post", "binary")
    assert (cfg.partition.test, cfg.partition.min_samples) == ("split", 3)
    # keys of other entries that were set (not their old defaults) are carried, not used
    assert dict(cfg.data_unused) == {"acs": {"year": 2016}} and dict(cfg.partition_unused) == {"alpha": 0.5}


def test_an_old_full_dump_translates_to_the_same_config():
    """A config as the earlier version printed it (every key of the two flat schemas): its entry's keys take their
    new names, the other entries' keys at their old defaults are dropped."""
    old = {"seed": 0, "data": {"name": "synthetic", "root": None, "max_train_samples": 0, "synthetic_samples": 900,
                               "synthetic_features": 20, "synthetic_classes": 10, "synthetic_separation": 2.0,
                               "cifar100_classes": 0, "text": {"max_length": 25, "padding": "pre"},
                               "chexpert": {"image_size": 64}, "path": None, "image_size": 0, "grey": False,
                               "meta_columns": []},
           "partition": {"name": "natural", "num_clients": 10, "alpha": 0.3, "min_samples": 10,
                         "natural_min_samples": 4, "natural_max_clients": 0, "natural_test": "auto",
                         "pqfed_rates": [round(0.1 * i, 1) for i in range(11)], "shift_type": "feature",
                         "meta_bins": {}, "samples_per_client": 0, "train_fraction": 0.8, "test_fraction": 0.2}}
    with pytest.warns(DeprecationWarning):
        new = legacy.upgrade_config(old)
    assert new["data"] == {"name": "synthetic", "root": None, "max_train_samples": 0, "samples": 900, "features": 20,
                           "classes": 10, "separation": 2.0}
    assert new["partition"] == {"name": "natural", "num_clients": 10, "train_fraction": 0.8, "test_fraction": 0.2,
                                "min_samples": 4, "max_clients": 0, "test": "auto"}
    assert "data_unused" not in new and "partition_unused" not in new
    assert legacy.upgrade_config({"data": {"name": "digits"}}) == {"data": {"name": "digits"}}  # current form


def test_a_resumed_run_of_an_old_version_reads_its_logged_config(tmp_path):
    """``flplat run --resume`` of a checkpoint written before the keys moved: its logged config.yaml is in the old
    form (experiment.resume_checkpoint upgrades it)."""
    from omegaconf import OmegaConf

    from flplat.data.legacy import upgrade_config

    logged = ("data: {name: digits, synthetic_samples: 2000, text: {max_length: 25}}\n"
              "partition: {name: dirichlet, alpha: 0.5, pqfed_sources: 15, natural_test: auto, num_clients: 4}\n")
    base = OmegaConf.create(upgrade_config(OmegaConf.create(logged)))
    assert OmegaConf.to_container(base) == {"data": {"name": "digits"},
                                            "partition": {"name": "dirichlet", "alpha": 0.5, "num_clients": 4}}


# ---- plugins declare their keys ------------------------------------------------------------------------------------

PLUGIN = '''
from dataclasses import dataclass, field

import numpy as np
import torch

from flplat.api import Dataset, Partition, check_range, register_dataset, register_partition


@dataclass
class RampConfig:
    length: int = 30                          # data.length
    labels: list = field(default_factory=lambda: [0, 1])

    def check(self):
        check_range(self.length >= 4, "data.length", self.length, "an integer >= 4")


@register_dataset("test_ramp", RampConfig)
def ramp(cfg, seed):
    """x = 0, 1, ...: a dataset whose keys are its plugin's."""
    n = int(cfg.length)
    return Dataset(name="test_ramp", x_train=torch.arange(n, dtype=torch.float32)[:, None],
                   y_train=torch.tensor([cfg.labels[i % len(cfg.labels)] for i in range(n)]),
                   num_classes=max(cfg.labels) + 1)


@dataclass
class HalvesConfig:
    cut: float = 0.5                          # partition.cut

    def check(self):
        check_range(0 < self.cut < 1, "partition.cut", self.cut, "a number in (0, 1)")


@register_partition("test_halves", HalvesConfig, plants=True)
def halves(dataset, cfg, seed):
    """Two clients: the first cut of the pool and the rest, two planted distributions."""
    n = len(dataset.y_train)
    m = int(cfg.cut * n)
    return Partition(clients=[np.arange(m), np.arange(m, n)], distribution=np.array([0, 1]))


@register_partition("test_old_style")
def old_style(labels, cfg, rng):
    """The old signature: the pool's labels, reading the old shared key alpha."""
    k = int(cfg.num_clients)
    order = rng.permutation(len(labels)) if cfg.alpha > 1 else np.arange(len(labels))
    return np.array_split(order, k)
'''


@pytest.fixture
def plugin_module(tmp_path, monkeypatch):
    """A plugin module written here, imported through the config's ``plugins`` key; its entries removed after."""
    from flplat.data.registry import DATASETS, PARTITIONS

    (tmp_path / "contract_plugin.py").write_text(textwrap.dedent(PLUGIN))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "contract_plugin"
    for registry, name in ((DATASETS, "test_ramp"), (PARTITIONS, "test_halves"), (PARTITIONS, "test_old_style")):
        registry.pop(name, None)
    sys.modules.pop("contract_plugin", None)
    from flplat import plugins

    plugins._LOADED.pop("contract_plugin", None)


def test_a_plugin_dataset_and_partition_declare_their_keys(plugin_module):
    with pytest.warns(DeprecationWarning, match="partition 'test_old_style': register_partition"):
        cfg = load_config(None, [f"plugins=[{plugin_module}]", "data.name=test_ramp", "data.length=10",
                                 "data.labels=[0,2]", "partition.name=test_halves", "partition.cut=0.3"])
    assert (cfg.data.length, list(cfg.data.labels), cfg.partition.cut) == (10, [0, 2], 0.3)
    ds = load_dataset(cfg.data, 0)
    assert ds.x_train[:, 0].tolist() == list(range(10)) and ds.y_train.tolist()[:3] == [0, 2, 0]
    fed = build_federation(ds, cfg.partition, 0)
    assert [len(c.all()) for c in fed.clients] == [3, 7] and fed.meta["num_distributions"] == 2
    for bad, msg in (("data.length=2", "data.length=2 is out of range; allowed: an integer >= 4"),
                     ("partition.cut=1.5", "partition.cut=1.5 is out of range; allowed: a number in (0, 1)"),
                     ("data.size=3", "unknown key data.size for dataset 'test_ramp'; valid keys: name, root, "
                                     "download, cache, cache_dir, max_train_samples, max_test_samples, length, labels"),
                     ("partition.alpha=2", "unknown key partition.alpha for partition 'test_halves' (a key of "
                                           "dirichlet, test_old_style)")):
        with pytest.raises(ConfigError) as e:
            load_config(None, [f"plugins=[{plugin_module}]", "data.name=test_ramp", "partition.name=test_halves",
                               bad])
        assert msg in str(e.value)


def test_an_old_style_plugin_partition_still_runs_with_the_old_shared_keys(plugin_module):
    with pytest.warns(DeprecationWarning):
        cfg = load_config(None, [f"plugins=[{plugin_module}]", "data.name=digits", "partition.name=test_old_style",
                                 "partition.num_clients=3", "partition.alpha=0.5"])
    assert cfg.partition.alpha == 0.5 and cfg.partition.min_samples == 10  # the old shared keys, their defaults
    fed = build_federation(load_dataset(cfg.data, 0), cfg.partition, 0)
    assert [c.all().min() for c in fed.clients] == [0, 599, 1198]  # alpha <= 1: the pool in order, cut in three


def test_legacy_partition_config_has_the_built_in_label_protocols_keys():
    from flplat.data.registry import legacy_partition_config

    fields = {f.name: f.default for f in __import__("dataclasses").fields(legacy_partition_config())}
    assert fields == {"alpha": 0.3, "min_samples": 10, "max_retries": 100, "similarity": 0.5, "iid_fraction": 0.5,
                      "class_fraction_min": 0.2, "class_fraction_max": 0.4, "size_min": 0.5, "size_max": 1.0}


def test_a_new_style_partition_without_keys_needs_no_config_and_an_old_label_function_is_told_apart():
    from flplat.data.registry import PARTITIONS, register_partition

    try:
        @register_partition("test_no_keys")
        def no_keys(dataset, cfg, seed):
            """Every sample to one client."""
            import numpy as np

            from flplat.data.containers import Partition

            return Partition(clients=[np.arange(len(dataset.y_train))])

        assert not PARTITIONS["test_no_keys"].legacy and PARTITIONS["test_no_keys"].labels is None
        with pytest.raises(TypeError, match="Config must not define num_clients"):
            from dataclasses import make_dataclass

            register_partition("test_bad", make_dataclass("Bad", [("num_clients", int, 3)]))
    finally:
        PARTITIONS.pop("test_no_keys", None)


# ---- config.py is the run frame ---------------------------------------------------------------------------------

def test_config_py_is_the_run_frame_only():
    """No dataset, partition, model or method is named in flplat/config.py beyond the four sections' default entry
    (what runs when a section names none), and it stays near the frame's size."""
    from flplat.algorithms import ALGORITHMS
    from flplat.data.registry import DATASETS, PARTITIONS
    from flplat.models import MODELS

    source = (REPO / "flplat" / "config.py").read_text()
    names = set(DATASETS) | set(PARTITIONS) | set(MODELS) | set(ALGORITHMS)
    strings = {n.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert strings & names == {"digits", "dirichlet", "mlp", "fedavg"}
    words = {w.strip("`'\".,:;()[]{}") for w in source.replace("_", " ").split()}
    assert not words & (names - {"digits", "dirichlet", "mlp", "fedavg", "iid", "local"}), words & names
    assert len(source.splitlines()) <= 360
