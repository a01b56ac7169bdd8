"""The papers' other datasets (flplat/data/tabular.py, text.py, leaf.py, medical.py, officehome.py): every test
writes tiny files in the dataset's public format and loads them with the real loader."""

from __future__ import annotations

import csv
import json
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO

from flplat.data.datasets import load_dataset
from flplat.data.files import DataUnavailableError
from flplat.data.formats import DataFormatError
from flplat.data.text import build_vocab, encode, tokenize
from flplat.errors import ConfigError


def cfg(name: str, root: Path | None = None, **groups) -> object:
    """The data section through load_config (as a run builds it), with ``group={key: value}`` overrides: the group
    only says which of the dataset's keys they are (text encoding, the dataset's own); the keys are flat."""
    from flplat.experiment import load_config

    over = [f"data.name={name}"] + ([f"data.root={root}"] if root else [])
    for values in groups.values():
        for k, v in values.items():
            over.append(f"data.{k}={json.dumps(v) if isinstance(v, list) else v}")
    return load_config(None, over).data


def write_csv(path: Path, rows: list[list], encoding: str = "utf-8", header: list[str] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding=encoding, newline="") as fh:
        w = csv.writer(fh, quoting=csv.QUOTE_ALL if header is None else csv.QUOTE_MINIMAL)
        if header:
            w.writerow(header)
        w.writerows(rows)
    return path


def write_leaf(path: Path, user_data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    users = list(user_data)
    path.write_text(json.dumps({"users": users, "num_samples": [len(user_data[u]["y"]) for u in users],
                                "user_data": user_data}))


# -------------------------------------------------------------------------------------------------------- text


def test_tokenize_vocab_and_encode_by_hand() -> None:
    assert tokenize("Hello, World! It's 2x GOOD...") == ["hello", "world", "it's", "2x", "good"]
    docs = [["b", "a", "b"], ["c", "a", "b"]]  # b: 3, a: 2, c: 1
    assert build_vocab(docs) == ["<pad>", "<unk>", "b", "a", "c"]
    assert build_vocab(docs, min_freq=2) == ["<pad>", "<unk>", "b", "a"]
    assert build_vocab(docs, max_vocab=1) == ["<pad>", "<unk>", "b"]
    vocab = ["<pad>", "<unk>", "b", "a"]
    assert encode([["a", "b", "z"]], vocab, 5, "pre").tolist() == [[0, 0, 3, 2, 1]]
    assert encode([["a", "b", "z"]], vocab, 5, "post").tolist() == [[3, 2, 1, 0, 0]]
    assert encode([["a", "b", "z"]], vocab, 2, truncation="pre").tolist() == [[2, 1]]
    assert encode([["a", "b", "z"]], vocab, 2, truncation="post").tolist() == [[3, 2]]
    assert encode([], vocab, 3).shape == (0, 3) and encode([[]], vocab, 3).dtype == torch.int64


def _sent140_csv(d: Path) -> None:
    train = [["0", "11", "Mon Apr 06 22:19:45 PDT 2009", "NO_QUERY", "alice", "sad sad day caf\u00e9"],
             ["4", "12", "Mon Apr 06 22:19:49 PDT 2009", "NO_QUERY", "bob", "happy day"],
             ["4", "13", "Mon Apr 06 22:20:00 PDT 2009", "NO_QUERY", "alice", "happy happy"]]
    test = [["4", "3", "Mon May 11 03:17:40 UTC 2009", "kindle2", "carol", "happy kindle"],
            ["2", "5", "Mon May 11 03:18:03 UTC 2009", "kindle2", "bob", "day"],
            ["0", "6", "Mon May 11 03:18:54 UTC 2009", "kindle2", "dave", "sad"]]
    write_csv(d / "training.1600000.processed.noemoticon.csv", train, encoding="latin-1")
    write_csv(d / "testdata.manual.2009.06.14.csv", test, encoding="latin-1")


def test_sent140_csv_three_polarities_users_and_train_only_vocabulary(isolated: Path) -> None:
    root = isolated / "data"
    _sent140_csv(root / "sent140")  # found in the root's layout sub-directory
    ds = load_dataset(cfg("sent140", root, text={"max_length": 4}), 0)
    # vocabulary of the TRAINING tweets only: happy 3, day 2, sad 2 (alphabetical tie), caf\u00e9 -> "caf" 1
    assert ds.vocab == ["<pad>", "<unk>", "happy", "day", "sad", "caf"]
    assert ds.x_train.dtype == torch.int64 and ds.x_train.tolist() == [[4, 4, 3, 5], [0, 0, 2, 3], [0, 0, 2, 2]]
    assert ds.x_test.tolist() == [[0, 0, 2, 1], [0, 0, 0, 3], [0, 0, 0, 4]]  # "kindle" is not in the vocabulary
    assert ds.num_classes == 3 and ds.y_train.tolist() == [0, 2, 2] and ds.y_test.tolist() == [2, 1, 0]
    # users: alice 0, bob 1, carol 2, dave 3, shared by the two splits
    assert ds.client_ids.tolist() == [0, 1, 0] and ds.client_ids_test.tolist() == [2, 1, 3]
    binary = load_dataset(cfg("sent140", root, sent140={"labels": "binary"}), 0)
    assert binary.num_classes == 2 and binary.y_train.tolist() == [0, 1, 1] and binary.y_test.tolist() == [1, 0]
    assert binary.client_ids_test.tolist() == [2, 3]  # the neutral tweet is dropped with its user id


def test_sent140_leaf_json_is_preferred_and_keeps_users(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = isolated / "env"
    base = env / "sent140" / "data"
    row = ["1467810369", "Mon Apr 06 22:19:45 PDT 2009", "NO_QUERY"]
    write_leaf(base / "train" / "all_data_0_keep_0_train_9.json",
               {"u1": {"x": [[*row, "u1", "good good"], [*row, "u1", "bad"]], "y": [1, 0]},
                "u2": {"x": [[*row, "u2", "good"]], "y": [1]}})
    write_leaf(base / "test" / "all_data_0_keep_0_test_9.json", {"u2": {"x": [[*row, "u2", "bad good"]], "y": [0]}})
    _sent140_csv(env / "sent140")  # also there: the LEAF JSON wins under source=auto
    monkeypatch.setenv("FLPLAT_DATA", str(env))
    ds = load_dataset(cfg("sent140", text={"max_length": 2}), 0)
    assert ds.vocab == ["<pad>", "<unk>", "good", "bad"]
    assert ds.y_train.tolist() == [2, 0, 2] and ds.y_test.tolist() == [0]  # LEAF's 1 = polarity 4 -> class 2
    assert ds.client_ids.tolist() == [0, 0, 1] and ds.client_ids_test.tolist() == [1]
    assert ds.x_test.tolist() == [[3, 2]]
    csv_ds = load_dataset(cfg("sent140", sent140={"source": "csv"}), 0)
    assert len(csv_ds.y_train) == 3 and csv_ds.y_test.tolist() == [2, 1, 0]


def test_amazon_categories_and_zhang_csv(isolated: Path) -> None:
    root = isolated / "amazon"
    header = ["productId", "Title", "userId", "Helpfulness", "Score", "Time", "Text", "Cat1", "Cat2", "Cat3"]
    write_csv(root / "train_40k.csv", [["B1", "Great toy", "A1", "0/0", "5.0", "1", "kids love it", "toys games",
                                        "games", "puzzles"],
                                       ["B2", "Dog food", "A2", "1/1", "4.0", "2", "my dog loves it", "pet supplies",
                                        "dogs", "food"]], header=header)
    write_csv(root / "val_10k.csv", [["B3", "Shampoo", "A3", "0/0", "3.0", "3", "nice hair", "beauty", "hair",
                                      "shampoo"]], header=header)
    ds = load_dataset(cfg("amazon_reviews", root, text={"max_length": 3}), 0)
    assert ds.num_classes == 6 and ds.class_names[ds.y_train[0]] == "toys games"
    assert ds.y_train.tolist() == [5, 4] and ds.y_test.tolist() == [1]
    assert ds.vocab == ["<pad>", "<unk>", "it", "dog", "kids", "love", "loves", "my"]  # it: 2, then alphabetical
    titled = load_dataset(cfg("amazon_reviews", root, amazon={"fields": "title_text"}), 0)
    assert "great" in titled.vocab and "great" not in ds.vocab
    full = isolated / "zhang"
    write_csv(full / "amazon_review_full_csv" / "train.csv", [["5", "Wow", "best ever"], ["1", "Bad", "awful"]])
    write_csv(full / "amazon_review_full_csv" / "test.csv", [["3", "Meh", "ok"]])
    zd = load_dataset(cfg("amazon_reviews", full, amazon={"source": "full"}), 0)
    assert zd.num_classes == 5 and zd.y_train.tolist() == [4, 0] and zd.y_test.tolist() == [2]
    with pytest.raises(DataUnavailableError, match="amazon_review_polarity_csv"):
        load_dataset(cfg("amazon_reviews", full, amazon={"source": "polarity"}), 0)
    write_csv(full / "amazon_review_full_csv" / "test.csv", [["9", "Meh", "ok"]])
    with pytest.raises(DataFormatError, match="class 1..5"):
        load_dataset(cfg("amazon_reviews", full, amazon={"source": "full"}), 0)


# ----------------------------------------------------------------------------------------------------- tabular

ACS_HEADER = ["RT", "SERIALNO", "ST", "PWGTP", "AGEP", "COW", "SCHL", "MAR", "OCCP", "POBP", "RELP", "WKHP", "SEX",
              "RAC1P", "PINCP"]


def _acs_rows(st: str) -> list[list]:
    return [
        ["P", "2018GQ01", st, "10", "30", "1", "21", "1", "1010", "6", "0", "40", "1", "1", "60000"],  # kept, > 50K
        ["P", "2018GQ02", st, "5", "45", "", "16", "3", "4720", "36", "1", "20", "2", "2", "20000"],  # kept, COW 0
        ["P", "2018GQ03", st, "8", "16", "1", "19", "5", "4720", "6", "2", "10", "2", "1", "9000"],  # AGEP 16: out
        ["P", "2018GQ04", st, "8", "50", "3", "22", "1", "10", "6", "0", "0", "1", "1", "90000"],  # WKHP 0: out
        ["P", "2018GQ05", st, "0", "50", "3", "22", "1", "10", "6", "0", "30", "1", "1", "90000"],  # PWGTP 0: out
        ["P", "2018GQ06", st, "7", "60", "2", "24", "1", "10", "6", "0", "50", "1", "6", "100"],  # PINCP 100: out
        ["P", "2018GQ07", st, "7", "61", "2", "24", "1", "10", "6", "0", "50", "1", "6", "50000"],  # kept, = 50K
    ]


def test_acs_income_folktables_task_from_pums_csv_and_zip(isolated: Path) -> None:
    root = isolated / "acs"
    write_csv(root / "acs_income" / "2018" / "1-Year" / "psam_p06.csv", _acs_rows("6"), header=ACS_HEADER)
    zdir = root / "acs_income" / "2018" / "1-Year"
    tmp = write_csv(isolated / "psam_p72.csv", _acs_rows("72")[:2], header=ACS_HEADER)
    with zipfile.ZipFile(zdir / "csv_ppr.zip", "w") as zf:
        zf.write(tmp, "psam_p72.csv")
    ds = load_dataset(cfg("acs_income", root, acs={"states": ["CA", "PR"], "scaler": "none"}), 0)
    assert ds.num_classes == 2 and ds.x_train.shape == (5, 10)
    # a missing COW is 0, as folktables' np.nan_to_num(x, -1) (the -1 is its `copy` argument) fills it
    assert ds.x_train[:3].tolist() == [[30, 1, 21, 1, 1010, 6, 0, 40, 1, 1], [45, 0, 16, 3, 4720, 36, 1, 20, 2, 2],
                                       [61, 2, 24, 1, 10, 6, 0, 50, 1, 6]]
    assert ds.y_train.tolist() == [1, 0, 0, 1, 0]
    assert ds.meta["state"].tolist() == [6, 6, 6, 72, 72] and ds.meta["sex"].tolist() == [1, 2, 1, 1, 2]
    robust = load_dataset(cfg("acs_income", root, acs={"states": ["CA", "PR"]}), 0)
    agep = np.array([30, 45, 61, 30, 45], dtype=np.float64)  # median 45, IQR 45 - 30 = 15
    assert np.allclose(robust.x_train[:, 0].numpy(), (agep - 45) / 15)
    with pytest.raises(DataUnavailableError, match=r"acs_income data not found: .*psam_p01\.csv"):
        load_dataset(cfg("acs_income", root, acs={"states": ["AL"]}), 0)


def test_acs_income_state_without_a_row_passing_the_filter_is_one_line(isolated: Path) -> None:
    """A state file where no row passes folktables' filter: a one-line error naming the file and the filter, also
    when another state has rows (not scikit-learn's error on an empty array); through `flplat run`: exit 2, no run."""
    d = isolated / "acs" / "2018" / "1-Year"
    write_csv(d / "psam_p06.csv", _acs_rows("6"), header=ACS_HEADER)
    empty = write_csv(d / "psam_p72.csv", _acs_rows("72")[2:6], header=ACS_HEADER)  # every row filtered out
    for states in (["PR"], ["CA", "PR"]):
        with pytest.raises(DataFormatError) as e:
            load_dataset(cfg("acs_income", isolated / "acs", acs={"states": states}), 0)
        msg = str(e.value)
        assert msg == (f"{empty}: none of its 4 rows passes folktables' ACSIncome filter (AGEP > 16, PINCP > 100, "
                       "WKHP > 0, PWGTP >= 1)")
    store = isolated / "mlruns"
    res = subprocess.run([sys.executable, "-m", "flplat.cli", "run", str(REPO / "configs" / "quickstart.yaml"),
                          "data.name=acs_income", f"data.root={isolated / 'acs'}", "data.states=[PR]",
                          "data.cache=false", f"tracking.store_dir={store}", "fabric.num_threads=1"],
                         cwd=isolated, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.strip().splitlines() == [f"flplat: error: {msg}"]
    assert not (store / "mlflow.db").exists()  # no MLflow run was started


SERENGETI_HEADER = ["CaptureEventID", "NumImages", "DateTime", "SiteID", "NumSpecies", "Species", "Count",
                    "Standing", "Resting", "Moving", "Eating", "Interacting", "Babies"]


def test_serengeti_consensus_table(isolated: Path) -> None:
    rows = [["ASG1", "3", "2010-07-18 16:26:14", "B04", "1", "zebra", "11-50", "0.5", "0", "0.5", "0", "0", "0"],
            ["ASG2", "1", "2010-08-01 06:00:00", "C05", "1", "zebra", "2", "1", "0", "0", "0", "0", "0"],
            ["ASG3", "3", "2011-01-02 22:10:00", "B04", "1", "lionFemale", "1", "0", "1", "0", "0", "0", "0"],
            ["ASG4", "3", "2011-01-03 23:10:00", "B04", "1", "gazelleThomsons", "51+", "0", "0", "1", "0", "0", "0"],
            ["ASG5", "2", "2011-02-03 01:10:00", "A01", "1", "gazelleThomsons", "10", "0", "0", "1", "0", "0", "0"]]
    root = isolated / "ser"
    write_csv(root / "consensus_data.csv", rows, header=SERENGETI_HEADER)
    features = ["NumImages", "Count", "Hour", "Month", "Site"]
    ds = load_dataset(cfg("serengeti", root, serengeti={"num_classes": 2, "scaler": "none", "features": features}), 0)
    # the two most frequent species (2 each; alphabetical tie) -> gazelleThomsons 0, zebra 1; lionFemale dropped
    assert ds.class_names == ["gazelleThomsons", "zebra"] and ds.y_train.tolist() == [1, 1, 0, 0]
    assert ds.x_train.tolist() == [[3, 11, 16, 7, 1], [1, 2, 6, 8, 2], [3, 12, 23, 1, 1], [2, 10, 1, 2, 0]]
    assert ds.meta["site"].tolist() == [1, 2, 1, 0]
    chosen = load_dataset(cfg("serengeti", root, serengeti={"classes": ["lionFemale", "zebra"]}), 0)
    assert chosen.y_train.tolist() == [1, 1, 0] and chosen.x_train.shape == (3, 11)
    assert np.allclose(chosen.x_train.mean(0).numpy(), 0, atol=1e-6)  # standard scaler by default
    with pytest.raises(ConfigError, match="data.classes"):
        load_dataset(cfg("serengeti", root, serengeti={"classes": ["unicorn", "zebra"]}), 0)


# ------------------------------------------------------------------------------------------------------ FEMNIST


def test_femnist_leaf_writers_and_letter_subset(isolated: Path) -> None:
    root = isolated / "leafroot"
    px = [0.0] * 783

    def img(v: float) -> list[float]:
        return [v, *px]

    # LEAF classes: 36 = 'a', 37 = 'b', 45 = 'j', 46 = 'k' (not kept by default), 5 = '5'
    write_leaf(root / "femnist" / "data" / "all_data" / "all_data_0.json",
               {"f0001_41": {"x": [img(0.1), img(0.2), img(0.3)], "y": [36, 5, 45]}})
    write_leaf(root / "femnist" / "data" / "all_data" / "all_data_1.json",
               {"f0002_07": {"x": [img(0.4), img(0.5)], "y": [46, 37]}})
    ds = load_dataset(cfg("femnist", root), 0)
    assert ds.num_classes == 10 and ds.class_names == list("abcdefghij") and ds.x_test is None
    assert ds.x_train.shape == (3, 1, 28, 28) and ds.x_train[:, 0, 0, 0].tolist() == pytest.approx([0.1, 0.3, 0.5])
    assert ds.y_train.tolist() == [0, 9, 1] and ds.client_ids.tolist() == [0, 0, 1]
    every = load_dataset(cfg("femnist", root, femnist={"classes": []}), 0)
    assert every.num_classes == 62 and every.y_train.tolist() == [36, 5, 45, 46, 37]
    # LEAF's split directories win over all_data and give the official test set
    write_leaf(root / "femnist" / "data" / "train" / "t.json", {"w1": {"x": [img(0.6)], "y": [36]}})
    write_leaf(root / "femnist" / "data" / "test" / "t.json", {"w0": {"x": [img(0.7)], "y": [38]}})
    split = load_dataset(cfg("femnist", root), 0)
    assert split.y_train.tolist() == [0] and split.y_test.tolist() == [2]
    assert split.client_ids.tolist() == [1] and split.client_ids_test.tolist() == [0]


def _leaf_user_split(root: Path) -> None:
    """LEAF's -t user split: whole writers in train (f0000: 4 samples, f0002: 5) or test (f0001: 2, f0003: 3)."""
    def user(labels: list[int], v: float) -> dict:
        return {"x": [[v + i / 100] + [1.0] * 783 for i in range(len(labels))], "y": labels}

    base = root / "femnist" / "data"
    write_leaf(base / "train" / "all_data_0_niid_0_keep_0_train_9.json",
               {"f0000_01": user([36, 37, 38, 36], 0.1), "f0002_01": user([39, 40, 41, 42, 36], 0.2)})
    write_leaf(base / "test" / "all_data_0_niid_0_keep_0_test_9.json",
               {"f0001_01": user([36, 37], 0.3), "f0003_01": user([38, 38, 39], 0.4)})


def test_femnist_leaf_user_split_test_users_are_unseen_clients(isolated: Path) -> None:
    """LEAF's -t user split under partition.name=natural: the test writers are no training clients; auto takes
    them as unseen test-only clients (users), the training clients are cut by the usual fractions (as split);
    official says which key to set instead of leaving every client without a test sample."""
    from flplat.data.partitions import build_federation
    from flplat.data.registry import partition_config
    from flplat.data.splits import InfeasiblePartitionError

    _leaf_user_split(isolated / "leaf")
    ds = load_dataset(cfg("femnist", isolated / "leaf"), 0)
    assert ds.client_ids.tolist() == [0] * 4 + [2] * 5 and ds.client_ids_test.tolist() == [1, 1, 3, 3, 3]
    fed = build_federation(ds, partition_config(name="natural"), seed=0)
    split = build_federation(ds, partition_config(name="natural", test="split"), seed=0)
    assert fed.meta["natural_test"] == "users" and fed.meta["natural_client_ids"].tolist() == [0, 2]
    assert fed.meta["num_unseen_clients"] == 2 and fed.meta["unseen_client_ids"].tolist() == [1, 3]
    assert len(fed.x) == 9 + 5 and fed.x_global_test is ds.x_test
    assert [c.test.tolist() for c in fed.unseen] == [[9, 10], [11, 12, 13]]  # the pool's 9, then the test set's
    assert all(len(c.train) == len(c.val) == 0 for c in fed.unseen) and fed.unseen_ids == [2, 3]
    for a, b in zip(fed.clients, split.clients):  # 0.8 / 0.2 of 4 and 5 samples: 3 + 1, 4 + 1
        assert (a.train.tolist(), a.test.tolist()) == (b.train.tolist(), b.test.tolist()) and len(a.test) == 1
    assert torch.equal(fed.x[fed.unseen[1].test], ds.x_test[2:])
    small = build_federation(ds, partition_config(name="natural", min_samples=3), seed=0)
    assert small.meta["unseen_client_ids"].tolist() == [3] and small.meta["test_samples_without_client"] == 2
    with pytest.raises(InfeasiblePartitionError) as e:
        build_federation(ds, partition_config(name="natural", test="official"), seed=0)
    assert "partition.test=users" in str(e.value) and "none of the official test set's 2 users" in str(e.value)


def test_flplat_run_on_a_leaf_user_split_reports_the_test_phase(isolated: Path) -> None:
    """`flplat run` with partition.name=natural on LEAF -t user files finishes (it stopped with "test_fraction
    leaves no client any test sample") and scores the test writers as unseen clients."""
    _leaf_user_split(isolated / "leaf")
    store = isolated / "mlruns"
    res = subprocess.run([sys.executable, "-m", "flplat.cli", "run", str(REPO / "configs" / "quickstart.yaml"),
                          "data.name=femnist", f"data.root={isolated / 'leaf'}", "partition.name=natural",
                          "federation.rounds=1", "federation.local_epochs=1", "federation.client_fraction=1.0",
                          "model.hidden=[8]", "fabric.num_threads=1", "tracking.plots=false",
                          f"tracking.store_dir={store}"], cwd=isolated, capture_output=True, text=True, timeout=300,
                         env={**{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"},
                              "PYTHONPATH": str(REPO)})
    assert res.returncode == 0, res.stderr[-2000:]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert run.info.status == "FINISHED"
    assert {"test_phase_accuracy", "known_association_accuracy"} <= set(run.data.metrics)


def _random_leaf_femnist(d: Path, files: int, users: int, rng: np.random.Generator, tag: str) -> None:
    """``files`` LEAF FEMNIST files of ``users`` writers each: pixels LEAF's k / 255 and arbitrary floats, any label."""
    for f in range(files):
        data = {}
        for u in range(users):
            n = int(rng.integers(0, 30))
            x = rng.integers(0, 256, (n, 784)) / 255
            x[:, :3] = rng.normal(size=(n, 3))  # not k / 255: parsed as they are
            data[f"f{f}{u:02d}_{tag}"] = {"x": x.tolist(), "y": rng.integers(0, 62, n).tolist()}
        write_leaf(d / f"all_data_{f}_niid_0_keep_0_{tag}_9.json", data)


def _femnist_reference(files: list[Path], chars: str):
    """The FEMNIST arrays the plain way: every sample of every file read, then the kept classes relabelled."""
    users, xs, ys = [], [], []
    for path in files:
        obj = json.loads(path.read_text())
        for u in obj["users"]:
            for x, y in zip(obj["user_data"][u]["x"], obj["user_data"][u]["y"]):
                c = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"[y]
                if c in chars:
                    users.append(u)
                    xs.append(x)
                    ys.append(chars.index(c))
    return users, np.asarray(xs, dtype=np.float32).reshape(-1, 1, 28, 28), np.asarray(ys, dtype=np.int64)


@pytest.mark.parametrize("chars", ["abcdefghij", "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
                                   "zZ9"])
def test_femnist_filtered_per_file_gives_the_plain_reading(isolated: Path, chars: str) -> None:
    """Each file filtered as it is parsed (pixels through the float cache) gives exactly the arrays, labels and
    writers of reading every sample and filtering afterwards, for LEAF's -t sample split files."""
    rng = np.random.default_rng(0)
    base = isolated / "leaf" / "femnist" / "data"
    _random_leaf_femnist(base / "train", 3, 4, rng, "train")
    _random_leaf_femnist(base / "test", 2, 3, rng, "test")
    ds = load_dataset(cfg("femnist", isolated / "leaf", femnist={"classes": list(chars)}), 0)
    u_tr, x_tr, y_tr = _femnist_reference(sorted((base / "train").glob("*.json")), chars)
    u_te, x_te, y_te = _femnist_reference(sorted((base / "test").glob("*.json")), chars)
    assert len(y_tr) > 10 and len(y_te) > 3
    assert np.array_equal(ds.x_train.numpy(), x_tr) and np.array_equal(ds.y_train.numpy(), y_tr)
    assert np.array_equal(ds.x_test.numpy(), x_te) and np.array_equal(ds.y_test.numpy(), y_te)
    names = sorted(set(u_tr) | set(u_te))
    assert ds.client_ids.tolist() == [names.index(u) for u in u_tr]
    assert ds.client_ids_test.tolist() == [names.index(u) for u in u_te]


def test_femnist_peak_memory_is_the_result_plus_one_file(isolated: Path) -> None:
    """The loader's peak (tracemalloc, numpy's buffers included) stays under the result plus 4 times the largest
    file's text: the files are filtered one at a time and the Python lists of one file are dropped before the next
    (reading every sample as lists first took ~33 KiB per sample, about 5 times the whole text)."""
    import tracemalloc

    d = isolated / "leaf" / "femnist" / "data" / "all_data"
    _random_leaf_femnist(d, 8, 5, np.random.default_rng(1), "all")
    config = cfg("femnist", isolated / "leaf", femnist={"classes": []})
    tracemalloc.start()
    try:
        ds = load_dataset(config, 0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    sizes = [p.stat().st_size for p in d.glob("*.json")]
    result = ds.x_train.numel() * 4
    assert result > 1_000_000 and sum(sizes) > 4 * max(sizes)
    assert peak < result + 4 * max(sizes), (peak, result, max(sizes), sum(sizes))


@pytest.mark.parametrize("sample, message", [
    ({"x": [[0.5] * 784], "y": [62]}, "labels are integers 0..61, got 62"),
    ({"x": [[0.5] * 784], "y": [1.0]}, "labels are integers 0..61, got 1.0"),
    ({"x": [[0.5] * 783], "y": [36]}, "784 pixel values, got 783"),
    ({"x": [["a"] * 784], "y": [36]}, "pixel values are numbers"),
    ({"x": [[0.5] * 784], "y": []}, "no 'x'/'y' of equal length"),
])
def test_femnist_format_errors_name_the_file(isolated: Path, sample: dict, message: str) -> None:
    path = isolated / "leaf" / "femnist" / "data" / "all_data" / "all_data_0.json"
    write_leaf(path, {"f0001_01": sample})
    with pytest.raises(DataFormatError, match=message) as e:
        load_dataset(cfg("femnist", isolated / "leaf"), 0)
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_cifar100_first_classes(isolated: Path) -> None:
    d = isolated / "c100" / "cifar-100-python"
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name, labels in (("train", [0, 25, 1, 19, 20]), ("test", [99, 3])):
        with open(d / name, "wb") as fh:
            pickle.dump({"data": rng.integers(0, 256, (len(labels), 3072), dtype=np.uint8), "fine_labels": labels},
                        fh, protocol=2)
    with open(d / "meta", "wb") as fh:
        pickle.dump({"fine_label_names": [f"f{i}" for i in range(100)]}, fh, protocol=2)
    from flplat.experiment import load_config

    c = load_config(None, ["data.name=cifar100", f"data.root={d.parent}", "data.classes=20",
                           "data.cache=false"]).data
    ds = load_dataset(c, 0)
    assert ds.num_classes == 20 and ds.y_train.tolist() == [0, 1, 19] and ds.y_test.tolist() == [3]
    assert ds.class_names == [f"f{i}" for i in range(20)] and ds.x_train.shape == (3, 3, 32, 32)


# ----------------------------------------------------------------------------------------------- images (PIL)


def _grey(path: Path, value: int, size: int = 20, mode: str = "L") -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, (size, size + 4), value if mode == "L" else (value, value // 2, 0)).save(path)


CHEX_HEADER = ["Path", "Sex", "Age", "Frontal/Lateral", "AP/PA", "No Finding", "Enlarged Cardiomediastinum",
               "Cardiomegaly", "Lung Opacity", "Lung Lesion", "Edema", "Consolidation", "Pneumonia", "Atelectasis",
               "Pneumothorax", "Pleural Effusion", "Pleural Other", "Fracture", "Support Devices"]


def test_chexpert_csv_images_uncertain_policy_and_metadata(isolated: Path) -> None:
    d = isolated / "chex" / "CheXpert-v1.0-small"
    rows = [["CheXpert-v1.0-small/train/patient00001/study1/view1_frontal.jpg", "Female", "68", "Frontal", "AP",
             "1.0", "", "", "", "", "", "", "", "", "0.0", "", "", "", "1.0"],
            ["CheXpert-v1.0-small/train/patient00002/study2/view2_lateral.jpg", "Male", "41", "Lateral", "",
             "", "-1.0", "", "1.0", "", "-1.0", "", "", "", "", "0.0", "", "", ""]]
    write_csv(d / "train.csv", rows, header=CHEX_HEADER)
    write_csv(d / "valid.csv", [["CheXpert-v1.0-small/valid/patient64541/study1/view1_frontal.jpg", "Unknown", "50",
                                 "Frontal", "PA", *(["0.0"] * 13), "1.0"]], header=CHEX_HEADER)
    _grey(d / "train/patient00001/study1/view1_frontal.jpg", 255)
    _grey(d / "train/patient00002/study2/view2_lateral.jpg", 0)
    _grey(d / "valid/patient64541/study1/view1_frontal.jpg", 255)
    ds = load_dataset(cfg("chexpert", d, chexpert={"image_size": 8}), 0)
    assert ds.multilabel and ds.num_classes == 14 and ds.y_train.dtype == torch.float32
    assert ds.x_train.shape == (2, 1, 8, 8) and ds.x_test.shape == (1, 1, 8, 8)
    assert torch.allclose(ds.x_train[0], torch.ones(1, 8, 8)) and torch.allclose(ds.x_train[1], torch.zeros(1, 8, 8))
    assert ds.y_train[0].nonzero().flatten().tolist() == [0, 13]
    assert ds.y_train[1].nonzero().flatten().tolist() == [1, 3, 5]  # U-Ones: -1 -> 1
    assert ds.meta["view"].tolist() == [0, 1] and ds.meta["sex"].tolist() == [0, 1]
    assert ds.meta["age"].tolist() == [68, 41] and ds.meta["age_group"].tolist() == [1, 0]
    assert ds.meta["ap_pa"].tolist() == [0, -1] and ds.meta_test["sex"].tolist() == [-1]  # Unknown: missing
    assert ds.meta_test["age_group"].tolist() == [1]  # 50 >= the paper's threshold 50
    zeros = load_dataset(cfg("chexpert", d, chexpert={"image_size": 8, "uncertain": "zeros", "age_threshold": 69}), 0)
    assert zeros.y_train[1].nonzero().flatten().tolist() == [3] and zeros.meta["age_group"].tolist() == [0, 0]
    one = load_dataset(cfg("chexpert", d, chexpert={"image_size": 8, "max_train_rows": 1}), 0)
    assert len(one.y_train) == 1 and len(one.y_test) == 1


def test_chexpert_root_above_the_archive_folder_and_partition_stats_count_images(
        isolated: Path, capsys: pytest.CaptureFixture) -> None:
    """data.root = the folder the official zip was unpacked in (holding CheXpert-v1.0-small/) is searched; and
    `flplat partition-stats` on this multi-label data reports each client's images as num_samples, not its positive
    labels (here 14 per image)."""
    from flplat.cli import main

    d = isolated / "unzipped" / "CheXpert-v1.0-small"
    rows = [[f"CheXpert-v1.0-small/train/patient{i:05d}/study1/view1_frontal.jpg", "Male", "60", "Frontal", "AP",
             *(["1.0"] * 14)] for i in range(6)]
    write_csv(d / "train.csv", rows, header=CHEX_HEADER)
    write_csv(d / "valid.csv", [["CheXpert-v1.0-small/valid/patient64541/study1/view1_frontal.jpg", "Female", "50",
                                 "Frontal", "PA", *(["0.0"] * 14)]], header=CHEX_HEADER)
    for i in range(6):
        _grey(d / f"train/patient{i:05d}/study1/view1_frontal.jpg", 40 * i)
    _grey(d / "valid/patient64541/study1/view1_frontal.jpg", 0)
    ds = load_dataset(cfg("chexpert", d.parent, chexpert={"image_size": 8}), 0)
    assert ds.x_train.shape == (6, 1, 8, 8) and ds.y_test.sum() == 0
    assert float(ds.x_train[5].mean()) == pytest.approx(200 / 255, abs=0.01)
    assert main(["partition-stats", "--dataset", "chexpert", "--partition", "iid", "--clients", "2",
                 "--data-root", str(d.parent), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [c["num_samples"] for c in out["clients"]] == [3, 3]
    assert [c["label_counts"] for c in out["clients"]] == [[3] * 14, [3] * 14]  # positives per label


def test_office_home_domain_class_folders(isolated: Path) -> None:
    root = isolated / "oh" / "OfficeHomeDataset_10072016"
    for dom in ("Art", "Clipart", "Product", "Real World"):  # the archive spells it with a space
        for k, cls in enumerate(("Alarm_Clock", "Backpack", "Bed")):
            _grey(root / dom / cls / "00001.jpg", 200, mode="RGB")
            if dom == "Art" and k == 0:
                _grey(root / dom / cls / "00002.jpg", 10, mode="RGB")
    ds = load_dataset(cfg("office_home", isolated / "oh", officehome={"num_classes": 2, "image_size": 8}), 0)
    assert ds.class_names == ["Alarm_Clock", "Backpack"] and ds.num_classes == 2
    assert ds.x_train.shape == (9, 3, 8, 8) and ds.y_train.tolist() == [0, 0, 1, 0, 1, 0, 1, 0, 1]
    assert ds.meta["domain"].tolist() == [0, 0, 0, 1, 1, 2, 2, 3, 3]
    assert float(ds.x_train[0, 0].mean()) == pytest.approx(200 / 255, abs=0.02)
    assert float(ds.x_train[0, 1].mean()) == pytest.approx(100 / 255, abs=0.02)
    sub = load_dataset(cfg("office_home", isolated / "oh", officehome={"domains": ["Clipart"], "image_size": 8}), 0)
    assert sub.num_classes == 3 and sub.meta["domain"].tolist() == [0, 0, 0]


# ------------------------------------------------------------------------------------------- errors and config


@pytest.mark.parametrize("name, where", [
    ("acs_income", "census.gov"), ("serengeti", "dryad"), ("sent140", "sentiment140"),
    ("amazon_reviews", "kaggle"), ("femnist", "leaf"), ("chexpert", "chexpert"), ("office_home", "officehome"),
])
def test_missing_files_say_data_not_found_and_where(isolated: Path, name: str, where: str) -> None:
    with pytest.raises(DataUnavailableError) as e:
        load_dataset(cfg(name), 0)
    msg = str(e.value)
    assert msg.startswith(f"{name} data not found: ") and where in msg.lower() and "\n" not in msg
    assert str(isolated / "cache") in msg and "FLPLAT_DATA" in msg  # every directory searched, and the fix
    root = isolated / "nothing"
    with pytest.raises(DataUnavailableError, match=f"data.root='{root}' holds none of them"):
        load_dataset(cfg(name, root), 0)


@pytest.mark.parametrize("override, key", [
    ("data.padding=left", "data.padding"), ("data.max_length=0", "data.max_length"),
    ("data.labels=five", "data.labels"), ("data.source=books", "data.source"),
    ("data.states=[XX]", "data.states"), ("data.uncertain=maybe", "data.uncertain"),
    ("data.classes=101", "data.classes"), ("data.classes=[a,a]", "data.classes"),
    ("data.classes=[ab]", "data.classes"), ("data.num_classes=66",
                                                              "data.num_classes"),
])
def test_bad_paper_data_keys_name_the_key(override: str, key: str) -> None:
    from flplat.experiment import load_config

    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(None, [override])


def test_token_ids_get_a_clear_error_where_float_inputs_are_assumed() -> None:
    """Text x is int64 token ids: a model without an embedding and PQFed's PCA of the inputs refuse it by name."""
    from types import SimpleNamespace

    from flplat.data.containers import Dataset
    from flplat.data.pqfed_partition import pqfed_sources
    from flplat.experiment import check_token_inputs

    ids = torch.tensor([[0, 2, 3], [2, 2, 1]])
    text = Dataset(name="sent140", x_train=ids, y_train=torch.tensor([0, 2]), num_classes=3, x_test=ids,
                   y_test=torch.tensor([0, 2]), vocab=["<pad>", "<unk>", "good", "bad"])
    with pytest.raises(ConfigError, match=r"model.name='mlp' takes float features.*token ids \(2, 3\) over 4 words"):
        check_token_inputs(text, "mlp")
    check_token_inputs(Dataset(name="digits", x_train=torch.zeros(2, 3), y_train=torch.tensor([0, 1]),
                               num_classes=2), "mlp")  # float features: nothing to say
    multi = Dataset(name="chexpert", x_train=torch.zeros(2, 1, 8, 8), y_train=torch.zeros(2, 14), num_classes=14,
                    multilabel=True)
    check_token_inputs(multi, "mlp")  # multi-label data train with BCE (tests/test_paper_models.py)
    with pytest.raises(ConfigError, match="partition.name='pqfed'.*token ids"):
        pqfed_sources(text, SimpleNamespace(pqfed_public_size=1, pqfed_pca_components=1, pqfed_sources=1),
                      np.random.default_rng(0))
    from flplat.algorithms.pqfed import PQFed

    fake = SimpleNamespace(cfg=SimpleNamespace(public_size=2), info=SimpleNamespace(public_x=ids))
    with pytest.raises(ConfigError, match="algorithm.name='pqfed'.*token ids"):
        PQFed.similarity(fake, np.random.default_rng(0), None)


def test_decoded_images_are_cached_by_settings_and_files(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CheXpert / Office-Home images are decoded once: a second load with the same settings and files reads the
    decoded-data cache; another image size, a changed file or data.cache=false decodes again."""
    from flplat.data import medical, officehome

    root = isolated / "oh"
    for dom in ("Art", "Clipart", "Product", "Real_World"):
        _grey(root / dom / "Bed" / "1.jpg", 100, mode="RGB")
    first = load_dataset(cfg("office_home", root, officehome={"image_size": 8}), 0)
    assert list((isolated / "cache" / "decoded").iterdir())  # the entry was written

    def no_decode(*args, **kwargs):
        raise AssertionError("decoded again")

    monkeypatch.setattr(officehome, "load_image", no_decode)
    again = load_dataset(cfg("office_home", root, officehome={"image_size": 8}), 0)
    assert torch.equal(again.x_train, first.x_train) and again.meta["domain"].tolist() == [0, 1, 2, 3]
    for other in (cfg("office_home", root, officehome={"image_size": 16}), cfg("office_home", root)):
        with pytest.raises(AssertionError, match="decoded again"):
            load_dataset(other, 0)
    _grey(root / "Art" / "Bed" / "1.jpg", 10, size=22, mode="RGB")  # the same file, rewritten
    with pytest.raises(AssertionError, match="decoded again"):
        load_dataset(cfg("office_home", root, officehome={"image_size": 8}), 0)
    monkeypatch.undo()
    d = isolated / "chex"
    write_csv(d / "train.csv", [["CheXpert-v1.0-small/train/p1/s1/view1_frontal.jpg", "Male", "70", "Frontal", "PA",
                                 *(["1.0"] * 14)]], header=CHEX_HEADER)
    write_csv(d / "valid.csv", [["CheXpert-v1.0-small/valid/p2/s1/view1_frontal.jpg", "Male", "30", "Lateral", "",
                                 *(["-1.0"] * 14)]], header=CHEX_HEADER)
    _grey(d / "train/p1/s1/view1_frontal.jpg", 255)
    _grey(d / "valid/p2/s1/view1_frontal.jpg", 0)
    ones = load_dataset(cfg("chexpert", d), 0)
    monkeypatch.setattr(medical, "load_image", no_decode)
    assert torch.equal(load_dataset(cfg("chexpert", d), 0).y_test, ones.y_test)  # from the cache
    with pytest.raises(AssertionError, match="decoded again"):
        load_dataset(cfg("chexpert", d, chexpert={"uncertain": "zeros"}), 0)  # labels differ: not the same entry
    from flplat.experiment import load_config

    with pytest.raises(AssertionError, match="decoded again"):
        load_dataset(load_config(None, ["data.name=chexpert", f"data.root={d}", "data.cache=false"]).data, 0)
