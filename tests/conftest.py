"""Shared fixtures: small, fast experiment configs, and the data the tests may read.

The default suite needs no file outside the clone. For the whole session the data locator searches only the
locations a test names (``$FLPLAT_DATA_SEARCH=explicit``, see flplat/data/files.py; set in the environment, so the
processes a test starts inherit it) and ``$FLPLAT_DATA`` is unset, so a copy of MNIST beside the checkout
(``../shared/data``), in ``~/.cache/flplat`` or in the user's ``$FLPLAT_DATA`` is invisible: a test that needs
image files writes them (``idx_data``: a small MNIST / Fashion-MNIST in the public gzip IDX layout) or uses
``digits``. A test that wants the real files is marked ``@pytest.mark.real_data("mnist", ...)``: for it the
user's settings and the full lookup come back, and it skips, giving the reason, where the files are absent.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]

os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
# the user's data settings, kept for the real_data tests; saved in the environment by the first pytest process so
# that xdist's workers (which inherit the already-changed variables) restore the user's values, not the session's
_SAVED = "FLPLAT_TESTS_USER_DATA_ENV"
if _SAVED not in os.environ:
    os.environ[_SAVED] = json.dumps({k: os.environ.get(k) for k in ("FLPLAT_DATA", "FLPLAT_DATA_SEARCH")})
os.environ["FLPLAT_DATA_SEARCH"] = "explicit"
os.environ.pop("FLPLAT_DATA", None)


# the tiny synthetic federation and the built-ins' settings on it live in the library, so `flplat check` and these
# tests run the same federation (flplat/studies/conformance.py)
from flplat.data import files as dfiles  # noqa: E402  (the locator the fixtures below point elsewhere)
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
    """Every documented data location an empty directory under ``tmp_path`` (the current directory ``cwd``, so
    ``shared/data`` is ``../shared/data``; ``repo_shared/data``, ``debian``, ``cache``), searched in full
    (``$FLPLAT_DATA_SEARCH=all``): only the files a test writes exist, wherever the lookup is to find them."""
    monkeypatch.delenv("FLPLAT_DATA", raising=False)
    monkeypatch.setenv("FLPLAT_DATA_SEARCH", "all")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setattr(dfiles, "REPO_SHARED_DATA", tmp_path / "repo_shared" / "data")
    monkeypatch.setattr(dfiles, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(dfiles, "DEBIAN_FMNIST_DIR", tmp_path / "debian")
    return tmp_path


@pytest.fixture(autouse=True, scope="session")
def _private_data_cache(tmp_path_factory: pytest.TempPathFactory):
    """``~/.cache/flplat`` (download root, decoded-data cache) is a session directory in this process."""
    cache = tmp_path_factory.mktemp("flplat_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dfiles, "CACHE_DIR", cache)
        yield


_USER_CACHE_DIR = dfiles.CACHE_DIR  # its own value, before the session's


@pytest.fixture(autouse=True)
def _deprecations_warn_in_every_test():
    """An old config key warns once per process (flplat.data.legacy); here once per test, so that a test that uses
    one sees its warning (flplat's deprecation warnings are errors in the tests, pyproject.toml) whatever ran
    before it in the same worker."""
    from flplat.data import legacy

    legacy._WARNED.clear()


@pytest.fixture(autouse=True)
def _real_data(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """``@pytest.mark.real_data(name, ...)``: the user's data settings and the full documented lookup for this
    test; it skips, with the locator's one-line reason, unless every named dataset's files are found."""
    marker = request.node.get_closest_marker("real_data")
    if marker is None:
        return
    if not marker.args:
        raise pytest.UsageError(f"{request.node.nodeid}: real_data needs the dataset names, e.g. real_data('mnist')")
    from flplat.config import DataConfig

    for key, value in json.loads(os.environ[_SAVED]).items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    monkeypatch.setattr(dfiles, "CACHE_DIR", _USER_CACHE_DIR)
    for name in marker.args:
        try:
            dfiles.locate(DataConfig(name=name), name)
        except dfiles.DataUnavailableError as e:
            pytest.skip(f"needs the real {name} files: {e}")


# ------------------------------------------------------------------------------------ small public-format files


def idx_bytes(arr: np.ndarray) -> bytes:
    """``arr`` in the IDX format of the MNIST distribution (big-endian header: type code, dims, sizes)."""
    codes = {np.dtype(np.uint8): 0x08, np.dtype(np.int32): 0x0C, np.dtype(np.float32): 0x0D}
    header = bytes([0, 0, codes[arr.dtype], arr.ndim]) + np.asarray(arr.shape, dtype=">u4").tobytes()
    return header + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


def write_idx_dataset(d: Path, n_train: int, n_test: int, seed: int) -> None:
    """An MNIST-shaped dataset in the public layout (the four ``*-ubyte.gz`` files in ``d``): 28×28 uint8 images,
    labels 0..9, each class a fixed random pattern plus Gaussian noise, so that a model can learn it; the same bytes
    for the same arguments (no time stamp in the gzip header)."""
    rng = np.random.default_rng(seed)
    protos = rng.integers(0, 256, size=(10, 28, 28))
    d.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("t10k", n_test)):
        y = rng.integers(0, 10, size=n).astype(np.uint8)
        x = np.clip(protos[y] + rng.normal(0.0, 48.0, size=(n, 28, 28)), 0, 255).astype(np.uint8)
        for kind, arr in (("images-idx3", x), ("labels-idx1", y)):
            (d / f"{split}-{kind}-ubyte.gz").write_bytes(gzip.compress(idx_bytes(arr), compresslevel=1, mtime=0))


@pytest.fixture(scope="session")
def idx_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory in torchvision's layout (``MNIST/raw``, ``FashionMNIST/raw``) holding a small MNIST and
    Fashion-MNIST: 6,000 training images (PQFed's smoke scale clusters the whole pool into 15 sources and needs 3
    of them with 225 images) and 1,000 test images (its public sample takes 500)."""
    root = tmp_path_factory.mktemp("idx_data")
    write_idx_dataset(root / "MNIST" / "raw", 6000, 1000, seed=0)
    write_idx_dataset(root / "FashionMNIST" / "raw", 6000, 1000, seed=1)
    return root


@pytest.fixture
def small_mnist(idx_data: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``$FLPLAT_DATA`` points at :func:`idx_data` (for this process and the ones a test starts)."""
    monkeypatch.setenv("FLPLAT_DATA", str(idx_data))
    return idx_data
