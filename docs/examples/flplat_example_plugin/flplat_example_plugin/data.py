"""``blobs_csv``: a classification table read from a CSV file with a header row, feature columns and a ``label``
column (integer class ids 0..C-1).

The file is ``data.file`` (default ``blobs.csv``: the dataset's own key, the field of its Config) in ``data.root``
when that is set, else the one shipped with this package (600 rows, 4 features, 3 classes; ``python -m
flplat_example_plugin.make_csv`` wrote it). The last 20 % of a seeded permutation is the official test set; features
are standardised with the training rows' mean and standard deviation.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from flplat.api import ConfigError, Dataset, check_range, register_dataset

FILE = "blobs.csv"
LABEL = "label"


@dataclass
class BlobsConfig:
    file: str = FILE  # data.file: the CSV's name in data.root

    def check(self) -> None:
        check_range(self.file.endswith(".csv"), "data.file", self.file, "the name of a .csv file")


def read_table(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(features float32 (N, D), labels int64 (N,)) of a CSV with a ``label`` column; one-line errors naming the
    file and what is wrong."""
    if not path.is_file():
        raise ConfigError(f"data.root / data.file: {path} does not exist; allowed: a directory holding the file")
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    if not rows or LABEL not in rows[0]:
        raise ConfigError(f"{path}: no {LABEL!r} column in the header {rows[0] if rows else []}")
    j = rows[0].index(LABEL)
    try:
        table = np.array([[float(v) for v in r] for r in rows[1:] if r], dtype=np.float64)
    except ValueError as e:
        raise ConfigError(f"{path}: a value is not a number ({e})") from None
    y = table[:, j].astype(np.int64)
    return np.delete(table, j, axis=1).astype(np.float32), y


@register_dataset("blobs_csv", BlobsConfig)
def load(cfg, seed: int) -> Dataset:
    path = Path(cfg.root) / cfg.file if cfg.root else Path(__file__).with_name(cfg.file)
    x, y = read_table(path)
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = len(y) // 5
    train, test = order[n_test:], order[:n_test]
    mean, std = x[train].mean(axis=0), x[train].std(axis=0) + 1e-8
    x = (x - mean) / std
    return Dataset(name="blobs_csv", x_train=torch.from_numpy(x[train]), y_train=torch.from_numpy(y[train]),
                   num_classes=int(y.max()) + 1, x_test=torch.from_numpy(x[test]), y_test=torch.from_numpy(y[test]))
