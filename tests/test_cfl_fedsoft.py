"""CFL (Sattler et al. 2021) and FedSoft (Ruan & Joe-Wong 2022): splitting rules and soft-cluster maths on
fabricated client results, plus FedSoft's reduction to FedAvg."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from torch import nn

from flplat.algorithms.cfl import CFL, bipartition
from flplat.algorithms.fedsoft import FedSoft, importance_weights, mixture_center
from flplat.api import ClientResult, EvalResult, FederationInfo, HookContext, ParamLayout, ProximalTerm
from flplat.experiment import run

P = 8  # nn.Linear(3, 2): 6 weights + 2 biases, all parameters


def _info(k: int, sizes=None) -> FederationInfo:
    return FederationInfo(num_clients=k, num_classes=2, num_samples=np.asarray(sizes or [10] * k),
                          label_counts=np.ones((k, 2)), client_fraction=1.0, local_epochs=1,
                          layout=ParamLayout(nn.Linear(3, 2)), all_train_indices=np.arange(10))


class FakeOps:
    """``evaluate`` answers ``loss_fn(client, weights)`` as the mean loss."""

    def __init__(self, loss_fn):
        self.loss_fn = loss_fn
        self.calls = 0

    def evaluate(self, requests, split="val"):
        self.calls += len(requests)
        return [EvalResult(k, float(self.loss_fn(k, w)), 0, 1) for k, w in requests]


def _results(base, deltas, sizes=None):
    sizes = sizes or [10] * len(deltas)
    return [ClientResult(k, base + d, n, 0.0) for k, (d, n) in enumerate(zip(deltas, sizes))]


def _cfl(k=4, **cfg):
    strat = CFL(CFL.Config(**{"eps1": 1.0, "eps2": 0.1, "gamma": 0.5, **cfg}), _info(k))
    w0 = torch.zeros(P)
    return strat, strat.init_state(w0, np.random.default_rng(0), FakeOps(lambda k, w: 0.0)), w0


V = torch.tensor([1.0, 2.0, 0.0, -1.0, 0.5, 0.0, 1.0, 0.0])


def test_cfl_splits_opposite_updates_into_two_clusters():
    strat, state, w0 = _cfl()
    state = strat.aggregate(state, _results(w0, [V, V, -V, -V]), None)  # mean update 0 < eps1, norms > eps2
    assert state.clusters.shape[0] == 2
    assert state.assignment.tolist() == [0, 0, 1, 1]
    # each child is the parent plus its own group's mean update
    assert torch.allclose(state.clusters[0], w0 + V) and torch.allclose(state.clusters[1], w0 - V)
    assert torch.equal(strat.plan(state, 3).weights, state.clusters[1])


def test_cfl_does_not_split_identical_updates():
    strat, state, w0 = _cfl(eps1=100.0)  # stationarity passes, the similarity criterion must reject
    state = strat.aggregate(state, _results(w0, [V] * 4), None)
    assert state.clusters.shape[0] == 1 and state.assignment.tolist() == [0] * 4
    assert torch.allclose(state.clusters[0], w0 + V)


@pytest.mark.parametrize("eps1_factor, splits", [(0.4, False), (0.6, True)])
def test_cfl_splits_only_when_mean_update_norm_below_eps1(eps1_factor, splits):
    # mean update is 0.5 V: no split while eps1 <= ||0.5 V||
    strat, state, w0 = _cfl(eps1=eps1_factor * float(V.norm()))
    state = strat.aggregate(state, _results(w0, [V, V, V, -V]), None)
    assert (state.clusters.shape[0] == 2) == splits
    assert state.assignment.tolist() == ([0, 0, 0, 1] if splits else [0] * 4)


def test_cfl_never_splits_when_max_update_norm_not_above_eps2():
    strat, state, w0 = _cfl(eps2=float(V.norm()))
    state = strat.aggregate(state, _results(w0, [V, V, -V, -V]), None)
    assert state.clusters.shape[0] == 1


@pytest.mark.parametrize("gamma, splits", [(0.5, False), (0.4, True)])
def test_cfl_gamma_rejects_split_of_similar_directions(gamma, splits):
    a, b = torch.zeros(P), torch.zeros(P)
    a[:2] = torch.tensor([1.0, 0.5])
    b[:2] = torch.tensor([1.0, -0.5])  # cos(a, b) = 0.6 -> gamma_max = sqrt(0.2) = 0.447
    strat, state, w0 = _cfl(eps1=100.0, gamma=gamma)
    state = strat.aggregate(state, _results(w0, [a, a, b, b]), None)
    assert state.assignment.tolist() == ([0, 0, 1, 1] if splits else [0] * 4)


@pytest.mark.parametrize("rule, joins", [("loss", 1), ("first", 0)])
def test_cfl_assigns_absent_members_of_a_split_cluster(rule, joins):
    strat, state, w0 = _cfl(k=5, assign_absent=rule)
    target = w0 - V  # client 4 (absent) fits the "-V" child best
    ops = FakeOps(lambda k, w: float((w - target).norm()))
    state = strat.aggregate(state, _results(w0, [V, V, -V, -V]), ops)
    assert state.assignment.tolist() == [0, 0, 1, 1, joins]
    assert ops.calls == (2 if rule == "loss" else 0)


def test_cfl_splits_need_min_participants_per_cluster():
    strat, state, w0 = _cfl(min_split_clients=5)
    state = strat.aggregate(state, _results(w0, [V, V, -V, -V]), None)
    assert state.clusters.shape[0] == 1


def test_single_linkage_bipartition_is_the_exact_argmin_of_max_cross_similarity():
    rng = np.random.default_rng(1)
    for _ in range(20):
        x = rng.normal(size=(6, 4))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        sim = x @ x.T
        labels, cross = bipartition(sim, "single")
        assert set(labels.tolist()) == {0, 1} and labels[0] == 0
        best = min(sim[np.ix_([i for i in range(6) if i in g], [i for i in range(6) if i not in g])].max()
                   for r in range(1, 6) for g in map(set, itertools.combinations(range(6), r)))
        assert cross == pytest.approx(best)


# ---- FedSoft -----------------------------------------------------------------------------------------


def test_fedsoft_importance_weights_on_a_loss_table():
    losses = torch.tensor([[0.1, 0.2, 0.9, 0.3],   # model 0
                           [0.5, 0.4, 0.8, 0.6],   # model 1: never the best
                           [0.7, 0.9, 0.2, 0.8]])  # model 2
    u = importance_weights(losses, sigma=0.01)
    assert torch.allclose(u, torch.tensor([0.75, 0.01, 0.25], dtype=torch.float64))
    # batched over clients; a per-client (S, 1) column is the hard argmin of the mean losses
    per_client = importance_weights(torch.tensor([[[0.3], [0.1]], [[0.2], [0.4]]]), sigma=1e-4)
    assert torch.allclose(per_client, torch.tensor([[1e-4, 1.0], [1.0, 1e-4]], dtype=torch.float64))


def test_fedsoft_mixture_centre_proximal_term_is_exact():
    torch.manual_seed(0)
    net = nn.Linear(3, 2)
    layout = ParamLayout(net)
    params = list(net.parameters())
    ctx = HookContext(net, layout, params)
    centers, u, lam = torch.randn(3, P), torch.tensor([0.5, 0.2, 0.3001], dtype=torch.float64), 0.1
    c_bar, total = mixture_center(u, centers)
    hook = ProximalTerm(c_bar, lam * total)
    hook.setup(ctx)

    def direct():
        w = torch.cat([p.reshape(-1) for p in params])  # layout order: weight, bias
        return 0.5 * lam * sum(float(u[s]) * ((w - centers[s]) ** 2).sum() for s in range(3))

    gaps = []
    for _ in range(2):
        g_direct = torch.autograd.grad(direct(), params)
        g_hook = torch.autograd.grad(hook.loss(ctx), params)
        for a, b in zip(g_direct, g_hook):
            assert torch.allclose(a, b, atol=1e-6)
        gaps.append(float((direct() - hook.loss(ctx)).detach()))
        with torch.no_grad():
            for p in params:
                p.add_(torch.randn_like(p))
    assert gaps[0] == pytest.approx(gaps[1], abs=1e-4)  # the two objectives differ by a constant


def _fedsoft(k, **cfg):
    strat = FedSoft(FedSoft.Config(**{"num_clusters": 2, "sigma": 0.0, "clients_per_cluster": 2, **cfg}), _info(k))
    state = strat.init_state(torch.arange(P, dtype=torch.float32), np.random.default_rng(0), None)
    return strat, state


# Two planted distributions on x in R^3: A labels y = 1[x_0 > 0], B the opposite (concept shift). Centre A
# (logits [-5 x_0, 5 x_0]) is right on A and wrong on B, centre B the reverse: a sample's smallest loss is under
# the centre of the distribution it was drawn from. Layout of nn.Linear(3, 2): weight (2 x 3), then bias (2).
CENTRE_A = torch.tensor([-5.0, 0, 0, 5, 0, 0, 0, 0])
CENTRE_B = -CENTRE_A


def _planted(n_a: int, n_b: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_a + n_b, 3, generator=g)
    y = (x[:, 0] > 0).long()
    y[n_a:] = 1 - y[n_a:]
    return x, y


class ViewOps:
    """Runs ``compute``'s client-side functions on real per-client tensors (``evaluate``: their mean loss)."""

    def __init__(self, data):
        self.data, self.net, self.calls = data, nn.Linear(3, 2), 0

    def _view(self, client, w):
        from contextlib import nullcontext

        from flplat.api import ClientView

        if w is not None:
            with torch.no_grad():
                self.net.weight.copy_(w[:6].view(2, 3))
                self.net.bias.copy_(w[6:])
        x, y = self.data[client]
        return ClientView(client, self.net.eval(), ParamLayout(self.net), x, y, 0, torch.device("cpu"), nullcontext)

    def compute(self, requests, fn, split="train", seed=0):
        self.calls += len(requests)
        return [fn(self._view(c, w)) for c, w in requests]

    def evaluate(self, requests, split="val"):
        self.calls += len(requests)
        out = []
        for c, w in requests:
            v = self._view(c, w)
            out.append(EvalResult(c, float(nn.functional.cross_entropy(v.net(v.x), v.y)), 0, len(v.y)))
        return out


def test_fedsoft_importance_weights_are_sample_shares_of_planted_distributions():
    # client 0: 70 samples from A and 30 from B -> u = (0.7, 0.3) (the paper's n_ks / n_k, not a one-hot)
    strat, state = _fedsoft(3)
    state.clusters = torch.stack([CENTRE_A, CENTRE_B])
    ops = ViewOps({0: _planted(70, 30, 0), 1: _planted(0, 40, 1), 2: _planted(0, 0, 2)})
    state.round = 1
    strat.select(state, np.random.default_rng(0), ops)
    u = state.method.importance
    np.testing.assert_allclose(u[0], [0.7, 0.3])
    np.testing.assert_allclose(u[1], [0.0, 1.0])
    np.testing.assert_allclose(u[2], [0.5, 0.5])  # no training samples: uniform
    assert state.assignment.tolist()[:2] == [0, 1]
    # the broadcast of both centres to the 3 clients and their 2 weights back are counted in estimating rounds
    m = strat.round_metrics(state)
    assert m["importance_bytes_down"] == 3 * 2 * P * 4 and m["importance_bytes_up"] == 3 * 2 * 8
    state.round = 2
    strat.select(state, np.random.default_rng(0), ops)
    assert strat.round_metrics(state)["importance_bytes_down"] == 0


def test_fedsoft_importance_selection_draws_per_cluster_from_its_clients():
    strat, state = _fedsoft(6)
    state.clusters = torch.stack([CENTRE_A, CENTRE_B])
    ops = ViewOps({k: _planted(20, 0, k) if k < 3 else _planted(0, 20, k) for k in range(6)})
    state.round = 1
    chosen = strat.select(state, np.random.default_rng(3), ops)
    assert ops.calls == 6  # every client scores both centres in one request
    assert state.assignment.tolist() == [0, 0, 0, 1, 1, 1]
    drawn = state.method.drawn
    assert drawn[0].sum() == 2 and drawn[1].sum() == 2 and not drawn[0, 3:].any() and not drawn[1, :3].any()
    assert chosen.tolist() == np.flatnonzero(drawn.any(axis=0)).tolist()
    state.round = 2  # tau = 2: no re-estimation
    strat.select(state, np.random.default_rng(3), ops)
    assert ops.calls == 6


def test_fedsoft_aggregate_and_plan_use_importance_weights():
    strat, state = _fedsoft(3, lam=0.1)
    old = state.clusters.clone()
    state.method.importance = np.array([[0.75, 0.5], [0.5, 0.5], [1.0, 0.0]])
    state.method.drawn = np.array([[True, False, True], [False, False, False]])
    w = torch.randn(3, P, generator=torch.Generator().manual_seed(0))
    results = [ClientResult(k, w[k], n, 0.0) for k, n in enumerate([10, 30, 20])]
    state = strat.aggregate(state, results, None)
    expected = (0.75 * 10 * w[0] + 1.0 * 20 * w[2]) / (0.75 * 10 + 1.0 * 20)
    assert torch.allclose(state.clusters[0], expected)
    assert torch.equal(state.clusters[1], old[1])  # nobody drawn for cluster 1: unchanged
    plan = strat.plan(state, 0)
    (hook,) = plan.hooks
    assert torch.allclose(hook.center, (0.75 * state.clusters[0] + 0.5 * state.clusters[1]) / 1.25)
    assert hook.mu == pytest.approx(0.1 * 1.25) and torch.equal(plan.weights, hook.center)


def test_fedsoft_with_one_cluster_and_no_proximal_term_is_fedavg(tiny_cfg):
    avg, _ = run(tiny_cfg(**{"algorithm.name": "fedavg", "federation.rounds": 2}), progress=False)
    soft, _ = run(tiny_cfg(**{"algorithm.name": "fedsoft", "algorithm.num_clusters": 1, "algorithm.lam": 0.0,
                              "algorithm.selection": "uniform", "federation.rounds": 2}), progress=False)
    assert torch.equal(avg.state.weights, soft.state.clusters[0])
    assert [h["train_loss"] for h in avg.history] == [h["train_loss"] for h in soft.history]
