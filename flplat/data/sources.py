"""Finding the files of the datasets that cannot be downloaded at run time (the papers' tabular, text, natural-client
and medical sets): the same documented lookup as the image sets (:func:`flplat.data.files._candidate_dirs`:
``data.root`` only when set, else ``$FLPLAT_DATA``, ``../shared/data/<layout>``, ``~/.cache/flplat/<layout>``, the
last two not under ``$FLPLAT_DATA_SEARCH=explicit``; in each, the directory itself or its ``<layout>``
sub-directory), and one error when nothing is found:
``<name> data not found: <where to get it>; need ...; looked in: ...``. ``data.download`` never fetches these.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from flplat.config import DataConfig
from flplat.data.files import ENV_VAR, DataUnavailableError, _cached_arrays, _candidate_dirs, looked_in
from flplat.data.formats import DataFormatError

__all__ = ["cached", "find_data", "load_image", "progress"]

log = logging.getLogger("flplat")


def find_data(cfg: DataConfig, name: str, layout: str, find: Callable[[Path], Any], needed: str, where: str) -> Any:
    """``find(d)`` for the first candidate directory where it is not None; else :class:`DataUnavailableError`
    (one line) naming ``where`` the files come from, what is needed and every directory looked in."""
    looked = _candidate_dirs(cfg, layout)
    for d in looked:
        if d.is_dir():
            found = find(d)
            if found is not None:
                return found
    fix = f"data.root={str(cfg.root)!r} holds none of them" if cfg.root else \
        f"set data.root=DIR or ${ENV_VAR}=DIR to a directory holding them"
    note = " (data.download does not fetch this dataset)" if cfg.download else ""
    raise DataUnavailableError(f"{name} data not found: {where}; need {needed}; looked in: "
                               f"{looked_in(looked)}; to fix: {fix}{note}")



def load_image(path: Path, size: int, mode: str) -> np.ndarray:
    """One image file as float32 (C, size, size) in [0, 1]: PIL, converted to ``mode`` (``L`` grey, ``RGB``) and
    resized bilinearly (with antialiasing, as torchvision's Resize on PIL images)."""
    from PIL import Image

    try:
        with Image.open(path) as img:
            arr = np.asarray(img.convert(mode).resize((size, size), Image.BILINEAR), dtype=np.float32)
    except OSError as e:
        raise DataFormatError(f"cannot read image {path}: {e}") from None
    arr = arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)
    return arr / np.float32(255.0)


def progress(items: Iterable, total: int, what: str, every: int = 10000) -> Iterator:
    """``items`` unchanged, with an INFO log line every ``every`` items (done / total, elapsed, time left) when
    there are more than ``every`` of them: reading 200,000 CheXpert images takes minutes."""
    start = time.monotonic()
    for i, item in enumerate(items, 1):
        yield item
        if total > every and (i % every == 0 or i == total):
            spent = time.monotonic() - start
            log.info("%s: %d/%d read, %.0fs elapsed, ~%.0fs left", what, i, total, spent, spent * (total - i) / i)


def cached(cfg: DataConfig, name: str, settings: Any, sources: list[Path],
           build: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """``build()``'s arrays through the decoded-data cache (:func:`flplat.data.files._cached_arrays`:
    ``data.cache_dir``, off with ``data.cache=false``), keyed by ``name``, the ``settings`` the arrays depend on
    (their ``repr``) and the SHA-256 of the ``sources`` files' contents."""
    import hashlib

    import torch

    key = f"{name}-{hashlib.sha256(repr(settings).encode()).hexdigest()[:12]}"
    arrays = _cached_arrays(cfg, key, sources,
                            lambda: {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in build().items()})
    return {k: v.numpy() for k, v in arrays.items()}
