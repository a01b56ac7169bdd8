"""Flux's shift generators (partition.name=shift): distributions, transforms, unseen clients, validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flplat.data.containers import Dataset
from flplat.data.partitions import build_federation
from flplat.data.shift_partition import Distribution, apply, colourise, distributions, rotate
from flplat.errors import ConfigError
from flplat.experiment import load_config


def shift_cfg(**extra):
    over = {"data.name": "digits", "partition.name": "shift", "partition.num_clients": 6,
            "partition.num_unseen_clients": 3, "partition.samples_per_client": 60, "partition.val_fraction": 0.2,
            "partition.train_fraction": 0.6, "partition.test_fraction": 0.2, "tracking.enabled": "false"}
    over.update(extra)
    return load_config(None, [f"{k}={v}" for k, v in over.items()]).partition


def toy_dataset(n: int = 720, classes: int = 4) -> Dataset:
    g = torch.Generator().manual_seed(0)
    x = torch.rand(n, 1, 6, 6, generator=g)
    y = torch.arange(n) % classes
    return Dataset("toy", x, y, classes)


@pytest.mark.parametrize("level,m", [(1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 9), (7, 12), (8, 15)])
def test_feature_levels_have_table9_pattern_counts(level, m):
    cands, which = distributions("feature", level, 10, 40, 5, np.random.default_rng(0))
    assert len(cands) == m  # rotations x colours of Table 9 (SEED-NOTES: M = 2, 3, 4, 5, 6, 9, 12, 15)
    assert which.min() >= 0 and which.max() < m
    if level == 3:
        assert sorted(c.rotation for c in cands) == [0.0, 90.0, 180.0, 270.0]
    if level >= 5:
        assert {c.colour for c in cands} == {"red", "blue", "green"}


def test_label_bank_sets_have_size_11_minus_level_and_equal_sets_share_an_id():
    cands, which = distributions("label", 8, 10, 30, 5, np.random.default_rng(1))
    assert all(len(c.classes) == 3 for c in cands) and len(cands) <= 5
    assert len(set(cands)) == len(cands)
    cands, _ = distributions("label", 2, 4, 30, 5, np.random.default_rng(1))  # C(4, 3) = 4 < 5 bank entries
    assert len(cands) <= 4 and all(len(c.classes) == 3 for c in cands)


def test_rotate_is_exact_for_right_angles_and_keeps_background_elsewhere():
    x = torch.arange(2 * 16, dtype=torch.float32).reshape(2, 1, 4, 4)
    assert torch.equal(rotate(x, 90), torch.rot90(x, 1, dims=(2, 3)))
    assert torch.equal(rotate(x, 360), x)
    img = torch.full((1, 1, 9, 9), -0.5)
    img[0, 0, 3:6, 3:6] = 2.0
    r = rotate(img, 45)
    assert r[0, 0, 0, 0] == pytest.approx(-0.5)  # a corner that rotates in from outside gets the background
    assert r[0, 0, 4, 4] == pytest.approx(2.0)  # the centre stays


def test_colourise_and_apply_hand_cases():
    x = torch.zeros(1, 1, 2, 2)
    c = colourise(x, "red", 3.0)
    assert c.shape == (1, 3, 2, 2) and torch.all(c[:, 0] == 3.0) and torch.all(c[:, 1:] == 0)
    y = torch.tensor([0, 1, 2, 3])
    xs = torch.arange(4 * 4, dtype=torch.float32).reshape(4, 1, 2, 2)
    _, y2 = apply(Distribution(label_map=((1, 2), (2, 1))), xs, y, 1.0, False)
    assert y2.tolist() == [0, 2, 1, 3]
    x3, y3 = apply(Distribution(class_rotation=((2, 90.0),)), xs, y, 1.0, False)
    assert torch.equal(y3, y)
    assert torch.equal(x3[2], torch.rot90(xs[2:3], 1, dims=(2, 3))[0]) and torch.equal(x3[[0, 1, 3]], xs[[0, 1, 3]])


@pytest.mark.parametrize("shift", ["feature", "label", "concept_yx", "concept_xy"])
def test_federation_has_unseen_clients_and_true_ids(shift):
    cfg = shift_cfg(**{"partition.type": shift, "partition.level": 6})
    ds = toy_dataset()
    fed = build_federation(ds, cfg, seed=3)
    assert fed.num_clients == 6 and len(fed.unseen) == 3 and fed.unseen_ids == [6, 7, 8]
    assert fed.num_samples("train").tolist() == [36] * 6  # 60 * 0.6: label shift resamples back to the size
    for q in fed.unseen_ids:
        assert len(fed.indices(q, "test")) == 60 and len(fed.indices(q, "train")) == 0
    true, unseen = fed.meta["distribution"], fed.meta["unseen_distribution"]
    assert len(true) == 6 and len(unseen) == 3 and set(unseen) <= set(true)  # unseen come from used distributions
    assert fed.meta["num_distributions"] == len(np.unique(true))
    assert fed.x_global_test is None
    assert ("test_phase" in fed.meta) == (shift == "concept_yx")
    if shift == "feature":  # level 6 is coloured: 3 channels
        assert fed.input_shape == (3, 6, 6)
    if shift == "label":
        sets = [eval(fed.meta["distributions"][d], {"Distribution": Distribution}).classes for d in true]
        for k, s in enumerate(sets):
            assert set(fed.y[fed.indices(k, "all")].tolist()) <= set(s)
    again = build_federation(ds, cfg, seed=3)
    assert torch.equal(fed.x, again.x) and torch.equal(fed.y, again.y)


def test_shift_config_errors():
    with pytest.raises(ConfigError, match="partition.type"):
        shift_cfg(**{"partition.type": "covariate"})
    with pytest.raises(ConfigError, match="partition.level"):
        shift_cfg(**{"partition.level": 9})
    with pytest.raises(ConfigError, match="partition.num_unseen_clients"):
        shift_cfg(**{"partition.num_unseen_clients": -1})
    tab = Dataset("tab", torch.zeros(50, 3), torch.zeros(50, dtype=torch.long), 2)
    with pytest.raises(ConfigError, match="image"):
        build_federation(tab, shift_cfg(), seed=0)
    with pytest.raises(ConfigError, match="samples_per_client"):
        cfg = shift_cfg(**{"partition.samples_per_client": 100, "partition.num_unseen_clients": 2})
        build_federation(toy_dataset(), cfg, seed=0)


@pytest.mark.parametrize("shift", ["concept_yx", "concept_xy"])
def test_concept_shift_pool_holds_exactly_level_classes(shift):
    """Table 9: the P(Y|X) swap pool and the P(X|Y) rotated-class set hold `level` classes (all clients share it)."""
    for level in range(1, 9):
        dists, which = distributions(shift, level, 10, 40, 5, np.random.default_rng(level))
        pools = {tuple(sorted(a for a, _ in (d.label_map or d.class_rotation))) for d in dists}
        assert len(pools) == 1 and len(next(iter(pools))) == level
        if shift == "concept_yx":  # every client permutes exactly the pool's labels among themselves
            assert all(sorted(b for _, b in d.label_map) == sorted(a for a, _ in d.label_map) for d in dists)


def test_train_copies_duplicate_each_training_clients_train_split_only():
    """App. F.2: local datasets are duplicated as the number of clients grows (indices repeated; the pool is kept)."""
    ds = toy_dataset()
    one = build_federation(ds, shift_cfg(**{"partition.type": "concept_xy", "partition.level": 2}), seed=3)
    cfg = shift_cfg(**{"partition.type": "concept_xy", "partition.level": 2, "partition.train_copies": 4})
    four = build_federation(ds, cfg, seed=3)
    assert torch.equal(one.x, four.x) and four.meta["train_copies"] == 4  # same pool, nothing copied
    assert four.num_samples("train").tolist() == [4 * 36] * 6
    for k in range(6):
        np.testing.assert_array_equal(four.indices(k, "train"), np.tile(one.indices(k, "train"), 4))
        for split in ("val", "test"):
            np.testing.assert_array_equal(four.indices(k, split), one.indices(k, split))
    for q in four.unseen_ids:
        np.testing.assert_array_equal(four.indices(q, "test"), one.indices(q, "test"))
    with pytest.raises(ConfigError, match="partition.train_copies"):
        load_config(None, ["partition.train_copies=2"])  # Dirichlet: only the shift partition duplicates
    with pytest.raises(ConfigError, match="partition.train_copies"):
        shift_cfg(**{"partition.train_copies": 0})
