"""Partition protocols (iid, dirichlet, similarity), local splits and build_federation."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from flplat.data.containers import Dataset
from flplat.data.partitions import (
    PARTITIONS,
    InfeasiblePartitionError,
    build_federation,
    partition,
    split_client,
)
from flplat.data.registry import partition_config
from flplat.errors import ConfigError
from flplat.metrics.noniid import wpsi


def balanced(num_classes: int = 10, per_class: int = 100) -> np.ndarray:
    return np.repeat(np.arange(num_classes), per_class)


def counts_of(labels: np.ndarray, parts: list[np.ndarray], num_classes: int = 10) -> np.ndarray:
    return np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts])


def assert_disjoint(parts: list[np.ndarray]) -> np.ndarray:
    for p in parts:
        assert p.dtype == np.int64
        assert np.all(np.diff(p) > 0)  # sorted, no duplicates
    allidx = np.concatenate(parts)
    assert len(np.unique(allidx)) == len(allidx)
    return allidx


#: each label protocol's own keys for the tests below (a key of another protocol is an error)
OWN = {"iid": {}, "dirichlet": {"alpha": 0.5}, "similarity": {"similarity": 0.5}}


def test_registry() -> None:
    assert set(PARTITIONS) == {"iid", "dirichlet", "similarity", "cafa", "pqfed", "shift", "natural", "metadata",
                               "mixed_shift", "drift"}


@pytest.mark.parametrize("name", ["iid", "dirichlet"])
def test_disjoint_and_cover(name: str) -> None:
    labels = balanced()
    cfg = partition_config(name=name, num_clients=7, **OWN[name])
    parts = partition(labels, cfg, np.random.default_rng(0))
    assert len(parts) == 7
    allidx = assert_disjoint(parts)
    np.testing.assert_array_equal(np.sort(allidx), np.arange(len(labels)))
    assert min(len(p) for p in parts) >= getattr(cfg, "min_samples", 1)


def test_iid_sizes_even() -> None:
    parts = partition(balanced(), partition_config(name="iid", num_clients=7), np.random.default_rng(0))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 1000


def test_similarity_sizes_equal_leftovers_dropped() -> None:
    labels = np.concatenate([balanced(10, 20), [0, 1, 2]])  # N = 203
    cfg = partition_config(name="similarity", num_clients=10, similarity=0.3)
    parts = partition(labels, cfg, np.random.default_rng(1))
    assert_disjoint(parts)
    # |iid| = round(0.3*203) = round(60.9) = 61 -> a = 6; |niid| = 142 -> b = 14; 20 each, 3 dropped
    assert [len(p) for p in parts] == [20] * 10
    assert len(np.concatenate(parts)) == 200


def test_similarity_extremes() -> None:
    labels = balanced(10, 100)
    # S = 1: everything IID -> every client sees every label in roughly equal shares
    parts = partition(labels, partition_config(name="similarity", num_clients=5, similarity=1.0),
                      np.random.default_rng(0))
    c = counts_of(labels, parts)
    assert (c > 0).all()
    assert np.abs(c / c.sum(1, keepdims=True) - 0.1).max() < 0.06
    assert wpsi(c) < 0.05
    # S = 0: sorted by label and dealt in contiguous blocks of <= 100 samples (K >= C) -> at most 2 labels
    for k in (10, 13, 20):
        parts = partition(labels, partition_config(name="similarity", num_clients=k, similarity=0.0),
                          np.random.default_rng(0))
        c = counts_of(labels, parts)
        assert ((c > 0).sum(axis=1) <= 2).all()
    parts = partition(labels, partition_config(name="similarity", num_clients=10, similarity=0.0),
                      np.random.default_rng(0))
    assert ((counts_of(labels, parts) > 0).sum(axis=1) == 1).all()


@pytest.mark.parametrize("name", ["iid", "dirichlet", "similarity"])
def test_determinism(name: str) -> None:
    labels = balanced()
    cfg = partition_config(name=name, num_clients=8, **OWN[name])
    a = partition(labels, cfg, np.random.default_rng(3))
    b = partition(labels, cfg, np.random.default_rng(3))
    c = partition(labels, cfg, np.random.default_rng(4))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_dirichlet_smaller_alpha_is_more_noniid() -> None:
    labels = balanced(10, 200)

    def mean_wpsi(alpha: float) -> float:
        cfg = partition_config(name="dirichlet", num_clients=10, alpha=alpha)
        return float(np.mean([wpsi(counts_of(labels, partition(labels, cfg, np.random.default_rng(s))))
                              for s in range(5)]))

    w_small, w_mid, w_large = mean_wpsi(0.1), mean_wpsi(1.0), mean_wpsi(100.0)
    assert w_small > w_mid > w_large
    assert w_large < 0.05


def test_dirichlet_infeasible_fails_fast() -> None:
    labels = balanced(10, 10)  # N = 100
    cfg = partition_config(name="dirichlet", num_clients=50, min_samples=10)
    t0 = time.perf_counter()
    with pytest.raises(InfeasiblePartitionError) as err:
        partition(labels, cfg, np.random.default_rng(0))
    assert time.perf_counter() - t0 < 1.0
    msg = str(err.value)
    assert "\n" not in msg
    for key in ("partition.alpha", "partition.num_clients", "partition.min_samples"):
        assert key in msg
    assert isinstance(err.value, ConfigError)


def test_dirichlet_infeasible_after_retries() -> None:
    # 2 classes x 100, 20 clients, min 10 each: only the exact 10-per-client split works; alpha tiny -> never
    labels = balanced(2, 100)
    cfg = partition_config(name="dirichlet", num_clients=20, alpha=0.01, min_samples=10, max_retries=50)
    t0 = time.perf_counter()
    with pytest.raises(InfeasiblePartitionError, match="51 draws"):
        partition(labels, cfg, np.random.default_rng(0))
    assert time.perf_counter() - t0 < 2.0


def test_dispatch_errors() -> None:
    names = "cafa, dirichlet, drift, iid, metadata, mixed_shift, natural, pqfed, shift, similarity"
    with pytest.raises(ConfigError, match=names):
        partition(balanced(), partition_config(name="nope"), np.random.default_rng(0))
    with pytest.raises(ConfigError, match="partition.num_clients"):
        partition(np.arange(5) % 2, partition_config(name="iid", num_clients=6), np.random.default_rng(0))


def test_split_client_fractions() -> None:
    rng = np.random.default_rng(0)
    idx = np.arange(100, 110)
    s = split_client(idx, partition_config(train_fraction=0.8, val_fraction=0.0, test_fraction=0.2), rng)
    assert (len(s.train), len(s.val), len(s.test)) == (8, 0, 2)
    np.testing.assert_array_equal(np.sort(s.all()), idx)
    s = split_client(idx, partition_config(train_fraction=0.7, val_fraction=0.1, test_fraction=0.2), rng)
    assert (len(s.train), len(s.val), len(s.test)) == (7, 1, 2)
    np.testing.assert_array_equal(np.sort(s.all()), idx)
    # round half up: 0.5 * 3 = 1.5 -> 2 test, train keeps the rest
    half = partition_config(train_fraction=0.5, val_fraction=0.0, test_fraction=0.5)
    s = split_client(np.arange(3), half, rng)
    assert (len(s.train), len(s.test)) == (1, 2)
    # train keeps at least one sample
    s = split_client(np.arange(1), half, rng)
    assert (len(s.train), len(s.val), len(s.test)) == (1, 0, 0)
    s = split_client(np.arange(0), half, rng)
    assert len(s.all()) == 0


def make_dataset(with_test: bool = True) -> Dataset:
    y = torch.as_tensor(balanced(5, 40))
    x = torch.randn(len(y), 3)
    return Dataset(
        name="toy", x_train=x, y_train=y, num_classes=5,
        x_test=torch.randn(7, 3) if with_test else None,
        y_test=torch.zeros(7, dtype=torch.int64) if with_test else None,
    )


def test_build_federation() -> None:
    ds = make_dataset()
    cfg = partition_config(name="dirichlet", num_clients=4, alpha=0.5, min_samples=5)
    fed = build_federation(ds, cfg, seed=11)
    assert fed.num_clients == 4 and fed.num_classes == 5
    assert fed.x is ds.x_train and fed.x_global_test is ds.x_test
    allidx = np.concatenate([c.all() for c in fed.clients])
    np.testing.assert_array_equal(np.sort(allidx), np.arange(200))
    assert fed.meta["partition"] == "dirichlet" and fed.meta["alpha"] == 0.5
    assert fed.label_counts("train").sum() + fed.label_counts("test").sum() == 200
    for c in fed.clients:
        n = len(c.all())
        assert len(c.test) == int(np.floor(0.2 * n + 0.5))
    same = build_federation(ds, cfg, seed=11)
    other = build_federation(ds, cfg, seed=12)
    assert all(np.array_equal(a.train, b.train) and np.array_equal(a.test, b.test)
               for a, b in zip(fed.clients, same.clients))
    assert not all(np.array_equal(a.train, b.train) for a, b in zip(fed.clients, other.clients))
    # the split stream is independent of the partition stream: other fractions, same client holdings
    cfg2 = partition_config(name="dirichlet", num_clients=4, alpha=0.5, min_samples=5,
                           train_fraction=0.5, val_fraction=0.25, test_fraction=0.25)
    fed2 = build_federation(ds, cfg2, seed=11)
    assert all(np.array_equal(np.sort(a.all()), np.sort(b.all())) for a, b in zip(fed.clients, fed2.clients))
    no_test = build_federation(make_dataset(with_test=False), partition_config(name="iid", num_clients=3), seed=0)
    assert no_test.x_global_test is None and no_test.y_global_test is None


def test_dirichlet_client_at_n_over_k_gets_no_further_classes() -> None:
    """FedArtML's cap (SEED-NOTES): classes are dealt in order, and a client already holding >= N/K samples gets
    probability 0 for the next classes, so before its last (highest) class every client holds < N/K samples. The
    cut points floor cumsum(p)·n, so the rounding remainder of a class (< K samples) always goes to the last client,
    even a full one (as in the classic cut code): that client is checked for that bound instead."""
    labels = balanced(10, 100)  # N = 1000, K = 10: cap 100
    cfg = partition_config(name="dirichlet", num_clients=10, alpha=0.3, min_samples=1)
    for seed in range(5):
        parts = partition(labels, cfg, np.random.default_rng(seed))
        for k, idx in enumerate(parts):
            held = np.bincount(labels[idx], minlength=10)
            full = np.flatnonzero(np.cumsum(held) >= 100)
            after = held[full[0] + 1:] if len(full) else held[:0]  # classes dealt once the client was full
            if k < 9:
                assert not after.any(), (seed, k, held)
            else:
                assert (after < 10).all(), (seed, k, held)
