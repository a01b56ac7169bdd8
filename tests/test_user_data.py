"""Own data without code (flplat/data/user_files.py) and the partitions that keep the data's groups
(flplat/data/group_partitions.py): every test writes its files in the public format (CSV, Parquet, .npz, PNG
folders) and reads them with the real loaders."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO

from flplat.data.datasets import load_dataset
from flplat.data.files import DataUnavailableError
from flplat.data.formats import DataFormatError
from flplat.data.group_partitions import metadata_groups
from flplat.data.partitions import build_federation
from flplat.data.registry import data_config, partition_config
from flplat.errors import ConfigError


def write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


HEADER = ["user", "age", "colour", "size", "label"]
ROWS = [["u1", 30, "red", 1.0, "yes"], ["u1", 40, "blue", 2.0, "no"], ["u2", 55, "red", 3.0, "yes"],
        ["u2", 60, "", 4.0, "no"], ["u2", 70, "red", 5.0, "yes"], ["u3", 20, "blue", 6.0, "no"]]


def table_cfg(path: Path, **kw) -> object:
    return data_config(name="table", path=str(path), **kw)


# ----------------------------------------------------------------------------------------------------- table


def test_table_csv_features_labels_clients_and_metadata(tmp_path):
    train = write_csv(tmp_path / "train.csv", HEADER, ROWS)
    test = write_csv(tmp_path / "test.csv", HEADER, [["u3", 41, "green", 2.0, "yes"], ["u4", "", "red", 8.0, "no"]])
    d = load_dataset(table_cfg(train, test_path=str(test), client_column="user", meta_columns=["age"]), 0)
    # features: colour one-hot over the training file's sorted categories ("", blue, red), then size z-scored
    mean, std = 3.5, np.std([1.0, 2, 3, 4, 5, 6])
    want = np.array([[0, 0, 1, (1 - mean) / std], [0, 1, 0, (2 - mean) / std], [0, 0, 1, (3 - mean) / std],
                     [1, 0, 0, (4 - mean) / std], [0, 0, 1, (5 - mean) / std], [0, 1, 0, (6 - mean) / std]])
    np.testing.assert_allclose(d.x_train.numpy(), want, rtol=1e-6)
    # the test file's unseen category "green" is all zeros; its size uses the training file's statistics
    np.testing.assert_allclose(d.x_test.numpy(), [[0, 0, 0, (2 - mean) / std], [0, 0, 1, (8 - mean) / std]],
                               rtol=1e-6)
    assert d.class_names == ["no", "yes"] and d.num_classes == 2
    assert d.y_train.tolist() == [1, 0, 1, 0, 1, 0] and d.y_test.tolist() == [1, 0]
    # client codes shared by both files: u1..u4 -> 0..3
    assert d.client_ids.tolist() == [0, 0, 1, 1, 1, 2] and d.client_ids_test.tolist() == [2, 3]
    # an integer metadata column keeps its values; an empty cell is missing (-1)
    assert d.meta["age"].tolist() == [30, 40, 55, 60, 70, 20] and d.meta_test["age"].tolist() == [41, -1]
    assert d.x_train.dtype == torch.float32 and d.y_train.dtype == torch.int64


def test_table_ordinal_unstandardised_and_chosen_features(tmp_path):
    train = write_csv(tmp_path / "t.csv", HEADER, ROWS)
    d = load_dataset(table_cfg(train, categorical="ordinal", standardize=False,
                               feature_columns=["size", "colour"], meta_columns=["colour"]), 0)
    # listed order; colour codes "" 0, blue 1, red 2 (text metadata: "" missing, blue 0, red 1)
    assert d.x_train.tolist() == [[1, 2], [2, 1], [3, 2], [4, 0], [5, 2], [6, 1]]
    assert d.meta["colour"].tolist() == [1, 0, 1, -1, 1, 0] and d.client_ids is None


def test_table_parquet_reads_like_the_csv(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    cols = {h: [r[j] for r in ROWS] for j, h in enumerate(HEADER)}
    pq.write_table(pa.table(cols), tmp_path / "t.parquet")
    csv_ds = load_dataset(table_cfg(write_csv(tmp_path / "t.csv", HEADER, ROWS), client_column="user"), 0)
    pq_ds = load_dataset(table_cfg(tmp_path / "t.parquet", client_column="user"), 0)
    assert torch.equal(csv_ds.x_train, pq_ds.x_train) and torch.equal(csv_ds.y_train, pq_ds.y_train)
    assert pq_ds.client_ids.tolist() == csv_ds.client_ids.tolist()


def test_parquet_without_pyarrow_says_how_to_install(tmp_path, monkeypatch):
    (tmp_path / "t.parquet").write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(DataUnavailableError) as e:
        load_dataset(table_cfg(tmp_path / "t.parquet"), 0)
    msg = str(e.value)
    assert "t.parquet" in msg and "pip install 'flplat[parquet]'" in msg and "\n" not in msg


def test_table_errors_name_the_file_and_the_column(tmp_path):
    train = write_csv(tmp_path / "t.csv", HEADER, ROWS)
    with pytest.raises(DataFormatError) as e:
        load_dataset(table_cfg(train, label_column="target"), 0)
    msg = str(e.value)
    assert str(train) in msg and "'target'" in msg and "data.label_column" in msg and "\n" not in msg
    with pytest.raises(DataFormatError, match=r"has no column 'writer' \(data.client_column\)"):
        load_dataset(table_cfg(train, client_column="writer"), 0)
    with pytest.raises(DataFormatError, match=r"has no column 'height' \(data.feature_columns\)"):
        load_dataset(table_cfg(train, feature_columns=["height"]), 0)
    with pytest.raises(DataUnavailableError) as e:
        load_dataset(table_cfg(tmp_path / "nope.csv"), 0)
    assert "nope.csv" in str(e.value) and "does not exist" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="needs data.path"):
        load_dataset(data_config(name="table"), 0)
    gap = write_csv(tmp_path / "gap.csv", ["a", "label"], [[1, 0], ["", 1]])
    with pytest.raises(DataFormatError, match=r"column 'a' data row 2 is empty"):
        load_dataset(table_cfg(gap), 0)


def test_a_relative_path_is_read_under_data_root(tmp_path):
    write_csv(tmp_path / "t.csv", HEADER, ROWS)
    d = load_dataset(data_config(name="table", root=str(tmp_path), path="t.csv"), 0)
    assert len(d.y_train) == 6


# ------------------------------------------------------------------------------------------------------- npz


def test_npz_arrays_clients_metadata_and_test_set(tmp_path):
    x = np.arange(2 * 3 * 2, dtype=np.uint8).reshape(2, 3, 2) * 20
    np.savez(tmp_path / "d.npz", x=x, y=np.array([2, 0]), x_test=np.ones((1, 3, 2), np.float64) * 0.5,
             y_test=np.array([1]), writer=np.array(["b", "a"]), writer_test=np.array(["c"]),
             site=np.array([5, 7]), class_names=np.array(["x", "y", "z"]))
    d = load_dataset(data_config(name="npz", path=str(tmp_path / "d.npz"), client_column="writer",
                                meta_columns=["site"]), 0)
    np.testing.assert_allclose(d.x_train.numpy(), x / 255.0, rtol=1e-6)  # uint8 scaled to [0, 1]
    assert d.x_test.tolist() == [[[0.5] * 2] * 3] and d.y_test.tolist() == [1]
    assert d.y_train.tolist() == [2, 0] and d.num_classes == 3 and d.class_names == ["x", "y", "z"]
    assert d.client_ids.tolist() == [1, 0] and d.client_ids_test.tolist() == [2]
    assert d.meta["site"].tolist() == [5, 7] and d.meta_test is None and not d.multilabel


def test_npz_multilabel_and_errors(tmp_path):
    np.savez(tmp_path / "m.npz", x=np.zeros((3, 4), np.float32), y=np.array([[1, 0], [0, 1], [1, 1]]))
    d = load_dataset(data_config(name="npz", path=str(tmp_path / "m.npz")), 0)
    assert d.multilabel and d.num_classes == 2 and d.y_train.dtype == torch.float32
    np.savez(tmp_path / "bad.npz", x=np.zeros((3, 4)))
    with pytest.raises(DataFormatError) as e:
        load_dataset(data_config(name="npz", path=str(tmp_path / "bad.npz")), 0)
    assert "bad.npz" in str(e.value) and "'y'" in str(e.value) and "its arrays: x" in str(e.value)
    np.savez(tmp_path / "half.npz", x=np.zeros((3, 4)), y=np.zeros(3, int), x_test=np.zeros((1, 4)))
    with pytest.raises(DataFormatError, match="x_test and y_test go together"):
        load_dataset(data_config(name="npz", path=str(tmp_path / "half.npz")), 0)
    with pytest.raises(DataFormatError, match=r"no array 'user' \(data.client_column\)"):
        load_dataset(data_config(name="npz", path=str(tmp_path / "m.npz"), client_column="user"), 0)


# ----------------------------------------------------------------------------------------------- imagefolder


def write_png(path: Path, value: int, size: tuple[int, int] = (4, 3), rgb: tuple[int, int, int] | None = None):
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, rgb or (value, value, value)).save(path)


def test_imagefolder_with_a_domain_level(tmp_path):
    root = tmp_path / "office"
    # <domain>/<class>/<image>: two domains, classes cat (0) and dog (1)
    write_png(root / "Art" / "dog" / "1.png", 10, rgb=(10, 20, 30))
    write_png(root / "Art" / "cat" / "2.png", 40)
    write_png(root / "Clipart" / "cat" / "3.jpg.png", 200)
    (root / "Clipart" / "cat" / "notes.txt").write_text("not an image")
    d = load_dataset(data_config(name="imagefolder", path=str(root), folder_levels=["domain"], cache=False,
                                meta_columns=["domain"], client_column="domain", standardize=False), 0)
    assert d.class_names == ["cat", "dog"] and d.num_classes == 2
    # sorted walk: Art/cat/2, Art/dog/1, Clipart/cat/3
    assert d.y_train.tolist() == [0, 1, 0] and d.x_train.shape == (3, 3, 3, 4)
    assert d.x_train[1, :, 0, 0].tolist() == pytest.approx([10 / 255, 20 / 255, 30 / 255])
    assert d.x_train[2].unique().tolist() == pytest.approx([200 / 255])
    assert d.meta["domain"].tolist() == [0, 0, 1] and d.client_ids.tolist() == [0, 0, 1]
    grey = load_dataset(data_config(name="imagefolder", path=str(root), folder_levels=["domain"], grey=True,
                                   image_size=2, cache=False), 0)
    assert grey.x_train.shape == (3, 1, 2, 2)
    # standardised per channel with the pool's statistics
    assert abs(float(grey.x_train.mean())) < 1e-5


def test_imagefolder_index_file_test_folder_and_errors(tmp_path):
    root, test = tmp_path / "train", tmp_path / "test"
    for i, cls in enumerate(["a", "b", "a", "b"]):
        write_png(root / cls / f"{i}.png", 30 * i)
    write_png(test / "b" / "9.png", 90)
    write_csv(tmp_path / "index.csv", ["path", "writer"], [["a/0.png", "w2"], ["b/1.png", "w1"], ["a/2.png", "w1"],
                                                            ["b/3.png", "w2"]])
    d = load_dataset(data_config(name="imagefolder", path=str(root), test_path=str(test), client_column="writer",
                                index_file=str(tmp_path / "index.csv"), cache=False), 0)
    # order a/0, a/2, b/1, b/3 -> writers w2, w1, w1, w2
    assert d.y_train.tolist() == [0, 0, 1, 1] and d.client_ids.tolist() == [1, 0, 0, 1]
    assert d.y_test.tolist() == [1] and d.client_ids_test is None
    with pytest.raises(DataFormatError, match=r"gives no column 'user' \(data.client_column\)"):
        load_dataset(data_config(name="imagefolder", path=str(root), client_column="user"), 0)
    write_png(root / "b" / "big.png", 0, size=(5, 5))
    with pytest.raises(DataFormatError, match=r"big.png is 5x5, the first image 4x3; set data.image_size"):
        load_dataset(data_config(name="imagefolder", path=str(root), cache=False), 0)
    with pytest.raises(DataUnavailableError, match="does not exist"):
        load_dataset(data_config(name="imagefolder", path=str(tmp_path / "nowhere")), 0)


def test_imagefolder_pixels_are_cached_by_content_and_settings(tmp_path, monkeypatch):
    from flplat.data import user_files

    root, cache = tmp_path / "imgs", tmp_path / "cache"
    for i in range(3):
        write_png(root / f"c{i % 2}" / f"{i}.png", 50 * i)
    cfg = dict(name="imagefolder", path=str(root), cache_dir=str(cache))
    first = load_dataset(data_config(**cfg), 0)
    assert len(list(cache.glob("imagefolder-s0-RGB-z1-*"))) == 1
    monkeypatch.setattr(user_files, "_read_image", lambda *a: pytest.fail("decoded again"))
    again = load_dataset(data_config(**cfg), 0)
    assert torch.equal(first.x_train, again.x_train) and torch.equal(first.y_train, again.y_train)
    monkeypatch.undo()
    load_dataset(data_config(**cfg, image_size=2), 0)  # other settings: another entry
    write_png(root / "c0" / "0.png", 77)  # other pixels: another entry
    changed = load_dataset(data_config(**cfg), 0)
    assert len(list(cache.iterdir())) == 3 and not torch.equal(changed.x_train, first.x_train)


# --------------------------------------------------------------------------------------------- natural partition


def natural_rows() -> list[list]:
    # clients: c (5 samples), a (3), b (2), d (1)
    owners = ["c", "a", "c", "b", "c", "a", "d", "c", "b", "a", "c"]
    return [[o, float(i), i % 2] for i, o in enumerate(owners)]


def test_natural_partition_keeps_the_clients_exactly(tmp_path):
    path = write_csv(tmp_path / "t.csv", ["client", "f", "label"], natural_rows())
    d = load_dataset(table_cfg(path, client_column="client"), 0)
    fed = build_federation(d, partition_config(name="natural", train_fraction=0.6, test_fraction=0.4), seed=3)
    # one client per id, in id order (a, b, c, d), holding exactly its rows
    assert fed.num_clients == 4
    assert [sorted(c.all().tolist()) for c in fed.clients] == [[1, 5, 9], [3, 8], [0, 2, 4, 7, 10], [6]]
    # the usual fractions: test = round(0.4 n) half up -> 1, 1, 2, 0 (n = 1 keeps its sample for training)
    assert [len(c.test) for c in fed.clients] == [1, 1, 2, 0] and [len(c.train) for c in fed.clients] == [2, 1, 3, 1]
    assert fed.meta["natural_client_ids"].tolist() == [0, 1, 2, 3] and fed.meta["dropped_samples"] == 0
    # at least 3 samples: a and c remain; at most one client: one of them, the same for the same seed
    fed3 = build_federation(d, partition_config(name="natural", min_samples=3), seed=3)
    assert [sorted(c.all().tolist()) for c in fed3.clients] == [[1, 5, 9], [0, 2, 4, 7, 10]]
    assert fed3.meta["dropped_samples"] == 3
    one = [build_federation(d, partition_config(name="natural", min_samples=3, max_clients=1), seed=s)
           for s in range(6)]
    picks = {tuple(f.meta["natural_client_ids"].tolist()) for f in one}
    assert picks == {(0,), (2,)}  # both can be drawn, only those two
    assert all(f.num_clients == 1 for f in one)
    again = build_federation(d, partition_config(name="natural", min_samples=3, max_clients=1), seed=4)
    assert again.meta["natural_client_ids"].tolist() == one[4].meta["natural_client_ids"].tolist()


def test_natural_partition_takes_test_splits_from_the_official_test_set(tmp_path):
    path = write_csv(tmp_path / "t.csv", ["client", "f", "label"], natural_rows())
    test = write_csv(tmp_path / "test.csv", ["client", "f", "label"],
                     [["b", 1.0, 0], ["a", 2.0, 1], ["b", 3.0, 1], ["z", 4.0, 0]])
    d = load_dataset(table_cfg(path, test_path=str(test), client_column="client"), 0)
    fed = build_federation(d, partition_config(name="natural"), seed=0)  # auto: the test set has client ids
    n = 11
    assert fed.meta["natural_test"] == "official" and len(fed.x) == n + 4
    # a: test row 1; b: test rows 0 and 2; c, d: none; z (no training client) is no client
    assert [c.test.tolist() for c in fed.clients] == [[n + 1], [n + 0, n + 2], [], []]
    assert [sorted(np.concatenate([c.train, c.val]).tolist()) for c in fed.clients] == [
        [1, 5, 9], [3, 8], [0, 2, 4, 7, 10], [6]]
    assert fed.meta["test_samples_without_client"] == 1
    assert torch.equal(fed.x[fed.clients[1].test], d.x_test[[0, 2]]) and fed.x_global_test is d.x_test
    split = build_federation(d, partition_config(name="natural", test="split"), seed=0)
    assert len(split.x) == n and split.meta["natural_test"] == "split"


def test_a_natural_run_logs_its_real_number_of_clients_and_keeps_its_hash(tmp_path):
    """4 natural clients with partition.num_clients=10 written: the run's param (and config.yaml) say 4, a tag keeps
    the 10, and the config hash is the written config's (a re-run finds the run by it)."""
    from mlflow.tracking import MlflowClient

    from flplat.config_io import config_key
    from flplat.experiment import REQUESTED_CLIENTS_TAG, load_config, run
    from flplat.tracking.resume import CONFIG_KEY_TAG, runs_by_key
    from flplat.tracking.store import store_uris

    path = write_csv(tmp_path / "t.csv", ["client", "f", "label"], natural_rows())
    over = ["data.name=table", f"data.path={path}", "data.client_column=client", "partition.name=natural",
            "partition.num_clients=10", "partition.train_fraction=0.6", "partition.test_fraction=0.4",
            "model.name=mlp", "model.hidden=[4]", "federation.rounds=1", "federation.client_fraction=1.0",
            "fabric.num_threads=1", f"tracking.store_dir={tmp_path / 'store'}", "tracking.plots=false",
            "tracking.log_models=false", "tracking.experiment=natural"]
    cfg = load_config(None, over)
    summary, run_id = run(cfg, progress=False)
    assert len(summary.client_table["client"]) == 4
    client = MlflowClient(tracking_uri=store_uris(None, str(tmp_path / "store"))[0])
    r = client.get_run(run_id)
    assert r.data.params["partition.num_clients"] == "4" and r.data.tags[REQUESTED_CLIENTS_TAG] == "10"
    logged = Path(client.download_artifacts(run_id, "config.yaml", str(tmp_path))).read_text()
    assert "num_clients: 4" in logged
    assert r.data.tags[CONFIG_KEY_TAG] == config_key(cfg) == config_key(load_config(None, over))
    assert config_key(cfg) != config_key(load_config(None, [*over, "partition.num_clients=4"]))
    exp = client.get_experiment_by_name("natural").experiment_id
    assert [x.info.run_id for x in runs_by_key(client, exp, CONFIG_KEY_TAG, config_key(cfg))] == [run_id]
    # a partition that produces the written number: no tag, the same param as written
    same, same_id = run(load_config(None, [*over, "partition.num_clients=4"]), progress=False)
    assert REQUESTED_CLIENTS_TAG not in client.get_run(same_id).data.tags


def test_natural_partition_needs_client_ids():
    d = load_dataset(data_config(name="digits"), 0)
    with pytest.raises(ConfigError) as e:
        build_federation(d, partition_config(name="natural"), seed=0)
    assert "partition.name='natural'" in str(e.value) and "data.client_column" in str(e.value)
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="test='official'"):
        d.client_ids = np.zeros(len(d.y_train), dtype=np.int64)
        build_federation(d, partition_config(name="natural", test="official"), seed=0)


# -------------------------------------------------------------------------------------------- metadata partition


def test_metadata_groups_cut_points_and_missing_levels():
    meta = {"view": np.array([0, 1, 0, 1, 0, 1]), "age": np.array([30, 49, 50, 80, -1, 20])}
    ids, names = metadata_groups(meta, ["view", "age"], {"age": [50]})
    # (view, age >= 50): (0,0) (1,0) (0,1) (1,1) missing (1,0) -> ids in lexicographic order of the pairs
    assert ids.tolist() == [0, 2, 1, 3, -1, 2]
    assert names == ["view=0, age < 50", "view=0, 50 <= age", "view=1, age < 50", "view=1, 50 <= age"]
    ids1, names1 = metadata_groups(meta, ["view"], {})
    assert ids1.tolist() == [0, 1, 0, 1, 0, 1] and names1 == ["view=0", "view=1"]


def chexpert_like(n: int = 64) -> torch.Tensor:
    from flplat.data.containers import Dataset

    rng = np.random.default_rng(0)
    view, age, sex = np.arange(n) % 2, rng.integers(20, 90, size=n), (np.arange(n) // 2) % 2
    age[5] = -1  # a missing age
    return Dataset(name="meta", x_train=torch.randn(n, 3), y_train=torch.from_numpy(rng.integers(0, 2, n)),
                   num_classes=2, meta={"view": view, "age": age, "sex": sex})


@pytest.mark.parametrize("assign", ["random", "balanced"])
def test_metadata_partition_plants_one_distribution_per_level_combination(assign):
    d = chexpert_like()
    cfg = partition_config(name="metadata", num_clients=8, num_unseen_clients=3, columns=["view", "age"],
                          bins={"age": [50]}, assign=assign)
    fed = build_federation(d, cfg, seed=1)
    group, _ = metadata_groups(d.meta, ["view", "age"], {"age": [50]})
    true, unseen = fed.meta["distribution"], fed.meta["unseen_distribution"]
    assert len(true) == 8 and len(unseen) == 3 and fed.num_clients == 8 and len(fed.unseen) == 3
    # every sample of a client belongs to the client's planted distribution; no sample is in two clients
    for k, c in enumerate(fed.clients):
        assert set(group[c.all()].tolist()) == {true[k]}
    for u, c in zip(unseen, fed.unseen):
        assert set(group[c.test].tolist()) == {u} and len(c.train) == len(c.val) == 0
    every = np.concatenate([c.all() for c in fed.clients + fed.unseen])
    assert len(every) == len(set(every.tolist())) and 5 not in every  # the missing-age sample is left out
    assert fed.meta["num_distributions"] == len(np.unique(true)) and fed.meta["num_candidate_distributions"] == 4
    assert set(unseen.tolist()) <= set(true.tolist())
    if assign == "balanced":  # 8 clients cycled over 4 distributions: two each
        assert np.bincount(true, minlength=4).tolist() == [2, 2, 2, 2]
    # each distribution's samples split evenly among its clients (training and unseen)
    for g in np.unique(np.concatenate([true, unseen])):
        sizes = [len(c.all()) for c, t in zip(fed.clients + fed.unseen, np.concatenate([true, unseen])) if t == g]
        assert max(sizes) - min(sizes) <= 1 and sum(sizes) == int((group == g).sum())


def test_metadata_partition_samples_per_client_and_errors():
    d = chexpert_like()
    fed = build_federation(d, partition_config(name="metadata", num_clients=4, columns=["sex"],
                                              samples_per_client=5, assign="balanced"), seed=0)
    assert [len(c.all()) for c in fed.clients] == [5, 5, 5, 5] and fed.meta["num_distributions"] == 2
    with pytest.raises(ConfigError, match=r"samples_per_client=20 times 2 clients of distribution"):
        build_federation(d, partition_config(name="metadata", num_clients=4, columns=["sex"],
                                            samples_per_client=20, assign="balanced"), seed=0)
    with pytest.raises(ConfigError, match=r"choose among its metadata columns: age, sex, view"):
        build_federation(d, partition_config(name="metadata", columns=["domain"]), seed=0)
    with pytest.raises(ConfigError, match="partition.bins.age cuts a column not in"):
        build_federation(d, partition_config(name="metadata", columns=["view"], bins={"age": [50]}), seed=0)


def test_metadata_partition_planted_ids_reach_ari_and_the_test_phase(tmp_path):
    """A table whose `group` column plants two distributions (the label rule flips between them): Flux-prior
    reads the true M, and the run reports ARI against the planted ids and the unseen clients' test phase."""
    from flplat.experiment import load_config, prepare, run

    rng = np.random.default_rng(0)
    rows = []
    for i in range(240):
        g, a, b = i % 2, rng.normal(), rng.normal()
        rows.append([g, a, b, int((a > 0) != bool(g))])
    path = write_csv(tmp_path / "t.csv", ["group", "a", "b", "label"], rows)
    cfg = load_config(None, [
        "data.name=table", f"data.path={path}", "data.meta_columns=[group]", "partition.name=metadata",
        "partition.columns=[group]", "partition.num_clients=6", "partition.num_unseen_clients=2",
        "partition.assign=balanced", "algorithm.name=flux_prior", "model.name=mlp", "model.hidden=[8]",
        "federation.rounds=3", "federation.client_fraction=1.0", "federation.batch_size=16",
        "tracking.enabled=false"])
    p = prepare(cfg)
    assert p.data.meta["num_distributions"] == 2 and p.data.meta["distribution"].tolist().count(0) == 3
    s = run(cfg, progress=False)[0]
    assert s.metrics["num_distributions"] == 2.0 and 0.0 <= s.metrics["ari"] <= 1.0 and "tau" in s.metrics
    assert 0.0 <= s.metrics["test_phase_accuracy"] <= 1.0 and "known_association_accuracy" in s.metrics


# ---------------------------------------------------------------------------------------------- end to end (CLI)


def test_flplat_run_on_a_csv_with_natural_clients(tmp_path):
    rng = np.random.default_rng(0)
    rows = [[f"user{i % 4}", *rng.normal(size=3).round(3), ["cat", "dog"][i % 2], int(i % 3 == 0)]
            for i in range(80)]
    path = write_csv(tmp_path / "users.csv", ["user", "f1", "f2", "f3", "pet", "label"], rows)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("MLFLOW_TRACKING_URI", None)
    base = [sys.executable, "-m", "flplat.cli", "run", str(REPO / "configs/quickstart.yaml"), "data.name=table",
            f"data.path={path}", "data.client_column=user", "partition.name=natural", "model.hidden=[8]",
            "federation.rounds=2", "federation.client_fraction=1.0", "fabric.num_threads=1"]
    store = tmp_path / "mlruns"
    res = subprocess.run(base + [f"tracking.store_dir={store}"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "global_accuracy=" in res.stdout and "[round 2/2]" in res.stderr
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert run.info.status == "FINISHED" and run.data.params["partition.name"] == "natural"
    csv_path = Path(client.download_artifacts(run.info.run_id, "clients/final_client_metrics.csv", str(tmp_path)))
    lines = csv_path.read_text().splitlines()[1:]
    # the four users are the four clients, each with its 20 rows: 16 train + 4 test
    assert len(lines) == 4 and all(line.split(",")[1:3] == ["16", "4"] for line in lines)


def test_flplat_run_names_the_file_and_the_missing_column(tmp_path, capsys):
    from flplat.cli import main

    path = write_csv(tmp_path / "users.csv", HEADER, ROWS)
    rc = main(["run", str(REPO / "configs/quickstart.yaml"), "data.name=table", f"data.path={path}",
               "data.label_column=target", f"tracking.store_dir={tmp_path / 'mlruns'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("flplat: error: "), (rc, err)
    assert str(path) in err[0] and "no column 'target' (data.label_column)" in err[0]
    assert not (tmp_path / "mlruns" / "mlflow.db").exists()


@pytest.mark.parametrize("override,key", [
    ("partition.name=natural partition.test=both", "partition.test"),
    ("partition.name=metadata partition.columns=[view] partition.assign=even", "partition.assign"),
    ("partition.name=natural partition.min_samples=0", "partition.min_samples"),
    ("partition.name=metadata partition.columns=[age] partition.bins.age=[60,50]", "partition.bins.age"),
    ("data.name=table data.categorical=hash", "data.categorical"),
    ("data.name=imagefolder data.image_size=-1", "data.image_size"),
])
def test_new_keys_are_validated(override, key):
    from flplat.experiment import load_config

    with pytest.raises(ConfigError) as e:
        load_config(None, override.split())
    assert key in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="partition.columns"):
        load_config(None, ["partition.name=metadata"])
