"""``partition.name=drift`` (Flux App. D.3, Table 6's dynamic setting): training clients whose distribution changes at
known rounds, and drifted test clients. The partition is checked by hand on a tiny image set of unique images (each
transformed sample traced back to its original); the switch in the engine by recording which rows each client trains
on in each round."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flplat.cli import main
from flplat.data.containers import ClientSplit, Dataset, Drift, Partition
from flplat.data.drift_partition import DriftConfig, drift_partition, schedule
from flplat.data.partitions import build_federation
from flplat.data.registry import PARTITIONS, NoConfig, PartitionSpec, partition_config
from flplat.data.shift_partition import Distribution
from flplat.engine import executor as executor_mod
from flplat.errors import ConfigError
from flplat.experiment import load_config, run


def tiny(n: int = 400) -> Dataset:
    g = torch.Generator().manual_seed(0)
    return Dataset("tiny", torch.rand(n, 1, 4, 4, generator=g), torch.arange(n) % 10, 10)


def cfg(**keys):
    base = dict(name="drift", num_clients=5, num_unseen_clients=5, samples_per_client=40, train_fraction=0.5,
                val_fraction=0.25, test_fraction=0.25)
    return partition_config(**{**base, **keys})


def bank_of(part) -> list[Distribution]:
    return [eval(r, {"Distribution": Distribution}) for r in part.meta["distributions"]]  # noqa: S307  (our repr)


def trace(part, block, rows: dict[bytes, int], dist: Distribution) -> list[list[int]]:
    """The original rows of a block's train / val / test samples, undoing ``dist``'s exact rotation."""
    turns = int(dist.rotation // 90)
    return [[rows[torch.rot90(part.x[i], -turns, dims=(1, 2)).numpy().tobytes()] for i in getattr(block, s)]
            for s in ("train", "val", "test")]


def test_each_stage_is_the_clients_same_rows_under_the_stages_distribution():
    """P(X) level 3 (bank: rotations 0/90/180/270), change points 3 and 6: three stages. Stage s of client k is its
    dealt rows rotated by the angle of its stage-s distribution, the same rows in every stage; the unseen client j
    holds other rows under a distribution training client j never had."""
    ds = tiny()
    part = drift_partition(ds, cfg(type="feature", level=3, change_rounds=[3, 6]), seed=11)
    drift, bank = part.drift, bank_of(part)
    assert [b.rotation for b in bank] == [0.0, 90.0, 180.0, 270.0]
    assert drift.rounds == [3, 6] and len(drift.stages) == 3 and drift.distribution.shape == (3, 5)
    assert [drift.stage(r) for r in (1, 2, 3, 5, 6, 10)] == [0, 0, 1, 1, 2, 2]
    assert part.clients is drift.stages[0] and part.distribution.tolist() == drift.distribution[0].tolist()
    rows = {ds.x_train[i].numpy().tobytes(): i for i in range(len(ds.y_train))}
    training_rows = set()
    for k in range(5):
        traced = [trace(part, drift.stages[s][k], rows, bank[int(drift.distribution[s, k])]) for s in range(3)]
        assert traced[0] == traced[1] == traced[2] and [len(x) for x in traced[0]] == [20, 10, 10]
        training_rows |= {r for split in traced[0] for r in split}
    for j, block in enumerate(part.unseen):
        own = set(drift.distribution[:, j % 5].tolist())
        d = int(part.unseen_distribution[j])
        last = set(drift.distribution[-1].tolist())
        assert d not in own and (d in last or not last - own)  # new to its client, held by someone at the end if any
        assert not {r for split in trace(part, block, rows, bank[d]) for r in split} & training_rows
        assert len(block.train) == len(block.val) == 0 and len(block.test) == 40
    changed = [k for k in range(5) if len(set(drift.distribution[:, k].tolist())) > 1]
    assert part.meta["drifted_clients"].tolist() == changed and part.meta["unseen_of"].tolist() == [0, 1, 2, 3, 4]


def test_a_label_drift_keeps_every_splits_size():
    ds = tiny()
    part = drift_partition(ds, cfg(type="label", level=5), seed=3)
    bank = bank_of(part)
    for k in range(5):
        sizes = [[len(getattr(st[k], s)) for s in ("train", "val", "test")] for st in part.drift.stages]
        assert sizes[0] == sizes[1] == [20, 10, 10]
        for s, st in enumerate(part.drift.stages):
            keep = bank[int(part.drift.distribution[s, k])].classes
            assert set(part.y[st[k].all()].tolist()) <= set(keep)


def test_schedule_by_hand():
    """Stage draws uniform over the bank; the test distribution avoids the client's own, and falls back to the rest
    of the bank when the last stage holds nothing else."""
    for seed in range(5):
        ids, test = schedule(4, 3, 6, 2, True, np.random.default_rng(seed))
        assert ids.shape == (2, 3) and all(test[j] not in ids[:, j % 3] for j in range(6))
        ids, test = schedule(3, 1, 1, 1, True, np.random.default_rng(seed))  # one client: the last stage is its own
        assert test[0] != ids[0, 0]
        ids, test = schedule(2, 1, 1, 2, True, np.random.default_rng(seed))  # a bank of 2
        assert test[0] != ids[-1, 0] and (test[0] not in ids[:, 0] or set(ids[:, 0].tolist()) == {0, 1})
    ids, test = schedule(4, 6, 6, 2, False, np.random.default_rng(1))  # no test drift: the last stage's ids
    assert set(test.tolist()) <= set(ids[-1].tolist())


def test_enter_round_puts_the_stage_in_force():
    fed = build_federation(tiny(), cfg(type="feature", level=3, change_rounds=[3]), 5)
    drift = fed.drift
    assert fed.meta["num_distributions"] == len(np.unique(drift.distribution)) and fed.meta["drift_rounds"] == [3]
    assert not fed.enter_round(1) and not fed.enter_round(2) and fed.clients == drift.stages[0]
    assert fed.enter_round(3) and fed.stage == 1 and fed.clients == drift.stages[1]
    assert fed.meta["distribution"].tolist() == drift.distribution[1].tolist()
    assert not fed.enter_round(4)
    assert fed.enter_round(1) and fed.meta["distribution"].tolist() == drift.distribution[0].tolist()


def _record(monkeypatch) -> dict[int, dict[int, np.ndarray]]:
    """round -> client -> the rows it trained on (the plan's own rows, else its train split then)."""
    seen: dict[int, dict[int, np.ndarray]] = {}
    train = executor_mod.LocalExecutor.train

    def recording(self, plans, round, groups=None):
        now = seen.setdefault(round, {})
        for c, p in plans:
            rows = p.indices if p.indices is not None else self.data.indices(c, "train")
            now[c] = np.concatenate([now.get(c, np.empty(0, np.int64)), rows])
        return train(self, plans, round, groups)

    monkeypatch.setattr(executor_mod.LocalExecutor, "train", recording)
    return seen


def test_evaluation_scores_the_stage_in_force(monkeypatch):
    """The batched evaluation's cached rows follow the change: after round 2 every client is scored on its stage-1
    test split (the executor drops its row cache when the stage changes)."""
    cfg_, fed = drift_run("fedavg")
    scored: list[tuple[int, bool]] = []
    groups = executor_mod.LocalExecutor.evaluate_groups

    def recording(self, gs, split="test"):
        d = self.data
        want = np.concatenate([d.indices(k, split) for k in range(d.num_clients + len(d.unseen))])
        scored.append((d.stage, np.array_equal(self.split_rows(split).rows, want)))
        return groups(self, gs, split)

    monkeypatch.setattr(executor_mod.LocalExecutor, "evaluate_groups", recording)
    run(cfg_, progress=False)
    assert {s for s, _ in scored} == {0, 1} and all(ok for _, ok in scored)


def drift_run(algorithm: str, **extra):
    over = {"data.name": "digits", "partition.name": "drift", "partition.type": "feature", "partition.level": 3,
            "partition.num_clients": 4, "partition.num_unseen_clients": 4, "partition.samples_per_client": 40,
            "partition.change_rounds": "[2]", "model.name": "mlp", "model.hidden": "[16]",
            "algorithm.name": algorithm, "federation.rounds": 3, "federation.client_fraction": 1.0,
            "federation.local_epochs": 1, "federation.batch_size": 16, "federation.eval_every": 1,
            "fabric.num_threads": 1, "tracking.enabled": "false", **extra}
    cfg_ = load_config(None, [f"{k}={v}" for k, v in over.items()])
    fed = build_federation(*_dataset_and_partition(cfg_))
    return cfg_, fed


def _dataset_and_partition(cfg_):
    from flplat.data.datasets import load_dataset
    from flplat.protocol.seeding import derive_seed

    return load_dataset(cfg_.data, derive_seed(cfg_.seed, "data")), cfg_.partition, derive_seed(cfg_.seed, "partition")


@pytest.mark.parametrize("algorithm", ["fedavg", "fedem"])
def test_clients_train_on_their_stage_from_the_change_round(monkeypatch, algorithm):
    """Round 1 trains on stage 0's rows, rounds 2 and 3 on stage 1's (the partition's change point: round 2). FedEM
    takes its rows from the federation info: those follow the change too. The per-round true M is the stage's."""
    cfg_, fed = drift_run(algorithm)
    seen = _record(monkeypatch)
    summary = run(cfg_, progress=False)[0]
    st = fed.drift.stages
    for r, stage in ((1, 0), (2, 1), (3, 1)):
        for c, rows in seen[r].items():
            assert set(rows.astype(int).tolist()) <= set(st[stage][c].train.tolist())
            assert not set(rows.astype(int).tolist()) & set(st[1 - stage][c].train.tolist())
    want = [len(np.unique(fed.drift.distribution[s])) for s in (0, 1, 1)]
    assert [h["num_distributions"] for h in summary.history] == want
    assert "test_phase_accuracy" in summary.metrics and "known_association_accuracy" in summary.metrics


def test_bad_change_rounds_name_the_key():
    for bad in ([], [1], [5, 3], [4, 4]):
        with pytest.raises(ConfigError, match=r"partition\.change_rounds"):
            DriftConfig(change_rounds=bad).check()
    with pytest.raises(ConfigError, match=r"partition\.level.*concept_bank_size"):
        drift_partition(tiny(), cfg(type="concept_yx", level=1), seed=0)


def test_flplat_check_passes(capsys):
    assert main(["check", "--partition", "drift", "partition.type=concept_xy", "partition.level=3",
                 "partition.num_unseen_clients=3"]) == 0
    out = capsys.readouterr().out
    assert out.count("PASS") == 6 and "FAIL" not in out


def _split(a: int) -> ClientSplit:
    return ClientSplit(np.arange(a, a + 10), np.arange(a + 10, a + 12), np.arange(a + 12, a + 14))


def _drift_reusing_rows(dataset, cfg, seed):
    """Client 0's second stage holds client 1's first-stage rows."""
    first, later = [_split(0), _split(20)], [_split(20), _split(40)]
    return Partition(clients=first, distribution=np.array([0, 1]), drift=Drift([2], [first, later],
                                                                               np.array([[0, 1], [1, 0]])))


def _drift_miscounting_m(dataset, cfg, seed):
    """A third distribution arrives in stage 1, but the partition says M = 2."""
    first, later = [_split(0), _split(20)], [_split(40), _split(60)]
    return Partition(clients=first, distribution=np.array([0, 1]), meta={"num_distributions": 2},
                     drift=Drift([2], [first, later], np.array([[0, 1], [2, 1]])))


@pytest.mark.parametrize("fn,prop,detail", [
    (_drift_reusing_rows, "disjoint", r"sample (2\d|3[0-3]) is in client 1 and client 2"),
    (_drift_miscounting_m, "planted", "num_distributions=2 is not the 3 distinct ids of the training clients"),
])
def test_flplat_check_holds_the_drift_stages_to_the_contract(monkeypatch, capsys, fn, prop, detail):
    import json
    import re

    monkeypatch.setitem(PARTITIONS, "test_drift_broken", PartitionSpec("test_drift_broken", NoConfig, fn, plants=True))
    assert main(["check", "--partition", "test_drift_broken", "partition.num_clients=2", "--json"]) == 1
    res = {r["property"]: r for r in json.loads(capsys.readouterr().out)}
    assert re.fullmatch(detail, res[prop]["detail"]) and [p for p, r in res.items() if not r["ok"]] == [prop]
