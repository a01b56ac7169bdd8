"""Batched evaluation (flplat/engine/batched_eval.py): clients sharing a model are scored in one pass, with the
same per-client counts as scoring them one by one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flplat.algorithms.base import ClusteredStrategy, PersonalizedStrategy, Strategy
from flplat.engine.batched_eval import shared_model_groups
from flplat.engine.client import ClientTrainer
from flplat.engine.state import ServerState


def _run(tiny_cfg, batched: bool, **extra):
    from flplat.experiment import run

    cfg = tiny_cfg(**{"partition.num_clients": 12, "federation.rounds": 3,
                      "federation.batched_eval": str(batched).lower(), **extra})
    summary, _ = run(cfg, progress=False)
    return summary


@pytest.mark.parametrize("extra", [{"algorithm.name": "fedavg"},
                                   {"algorithm.name": "ifca", "algorithm.num_clusters": 3}],
                         ids=["fedavg", "ifca"])
def test_batched_evaluation_gives_the_per_client_metrics(tiny_cfg, extra, monkeypatch):
    calls = {"one": 0, "many": 0}
    one, many = ClientTrainer.evaluate, ClientTrainer.evaluate_many

    def count_one(self, *a, **k):
        calls["one"] += 1
        return one(self, *a, **k)

    def count_many(self, *a, **k):
        calls["many"] += 1
        return many(self, *a, **k)

    monkeypatch.setattr(ClientTrainer, "evaluate", count_one)
    monkeypatch.setattr(ClientTrainer, "evaluate_many", count_many)
    per_client = _run(tiny_cfg, False, **extra)
    assert calls["many"] == 0 and calls["one"] > 0
    calls.update(one=0, many=0)
    batched = _run(tiny_cfg, True, **extra)
    if extra["algorithm.name"] == "fedavg":
        assert calls["one"] == 0 and calls["many"] == 3  # one pass per round (the single model)
    else:
        assert calls["one"] == 0 and calls["many"] >= 3  # one pass per cluster that has clients
    for key in ("client", "num_train", "num_test", "correct"):
        np.testing.assert_array_equal(batched.client_table[key], per_client.client_table[key])
    np.testing.assert_allclose(batched.client_table["test_loss"], per_client.client_table["test_loss"], rtol=1e-5)
    for h_b, h_p in zip(batched.history, per_client.history):
        assert set(h_b) == set(h_p)
        for k in h_b:
            if k == "round_time_s":
                continue
            if "loss" in k:
                assert h_b[k] == pytest.approx(h_p[k], rel=1e-5), k
            else:
                assert h_b[k] == h_p[k], k  # accuracies, fairness, per-class buckets, cluster accuracies


def test_shared_model_groups_follow_the_strategy_structure():
    w, clusters = torch.zeros(3), torch.arange(6.0).view(2, 3)

    class Plain(Strategy):
        pass

    class Clustered(ClusteredStrategy):
        pass

    class Mixed(ClusteredStrategy):
        def eval_weights(self, state, client):
            return state.weights

    def make(cls):  # only the classes matter: skip the abstract methods and __init__
        cls.__abstractmethods__ = frozenset()
        return object.__new__(cls)

    plain, clustered, mixed = (make(cls) for cls in (Plain, Clustered, Mixed))
    (g,) = shared_model_groups(plain, ServerState(weights=w), 4)
    assert g[0] is w and g[1] == [0, 1, 2, 3]
    groups = shared_model_groups(clustered, ServerState(weights=w, clusters=clusters,
                                                        assignment=np.array([1, -1, 1, 0])), 4)
    assert [(gw.tolist(), cl) for gw, cl in groups] == [([0.0, 1.0, 2.0], [3]), ([3.0, 4.0, 5.0], [0, 2]),
                                                      ([0.0, 0.0, 0.0], [1])]
    assert shared_model_groups(mixed, ServerState(weights=w), 4) is None  # overrides eval_weights: per client
    personal = make(type("Personal", (PersonalizedStrategy,), {}))
    assert shared_model_groups(personal, ServerState(weights=w), 4) is None
