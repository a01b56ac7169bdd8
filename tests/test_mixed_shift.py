"""``partition.name=mixed_shift`` (Flux App. F.3, Tables 56-58): two shifts planted together, the pair as the
distribution id. Checked on a tiny image set whose every image is unique, so that each client's transformed samples
can be traced back to the original ones by hand (an exact 90° rotation is ``torch.rot90``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flplat.cli import main
from flplat.data.containers import Dataset
from flplat.data.mixed_shift_partition import MIXES, MixedShiftConfig, combine, mixed_shift_partition, pairs
from flplat.data.partitions import build_federation
from flplat.data.registry import partition_config
from flplat.data.shift_partition import Distribution, distributions
from flplat.errors import ConfigError


def tiny(n: int = 400) -> Dataset:
    """``n`` unique 1x4x4 images (random values), labels ``i % 10``."""
    g = torch.Generator().manual_seed(0)
    return Dataset("tiny", torch.rand(n, 1, 4, 4, generator=g), torch.arange(n) % 10, 10)


def cfg(**keys):
    base = dict(name="mixed_shift", num_clients=6, num_unseen_clients=3, samples_per_client=40,
                train_fraction=0.5, val_fraction=0.25, test_fraction=0.25)
    return partition_config(**{**base, **keys})


def originals(ds: Dataset) -> dict[bytes, int]:
    """Every original image's bytes -> its row."""
    return {ds.x_train[i].numpy().tobytes(): i for i in range(len(ds.y_train))}


def dist_of(part, client: int) -> Distribution:
    """The planted distribution of a training (client < K) or unseen client, from the partition's meta (its repr)."""
    k = len(part.clients)
    i = int(part.distribution[client] if client < k else part.unseen_distribution[client - k])
    return eval(part.meta["distributions"][i], {"Distribution": Distribution})  # noqa: S307  (our own repr)


def test_feature_plus_label_pairs_ids_and_transformations_by_hand():
    """Level 3: P(X) = 4 rotations (0/90/180/270), P(Y) = class sets of 8 classes. A client's images are its original
    images of its set's classes rotated by its pattern's angle, labels unchanged; its id is a * M_b + b; the
    candidates are 4 x M_b; clients with equal ids hold the same pair."""
    ds = tiny()
    part = mixed_shift_partition(ds, cfg(type="feature+label", level=3), seed=7)
    meta = part.meta
    comp, ids = meta["component_distribution"], part.distribution
    m_b = meta["num_candidate_distributions"] // 4
    assert meta["num_candidate_distributions"] == 4 * m_b and 1 <= m_b <= 5
    assert ids.tolist() == (comp[:, 0] * m_b + comp[:, 1]).tolist()
    for i, j in ((i, j) for i in range(6) for j in range(6)):
        assert (ids[i] == ids[j]) == (dist_of(part, i) == dist_of(part, j))
    rows = originals(ds)
    for k, block in enumerate([*part.clients, *part.unseen]):
        d = dist_of(part, k)
        assert d.rotation == 90.0 * (int(ids[k] if k < 6 else part.unseen_distribution[k - 6]) // m_b)
        assert d.colour is None and d.classes is not None and len(d.classes) == 8
        turns = int(d.rotation // 90)
        for i in block.all():
            orig = rows[torch.rot90(part.x[i], -turns, dims=(1, 2)).numpy().tobytes()]
            assert int(part.y[i]) == int(ds.y_train[orig]) and int(ds.y_train[orig]) in d.classes
    assert set(part.unseen_distribution.tolist()) <= set(ids.tolist())  # unseen: pairs the training clients hold


def test_the_pairs_are_the_two_shifts_draws_in_turn():
    """Each component is drawn as the ``shift`` partition draws it, the first then the second from one generator;
    the unseen clients take pairs the training clients hold."""
    rng = np.random.default_rng(5)
    ca, wa = distributions("feature", 3, 10, 6, 5, rng)
    cb, wb = distributions("label", 3, 10, 6, 5, rng)
    dists, comp, ids, m = pairs("feature", "label", 3, 10, 6, 4, 5, np.random.default_rng(5))
    assert comp[:6, 0].tolist() == wa.tolist() and comp[:6, 1].tolist() == wb.tolist() and m == len(ca) * len(cb)
    assert [dists[int(i)] for i in ids[:6]] == [combine(ca[a], cb[b]) for a, b in zip(wa, wb)]
    assert len(ids) == 10 and set(ids[6:].tolist()) <= set(ids[:6].tolist())
    assert comp[6:].tolist() == [[int(i) // len(cb), int(i) % len(cb)] for i in ids[6:]]


def test_concept_yx_plus_label_relabels_after_keeping_the_set():
    """P(Y|X) + P(Y): images unchanged, a kept original label c (in the set) becomes perm[c]; a test phase exists."""
    ds = tiny()
    part = mixed_shift_partition(ds, cfg(type="concept_yx+label", level=4), seed=1)
    assert "test_phase" not in part.meta
    rows = originals(ds)
    for k, block in enumerate(part.clients):
        d = dist_of(part, k)
        lut = dict(d.label_map)
        assert len(lut) == 4 and sorted(lut) == sorted(lut.values())  # a permutation of a 4-class pool
        for i in block.all():
            c = int(ds.y_train[rows[part.x[i].numpy().tobytes()]])
            assert c in d.classes and int(part.y[i]) == lut.get(c, c)


def test_concept_xy_plus_label_rotates_the_pool_classes_only():
    ds = tiny()
    part = mixed_shift_partition(ds, cfg(type="label+concept_xy", level=3), seed=2)  # the other order: the same mix
    assert part.meta["shift_type"] == "concept_xy+label"
    rows = originals(ds)
    for k, block in enumerate(part.clients):
        d = dist_of(part, k)
        turns = {c: int(a // 90) for c, a in d.class_rotation}
        assert len(turns) == 3
        for i in block.all():
            c = int(part.y[i])
            orig = rows[torch.rot90(part.x[i], -turns.get(c, 0), dims=(1, 2)).numpy().tobytes()]
            assert int(ds.y_train[orig]) == c and c in d.classes


def test_pure_in_the_seed_and_disjoint():
    ds = tiny()
    a, b = (mixed_shift_partition(ds, cfg(type="feature+label", level=5), seed=3) for _ in range(2))
    assert torch.equal(a.x, b.x) and a.distribution.tolist() == b.distribution.tolist()
    assert a.x.shape[1] == 3  # level 5 colours every client's images (3 channels)
    c = mixed_shift_partition(ds, cfg(type="feature+label", level=5), seed=4)
    assert not (a.x.shape == c.x.shape and torch.equal(a.x, c.x))
    seen: set[int] = set()
    for block in [*a.clients, *a.unseen]:
        rows = set(block.all().tolist())
        assert not rows & seen
        seen |= rows
    fed = build_federation(ds, cfg(type="feature+label", level=5), 3)
    assert fed.meta["num_distributions"] == len(np.unique(a.distribution)) and fed.x_global_test is None


def test_combine_takes_each_components_fields():
    a, b = Distribution(rotation=90.0, colour="red"), Distribution(classes=(1, 2))
    assert combine(a, b) == Distribution(rotation=90.0, colour="red", classes=(1, 2))
    assert "feature+label" in MIXES and "concept_xy+label" in MIXES and "concept_yx+label" in MIXES


@pytest.mark.parametrize("bad", ["label+label", "feature", "feature+colour"])
def test_a_bad_type_names_the_key_and_the_mixtures(bad):
    with pytest.raises(ConfigError, match=r"partition\.type.*feature\+label"):
        MixedShiftConfig(type=bad).check()


def test_flplat_check_passes(capsys):
    assert main(["check", "--partition", "mixed_shift", "partition.type=feature+label", "partition.level=3",
                 "partition.num_unseen_clients=2"]) == 0
    out = capsys.readouterr().out
    assert out.count("PASS") == 6 and "FAIL" not in out
