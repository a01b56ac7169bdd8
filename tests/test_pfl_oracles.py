"""One-step oracles for the personalised baselines (issue 24, item 5): one round on one tiny client (two for FedAMP)
computed from each paper's equations with plain torch tensors, every parameter compared with flplat's to 1e-6 (as
tests/test_fedopt.py pins FedOpt against Flower's formulas).

flplat runs the round through its own pieces (the strategy's ``init_state`` / ``select`` / ``plan`` /
``aggregate`` and the trainer's loop); a recording hook keeps the minibatches the loop drew, so the oracle replays
the same batches. The model is a 4-3-3 MLP (Linear, ReLU, Linear), the federation optimizer SGD with momentum 0.9
(torch.optim.SGD's rule: b ← g on the first step, then b ← 0.9 b + g; p ← p − lr b), two local epochs of batches
of 4 over 16 training samples.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from flplat.api import LocalHook
from flplat.engine.executor import LocalExecutor
from flplat.experiment import load_config, prepare

LR, MOM = 0.1, 0.9
ATOL = 1e-6


class _Record(LocalHook):
    """The minibatch of every optimizer step, in order (test bookkeeping only)."""

    def __init__(self):
        self.batches = []

    def after_step(self, ctx):
        x, y = ctx.batch
        self.batches.append((x.detach().clone(), y.detach().clone()))


def _recorded(plan):
    from dataclasses import replace

    rec = [_Record()]
    phases = []
    for ph in plan.phases:
        rec.append(_Record())
        phases.append(replace(ph, hooks=(*ph.hooks, rec[-1])))
    return replace(plan, hooks=(*plan.hooks, rec[0]), phases=tuple(phases)), rec


def _round(algorithm, clients=1, personal=None, **over):
    """flplat's round: (prepared run, state before, state after, recorded batches per client and phase)."""
    base = {"data.name": "synthetic", "data.samples": 20 * clients, "data.features": 4,
            "data.classes": 3, "partition.name": "iid", "partition.num_clients": clients,
            "model.name": "mlp", "model.hidden": "[3]", "federation.rounds": 1, "federation.client_fraction": 1.0,
            "federation.local_epochs": 2, "federation.batch_size": 4, "federation.optimizer.name": "sgd",
            "federation.optimizer.lr": LR, "federation.optimizer.momentum": MOM, "fabric.num_threads": 1,
            "tracking.enabled": "false", "algorithm.name": algorithm, "seed": 0}
    base.update(over)
    p = prepare(load_config(None, [f"{k}={v}" for k, v in base.items()]))
    ex = LocalExecutor(p.trainer, p.data, 0)
    rng = np.random.default_rng(0)
    state = p.strategy.init_state(p.init_weights.clone(), rng, ex)
    if personal is not None:  # distinct personal models before the round (FedAMP)
        for k, w in personal(p.init_weights).items():
            state.personal.set(k, w)
    before = {k: state.personal.get(k).clone() for k in range(clients)
              if state.personal is not None and (state.personal.default is not None or state.personal.has(k))}
    w0 = state.weights.clone()
    sel = [int(k) for k in p.strategy.select(state, rng, ex)]
    results, recs = [], {}
    for k in sel:
        plan, recs[k] = _recorded(p.strategy.plan(state, k))
        results.append(p.trainer.train(k, plan, p.data.indices(k, "train"), seed=100 + k))
    state = p.strategy.aggregate(state, results, ex)
    return p, w0, before, state, recs


def _unpack(p, vec):
    """Flat vector -> the MLP's tensors [W1, b1, W2, b2] (layout bookkeeping)."""
    lay = p.trainer.layout
    assert lay.names == ["features.dense.0.weight", "features.dense.0.bias", "head.weight", "head.bias"]
    return [t.reshape(s).clone() for t, s in zip(vec.split(lay.numels), lay.shapes)]


def _pack(ts):
    return torch.cat([t.reshape(-1) for t in ts])


def _loss(P, x, y):
    """Cross-entropy of the 4-3-3 MLP by hand: softmax(relu(x W1ᵀ + b1) W2ᵀ + b2)."""
    W1, b1, W2, b2 = P
    return F.cross_entropy(torch.relu(x @ W1.T + b1) @ W2.T + b2, y)


def _grad(fn, P):
    P = [t.detach().clone().requires_grad_(True) for t in P]
    return [g.detach() for g in torch.autograd.grad(fn(P), P)]


class _SGD:
    """torch.optim.SGD's update (momentum, no dampening, no weight decay) on a list of tensors, fresh state."""

    def __init__(self, lr=LR, momentum=MOM):
        self.lr, self.m, self.buf = lr, momentum, None

    def step(self, P, G, mask=None):
        if self.buf is None:
            self.buf = [g.clone() for g in G]
        else:
            self.buf = [self.m * b + g for b, g in zip(self.buf, G)]
        return [p - self.lr * b if (mask is None or mask[i]) else p for i, (p, b) in enumerate(zip(P, self.buf))]


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=0, atol=ATOL)


# ---- Ditto (Li et al., ICML 2021, Algorithm 1) ------------------------------------------------------------------
def test_ditto_one_round_by_hand():
    lam = 0.5
    p, w0, before, state, recs = _round("ditto", **{"algorithm.lam": lam})
    W0 = _unpack(p, w0)
    # personal: v ← v − η ∇(F_k(v) + λ/2 ‖v − w^t‖²), from v_k = w^0, the federation's SGD
    v, opt = _unpack(p, before[0]), _SGD()
    for x, y in recs[0][0].batches:
        g = _grad(lambda P, x=x, y=y: _loss(P, x, y) + lam / 2 * sum(((a - b) ** 2).sum() for a, b in zip(P, W0)), v)
        v = opt.step(v, g)
    # global: w ← w − η ∇F_k(w) from w^t, fresh optimizer state; the server's FedAvg of one client is its w
    w, opt = W0, _SGD()
    for x, y in recs[0][1].batches:
        w = opt.step(w, _grad(lambda P, x=x, y=y: _loss(P, x, y), w))
    assert len(recs[0][0].batches) == len(recs[0][1].batches) == 8  # 2 epochs × 4 batches each
    _close(state.personal.get(0), _pack(v))
    _close(state.weights, _pack(w))


# ---- APFL (Deng et al. 2020, Algorithm 1, Eqs. 5 and 10) ---------------------------------------------------------
def test_apfl_one_round_by_hand():
    a0, v_lr, a_lr = 0.4, 0.05, 0.2
    p, w0, before, state, recs = _round("apfl", **{"algorithm.alpha": a0, "algorithm.v_lr": v_lr,
                                                   "algorithm.alpha_lr": a_lr, "algorithm.v_momentum": 0.0})
    w, v, a = _unpack(p, w0), _unpack(p, before[0]), a0
    opt = _SGD()
    for x, y in recs[0][0].batches:
        # step t reads w^{t-1}, v^{t-1}, α^{t-1}: v̄ = α v + (1 − α) w
        vbar = [a * vi + (1 - a) * wi for vi, wi in zip(v, w)]
        g_bar = _grad(lambda P, x=x, y=y: _loss(P, x, y), vbar)
        w_new = opt.step(w, _grad(lambda P, x=x, y=y: _loss(P, x, y), w))
        v_new = [vi - v_lr * a * g for vi, g in zip(v, g_bar)]  # Eq. 5: ∇_v f(v̄) = α ∇f(v̄)
        a = float(np.clip(a - a_lr * sum(float(((vi - wi) * g).sum()) for vi, wi, g in zip(v, w, g_bar)), 0, 1))
        w, v = w_new, v_new  # Eq. 10 above: α ← Π(α − η_α ⟨v − w, ∇f(v̄)⟩)
    _close(state.weights, _pack(w))
    _close(state.personal.get(0), _pack(v))
    assert float(state.method.alpha[0]) == pytest.approx(a, abs=ATOL)


# ---- FedRep (Collins et al., ICML 2021, Algorithm 1) -------------------------------------------------------------
def test_fedrep_one_round_by_hand():
    p, w0, before, state, recs = _round("fedrep", **{"algorithm.head_epochs": 2, "algorithm.body_epochs": 1})
    P = _unpack(p, w0)
    P[2:] = [t.clone() for t in _unpack(p, torch.cat([torch.zeros(15), before[0]]))[2:]]  # h_k: its stored head
    opt = _SGD()  # τ_h epochs on the head, the body frozen
    for x, y in recs[0][0].batches:
        P = opt.step(P, _grad(lambda Q, x=x, y=y: _loss(Q, x, y), P), mask=[False, False, True, True])
    head = [t.clone() for t in P[2:]]
    opt = _SGD()  # τ_φ epochs on the body, the head frozen, a fresh optimizer
    for x, y in recs[0][1].batches:
        P = opt.step(P, _grad(lambda Q, x=x, y=y: _loss(Q, x, y), P), mask=[True, True, False, False])
    assert len(recs[0][0].batches) == 8 and len(recs[0][1].batches) == 4
    W0 = _unpack(p, w0)
    _close(state.weights, _pack([*P[:2], *W0[2:]]))  # the server's mean body; the global head slice unused
    _close(state.personal.get(0), _pack(head))
    _close(p.strategy.eval_weights(state, 0), _pack([*P[:2], *head]))


# ---- FedAMP (Huang et al., AAAI 2021, Eqs. 6-7) -------------------------------------------------------------------
@pytest.mark.parametrize("attention", ["exp_dist", "exp_cos"])
def test_fedamp_one_round_by_hand(attention):
    sigma, alpha_k, lam, sw = 2.0, 0.5, 0.8, 0.6

    def personal(w0):
        g = torch.Generator().manual_seed(3)
        return {0: w0 + 0.3 * torch.randn(w0.shape, generator=g), 1: w0 - 0.2 * torch.randn(w0.shape, generator=g)}

    p, w0, before, state, recs = _round("fedamp", clients=2, personal=personal,
                                        **{"algorithm.attention": attention, "algorithm.sigma": sigma,
                                           "algorithm.alpha_k": alpha_k, "algorithm.lam": lam,
                                           "algorithm.self_weight": sw})
    w = [before[0].double(), before[1].double()]
    if attention == "exp_dist":  # ξ_ij = α_k A'(‖w_i − w_j‖²), A'(x) = e^{−x/σ}/σ; ξ_ii = 1 − Σ_{j≠i} ξ_ij
        off = alpha_k * torch.exp(-((w[0] - w[1]) ** 2).sum() / sigma) / sigma
        assert off < 1
        xi = torch.tensor([[1 - off, off], [off, 1 - off]], dtype=torch.float64)
    else:  # HeurFedAMP: ξ_ii = self_weight, the rest by exp(σ cos): with two clients all of it to the other
        xi = torch.tensor([[sw, 1 - sw], [1 - sw, sw]], dtype=torch.float64)
    for i in (0, 1):
        u = _unpack(p, (xi[i, 0] * w[0] + xi[i, 1] * w[1]).float())  # Eq. 6
        P, opt = _unpack(p, before[i]), _SGD()
        for x, y in recs[i][0].batches:  # Eq. 7: F_i(w) + λ/(2α_k) ‖w − u_i‖² from w_i
            P = opt.step(P, _grad(lambda Q, x=x, y=y, u=u: _loss(Q, x, y) + lam / (2 * alpha_k) * sum(
                ((a - b) ** 2).sum() for a, b in zip(Q, u)), P))
        _close(state.personal.get(i), _pack(P))


# ---- pFedMe (Dinh et al., NeurIPS 2020, Algorithm 1) ------------------------------------------------------------
def test_pfedme_one_round_by_hand():
    lam, K, eta_p, eta, beta = 15.0, 3, 0.05, 0.01, 0.7
    p, w0, before, state, recs = _round("pfedme", **{"algorithm.lam": lam, "algorithm.inner_steps": K,
                                                     "algorithm.personal_lr": eta_p, "algorithm.lr": eta,
                                                     "algorithm.beta": beta})
    batches = recs[0][0].batches
    assert len(batches) == 2 * 4 * K  # E = 2 epochs of 4 minibatches, K inner steps each
    theta, w = _unpack(p, w0), _unpack(p, w0)
    for r in range(len(batches) // K):
        x, y = batches[r * K]  # local round r: ONE minibatch D_i for the whole inner solve
        for _ in range(K):  # h̃_i(θ; w, D_i) = f_i(θ; D_i) + λ/2 ‖θ − w‖², plain gradient steps of η_p
            g = _grad(lambda P, x=x, y=y, w=w: _loss(P, x, y) + lam / 2 * sum(((a - b) ** 2).sum()
                                                                              for a, b in zip(P, w)), theta)
            theta = [t - eta_p * gi for t, gi in zip(theta, g)]
        w = [wi - eta * lam * (wi - t) for wi, t in zip(w, theta)]  # w ← w − ηλ(w − θ̃)
    W0 = _unpack(p, w0)
    _close(state.weights, _pack([(1 - beta) * a + beta * b for a, b in zip(W0, w)]))  # (1 − β) w_t + β mean w_i
    _close(state.personal.get(0), _pack(theta))  # θ_i: the personalised model the client is evaluated with
    _close(p.strategy.eval_weights(state, 0), _pack(theta))
