"""LEAF's JSON (Caldas et al. 2019) and the FEMNIST loader (DA-PFL Table III).

LEAF writes each split as JSON files ``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...],
"y": [...]}}}``: ``data/train/*.json`` + ``data/test/*.json`` after its split step, or ``data/all_data/*.json``
(``all_data_0.json``, ...) before it. :func:`read_leaf_dir` reads either (the split directories win; without them
``all_data`` is the pool and there is no official test set), from the directory itself or its ``data/``.

FEMNIST: ``x`` is 784 floats (a 28x28 image, row-major, LEAF's values as they are: 1.0 is the white background)
and ``y`` the class 0..61 (0-9 digits, 10-35 ``A``-``Z``, 36-61 ``a``-``z``). The writer becomes the natural client
(``client_ids``, the same integer in both splits). DA-PFL §V-A: "Following the previous work [34], we select 10
lowercase letters as the client dataset"; the paper does not name them, so ``data.femnist.classes`` keeps
``a``-``j`` by default (relabelled 0..9 in the listed order); an empty list keeps all 62 classes. ``x`` is float32
``(N, 1, 28, 28)``, not standardised.
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flplat.config import DataConfig
from flplat.data.containers import Dataset
from flplat.data.formats import DataFormatError
from flplat.data.sources import find_data
from flplat.errors import ConfigError

FEMNIST_CHARS = string.digits + string.ascii_uppercase + string.ascii_lowercase  # LEAF's class order (62)
FEMNIST_WHERE = "LEAF's femnist (github.com/TalwalkarLab/leaf: data/femnist/preprocess.sh writes data/all_data/*.json)"


def read_leaf_json(path: Path) -> list[tuple[str, Any, Any]]:
    """(user, x, y) for every sample of one LEAF JSON file, users in the file's order."""
    try:
        with open(path, encoding="utf-8") as fh:
            obj = json.load(fh)
    except (OSError, ValueError) as e:
        raise DataFormatError(f"cannot read LEAF JSON {path}: {e}") from None
    if not isinstance(obj, dict) or not {"users", "user_data"} <= set(obj):
        raise DataFormatError(f"{path}: not LEAF JSON (need 'users' and 'user_data')")
    rows = []
    for user in obj["users"]:
        data = obj["user_data"].get(user)
        if not isinstance(data, dict) or len(data.get("x", [])) != len(data.get("y", [])):
            raise DataFormatError(f"{path}: user {user!r} has no 'x'/'y' of equal length")
        rows += [(str(user), x, y) for x, y in zip(data["x"], data["y"])]
    return rows


def _split_files(d: Path) -> dict[str, list[Path]] | None:
    train, test = sorted((d / "train").glob("*.json")), sorted((d / "test").glob("*.json"))
    if train and test:
        return {"train": train, "test": test}
    pool = sorted((d / "all_data").glob("*.json"))
    return {"train": pool, "test": []} if pool else None


def read_leaf_dir(d: Path, subdirs: tuple[str, ...] = ("data",)) -> dict[str, Any] | None:
    """``{"train": {"rows": [...]}, "test": {"rows": [...]} | None, "path": dir}`` of the first of ``d`` and
    ``d/<subdir>`` holding LEAF's split directories or ``all_data``; None when neither does."""
    for base in (d, *(d / s for s in subdirs)):
        files = _split_files(base)
        if files is None:
            continue
        train = {"rows": [r for f in files["train"] for r in read_leaf_json(f)]}
        test = {"rows": [r for f in files["test"] for r in read_leaf_json(f)]} if files["test"] else None
        return {"train": train, "test": test, "path": base}
    return None


def _femnist_arrays(rows: list, keep: dict[int, int], path: Path):
    users, xs, ys = [], [], []
    for user, x, y in rows:
        if not isinstance(y, int) or not 0 <= y < 62:
            raise DataFormatError(f"{path}: FEMNIST labels are integers 0..61, got {y!r}")
        if y not in keep:
            continue
        if len(x) != 784:
            raise DataFormatError(f"{path}: a FEMNIST sample has 784 pixel values, got {len(x)}")
        users.append(user)
        xs.append(x)
        ys.append(keep[y])
    x = torch.from_numpy(np.asarray(xs, dtype=np.float32).reshape(-1, 1, 28, 28))
    return users, x, torch.as_tensor(np.asarray(ys, dtype=np.int64))


def load_femnist(cfg: DataConfig) -> Dataset:
    chars = list(cfg.femnist.classes) or list(FEMNIST_CHARS)
    bad = [c for c in chars if c not in FEMNIST_CHARS]
    if bad:
        raise ConfigError(f"data.femnist.classes={chars!r} is not valid; allowed: characters of 0-9, A-Z, a-z")
    keep = {FEMNIST_CHARS.index(c): i for i, c in enumerate(chars)}
    found = find_data(cfg, "femnist", "femnist", lambda d: read_leaf_dir(d, ("data",)),
                      "LEAF train/*.json + test/*.json or all_data/*.json", FEMNIST_WHERE)
    u_tr, x_tr, y_tr = _femnist_arrays(found["train"]["rows"], keep, found["path"])
    ds = Dataset(name="femnist", x_train=x_tr, y_train=y_tr, num_classes=len(chars), class_names=chars)
    u_te: list[str] = []
    if found["test"] is not None:
        u_te, ds.x_test, ds.y_test = _femnist_arrays(found["test"]["rows"], keep, found["path"])
    ids = {u: i for i, u in enumerate(sorted(set(u_tr) | set(u_te)))}
    ds.client_ids = np.asarray([ids[u] for u in u_tr], dtype=np.int64)
    if found["test"] is not None:
        ds.client_ids_test = np.asarray([ids[u] for u in u_te], dtype=np.int64)
    return ds
