"""The file-backed datasets: where their files are found (or downloaded), how they are decoded and cached.

Split from :mod:`flplat.data.datasets` along the seam between the registry (names -> loaders, subsampling, the
generated datasets) and the disk: this module locates, downloads, decodes, standardises and caches the image
datasets' files (IDX for ``mnist`` / ``fmnist``, the pickle batches for ``cifar10`` / ``cifar100``; the parsers
themselves are :mod:`flplat.data.formats`). The pixel standardisation (:data:`NORMALIZATION`,
:func:`_standardise`) lives here because both sides use it (``digits`` too). :mod:`flplat.data.datasets` registers
:func:`load_idx_dataset` and :func:`load_cifar` under the dataset names (reading one of this module's names from
there, the old path, warns until flplat 0.3.0); the module attributes tests point elsewhere (:data:`CACHE_DIR`,
:data:`REPO_SHARED_DATA`, :data:`DEBIAN_FMNIST_DIR`, :func:`_torchvision_download`, :func:`read_idx`) must be
patched HERE to reach the code.

Lookup order (files on disk)
----------------------------
A directory is used when it holds every file the dataset needs; the first such directory wins:

1. ``data.root`` when set (then ONLY there: an explicit root is used or refused, never silently replaced by a
   copy found elsewhere): the directory holding the files itself, or its torchvision layout
   (``<root>/MNIST/raw``, ``<root>/FashionMNIST/raw``, ``<root>/cifar-10-batches-py``, ``<root>/cifar-100-python``);
2. ``$FLPLAT_DATA``, with the same two layouts;
3. ``../shared/data/<layout>`` relative to the current working directory;
4. ``../shared/data/<layout>`` relative to the repository root (the parent of the ``flplat`` package directory);
5. ``fmnist`` only: ``/usr/share/datasets/fashion-mnist/`` (Debian's ``dataset-fashion-mnist`` package, gzip files
   under the standard names);
6. ``~/.cache/flplat/<layout>`` (where downloads go when ``data.root`` is unset).

``$FLPLAT_DATA_SEARCH=explicit`` (:data:`SEARCH_ENV_VAR`; the default is ``all``) keeps only the locations the
user names, 1 and 2: nothing is found in ``../shared/data``, Debian's directory or the cache unless ``data.root``
or ``$FLPLAT_DATA`` points there. It is an environment variable rather than a config key so that every process a
command starts (the ranks of a sharded run, a benchmark script, a test's subprocess) inherits it: the test suite
sets it for its whole session (tests/conftest.py), so a test can only read the files it writes itself, and one that
silently needed a copy of MNIST beside the checkout fails everywhere, not only on a clone without one. Any other
value is a one-line :class:`~flplat.errors.ConfigError`.

Only when none of them has the files and ``data.download`` is true does torchvision download them (into
``data.root``, else ``~/.cache/flplat``); a download is never attempted when the files are present. Otherwise
:class:`DataUnavailableError` names every directory looked in and how to provide the files.

Decoded cache
-------------
Decoding and standardising the image files costs seconds per run (60,000 FMNIST images: gunzip, a float32
copy, the per-channel standardisation), so the resulting tensors are kept as ``.npy`` files under
``data.cache_dir`` (default ``~/.cache/flplat/decoded``), keyed by the SHA-256 of the source files, the
normalisation constants and a format version (:data:`DECODED_CACHE_VERSION`); a later run maps them
(copy-on-write ``np.load(..., mmap_mode="c")``: no up-front read, pages shared by the processes of a sharded
run) instead of decoding (a bit-identical result). ``data.cache=false`` turns the cache off. See :func:`_cached_arrays`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flplat.config import DataConfig
from flplat.data.containers import Dataset
from flplat.data.formats import DataFormatError, read_cifar_batches, read_idx, read_pickle
from flplat.errors import ConfigError, check_choice

log = logging.getLogger("flplat")
#: bump when the decoded arrays of a source file would change (decoding or standardisation code)
DECODED_CACHE_VERSION = 1


class DataUnavailableError(ConfigError):
    """The dataset's files are not on disk (and downloading is off or failed); the message is one line."""


#: Per-channel (mean, std) applied after scaling pixels to [0, 1]: ``x = (x / max - mean) / std``.
#: digits: computed over all 1,797 images / 16; mnist, fmnist, cifar10, cifar100: the usual statistics of the
#: official training sets (as used throughout the literature).
NORMALIZATION: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "digits": ((0.3053,), (0.3760,)),
    "mnist": ((0.1307,), (0.3081,)),
    "fmnist": ((0.2860,), (0.3530,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
}

ENV_VAR = "FLPLAT_DATA"
#: ``all`` (default): every documented location; ``explicit``: only ``data.root`` and ``$FLPLAT_DATA``
SEARCH_ENV_VAR = "FLPLAT_DATA_SEARCH"
SEARCH_MODES = ("all", "explicit")
#: ``<repo>/../shared/data``; module attributes so that tests can point them elsewhere.
REPO_SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
CACHE_DIR = Path.home() / ".cache" / "flplat"
DEBIAN_FMNIST_DIR = Path("/usr/share/datasets/fashion-mnist")

IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
FMNIST_CLASSES = [
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
]
# name -> (torchvision layout sub-directory, number of classes)
_IDX_LAYOUT = {"mnist": ("MNIST/raw", 10), "fmnist": ("FashionMNIST/raw", 10)}
# name -> (torchvision layout sub-directory, train files, test file, meta file, label key, class-name key, classes)
_CIFAR_LAYOUT: dict[str, tuple[str, tuple[str, ...], str, str, str, str, int]] = {
    "cifar10": (
        "cifar-10-batches-py", tuple(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "batches.meta",
        "labels", "label_names", 10,
    ),
    "cifar100": ("cifar-100-python", ("train",), "test", "meta", "fine_labels", "fine_label_names", 100),
}


# ----------------------------------------------------------------------------------------------- tensor helpers


def _standardise(pixels: np.ndarray, max_value: float, name: str) -> torch.Tensor:
    """uint/float pixels (N, C, H, W) -> float32 tensor scaled to [0, 1] and standardised per channel."""
    mean, std = (np.asarray(v, dtype=np.float32).reshape(1, -1, 1, 1) for v in NORMALIZATION[name])
    x = np.array(pixels, dtype=np.float32, order="C")  # one float32 copy, then in place (no N-sized temporaries)
    x /= np.float32(max_value)
    x -= mean
    x /= std
    return torch.from_numpy(x)


def _file_digest(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _decoded_cache_dir(cfg: DataConfig) -> Path | None:
    if not getattr(cfg, "cache", True):
        return None
    d = getattr(cfg, "cache_dir", None)
    return Path(str(d)).expanduser() if d else CACHE_DIR / "decoded"


def _cached_arrays(cfg: DataConfig, name: str, sources: Iterable[Path],
                   build: Callable[[], dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """``build()``'s tensors (decoded and standardised), read from the on-disk cache when the same source files
    (by SHA-256 of their contents) were decoded before with the same :data:`NORMALIZATION` and format version.

    The cache is ``data.cache_dir`` (default ``~/.cache/flplat/decoded``; ``data.cache=false`` turns it off): one
    directory of ``.npy`` files per key, written under a temporary name and renamed into place, so processes that
    create it at the same time (the ranks of a sharded run) never read a partial entry. A cache that cannot be
    written only costs the decode (a warning says so).
    """
    root = _decoded_cache_dir(cfg)
    if root is None:
        return build()
    h = hashlib.sha256(f"v{DECODED_CACHE_VERSION}:{name}:{NORMALIZATION.get(name)}".encode())
    for path in sources:
        h.update(_file_digest(path).encode())
    entry = root / f"{name}-{h.hexdigest()[:24]}"
    if entry.is_dir():
        try:
            # memory-mapped copy-on-write: pages are read on first touch and shared by the processes of a
            # sharded run through the page cache; writes (none expected) stay private to the process
            return {f.stem: torch.from_numpy(np.load(f, mmap_mode="c")) for f in sorted(entry.glob("*.npy"))}
        except (OSError, ValueError):  # an unreadable entry: decode again and replace it
            shutil.rmtree(entry, ignore_errors=True)
    import sys
    import time

    t0 = time.perf_counter()  # the first build (a minute for the larger sets on a busy machine) says what it does
    print(f"flplat: decoding {name} once into the cache {entry} (later runs read it)", file=sys.stderr, flush=True)
    arrays = build()
    print(f"flplat: decoded {name} in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=root))
        os.chmod(tmp, 0o755)  # mkdtemp's 0700 would hide a shared cache_dir from other users
        for key, t in arrays.items():
            np.save(tmp / f"{key}.npy", t.numpy())
        try:
            os.rename(tmp, entry)
        except OSError:  # another process renamed its identical copy into place first
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as e:
        log.warning("data.cache_dir: cannot write the decoded-data cache in %s (%s); decoding every run", root, e)
    return arrays


def _labels(y: Iterable[int] | np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(y, dtype=np.int64).copy())


# ---------------------------------------------------------------------------------------------- directory lookup


def _with_layout(base: Path, layout: str) -> list[Path]:
    """A user-given directory: the files may sit in it directly or in its torchvision layout sub-directory."""
    return [base, base / layout]


def search_mode() -> str:
    """``$FLPLAT_DATA_SEARCH`` (``all`` when unset or empty); ConfigError for any other value than those allowed."""
    mode = os.environ.get(SEARCH_ENV_VAR, "").strip() or "all"
    check_choice(f"${SEARCH_ENV_VAR}", mode, SEARCH_MODES)
    return mode


def looked_in(looked: list[Path]) -> str:
    """The directories searched, for an error message; under ``explicit`` search it says why there are so few."""
    text = ", ".join(map(str, looked)) or "no directory"
    if search_mode() == "explicit":
        text += f" (${SEARCH_ENV_VAR}=explicit: only data.root and ${ENV_VAR} are searched)"
    return text


def _candidate_dirs(cfg: DataConfig, layout: str, extra: Iterable[Path] = ()) -> list[Path]:
    """Directories to search, in the documented order, without duplicates."""
    dirs: list[Path] = []
    explicit = search_mode() == "explicit"
    if cfg.root:  # an explicit root is used or refused: never a silent fallback to another copy elsewhere
        return [Path(os.path.abspath(d)) for d in _with_layout(Path(str(cfg.root)).expanduser(), layout)]
    env = os.environ.get(ENV_VAR)
    if env:
        dirs += _with_layout(Path(env).expanduser(), layout)
    if explicit:  # the locations the user did not name are off
        return [Path(os.path.abspath(d)) for d in dirs]
    dirs.append(Path.cwd().parent / "shared" / "data" / layout)
    dirs.append(REPO_SHARED_DATA / layout)
    dirs += list(extra)
    dirs.append(CACHE_DIR / layout)
    unique: list[Path] = []
    for d in dirs:
        d = Path(os.path.abspath(d))
        if d not in unique:
            unique.append(d)
    return unique


def _download_root(cfg: DataConfig) -> Path:
    return Path(str(cfg.root)).expanduser() if cfg.root else CACHE_DIR


def _torchvision_download(name: str, root: Path) -> None:
    """Let torchvision download ``name`` into ``root`` (torchvision layout). Only called when files are absent."""
    try:
        from torchvision import datasets as tvd
    except ImportError:
        raise DataUnavailableError(f"cannot download {name}: torchvision is not installed") from None
    cls = {"mnist": tvd.MNIST, "fmnist": tvd.FashionMNIST, "cifar10": tvd.CIFAR10, "cifar100": tvd.CIFAR100}[name]
    root.mkdir(parents=True, exist_ok=True)
    try:
        cls(str(root), train=True, download=True)
    except Exception as e:  # network errors, bad archives, ...
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataUnavailableError(f"downloading {name} into {root} failed: {first}") from None


def _missing_message(name: str, looked: list[Path], needed: str, root=None) -> str:
    if root:
        return (f"data.root={str(root)!r} does not hold the {name} files (need {needed}; looked in: "
                f"{looked_in(looked)}); allowed: a directory holding them, or data.download=true")
    how = f"set data.root=DIR or ${ENV_VAR}=DIR to a directory holding them"
    if name == "fmnist":
        how += ", run `apt-get install dataset-fashion-mnist`"
    how += ", or set data.download=true to let torchvision download them"
    return f"{name} data not found (need {needed}); looked in: {looked_in(looked)}; to fix: {how}"


def _locate(
    cfg: DataConfig, name: str, layout: str, find: Callable[[Path], Any], needed: str, extra: Iterable[Path] = ()
) -> Any:
    """First directory where ``find`` succeeds; else download (if allowed) or raise DataUnavailableError."""
    looked = _candidate_dirs(cfg, layout, extra)
    for d in looked:
        found = find(d)
        if found is not None:
            return found
    if not cfg.download:
        raise DataUnavailableError(_missing_message(name, looked, needed, cfg.root))
    root = _download_root(cfg)
    _torchvision_download(name, root)
    found = find(root / layout)
    if found is None:
        raise DataUnavailableError(f"{name}: the download finished but {needed} are not in {root / layout}")
    return found


# ---------------------------------------------------------------------------------------------------------- IDX

def _find_idx_files(d: Path) -> dict[str, Path] | None:
    """Map each standard IDX stem to its file in ``d`` (raw preferred over ``.gz``); None unless all four exist."""
    out: dict[str, Path] = {}
    for stem in IDX_FILES:
        dotted = stem.replace("-idx", ".idx")  # the original distribution's "train-images.idx3-ubyte" spelling
        names = (stem, f"{stem}.gz", dotted, f"{dotted}.gz")
        path = next((d / n for n in names if (d / n).is_file()), None)
        if path is None:
            return None
        out[stem] = path
    return out


def _read_idx_split(files: dict[str, Path], prefix: str, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    img_path, lab_path = files[f"{prefix}-images-idx3-ubyte"], files[f"{prefix}-labels-idx1-ubyte"]
    images, labels = read_idx(img_path), read_idx(lab_path)
    if images.ndim != 3:
        raise DataFormatError(f"{img_path}: expected 3 dims (N, H, W), got shape {images.shape}")
    if labels.ndim != 1 or len(labels) != len(images):
        raise DataFormatError(f"{lab_path}: expected {len(images)} labels, got shape {labels.shape}")
    if len(labels) and (labels.min() < 0 or labels.max() >= num_classes):
        raise DataFormatError(f"{lab_path}: labels outside 0..{num_classes - 1}")
    return images[:, None, :, :], labels


def _locate_idx(cfg: DataConfig, name: str) -> dict[str, Path]:
    layout = _IDX_LAYOUT[name][0]
    extra = [DEBIAN_FMNIST_DIR] if name == "fmnist" else []
    needed = ", ".join(f"{s}[.gz]" for s in IDX_FILES)
    return _locate(cfg, name, layout, _find_idx_files, needed, extra)


def load_idx_dataset(cfg: DataConfig, name: str) -> Dataset:
    """Load ``mnist`` or ``fmnist`` from IDX files found by the documented lookup (downloading only if allowed)."""
    num_classes = _IDX_LAYOUT[name][1]
    files = _locate_idx(cfg, name)

    def build() -> dict[str, torch.Tensor]:
        x_train, y_train = _read_idx_split(files, "train", num_classes)
        x_test, y_test = _read_idx_split(files, "t10k", num_classes)
        return {"x_train": _standardise(x_train, 255.0, name), "y_train": _labels(y_train),
                "x_test": _standardise(x_test, 255.0, name), "y_test": _labels(y_test)}

    arrays = _cached_arrays(cfg, name, [files[s] for s in IDX_FILES], build)
    return Dataset(name=name, num_classes=num_classes, **arrays,
                   class_names=FMNIST_CLASSES if name == "fmnist" else [str(i) for i in range(10)])


# -------------------------------------------------------------------------------------------------------- CIFAR


def _cifar_files(d: Path, files: tuple[str, ...]) -> Path | None:
    return d if all((d / f).is_file() for f in files) else None


def _locate_cifar(cfg: DataConfig, name: str) -> Path:
    layout, train_files, test_file, meta_file = _CIFAR_LAYOUT[name][:4]
    needed_files = (*train_files, test_file, meta_file)
    return _locate(cfg, name, layout, lambda p: _cifar_files(p, needed_files), ", ".join(needed_files))


def load_cifar(cfg: DataConfig, name: str) -> Dataset:
    """Load ``cifar10`` or ``cifar100`` from the torchvision-unpacked pickle batches (downloading only if allowed)."""
    _, train_files, test_file, meta_file, label_key, names_key, num_classes = _CIFAR_LAYOUT[name]
    d = _locate_cifar(cfg, name)

    def build() -> dict[str, torch.Tensor]:
        x_train, y_train = read_cifar_batches(d, train_files, label_key)
        x_test, y_test = read_cifar_batches(d, [test_file], label_key)
        for path, y in ((d / train_files[0], y_train), (d / test_file, y_test)):
            if len(y) and (y.min() < 0 or y.max() >= num_classes):
                raise DataFormatError(f"{path}: labels outside 0..{num_classes - 1}")
        return {"x_train": _standardise(x_train, 255.0, name), "y_train": _labels(y_train),
                "x_test": _standardise(x_test, 255.0, name), "y_test": _labels(y_test)}

    arrays = _cached_arrays(cfg, name, [d / f for f in (*train_files, test_file)], build)
    class_names = [str(c) for c in read_pickle(d / meta_file).get(names_key, [])] or None
    return Dataset(name=name, num_classes=num_classes, **arrays, class_names=class_names)


def locate(cfg: DataConfig, name: str) -> Path:
    """The directory :func:`~flplat.data.datasets.load_dataset` would read ``name``'s files from (``mnist``,
    ``fmnist``, ``cifar10``, ``cifar100``), found by the documented lookup without decoding anything (downloading
    only if ``cfg.download``); :class:`DataUnavailableError` (one line, every directory looked in) when absent.
    The test suite's ``real_data`` marker asks it whether a test that needs the real files can run."""
    if name in _IDX_LAYOUT:
        return _locate_idx(cfg, name)[IDX_FILES[0]].parent
    if name in _CIFAR_LAYOUT:
        return _locate_cifar(cfg, name)
    raise ConfigError(f"data.name={name!r} has no files to locate here; allowed: "
                      f"{', '.join([*_IDX_LAYOUT, *_CIFAR_LAYOUT])}")
