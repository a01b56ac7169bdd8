"""FedPFA (PFA): activation sparsity, distances, grouping of similar clients, group-wise adaptation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from flplat.algorithms.fedpfa import FedPFA, FedPFAState
from flplat.api import ClientResult, FederationInfo, ParamLayout, ServerState
from flplat.errors import ConfigError
from flplat.experiment import run
from flplat.maths.fedpfa_similarity import activation_sparsity, euclidean_distances


def test_activation_sparsity_by_hand():
    a = torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 0.0], [0.0, 3.0, 0.05], [0.0, 1.0, 0.0]])
    torch.testing.assert_close(activation_sparsity(a), torch.tensor([0.75, 0.25, 0.75]))
    torch.testing.assert_close(activation_sparsity(a, eps=0.1), torch.tensor([0.75, 0.25, 1.0]))
    maps = torch.zeros(2, 2, 2, 2)
    maps[0, 0, 0, 0] = 1.0  # channel 0: 1 of 8 entries non-zero; channel 1 all zero
    torch.testing.assert_close(activation_sparsity(maps), torch.tensor([7 / 8, 1.0]))


def test_euclidean_distances_by_hand():
    D = euclidean_distances(np.array([[0.0, 0.0], [3.0, 4.0], [0.0, 1.0]]))
    np.testing.assert_allclose(D, [[0, 5, 1], [5, 0, np.sqrt(18)], [1, np.sqrt(18), 0]], atol=1e-12)


class FakeOps:
    def __init__(self, S):
        self.S, self.calls = S, []

    def compute(self, requests, fn, split="train", seed=0):
        self.calls.append((split, [c for c, _ in requests]))
        return [torch.as_tensor(self.S[c]) for c, _ in requests]


def _strategy(K, **cfg):
    info = FederationInfo(num_clients=K, num_classes=2, num_samples=np.full(K, 10), label_counts=np.ones((K, 2)),
                          client_fraction=0.5, local_epochs=1, layout=ParamLayout(nn.Linear(1, 1)),
                          all_train_indices=np.arange(1))
    return FedPFA(FedPFA.Config(**cfg), info)


def test_grouping_by_sparsity_then_groupwise_fedavg():
    S = np.array([[0.9, 0.1, 0.8], [0.85, 0.12, 0.8], [0.1, 0.9, 0.2], [0.9, 0.15, 0.75], [0.12, 0.88, 0.2]])
    s = _strategy(5, warmup_rounds=1)
    state = s.init_state(torch.zeros(2), np.random.default_rng(0), None)
    state.round = 1
    r = [ClientResult(0, torch.tensor([1.0, 1.0]), 10, 0.0), ClientResult(2, torch.tensor([3.0, 3.0]), 30, 0.0)]
    ops = FakeOps(S)
    state = s.aggregate(state, r, ops)
    assert ops.calls == [("train", [0, 1, 2, 3, 4])]  # every client reports its sparsity once
    torch.testing.assert_close(state.weights, torch.tensor([2.5, 2.5]))  # round 1 was FedAvg
    assert state.assignment.tolist() == [0, 0, 1, 0, 1]
    torch.testing.assert_close(state.clusters, torch.tensor([[2.5, 2.5], [2.5, 2.5]]))  # both from the fed. model
    state.round = 2
    r = [ClientResult(1, torch.tensor([0.0, 2.0]), 10, 0.0), ClientResult(3, torch.tensor([4.0, 2.0]), 30, 0.0)]
    state = s.aggregate(state, r, ops)
    torch.testing.assert_close(state.clusters[0], torch.tensor([3.0, 2.0]))  # FedAvg of group 0's clients
    torch.testing.assert_close(state.clusters[1], torch.tensor([2.5, 2.5]))  # no member sampled: unchanged
    assert torch.equal(s.plan(state, 4).weights, state.clusters[1]) and s.global_weights(state) is None
    assert "clustering/sparsity_distances.csv" in s.artifacts(state)


def test_fixed_number_of_groups():
    s = _strategy(4, num_groups=1)
    state = ServerState(weights=torch.zeros(2), method=FedPFAState(seed=0))
    s._group(state, FakeOps(np.random.default_rng(0).random((4, 3))))
    assert state.assignment.tolist() == [0, 0, 0, 0]


def test_validate_config():
    with pytest.raises(ConfigError, match="algorithm.layer"):
        FedPFA.validate_config(FedPFA.Config(layer="conv1"), "algorithm")


def test_fedpfa_before_grouping_is_fedavg(tiny_cfg):
    avg, _ = run(tiny_cfg(**{"algorithm.name": "fedavg"}), progress=False)
    pfa, _ = run(tiny_cfg(**{"algorithm.name": "fedpfa", "algorithm.warmup_rounds": 5}), progress=False)
    assert torch.equal(avg.state.weights, pfa.state.weights) and pfa.state.assignment is None
    grouped, _ = run(tiny_cfg(**{"algorithm.name": "fedpfa", "algorithm.warmup_rounds": 1}), progress=False)
    assert grouped.state.assignment is not None and "tau" in grouped.metrics
