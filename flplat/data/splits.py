"""What every partition protocol shares: label checks, the infeasibility error, running a label protocol and one
client's local splits.

Kept apart from the registry (:mod:`flplat.data.registry`) and the builder (:mod:`flplat.data.partitions`) so the
protocols that live in their own modules (:mod:`flplat.data.shift_partition`, :mod:`flplat.data.pqfed_partition`,
:mod:`flplat.data.group_partitions`) use them without importing either.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from flplat.data.containers import ClientSplit, Partition
from flplat.errors import ConfigError


class InfeasiblePartitionError(ConfigError):
    """The partition parameters cannot be satisfied by the data (e.g. too many clients for ``min_samples``)."""


def as_labels(labels: Any) -> np.ndarray:
    """Labels as a 1-D ``int64`` numpy array (from a tensor or array-like); raises on other shapes/dtypes."""
    if isinstance(labels, torch.Tensor):
        labels = labels.detach().cpu().numpy()
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must be a 1-D array, got shape {labels.shape}")
    if labels.size and not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be integers, got dtype {labels.dtype}")
    return labels.astype(np.int64, copy=False)


def run_label_protocol(fn: Callable, labels: np.ndarray, cfg: Any, rng: np.random.Generator) -> Partition:
    """``fn(labels, cfg, rng)`` (a list of index arrays, or a :class:`Partition` of them) as a Partition whose
    clients are sorted ``int64`` arrays; at least as many samples as clients."""
    k, n = int(cfg.num_clients), len(labels)
    if k > n:
        raise ConfigError(f"partition.num_clients={k} exceeds the {n} training samples; lower partition.num_clients")
    out = fn(labels, cfg, rng)
    part = out if isinstance(out, Partition) else Partition(clients=list(out))
    part.clients = [np.sort(np.asarray(p, dtype=np.int64)) for p in part.clients]
    return part


def _round_half_up(x: float) -> int:
    return math.floor(x + 0.5)


def split_client(indices: np.ndarray, cfg: Any, rng: np.random.Generator) -> ClientSplit:
    """Shuffle one client's indices and cut them into local train / val / test.

    ``|test| = round(test_fraction * n)`` and ``|val| = round(val_fraction * n)`` (half up); train gets the rest
    and keeps at least one sample when ``n >= 1`` (taken back from test, then from val). Each split is sorted.
    """
    idx = rng.permutation(np.asarray(indices, dtype=np.int64))
    n = len(idx)
    n_test = _round_half_up(float(cfg.test_fraction) * n)
    n_val = _round_half_up(float(cfg.val_fraction) * n)
    n_test, n_val = min(n_test, n), min(n_val, n - min(n_test, n))
    deficit = 1 - (n - n_test - n_val) if n >= 1 else 0
    if deficit > 0:
        take = min(deficit, n_test)
        n_test -= take
        n_val -= deficit - take
    n_train = n - n_test - n_val
    train, val, test = idx[:n_train], idx[n_train:n_train + n_val], idx[n_train + n_val:]
    return ClientSplit(train=np.sort(train), val=np.sort(val), test=np.sort(test))
