"""Parsers for the on-disk formats the dataset loaders read: IDX (MNIST, Fashion-MNIST; gzip or raw) and the
python-pickle batches of CIFAR-10/100 (read with a restricted unpickler). Pure functions of a path."""

from __future__ import annotations

import gzip
import pickle
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from flplat.errors import ConfigError


class DataFormatError(ConfigError):
    """A dataset file exists but is not in the expected format; the message names the file."""


# IDX type byte -> big-endian numpy dtype
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def _read_bytes(path: Path) -> bytes:
    """File contents, gunzipped when the file is gzip-compressed (detected by its magic bytes)."""
    with open(path, "rb") as fh:
        head = fh.read(2)
    opener = gzip.open if head == b"\x1f\x8b" else open
    try:
        with opener(path, "rb") as fh:
            return fh.read()
    except (OSError, EOFError) as e:
        raise DataFormatError(f"cannot read {path}: {e}") from None


def read_idx(path: str | Path) -> np.ndarray:
    """Parse an IDX file (gzip or raw): magic ``00 00 <type> <ndim>``, ``ndim`` big-endian uint32 dims, then data.

    Returns an array in native byte order with the file's shape; raises :class:`DataFormatError` when the header or
    the payload size is wrong.
    """
    path = Path(path)
    raw = _read_bytes(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES or raw[3] == 0:
        raise DataFormatError(f"{path} is not an IDX file (bad magic number {raw[:4].hex() or 'empty'})")
    dtype, ndim = np.dtype(_IDX_DTYPES[raw[2]]), raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataFormatError(f"{path}: truncated IDX header")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(raw) - header != expected:
        raise DataFormatError(f"{path}: IDX dims {dims} need {expected} data bytes, file has {len(raw) - header}")
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims).astype(dtype.newbyteorder("="))


class _NumpyUnpickler(pickle.Unpickler):
    """Unpickler admitting only what CIFAR batches contain (dicts, lists, strings and numpy arrays)."""

    _ALLOWED = {
        ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),
        ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
        ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a CIFAR batch")
        if module.startswith("numpy.core.") and hasattr(np, "_core"):
            module = "numpy._core." + module[len("numpy.core."):]  # numpy >= 2 moved numpy.core
        return super().find_class(module, name)


def read_pickle(path: Path) -> dict[str, Any]:
    """A CIFAR pickle (written by Python 2: latin1 strings) as a dict with ``str`` keys."""
    try:
        with open(path, "rb") as fh:
            obj = _NumpyUnpickler(fh, encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as e:
        raise DataFormatError(f"cannot read CIFAR pickle {path}: {e}") from None
    if not isinstance(obj, dict):
        raise DataFormatError(f"{path}: expected a pickled dict, got {type(obj).__name__}")
    return {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in obj.items()}


def read_cifar_batches(d: Path, names: Iterable[str], label_key: str) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for name in names:
        batch = read_pickle(d / name)
        if "data" not in batch or label_key not in batch:
            raise DataFormatError(f"{d / name}: missing 'data' or {label_key!r}")
        data = np.asarray(batch["data"], dtype=np.uint8)
        if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or len(data) != len(batch[label_key]):
            raise DataFormatError(f"{d / name}: expected (N, 3072) uint8 data with N labels, got {data.shape}")
        xs.append(data.reshape(-1, 3, 32, 32))
        ys.append(np.asarray(batch[label_key], dtype=np.int64))
    return np.concatenate(xs), np.concatenate(ys)
