"""LEAF's JSON (Caldas et al. 2019) and the FEMNIST loader (DA-PFL Table III).

LEAF writes each split as JSON files ``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...],
"y": [...]}}}``: ``data/train/*.json`` + ``data/test/*.json`` after its split step, or ``data/all_data/*.json``
(``all_data_0.json``, ...) before it. :func:`find_leaf_files` finds either (the split directories win; without them
``all_data`` is the pool and there is no official test set), in the directory itself or its ``data/``. LEAF's
``-t sample`` split cuts each user's samples (the test users are training users); ``-t user`` puts whole users in
train or test (``partition.test=users``: :mod:`flplat.data.group_partitions`).

FEMNIST: ``x`` is 784 floats (a 28x28 image, row-major, LEAF's values as they are: 1.0 is the white background)
and ``y`` the class 0..61 (0-9 digits, 10-35 ``A``-``Z``, 36-61 ``a``-``z``). The writer becomes the natural client
(``client_ids``, the same integer in both splits). DA-PFL §V-A: "Following the previous work [34], we select 10
lowercase letters as the client dataset"; the paper does not name them, so ``data.classes`` keeps
``a``-``j`` by default (relabelled 0..9 in the listed order); an empty list keeps all 62 classes. ``x`` is float32
``(N, 1, 28, 28)``, not standardised.

Memory: LEAF's FEMNIST is 805,263 samples; held as Python lists (784 float objects each) they took ~33 KiB per
sample, ~27 GiB in all, before the unused classes were dropped. Each file (LEAF writes ~100 writers per file) is
now parsed on its own, its pixels through one shared float object per distinct number (:class:`_FloatCache`),
filtered to the kept classes into float32 arrays at once and dropped; the per-file arrays are then copied into the
result one by one and freed. The peak is about the result (3 KiB per kept sample) plus one parsed file: 3.5 GiB
for all 62 classes of a paper-size set, 1.6 GiB for ``a``-``j`` (README, "Data"; tools/generators/make_leaf_femnist.py).
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flplat.data.containers import Dataset
from flplat.data.formats import DataFormatError
from flplat.data.registry import register_dataset
from flplat.data.sources import find_data
from flplat.errors import ConfigError, check_range

FEMNIST_CHARS = string.digits + string.ascii_uppercase + string.ascii_lowercase  # LEAF's class order (62)
FEMNIST_WHERE = "LEAF's femnist (github.com/TalwalkarLab/leaf: data/femnist/preprocess.sh writes data/all_data/*.json)"


@dataclass
class FEMNISTConfig:
    """``femnist`` (LEAF's JSON)."""

    classes: list[str] = field(default_factory=lambda: list("abcdefghij"))  # characters kept (empty: all 62)

    def check(self) -> None:
        chars = list(self.classes)
        check_range(len(set(chars)) == len(chars) and all(len(c) == 1 and c in FEMNIST_CHARS for c in chars),
                    "data.classes", chars, "distinct characters of 0-9, A-Z, a-z (empty: all 62)")


class _FloatCache(dict):
    """``json.load``'s ``parse_float``: one float object per distinct number text (LEAF's pixels are ``k / 255``: at
    most 256 of them), so a parsed image is 784 pointers to shared floats, not 784 float objects (32 bytes each);
    a file of arbitrary numbers keeps at most ``LIMIT`` of them."""

    LIMIT = 65536

    def __missing__(self, text: str) -> float:
        value = float(text)
        if len(self) < self.LIMIT:
            self[text] = value
        return value


def _leaf_object(path: Path, numbers: bool = False) -> dict:
    """One LEAF JSON file, checked to hold ``users`` and ``user_data``; ``numbers``: floats parsed through a
    :class:`_FloatCache` (FEMNIST's pixels)."""
    try:
        with open(path, encoding="utf-8") as fh:
            obj = json.load(fh, parse_float=_FloatCache().__getitem__) if numbers else json.load(fh)
    except (OSError, ValueError) as e:
        raise DataFormatError(f"cannot read LEAF JSON {path}: {e}") from None
    if not isinstance(obj, dict) or not {"users", "user_data"} <= set(obj):
        raise DataFormatError(f"{path}: not LEAF JSON (need 'users' and 'user_data')")
    return obj


def _user_data(obj: dict, user: Any, path: Path) -> dict:
    data = obj["user_data"].get(user)
    if not isinstance(data, dict) or len(data.get("x", [])) != len(data.get("y", [])):
        raise DataFormatError(f"{path}: user {user!r} has no 'x'/'y' of equal length")
    return data


def read_leaf_json(path: Path) -> list[tuple[str, Any, Any]]:
    """(user, x, y) for every sample of one LEAF JSON file, users in the file's order."""
    obj = _leaf_object(path)
    rows = []
    for user in obj["users"]:
        data = _user_data(obj, user, path)
        rows += [(str(user), x, y) for x, y in zip(data["x"], data["y"])]
    return rows


def _split_files(d: Path) -> dict[str, list[Path]] | None:
    train, test = sorted((d / "train").glob("*.json")), sorted((d / "test").glob("*.json"))
    if train and test:
        return {"train": train, "test": test}
    pool = sorted((d / "all_data").glob("*.json"))
    return {"train": pool, "test": []} if pool else None


def find_leaf_files(d: Path, subdirs: tuple[str, ...] = ("data",)) -> dict[str, Any] | None:
    """``{"train": [files], "test": [files] (empty: no official test set), "path": dir}`` of the first of ``d`` and
    ``d/<subdir>`` holding LEAF's split directories or ``all_data``; None when neither does."""
    for base in (d, *(d / s for s in subdirs)):
        files = _split_files(base)
        if files is not None:
            return {**files, "path": base}
    return None


def read_leaf_dir(d: Path, subdirs: tuple[str, ...] = ("data",)) -> dict[str, Any] | None:
    """``{"train": {"rows": [...]}, "test": {"rows": [...]} | None, "path": dir}`` of the LEAF files
    :func:`find_leaf_files` finds (every sample as Python objects: Sent140's tweets); None when there are none."""
    files = find_leaf_files(d, subdirs)
    if files is None:
        return None
    train = {"rows": [r for f in files["train"] for r in read_leaf_json(f)]}
    test = {"rows": [r for f in files["test"] for r in read_leaf_json(f)]} if files["test"] else None
    return {"train": train, "test": test, "path": files["path"]}


def _femnist_file(path: Path, keep: dict[int, int]) -> tuple[list[str], list[int], np.ndarray, np.ndarray]:
    """One LEAF FEMNIST file filtered to the ``keep`` classes at once: its writers with kept samples, how many each
    has, x float32 ``(n, 784)`` and y (relabelled) int64; the parsed JSON is dropped on return."""
    obj = _leaf_object(path, numbers=True)
    users, counts, xs, ys = [], [], [], []
    for user in obj["users"]:
        data = _user_data(obj, user, path)
        labels = data["y"]
        for y in labels:
            if not isinstance(y, int) or not 0 <= y < 62:
                raise DataFormatError(f"{path}: FEMNIST labels are integers 0..61, got {y!r}")
        idx = [i for i, y in enumerate(labels) if y in keep]
        if not idx:
            continue
        pixels = [data["x"][i] for i in idx]
        short = next((x for x in pixels if not isinstance(x, list) or len(x) != 784), None)
        if short is not None:
            raise DataFormatError(f"{path}: a FEMNIST sample has 784 pixel values, got "
                                  f"{len(short) if isinstance(short, list) else repr(short)[:40]}")
        try:
            xs.append(np.asarray(pixels, dtype=np.float32))
        except (TypeError, ValueError) as e:
            raise DataFormatError(f"{path}: user {user!r}: FEMNIST pixel values are numbers ({e})") from None
        ys.append(np.asarray([keep[labels[i]] for i in idx], dtype=np.int64))
        users.append(str(user))
        counts.append(len(idx))
    empty = (np.empty((0, 784), np.float32), np.empty(0, np.int64))
    return users, counts, np.concatenate(xs) if xs else empty[0], np.concatenate(ys) if ys else empty[1]


def _femnist_arrays(files: list[Path], keep: dict[int, int]) -> tuple[list[str], list[int], torch.Tensor,
                                                                          torch.Tensor]:
    """The kept samples of ``files`` in file, writer and sample order: x float32 ``(N, 1, 28, 28)``, y int64, and
    the writers with their sample counts. Each file is filtered as it is parsed; the per-file arrays are copied into
    the result one by one and freed, so the peak is about the result plus one parsed file (README, "Data")."""
    users: list[str] = []
    counts: list[int] = []
    chunks: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    for path in files:
        u, c, x, y = _femnist_file(path, keep)
        users += u
        counts += c
        chunks.append(x)
        labels.append(y)
    out = np.empty((sum(len(x) for x in chunks), 1, 28, 28), dtype=np.float32)
    at = 0
    chunks.reverse()
    while chunks:
        x = chunks.pop()
        out[at:at + len(x)] = x.reshape(-1, 1, 28, 28)
        at += len(x)
        del x
    return users, counts, torch.from_numpy(out), torch.from_numpy(np.concatenate(labels))


@register_dataset("femnist", FEMNISTConfig)
def load_femnist(cfg: Any, seed: int = 0) -> Dataset:
    """FEMNIST from LEAF's JSON: x (N, 1, 28, 28), writers as natural clients, 10 letters by default (DA-PFL)."""
    chars = list(cfg.classes) or list(FEMNIST_CHARS)
    bad = [c for c in chars if c not in FEMNIST_CHARS]
    if bad:
        raise ConfigError(f"data.classes={chars!r} is not valid; allowed: characters of 0-9, A-Z, a-z")
    keep = {FEMNIST_CHARS.index(c): i for i, c in enumerate(chars)}
    found = find_data(cfg, "femnist", "femnist", lambda d: find_leaf_files(d, ("data",)),
                      "LEAF train/*.json + test/*.json or all_data/*.json", FEMNIST_WHERE)
    u_tr, n_tr, x_tr, y_tr = _femnist_arrays(found["train"], keep)
    ds = Dataset(name="femnist", x_train=x_tr, y_train=y_tr, num_classes=len(chars), class_names=chars)
    u_te: list[str] = []
    if found["test"]:
        u_te, n_te, ds.x_test, ds.y_test = _femnist_arrays(found["test"], keep)
    ids = {u: i for i, u in enumerate(sorted(set(u_tr) | set(u_te)))}
    ds.client_ids = np.repeat(np.asarray([ids[u] for u in u_tr], dtype=np.int64), n_tr)
    if found["test"]:
        ds.client_ids_test = np.repeat(np.asarray([ids[u] for u in u_te], dtype=np.int64), n_te)
    return ds
