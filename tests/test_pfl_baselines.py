"""DA-PFL's baselines: Ditto (Li et al. 2021), FedRep (Collins et al. 2021), FedAMP (Huang et al. 2021) and
FedDyn (Acar et al. 2021) — their defining behaviour, reductions, and the multi-phase client plan they use."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from flplat.algorithms.fedamp import attention_weights
from flplat.algorithms.feddyn import DynamicRegularizer, FedDyn
from flplat.api import ClientPlan, ClientResult, FederationInfo, HookContext, ParamLayout
from flplat.experiment import prepare, run


def _run(cfg):
    return run(cfg, progress=False)[0]


def test_plan_phases_continue_and_train_only_their_part(tiny_cfg):
    p = prepare(tiny_cfg())
    head = p.trainer.layout.mask("head.")
    idx = p.data.indices(0, "train")
    plan = ClientPlan(weights=p.init_weights, trainable="head", epochs=2,
                      phases=(ClientPlan(weights=None, trainable="features", epochs=1),))
    r = p.trainer.train(0, plan, idx, seed=3)
    mid = r.extra["phase_weights"][0]
    assert torch.equal(mid[~head], p.init_weights[~head]) and not torch.equal(mid[head], p.init_weights[head])
    assert torch.equal(r.weights[head], mid[head]) and not torch.equal(r.weights[~head], mid[~head])
    # the first phase alone is the plain plan (same seed, same result)
    alone = p.trainer.train(0, ClientPlan(weights=p.init_weights, trainable="head", epochs=2), idx, seed=3)
    assert torch.equal(alone.weights, mid)
    ev = p.trainer.evaluate(0, r.weights, p.data.indices(0, "test"))
    assert sum(ev.class_correct) == ev.correct and sum(ev.class_total) == ev.num_samples


# ---- Ditto -------------------------------------------------------------------------------------------------


def test_ditto_with_lambda_zero_is_local_training_plus_fedavg(tiny_cfg):
    d = _run(tiny_cfg(**{"algorithm.name": "ditto", "algorithm.lam": 0.0, "federation.rounds": 3}))
    avg = _run(tiny_cfg(**{"algorithm.name": "fedavg", "federation.rounds": 3}))
    loc = _run(tiny_cfg(**{"algorithm.name": "local", "federation.rounds": 3}))
    assert torch.equal(d.state.weights, avg.state.weights)
    for k in range(6):
        assert torch.equal(d.state.personal.get(k), loc.state.personal.get(k))


def test_ditto_lambda_pulls_personal_models_to_the_global_model(tiny_cfg):
    w0 = prepare(tiny_cfg()).init_weights  # the global model the first round's clients receive

    def gap(lam):
        s = _run(tiny_cfg(**{"algorithm.name": "ditto", "algorithm.lam": lam, "federation.rounds": 1,
                             "federation.local_epochs": 5}))
        return sum(float((s.state.personal.get(k) - w0).norm()) for k in range(6) if s.state.personal.has(k))

    assert gap(100.0) < 0.5 * gap(0.0)


# ---- FedRep ------------------------------------------------------------------------------------------------


def test_fedrep_keeps_heads_local_and_averages_bodies(tiny_cfg):
    cfg = tiny_cfg(**{"algorithm.name": "fedrep", "federation.rounds": 1, "algorithm.head_epochs": 2})
    p = prepare(cfg)
    s = _run(cfg)
    head = p.trainer.layout.mask("head.")
    assert s.state.personal.size == int(head.sum())  # only the head slice is stored per client
    trained = [k for k in range(6) if s.state.personal.has(k)]
    assert len(trained) == 3
    w0 = p.init_weights
    for k in range(6):
        w = s.state.personal.get(k)
        assert torch.equal(w, w0[head]) != (k in trained)  # trained clients moved their heads, others did not
    assert torch.equal(s.state.weights[head], w0[head]) and not torch.equal(s.state.weights[~head], w0[~head])


# ---- FedAMP ------------------------------------------------------------------------------------------------


def test_fedamp_attention_weights_by_hand():
    w = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
    xi = attention_weights(w, "exp_cos", sigma=2.0, self_weight=0.4)
    e01, e02 = math.exp(0.0), math.exp(2.0 / math.sqrt(2))  # cos(w0, w1) = 0, cos(w0, w2) = 1/sqrt(2)
    assert xi[0].tolist() == pytest.approx([0.4, 0.6 * e01 / (e01 + e02), 0.6 * e02 / (e01 + e02)])
    # exp_dist: xi_ij = alpha_k exp(-d²/σ)/σ, d²(0,1) = 2, d²(0,2) = 1; self weight 1 - Σ
    xi = attention_weights(w, "exp_dist", sigma=1.0, alpha_k=0.5)
    a, b = 0.5 * math.exp(-2.0), 0.5 * math.exp(-1.0)
    assert xi[0].tolist() == pytest.approx([1 - a - b, a, b])
    # a step size too large for the paper's condition: off-diagonal rescaled to sum 1, no self weight
    xi = attention_weights(w, "exp_dist", sigma=1.0, alpha_k=10.0)
    assert xi[0, 0].item() == pytest.approx(0.0) and torch.allclose(xi.sum(1), torch.ones(3, dtype=torch.float64))


def test_fedamp_cloud_model_leans_to_the_similar_client():
    from flplat.algorithms.fedamp import FedAMP

    info = FederationInfo(num_clients=3, num_classes=2, num_samples=np.full(3, 10), label_counts=np.ones((3, 2)),
                          client_fraction=1.0, local_epochs=1, layout=ParamLayout(nn.Linear(1, 1)),
                          all_train_indices=np.arange(10))
    strat = FedAMP(FedAMP.Config(sigma=5.0, self_weight=0.2), info)
    state = strat.init_state(torch.zeros(2), np.random.default_rng(0), None)
    for k, w in enumerate(([1.0, 0.0], [1.0, 0.1], [-1.0, 0.0])):
        state.personal.set(k, torch.tensor(w))
    assert strat.select(state, np.random.default_rng(0), None).tolist() == [0, 1, 2]
    u0 = state.method.cloud[0]
    assert float((u0 - torch.tensor([1.0, 0.0])).norm()) < 0.1  # mostly itself and its similar client 1
    plan = strat.plan(state, 0)
    assert torch.equal(plan.weights, state.personal.get(0)) and plan.hooks[0].mu == pytest.approx(1.0)
    # FedAMP's local objective: the proximal centre is the cloud model u_i, training starts from w_i
    for k in range(3):
        plan = strat.plan(state, k)
        assert torch.equal(plan.hooks[0].center, state.method.cloud[k])
        assert not torch.equal(plan.hooks[0].center, plan.weights)


# ---- FedDyn ------------------------------------------------------------------------------------------------


def _dyn(k=4, alpha=0.5):
    layout = ParamLayout(nn.Linear(1, 2))  # P = 4
    info = FederationInfo(num_clients=k, num_classes=2, num_samples=np.full(k, 10), label_counts=np.ones((k, 2)),
                          client_fraction=0.5, local_epochs=1, layout=layout, all_train_indices=np.arange(10))
    strat = FedDyn(FedDyn.Config(alpha=alpha), info)
    return strat, strat.init_state(torch.zeros(4), np.random.default_rng(0), None)


def test_feddyn_server_and_client_state_updates_by_hand():
    strat, state = _dyn(k=4, alpha=0.5)
    d1, d2 = torch.tensor([1.0, 2.0, 0.0, -1.0]), torch.tensor([3.0, 0.0, 2.0, 1.0])
    state = strat.aggregate(state, [ClientResult(0, d1, 10, 0.0), ClientResult(2, d2, 30, 0.0)], None)
    h = -0.5 * (d1 + d2) / 4  # h = 0 - α/K Σ (θ_k - θ^{t-1})
    assert torch.allclose(state.method.h, h)
    assert torch.allclose(state.weights, (d1 + d2) / 2 - h / 0.5)  # uniform mean - h/α
    assert torch.allclose(state.personal.get(0), -0.5 * d1) and torch.allclose(state.personal.get(2), -0.5 * d2)
    assert torch.equal(state.personal.get(1), torch.zeros(4))


def test_feddyn_regulariser_gradient_is_alpha_times_distance_minus_state():
    net = nn.Linear(1, 2)
    layout = ParamLayout(net)
    params = list(net.parameters())
    g, c = torch.tensor([0.1, -0.2, 0.3, 0.4]), torch.tensor([1.0, 1.0, -1.0, 0.0])
    hook = DynamicRegularizer(g, c, alpha=2.0)
    hook.setup(HookContext(net, layout, params))
    hook.loss(HookContext(net, layout, params)).backward()
    grad = torch.cat([p.grad.reshape(-1) for p in params])
    assert torch.allclose(grad, 2.0 * (layout.flatten() - c) - g)


def test_feddyn_trains(tiny_cfg):
    s = _run(tiny_cfg(**{"algorithm.name": "feddyn", "federation.rounds": 3}))
    assert np.isfinite(s.metrics["global_accuracy"])
    assert 3 <= sum(s.state.personal.has(k) for k in range(6)) <= 6  # participants hold their state h_k
    assert s.state.method.h.abs().sum() > 0
