"""Client-selection baselines: Power-of-Choice, HACCS, FedCLS — selection rules checked with a fake
FederationOps that reports chosen losses, hand-built federations and hand-computed numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flplat.algorithms.fedcls import FedCLS, hamming_groups, loss_ranked_selection
from flplat.algorithms.haccs import HACCS, cluster_scores, hellinger_optics, simulate_latency
from flplat.algorithms.power_of_choice import PowerOfChoice
from flplat.api import ClientResult, EvalResult, FederationInfo, ServerState, sample_proportional
from flplat.errors import ConfigError

STATE = ServerState(weights=torch.zeros(2))


class FakeOps:
    """Reports ``losses[k]`` as client k's loss and records every evaluated client."""

    def __init__(self, losses):
        self.losses = np.asarray(losses, dtype=float)
        self.calls: list[list[int]] = []

    def evaluate(self, requests, split="val"):
        assert split == "train"
        self.calls.append([k for k, _ in requests])
        return [EvalResult(k, float(self.losses[k]) * 10, 0, 10) for k, _ in requests]


def make(cls, num_samples=None, label_counts=None, q=0.3, num_clients=10, **cfg):
    counts = np.ones((num_clients, 3)) if label_counts is None else np.asarray(label_counts, dtype=float)
    k = len(counts)
    n = counts.sum(1) if num_samples is None else np.asarray(num_samples, dtype=float)
    info = FederationInfo(k, counts.shape[1], n, counts, q, 1, None, np.arange(0))
    return cls(cls.Config(**cfg), info)


# ---- Power-of-Choice ---------------------------------------------------------------------------------------
def test_poc_trains_exactly_the_highest_loss_candidates():
    losses = np.array([0.3, 2.0, 0.1, 1.5, 0.9, 0.2, 1.7, 0.4, 0.8, 1.1])
    s = make(PowerOfChoice, d=10)  # every client is a candidate: the top-3 losses overall
    ops = FakeOps(losses)
    assert s.select(STATE, np.random.default_rng(0), ops).tolist() == [1, 3, 6]
    s = make(PowerOfChoice, d=5)
    rng = np.random.default_rng(1)
    for _ in range(20):
        ops = FakeOps(losses)
        sel = s.select(STATE, rng, ops)
        cand = ops.calls[-1]
        assert len(cand) == 5 and len(set(cand)) == 5
        assert sel.tolist() == sorted(sorted(cand, key=lambda k: -losses[k])[:3])


def test_poc_candidates_are_sampled_by_data_size():
    ops = FakeOps(np.zeros(10))
    s = make(PowerOfChoice, num_samples=[0] * 7 + [100, 0, 0], d=3)
    rng = np.random.default_rng(0)
    for _ in range(30):  # the client holding all the data is always a candidate
        s.select(STATE, rng, ops)
        assert 7 in ops.calls[-1]
    # with d = m = 1 the single candidate is drawn with probability n_k / n
    s = make(PowerOfChoice, num_samples=[10, 20, 30, 40], q=0.1, num_clients=4, d=1)
    picks = [s.select(STATE, rng, ops)[0] for _ in range(4000)]
    assert np.allclose(np.bincount(picks, minlength=4) / 4000, [0.1, 0.2, 0.3, 0.4], atol=0.03)


def test_poc_d_below_m_is_a_config_error_naming_both_values():
    with pytest.raises(ConfigError, match=r"algorithm\.d=2 is below m=5 .*allowed: an integer in \[5, 10\]"):
        make(PowerOfChoice, q=0.5, d=2)  # m = round(0.5 * 10) = 5 > d


def test_poc_d_below_m_opt_in_rules_are_logged_and_deterministic():
    ops = FakeOps(np.arange(10.0))
    s = make(PowerOfChoice, q=0.5, d=2, small_d="raise_d")  # d_eff = m = 5: every candidate trains
    sel = s.select(STATE, np.random.default_rng(3), ops)
    assert len(ops.calls[-1]) == 5 and sel.tolist() == sorted(ops.calls[-1])
    assert s.round_metrics(STATE) == {"poc_d": 5.0, "poc_m": 5.0}
    a = [s.select(STATE, np.random.default_rng(7), ops).tolist() for _ in range(2)]
    assert a[0] == a[1]
    s = make(PowerOfChoice, q=0.5, d=2, small_d="train_d")  # m_eff = d = 2: both candidates train
    sel = s.select(STATE, np.random.default_rng(3), ops)
    assert len(ops.calls[-1]) == 2 and sel.tolist() == sorted(ops.calls[-1])
    assert s.round_metrics(STATE) == {"poc_d": 2.0, "poc_m": 2.0}
    assert make(PowerOfChoice, q=0.5, d=50).round_metrics(STATE) == {"poc_d": 10.0, "poc_m": 5.0}  # d > K: K
    assert sample_proportional(np.random.default_rng(0), [0, 0, 5, 0], 4)[0] == 2


def test_poc_d_below_m_exits_2_without_a_run(tmp_path, tiny_cfg):
    from flplat.experiment import run

    cfg = tiny_cfg(**{"algorithm.name": "poc", "algorithm.d": 1, "federation.client_fraction": 1.0})
    with pytest.raises(ConfigError, match="algorithm.d=1"):
        run(cfg, progress=False)


def test_poc_aggregation_weighting():
    res = [ClientResult(0, torch.tensor([0.0, 0.0]), 1, 1.0), ClientResult(1, torch.tensor([3.0, 3.0]), 3, 1.0)]
    uni = make(PowerOfChoice).aggregate(ServerState(weights=torch.zeros(2)), res, None)
    smp = make(PowerOfChoice, weighting="samples").aggregate(ServerState(weights=torch.zeros(2)), res, None)
    assert torch.allclose(uni.weights, torch.tensor([1.5, 1.5]))  # the paper's (1/m) Σ w_k
    assert torch.allclose(smp.weights, torch.tensor([2.25, 2.25]))  # FedAvg's (1·0 + 3·3) / 4


# ---- HACCS --------------------------------------------------------------------------------------------------
def _four_clusters():
    """Three groups of three clients with the same label support, plus one client with labels of its own."""
    c = np.zeros((10, 8))
    for k in range(3):
        c[k, [0, 1]] = [5 + k, 5]
        c[3 + k, [2, 3]] = [5, 5 + k]
        c[6 + k, [4, 5]] = [5, 5]
    c[9, [6, 7]] = [3, 1]
    return c, np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 3])


def test_haccs_hellinger_optics_clusters_and_noise_singletons():
    c, truth = _four_clusters()
    rng = np.random.default_rng(0)
    for _ in range(20):  # the same partition whatever the client numbering
        perm = rng.permutation(10)
        lab = hellinger_optics(c[perm])
        assert np.array_equal(lab[:, None] == lab[None], truth[perm][:, None] == truth[perm][None])
    assert hellinger_optics(np.eye(4)).tolist() == [0, 1, 2, 3]  # disjoint label sets: all singletons


def test_haccs_scores_latency_tiers_and_latency_preference():
    # hand-computed: l_c = [1, 4], max l = 4 -> latency term [0.75, 0]; mean losses [2, 2] -> shares [0.5, 0.5]
    score = cluster_scores(np.array([0, 0, 1]), np.array([1.0, 2.0, 4.0]), np.array([1.0, 3.0, 2.0]), 0.5)
    assert np.allclose(score, [0.625, 0.25])
    lat = simulate_latency(50, [0.6, 0.2, 0.14, 0.06], [1, 2, 4, 8], 0.0, np.random.default_rng(0))
    assert [int((lat == v).sum()) for v in (1, 2, 4, 8)] == [30, 10, 7, 3]

    c, truth = _four_clusters()
    s = make(HACCS, label_counts=c, rho=0.5)
    rng = np.random.default_rng(0)
    ops = FakeOps(np.random.default_rng(1).uniform(0.5, 2, 10))
    state = s.init_state(torch.zeros(2), rng, ops)
    lat, group = state.method.latency, state.method.group
    for _ in range(50):
        sel = s.select(state, rng, ops)
        assert len(sel) == 3 and len(set(group[sel])) == 3  # >= m clusters: never two of one cluster
        for k in sel:  # the fastest member of its cluster
            assert lat[k] == lat[group == group[k]].min()


def test_haccs_cycles_when_fewer_clusters_than_m():
    c, _ = _four_clusters()
    s = make(HACCS, label_counts=c[:6], q=0.67, rho=1.0)  # 2 clusters, m = 4: the 2 fastest of each
    state = s.init_state(torch.zeros(2), np.random.default_rng(0), FakeOps(np.ones(6)))
    lat = state.method.latency
    sel = s.select(state, np.random.default_rng(0), FakeOps(np.ones(6)))
    expect = [k for g in ([0, 1, 2], [3, 4, 5]) for k in sorted(g, key=lambda k: lat[k])[:2]]
    assert sel.tolist() == sorted(expect)


def test_haccs_rho_one_ignores_loss():
    c, _ = _four_clusters()
    picks = []
    for seed in (1, 2):
        s = make(HACCS, label_counts=c, rho=1.0)
        ops = FakeOps(np.random.default_rng(seed).uniform(0, 5, 10))
        rng = np.random.default_rng(0)
        state = s.init_state(torch.zeros(2), rng, ops)
        picks.append([s.select(state, rng, ops).tolist() for _ in range(10)])
        assert not ops.calls  # losses are not even evaluated
    assert picks[0] == picks[1]
    s = make(HACCS, label_counts=c, rho=0.0)  # rho = 0: cluster sampling follows the loss shares
    ops = FakeOps(np.array([9.0] * 3 + [0.0] * 7))
    rng = np.random.default_rng(0)
    state = s.init_state(torch.zeros(2), rng, ops)
    assert all(set(s.select(state, rng, ops).tolist()) & {0, 1, 2} for _ in range(10))


def test_haccs_last_losses_come_from_results():
    c, _ = _four_clusters()
    s = make(HACCS, label_counts=c, losses="last")
    ops = FakeOps(np.arange(10.0))
    state = s.init_state(torch.zeros(2), np.random.default_rng(0), ops)
    assert ops.calls == [list(range(10))] and np.allclose(state.method.loss, np.arange(10.0))
    s.select(state, np.random.default_rng(0), ops)
    assert len(ops.calls) == 1  # no evaluation per round
    state = s.aggregate(state, [ClientResult(4, torch.ones(2), 5, 0.25)], ops)
    assert state.method.loss[4] == 0.25 and state.method.loss[5] == 5.0


# ---- FedCLS -------------------------------------------------------------------------------------------------
# label counts of 5 clients x 4 classes; presence: 1100, 1110, 0011, 0111, 1000
COUNTS = np.array([[5, 3, 0, 0], [1, 2, 7, 0], [0, 0, 4, 4], [0, 6, 1, 2], [9, 0, 0, 0]])


def test_fedcls_groups_by_hamming_threshold():
    # Hamming from leader 0 (1100): c1 1, c2 4, c3 3, c4 1; from leader 2 (0011): c3 1
    assert hamming_groups(COUNTS > 0, 0.25).tolist() == [0, 0, 1, 1, 0]  # threshold 1 (c1-c4 are 2 apart)
    assert hamming_groups(COUNTS > 0, 0.75).tolist() == [0, 0, 1, 0, 0]  # threshold 3
    assert hamming_groups(COUNTS > 0, 0.0).tolist() == [0, 1, 2, 3, 4]
    s = make(FedCLS, label_counts=COUNTS, tau=0.25)
    assert s.init_state(torch.zeros(2), None, FakeOps(np.zeros(5))).method.group.tolist() == [0, 0, 1, 1, 0]


def test_fedcls_selects_complementary_groups_by_loss():
    losses = np.array([1.9, 2.0, 1.5, 1.0, 0.1])  # group means: {0,1,4} 1.333, {2,3} 1.25
    s = make(FedCLS, label_counts=COUNTS, tau=0.25, q=0.4)  # m = 2
    ops = FakeOps(losses)
    state = s.init_state(torch.zeros(2), np.random.default_rng(0), ops)
    assert s.select(state, np.random.default_rng(0), ops).tolist() == [1, 2]  # not the top-2 losses {0, 1}
    assert ops.calls[-1] == [0, 1, 2, 3, 4]
    s = make(FedCLS, label_counts=COUNTS, tau=0.25, q=0.6)  # m = 3: second pass, top group first
    assert s.select(state, np.random.default_rng(5), ops).tolist() == [0, 1, 2]
    assert loss_ranked_selection(np.array([0, 0, 1]), np.array([1.0, np.nan, 0.5]), 2).tolist() == [0, 2]


@pytest.mark.parametrize("name,key,value", [("poc", "d", 0), ("poc", "weighting", "x"), ("haccs", "rho", 1.5),
                                            ("haccs", "tier_latency", "[1,2]"), ("fedcls", "tau", -0.1),
                                            ("fedcls", "losses", "some")])
def test_invalid_config_names_the_key(tiny_cfg, name, key, value):
    with pytest.raises(ConfigError, match=f"algorithm.{key}"):
        tiny_cfg(**{"algorithm.name": name, f"algorithm.{key}": value})
