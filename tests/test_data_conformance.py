"""`flplat check --dataset NAME` / `--partition NAME` (flplat/studies/conformance_data.py): every registered
partition and every registered dataset that can run on files the test writes pass the contract; deliberately broken
ones, registered the way a plugin registers them, fail the property they break; bad input exits 2 with one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from flplat.cli import main
from flplat.data.containers import Dataset, Partition
from flplat.data.registry import (
    DATASETS,
    PARTITIONS,
    DatasetSpec,
    NoConfig,
    PartitionSpec,
    builtin_names,
    load_builtins,
)
from flplat.studies.conformance_data import PROPERTIES, check_entry

load_builtins()  # the registries the tests below iterate over


def _npz(tmp: Path) -> list[str]:
    rng = np.random.default_rng(0)
    np.savez(tmp / "d.npz", x=rng.normal(size=(40, 3)).astype(np.float32), y=rng.integers(0, 3, 40),
             x_test=rng.normal(size=(10, 3)).astype(np.float32), y_test=rng.integers(0, 3, 10),
             writer=rng.integers(0, 4, 40), site=rng.integers(0, 2, 40))
    return [f"data.path={tmp / 'd.npz'}", "data.client_column=writer", "data.meta_columns=[site]"]


def _table(tmp: Path) -> list[str]:
    rows = ["a,b,colour,user,label"] + [f"{i},{i % 3 * 0.5},{'red' if i % 2 else 'blue'},u{i % 4},{i % 3}"
                                        for i in range(30)]
    (tmp / "t.csv").write_text("\n".join(rows) + "\n")
    return [f"data.path={tmp / 't.csv'}", "data.client_column=user"]


def _imagefolder(tmp: Path) -> list[str]:
    from PIL import Image

    for domain in ("art", "photo"):
        for cls in ("cat", "dog"):
            (tmp / "imgs" / domain / cls).mkdir(parents=True)
            for i in range(3):
                Image.fromarray(np.full((6, 6, 3), 40 * i + (cls == "dog") * 100, np.uint8)).save(
                    tmp / "imgs" / domain / cls / f"{i}.png")
    return [f"data.path={tmp / 'imgs'}", "data.folder_levels=[domain]", "data.meta_columns=[domain]",
            "data.cache=false"]


def _idx(name: str):
    def write(tmp: Path) -> list[str]:
        from test_datasets import _write_idx_set

        _write_idx_set(tmp / name, gz=True)
        return [f"data.root={tmp / name}", "data.cache=false"]
    return write


def _cifar(tmp: Path, name: str) -> list[str]:
    import test_datasets

    layout = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}[name]
    (test_datasets._write_cifar10 if name == "cifar10" else test_datasets._write_cifar100)(tmp / layout)
    return [f"data.root={tmp}", "data.cache=false"]


def _sent140(tmp: Path) -> list[str]:
    from test_paper_datasets import _sent140_csv

    _sent140_csv(tmp / "sent140")
    return [f"data.root={tmp}", "data.source=csv", "data.max_length=4"]


def _femnist(tmp: Path) -> list[str]:
    from test_paper_datasets import write_leaf

    img = [[0.1 * k] + [0.0] * 783 for k in range(4)]
    write_leaf(tmp / "femnist" / "data" / "train" / "t.json", {"w1": {"x": img[:3], "y": [36, 37, 38]},
                                                                "w2": {"x": img[3:], "y": [39]}})
    write_leaf(tmp / "femnist" / "data" / "test" / "t.json", {"w1": {"x": img[:1], "y": [36]}})
    return [f"data.root={tmp}"]


#: every built-in dataset the test can give files to, with the overrides that point at them
SETUPS = {"digits": lambda tmp: [], "synthetic": lambda tmp: ["data.samples=200"], "npz": _npz, "table": _table,
          "imagefolder": _imagefolder, "mnist": _idx("mnist"), "fmnist": _idx("fmnist"),
          "cifar10": lambda tmp: _cifar(tmp, "cifar10"), "cifar100": lambda tmp: _cifar(tmp, "cifar100"),
          "sent140": _sent140, "femnist": _femnist}
#: the papers' datasets whose public formats test_paper_datasets.py exercises (big files: ACS PUMS, CheXpert images)
NOT_HERE = {"acs_income", "serengeti", "amazon_reviews", "chexpert", "office_home"}


def _failed(results) -> list[str]:
    return [f"{r.prop}: {r.detail}" for r in results if not r.ok]


def test_every_builtin_dataset_is_checked_or_named():
    assert set(builtin_names(DATASETS, "dataset")) == set(SETUPS) | NOT_HERE


@pytest.mark.parametrize("name", sorted(SETUPS))
def test_builtin_dataset_passes_the_contract(name, isolated):
    results = check_entry("dataset", name, SETUPS[name](isolated))
    assert [r.prop for r in results] == list(PROPERTIES["dataset"])
    assert not _failed(results)


@pytest.mark.parametrize("name", sorted(builtin_names(PARTITIONS, "partition")))
def test_builtin_partition_passes_the_contract(name):
    results = check_entry("partition", name)
    assert [r.prop for r in results] == list(PROPERTIES["partition"])
    assert not _failed(results)


def test_a_partition_runs_on_the_dataset_the_overrides_name():
    r = check_entry("partition", "dirichlet", ["data.name=synthetic", "data.samples=300"], only=["disjoint"])
    assert r[0].ok and "300 samples" in r[0].detail


# ---- deliberately broken entries, registered as a plugin registers them ---------------------------------------------

def _float64_blobs(cfg, seed):
    """x in float64 and a label beyond num_classes."""
    return Dataset(name="blobs", x_train=torch.zeros(10, 2, dtype=torch.float64),
                   y_train=torch.arange(10) % 3, num_classes=2)


def _moody_blobs(cfg, seed):
    """Different data at every load: reads the global generator instead of ``seed``."""
    return Dataset(name="moody", x_train=torch.from_numpy(np.random.rand(10, 2).astype(np.float32)),
                   y_train=torch.arange(10) % 2, num_classes=2, client_ids=np.zeros(9, np.int64))


def _overlapping(dataset, cfg, seed):
    """Two clients share sample 0."""
    n = len(dataset.y_train)
    return Partition(clients=[np.arange(0, n // 2), np.arange(0, n)[n // 2 - 1:]])


def _impure(dataset, cfg, seed):
    """Reads numpy's global generator: another federation for the same seed."""
    return Partition(clients=np.array_split(np.random.permutation(len(dataset.y_train)), int(cfg.num_clients)))


def _unplanted(dataset, cfg, seed):
    """Says it plants distributions but gives none."""
    return Partition(clients=np.array_split(np.arange(len(dataset.y_train)), int(cfg.num_clients)))


@pytest.fixture
def plugin(monkeypatch):
    def add(kind, spec):
        monkeypatch.setitem(DATASETS if kind == "dataset" else PARTITIONS, spec.name, spec)
        return spec.name
    return add


def _lines(text: str) -> dict[str, str]:
    return {line.split()[1]: line for line in text.splitlines() if line.startswith(("PASS", "FAIL"))}


def test_a_dataset_of_float64_and_labels_out_of_range_fails_dtypes_and_classes(plugin, capsys):
    name = plugin("dataset", DatasetSpec("test_blobs", NoConfig, _float64_blobs))
    assert main(["check", "--dataset", name]) == 1
    out = capsys.readouterr()
    lines = _lines(out.out)
    assert lines["dtypes"].startswith("FAIL  dtypes          x is torch.float64; allowed: finite float32")
    assert lines["classes"].startswith("FAIL  classes         y holds labels in [0, 2], not in [0, 2)")
    assert lines["shapes"].startswith("PASS") and lines["registry"].startswith("PASS")
    assert "2 of 6 properties fail: dtypes, classes" in out.err


def test_a_dataset_that_ignores_the_seed_fails_determinism_and_shapes(plugin, capsys):
    name = plugin("dataset", DatasetSpec("test_moody", NoConfig, _moody_blobs))
    assert main(["check", "--dataset", name, "--only", "shapes,determinism"]) == 1
    lines = _lines(capsys.readouterr().out)
    assert lines["shapes"] == "FAIL  shapes          client_ids has shape (9,), not (10,)"
    assert lines["determinism"] == "FAIL  determinism     same seed: x_train differs"


@pytest.mark.parametrize("fn,plants,prop,detail", [
    (_overlapping, False, "disjoint", r"sample \d+ is in client 0 and client 1"),
    (_impure, False, "pure", r"the same seed gave other clients \(does it read a global random generator\?\)"),
    (_unplanted, True, "planted", "registered with plants=True but gives no Partition.distribution"),
])
def test_a_broken_partition_fails_the_property_it_breaks(plugin, capsys, fn, plants, prop, detail):
    import re

    name = plugin("partition", PartitionSpec(f"test_{fn.__name__.strip('_')}", NoConfig, fn, plants=plants))
    assert main(["check", "--partition", name, "partition.num_clients=2", "--json"]) == 1
    res = {r["property"]: r for r in json.loads(capsys.readouterr().out)}
    assert not res[prop]["ok"] and re.fullmatch(detail, res[prop]["detail"])
    assert [p for p, r in res.items() if not r["ok"]] == [prop]


@pytest.mark.parametrize("args,msg", [
    (["--dataset", "no_such_data"], "dataset 'no_such_data' is not registered; allowed: acs_income, "),
    (["--partition", "shift", "--only", "disjoint,speed"], "--only=speed unknown for a partition; allowed: registry"),
    (["--partition", "iid", "partition.alpha=1"], "unknown key partition.alpha for partition 'iid' (a key of "
                                                   "dirichlet)"),
])
def test_bad_input_exits_2_with_one_line(capsys, args, msg):
    assert main(["check", *args]) == 2
    out = capsys.readouterr()
    assert out.out == "" and len(out.err.strip().splitlines()) == 1 and msg in out.err
