"""Dataset registry and loaders (flplat.data.datasets): every file-based test writes its own tiny files."""

from __future__ import annotations

import gzip
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import idx_bytes
from omegaconf import OmegaConf

from flplat.data import datasets as ds
from flplat.data import files as dfiles  # the file loaders: patch here, not the re-exports in datasets
from flplat.data.datasets import DATASETS, load_dataset
from flplat.data.files import NORMALIZATION, DataUnavailableError
from flplat.data.formats import DataFormatError, read_idx
from flplat.data.registry import data_config
from flplat.errors import ConfigError

TV_CLASSES = {"mnist": "MNIST", "fmnist": "FashionMNIST", "cifar10": "CIFAR10", "cifar100": "CIFAR100"}


def _no_download(*args, **kwargs):
    pytest.fail(f"a download was attempted: {args} {kwargs}")


@pytest.fixture
def no_download(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to download (our hook or torchvision's dataset classes) fails the test."""
    monkeypatch.setattr(dfiles, "_torchvision_download", _no_download)
    try:
        import torchvision.datasets as tvd
    except ImportError:
        return
    for cls in TV_CLASSES.values():
        monkeypatch.setattr(tvd, cls, _no_download)


@pytest.fixture
def isolated(isolated: Path, no_download: None) -> Path:
    """conftest's: every documented location an empty directory under tmp_path; and no download."""
    return isolated


# ------------------------------------------------------------------------------------------------ file writers


def _write(path: Path, data: bytes, gz: bool) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def _tiny_images(n: int, seed: int, hw: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(n, hw, hw), dtype=np.uint8), rng.integers(0, 10, size=n).astype(np.uint8)


def _write_idx_set(d: Path, gz: bool) -> dict[str, np.ndarray]:
    (xtr, ytr), (xte, yte) = _tiny_images(5, 0), _tiny_images(3, 1)
    arrays = {
        "train-images-idx3-ubyte": xtr,
        "train-labels-idx1-ubyte": ytr,
        "t10k-images-idx3-ubyte": xte,
        "t10k-labels-idx1-ubyte": yte,
    }
    for name, arr in arrays.items():
        _write(d / name, idx_bytes(arr), gz)
    return arrays


def _pickle(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        pickle.dump(obj, fh, protocol=2)


def _cifar_batch(n: int, seed: int, label_key: str, num_classes: int) -> dict:
    rng = np.random.default_rng(seed)
    batch = {
        "batch_label": f"batch {seed}",
        label_key: [int(v) for v in rng.integers(0, num_classes, size=n)],
        "data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
        "filenames": [f"img_{seed}_{i}.png" for i in range(n)],
    }
    if label_key == "fine_labels":
        batch["coarse_labels"] = [v // 5 for v in batch[label_key]]
    return batch


def _write_cifar10(d: Path) -> list[dict]:
    batches = [_cifar_batch(2, i, "labels", 10) for i in range(1, 6)]
    for i, b in enumerate(batches, start=1):
        _pickle(d / f"data_batch_{i}", b)
    batches.append(_cifar_batch(3, 9, "labels", 10))
    _pickle(d / "test_batch", batches[-1])
    meta = {"num_cases_per_batch": 2, "label_names": [f"c{i}" for i in range(10)], "num_vis": 3072}
    _pickle(d / "batches.meta", meta)
    return batches


def _write_cifar100(d: Path) -> list[dict]:
    batches = [_cifar_batch(4, 1, "fine_labels", 100), _cifar_batch(3, 2, "fine_labels", 100)]
    _pickle(d / "train", batches[0])
    _pickle(d / "test", batches[1])
    meta = {"fine_label_names": [f"f{i}" for i in range(100)], "coarse_label_names": [f"k{i}" for i in range(20)]}
    _pickle(d / "meta", meta)
    return batches


def _expected(pixels: np.ndarray, name: str) -> torch.Tensor:
    mean, std = (np.asarray(v, dtype=np.float32).reshape(1, -1, 1, 1) for v in NORMALIZATION[name])
    return torch.from_numpy((pixels.astype(np.float32) / 255.0 - mean) / std)


# ---------------------------------------------------------------------------------------------------- registry


def test_registry_and_unknown_name() -> None:
    assert set(DATASETS) >= {"digits", "mnist", "fmnist", "cifar10", "cifar100", "synthetic"}
    with pytest.raises(ConfigError) as e:
        load_dataset(data_config(name="imagenet"), 0)
    msg = str(e.value)
    assert "imagenet" in msg and "\n" not in msg
    for name in DATASETS:
        assert name in msg
    with pytest.raises(ValueError):
        ds.register_dataset("digits")(lambda cfg, seed: None)


def test_digits() -> None:
    d = load_dataset(data_config(name="digits"), 0)
    assert d.x_train.shape == (1797, 1, 8, 8) and d.x_train.dtype == torch.float32
    assert d.y_train.shape == (1797,) and d.y_train.dtype == torch.int64
    assert d.num_classes == 10 and sorted(d.y_train.unique().tolist()) == list(range(10))
    assert d.x_test is None and d.y_test is None and d.input_shape == (1, 8, 8)
    # standardised with the documented constants: roughly zero mean, unit std
    assert abs(d.x_train.mean().item()) < 0.01 and abs(d.x_train.std().item() - 1.0) < 0.01


def test_synthetic_deterministic_and_shapes() -> None:
    cfg = data_config(name="synthetic", samples=100, features=7, classes=3)
    a, b, c = load_dataset(cfg, 1), load_dataset(cfg, 1), load_dataset(cfg, 2)
    assert a.x_train.shape == (100, 7) and a.x_train.dtype == torch.float32
    assert a.y_train.shape == (100,) and a.y_train.dtype == torch.int64
    assert a.x_test is not None and a.x_test.shape == (20, 7) and a.y_test.shape == (20,)
    assert a.num_classes == 3 and set(a.y_train.tolist()) == {0, 1, 2}
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_train, b.y_train)
    assert torch.equal(a.x_test, b.x_test) and torch.equal(a.y_test, b.y_test)
    assert not torch.equal(a.x_train, c.x_train)
    # separation 0: every class has mean 0 -> the per-class means are close to each other
    flat = load_dataset(data_config(name="synthetic", samples=3000, separation=0.0), 0)
    means = torch.stack([flat.x_train[flat.y_train == k].mean(0) for k in range(10)])
    assert means.abs().max() < 0.5


# --------------------------------------------------------------------------------------------------------- IDX


@pytest.mark.parametrize("gz", [False, True])
def test_read_idx(tmp_path: Path, gz: bool) -> None:
    imgs = np.arange(2 * 300 * 3, dtype=np.uint8).reshape(2, 300, 3)  # a dim > 255 checks big-endian dims
    ints = np.array([1, -2, 70000], dtype=np.int32)
    floats = np.array([[0.5, -1.25]], dtype=np.float32)
    for i, arr in enumerate((imgs, ints, floats)):
        out = read_idx(_write(tmp_path / f"a{i}", idx_bytes(arr), gz))
        assert out.shape == arr.shape and out.dtype == arr.dtype and np.array_equal(out, arr)


def test_read_idx_rejects_bad_files(tmp_path: Path) -> None:
    good = idx_bytes(np.zeros((2, 2), dtype=np.uint8))
    bad = {"magic": b"\x01\x02" + good[2:], "type": b"\x00\x00\x07" + good[3:], "size": good[:-1], "empty": b""}
    for name, data in bad.items():
        with pytest.raises(DataFormatError, match=name if name != "size" else "data bytes"):
            read_idx(_write(tmp_path / name, data, gz=False))


@pytest.mark.parametrize("name", ["mnist", "fmnist"])
@pytest.mark.parametrize("layout", ["flat", "torchvision"])
@pytest.mark.parametrize("gz", [False, True])
def test_idx_dataset_from_root(isolated: Path, name: str, layout: str, gz: bool) -> None:
    root = isolated / "data"
    d = root if layout == "flat" else root / TV_CLASSES[name] / "raw"
    arrays = _write_idx_set(d, gz)
    data = load_dataset(data_config(name=name, root=str(root), download=True), 0)  # files present: no download
    assert data.x_train.shape == (5, 1, 4, 4) and data.x_test.shape == (3, 1, 4, 4)
    assert data.x_train.dtype == torch.float32 and data.y_train.dtype == torch.int64
    assert torch.allclose(data.x_train, _expected(arrays["train-images-idx3-ubyte"][:, None], name))
    assert data.y_test.tolist() == arrays["t10k-labels-idx1-ubyte"].tolist()
    assert data.num_classes == 10 and len(data.class_names) == 10


def test_idx_lookup_env_and_debian(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = isolated / "env"
    _write_idx_set(env / "MNIST" / "raw", gz=True)
    monkeypatch.setenv("FLPLAT_DATA", str(env))
    assert load_dataset(data_config(name="mnist"), 0).x_train.shape == (5, 1, 4, 4)
    _write_idx_set(isolated / "debian", gz=True)  # /usr/share/datasets/fashion-mnist layout
    assert load_dataset(data_config(name="fmnist"), 0).x_test.shape == (3, 1, 4, 4)
    # cwd-relative ../shared/data and an OmegaConf DictConfig work too
    _write_idx_set(isolated / "shared" / "data" / "FashionMNIST" / "raw", gz=False)
    cfg = OmegaConf.structured(data_config(name="fmnist"))
    assert load_dataset(cfg, 0).x_train.shape == (5, 1, 4, 4)


@pytest.mark.parametrize("name", ["mnist", "fmnist"])
def test_missing_idx_data(isolated: Path, name: str) -> None:
    root = isolated / "nothing_here"
    with pytest.raises(DataUnavailableError) as e:
        load_dataset(data_config(name=name, root=str(root)), 0)
    msg = str(e.value)
    assert "\n" not in msg and isinstance(e.value, ConfigError)
    # an explicit data.root is used or refused: only it is searched, never a copy elsewhere
    for d in (root, root / TV_CLASSES[name] / "raw"):
        assert str(d) in msg
    assert str(isolated / "cache") not in msg and str(isolated / "repo_shared") not in msg
    assert f"data.root={str(root)!r}" in msg and "data.download=true" in msg
    with pytest.raises(DataUnavailableError) as e:  # without a root every documented place is listed
        load_dataset(data_config(name=name), 0)
    msg = str(e.value)
    for d in (isolated / "cache", isolated / "repo_shared" / "data"):
        assert str(d) in msg
    assert "data.root" in msg and "FLPLAT_DATA" in msg and "data.download=true" in msg
    assert ("apt-get install dataset-fashion-mnist" in msg) == (name == "fmnist")
    assert (str(isolated / "debian") in msg) == (name == "fmnist")


def test_download_only_when_absent(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, Path]] = []

    def fake_download(name: str, root: Path) -> None:
        calls.append((name, root))
        _write_idx_set(root / "MNIST" / "raw", gz=True)

    monkeypatch.setattr(dfiles, "_torchvision_download", fake_download)
    root = isolated / "dl"
    cfg = data_config(name="mnist", root=str(root), download=True)
    assert load_dataset(cfg, 0).x_train.shape == (5, 1, 4, 4)
    assert calls == [("mnist", root)]
    load_dataset(cfg, 0)  # now present: no second download
    assert len(calls) == 1


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.real_data(n)) for n in ("mnist", "fmnist")])
def test_real_idx_data(name: str, tmp_path: Path, no_download: None) -> None:
    """The official files, wherever the documented lookup finds them (e.g. ``../shared/data`` beside the checkout);
    skipped without them."""
    d = load_dataset(data_config(name=name, cache_dir=str(tmp_path / "decoded")), 0)
    assert d.x_train.shape == (60000, 1, 28, 28) and d.x_test.shape == (10000, 1, 28, 28)
    assert d.y_train.dtype == torch.int64 and sorted(d.y_test.unique().tolist()) == list(range(10))
    assert abs(d.x_train.mean().item()) < 0.01 and abs(d.x_train.std().item() - 1.0) < 0.01


# ------------------------------------------------------------------------------------------------------- CIFAR


@pytest.mark.parametrize("layout", ["flat", "torchvision"])
def test_cifar10(isolated: Path, layout: str) -> None:
    root = isolated / "data"
    batches = _write_cifar10(root if layout == "flat" else root / "cifar-10-batches-py")
    d = load_dataset(data_config(name="cifar10", root=str(root), download=True), 0)
    assert d.x_train.shape == (10, 3, 32, 32) and d.x_test.shape == (3, 3, 32, 32)
    assert d.x_train.dtype == torch.float32 and d.y_train.dtype == torch.int64
    assert d.y_train.tolist() == [v for b in batches[:5] for v in b["labels"]]
    assert d.y_test.tolist() == batches[5]["labels"]
    pixels = np.concatenate([b["data"] for b in batches[:5]]).reshape(-1, 3, 32, 32)
    assert torch.allclose(d.x_train, _expected(pixels, "cifar10"))
    assert d.num_classes == 10 and d.class_names == [f"c{i}" for i in range(10)]


def test_cifar100(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = isolated / "env"
    train, test = _write_cifar100(env / "cifar-100-python")
    monkeypatch.setenv("FLPLAT_DATA", str(env))
    d = load_dataset(data_config(name="cifar100"), 0)
    assert d.x_train.shape == (4, 3, 32, 32) and d.x_test.shape == (3, 3, 32, 32)
    assert d.y_train.tolist() == train["fine_labels"] and d.y_test.tolist() == test["fine_labels"]
    assert torch.allclose(d.x_test, _expected(test["data"].reshape(-1, 3, 32, 32), "cifar100"))
    assert d.num_classes == 100 and d.class_names[:2] == ["f0", "f1"]


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_missing_cifar(isolated: Path, name: str) -> None:
    root = isolated / "empty"
    _write_cifar10(root / "cifar-10-batches-py")
    os.remove(root / "cifar-10-batches-py" / "data_batch_5")  # incomplete: not accepted
    with pytest.raises(DataUnavailableError) as e:
        load_dataset(data_config(name=name, root=str(root)), 0)
    assert str(root) in str(e.value) and "\n" not in str(e.value)


def test_cifar_pickle_only_admits_numpy(isolated: Path) -> None:
    root = isolated / "evil"
    _write_cifar10(root)

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    with open(root / "test_batch", "wb") as fh:
        pickle.dump({"data": Evil(), "labels": []}, fh, protocol=2)
    with pytest.raises(DataFormatError, match="not allowed"):
        load_dataset(data_config(name="cifar10", root=str(root)), 0)


def test_decoded_cache_is_reused_and_keyed_by_file_contents(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, cache = isolated / "data", isolated / "decoded"
    arrays = _write_idx_set(root, gz=True)
    cfg = data_config(name="fmnist", root=str(root), cache_dir=str(cache))
    first = load_dataset(cfg, 0)
    assert len(list(cache.iterdir())) == 1  # one entry, no temporary directory left behind

    def no_decode(path):
        raise AssertionError(f"decoded {path} although the cache holds it")

    with monkeypatch.context() as m:
        m.setattr(dfiles, "read_idx", no_decode)
        again = load_dataset(cfg, 0)
    for key in ("x_train", "y_train", "x_test", "y_test"):
        assert torch.equal(getattr(first, key), getattr(again, key))
    assert torch.equal(again.x_train, _expected(arrays["train-images-idx3-ubyte"][:, None], "fmnist"))

    changed = arrays["train-images-idx3-ubyte"][::-1].copy()  # new contents under the same file name
    _write(root / "train-images-idx3-ubyte", idx_bytes(changed), gz=True)
    fresh = load_dataset(cfg, 0)
    assert torch.equal(fresh.x_train, _expected(changed[:, None], "fmnist"))
    assert len(list(cache.iterdir())) == 2


def test_decoded_cache_off(isolated: Path) -> None:
    root, cache = isolated / "data", isolated / "decoded"
    _write_idx_set(root, gz=False)
    load_dataset(data_config(name="mnist", root=str(root), cache=False, cache_dir=str(cache)), 0)
    assert not cache.exists()
