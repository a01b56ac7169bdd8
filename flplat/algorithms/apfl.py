"""APFL — Deng, Kamani, Mahdavi, "Adaptive Personalized Federated Learning", arXiv:2003.13461, 2020
(Algorithm 1).

Every client i keeps a local model v_i and a mixing weight α_i ∈ [0, 1]; its personalised model is the mixture
v̄_i = α_i v_i + (1 − α_i) w of its local model and the global model w. Per local step on a minibatch ξ:

* w ← w − η ∇f_i(w; ξ)                                     (the ordinary local training of the global copy);
* v_i ← v_i − η ∇_v f_i(v̄_i; ξ) = v_i − η α_i ∇f_i(v̄_i; ξ)  (Eq. 5, local-model step);
* α_i ← Π_[0,1](α_i − η_α ⟨v_i − w, ∇f_i(v̄_i; ξ)⟩)          (Eq. 10, adaptive α; ``adaptive_alpha``).

Only w goes to the server (FedAvg over the sampled clients); v_i (a :class:`~flplat.protocol.state.ClientStore` row) and
α_i (``state.method.alpha``) stay on the client. The global copy is trained by the platform's loop (federation
optimizer, learning rate η); v and α are updated by a hook after each step on the same minibatch: v by its own
optimizer (``v_optimizer`` sgd | adam, ``v_lr``, ``v_momentum``; fresh each round like the federation's — the
paper uses the same η and optimizer for w and v, so set these to the federation's: defaults are Flux's SGD
0.005, momentum 0.9), α by projected gradient steps of ``alpha_lr``.
The v- and α-steps use v̄ = α v + (1 − α) w with w *before* this step's update, as Algorithm 1 (every line of step t
reads the iterates of step t − 1; ``mix_with: before``, default): the hook keeps a copy of w from the previous step.
``mix_with: after`` (opt-in) uses w after this step's update (the earlier flplat; one step of w apart). v_i starts as
the initial model (v_i^0 = w^0).

Vectorised clients (``federation.vectorize``): :class:`StackedMixture` takes the same v- and α-steps for a group of
clients at once (v and α stacked, one batched gradient of the mixed models' losses); ``flplat check``'s ``vectorize``
property holds it to the loop's weights, v and α.

Evaluation: client i uses v̄_i = α_i v_i + (1 − α_i) w with the current global w (a client that never trained
uses w). With α = 0 and ``adaptive_alpha: false`` APFL is FedAvg (the hook never touches w).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.func import functional_call

from flplat.api import (
    ClientPlan,
    ConfigError,
    EvalModels,
    LocalHook,
    ServerState,
    StackedHook,
    Strategy,
    fedavg,
    param_choice,
    register_algorithm,
    task_loss,
)


class PersonalMixture(LocalHook):
    """Keeps v and α; after each step takes APFL's v- and α-steps on that step's batch (see the module doc)."""

    def __init__(self, v: torch.Tensor, alpha: float, v_lr: float, alpha_lr: float, adaptive: bool,
                 v_optimizer: str = "sgd", v_momentum: float = 0.0, mix_with: str = "before"):
        self.v0, self.alpha, self.v_lr, self.alpha_lr, self.adaptive = v, alpha, v_lr, alpha_lr, adaptive
        self.v_optimizer, self.v_momentum, self.mix_with = v_optimizer, v_momentum, mix_with

    def setup(self, ctx):
        self._v = [t.detach().clone() for t in ctx.param_views(self.v0)]
        self._opt = (torch.optim.Adam(self._v, lr=self.v_lr) if self.v_optimizer == "adam"
                     else torch.optim.SGD(self._v, lr=self.v_lr, momentum=self.v_momentum))
        name_of = {id(p): n for n, p in ctx.net.named_parameters()}
        self._names = [name_of[id(p)] for p in ctx.params]
        self._w_prev = [p.detach().clone() for p in ctx.params]  # w before the coming step (mix_with=before)

    def after_step(self, ctx):
        if self.alpha == 0 and not self.adaptive:
            return  # v̄ = w: v gets no gradient and α stays 0
        x, y = ctx.batch
        a = self.alpha
        w = self._w_prev if self.mix_with == "before" else [p.detach() for p in ctx.params]
        mixed = [(a * v + (1 - a) * p).requires_grad_(True) for v, p in zip(self._v, w)]
        buffers = {n: b.clone() for n, b in ctx.net.named_buffers()}  # running statistics are not v's to change
        with torch.enable_grad():
            loss = task_loss(functional_call(ctx.net, {**dict(zip(self._names, mixed)), **buffers}, (x,)), y)
            grads = torch.autograd.grad(loss, mixed)
        with torch.no_grad():
            if self.adaptive:
                g_alpha = sum(float(((v - p) * g).sum()) for v, p, g in zip(self._v, w, grads))
                self.alpha = float(np.clip(a - self.alpha_lr * g_alpha, 0.0, 1.0))
            for v, g in zip(self._v, grads):
                v.grad = a * g  # ∇_v f(α v + (1 − α) w) = α ∇f(v̄)
        self._opt.step()
        if self.mix_with == "before":
            torch._foreach_copy_(self._w_prev, [p.detach() for p in ctx.params])

    def finalize(self, ctx):
        vec = ctx.layout.flatten().to(ctx.params[0].device)
        for view, v in zip(ctx.param_views(vec), self._v):
            view.copy_(v)
        return {"v": vec.cpu(), "alpha": self.alpha}


class StackedMixture(StackedHook):
    """:class:`PersonalMixture` for a group of vectorised clients: v as ``(G, ...)`` tensors trained by the engine's
    stacked optimizer, α as a ``(G,)`` float64 tensor, the same v- and α-steps on each live client's batch."""

    def __init__(self, hooks, ctx):
        super().__init__(hooks, ctx)
        h = hooks[0]
        settings = (h.v_lr, h.alpha_lr, h.adaptive, h.v_optimizer, h.v_momentum, h.mix_with)
        if any((o.v_lr, o.alpha_lr, o.adaptive, o.v_optimizer, o.v_momentum, o.mix_with) != settings for o in hooks):
            raise ValueError("StackedMixture: the clients of a group must share APFL's settings")
        self.adaptive, self.alpha_lr, self.before = h.adaptive, h.alpha_lr, h.mix_with == "before"
        self.v = ctx.stack([o.v0 for o in hooks])
        self.alpha = torch.tensor([o.alpha for o in hooks], dtype=torch.float64, device=ctx.device)
        self.idle = not h.adaptive and all(o.alpha == 0 for o in hooks)  # v̄ = w for every client: nothing to do
        self.w_prev = [p.clone() for p in ctx.params] if self.before else None
        self.opt = ctx.optimizer(h.v_optimizer, self.v, h.v_lr, h.v_momentum if h.v_optimizer == "sgd" else 0.0, 0.0)

    def after_step(self, step):
        if self.idle:
            return
        g = step.live
        a = self.alpha[:g].clone()  # α before this step's update
        w = [p[:g] for p in self.w_prev] if self.before else step.params
        v = [t[:g] for t in self.v]

        def per_client(c: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
            return c.float().view(-1, *[1] * (like.dim() - 1))

        mixed = [(per_client(a, t) * t + per_client(1 - a, t) * p).requires_grad_(True) for t, p in zip(v, w)]
        with torch.enable_grad():
            grads = torch.autograd.grad(step.losses(mixed).sum(), mixed)  # each client's ∇f_i(v̄_i; ξ)
        with torch.no_grad():
            if self.adaptive:
                g_alpha = sum(((t - p) * d).flatten(1).sum(1).double() for t, p, d in zip(v, w, grads))
                self.alpha[:g] = (a - self.alpha_lr * g_alpha).clamp(0.0, 1.0)
            v_grads = [per_client(a, d) * d for d in grads]  # α_i ∇f_i(v̄_i)
        self.opt.step(v_grads, g)
        if self.before:
            with torch.no_grad():
                for p, q in zip(w, step.params):
                    p.copy_(q)

    def finalize(self, weights):
        v = self.ctx.with_params(weights, self.v)
        return [{"v": v[g].clone().cpu(), "alpha": float(self.alpha[g])} for g in range(len(self.hooks))]


PersonalMixture.Stacked = StackedMixture


@dataclass
class APFLState:
    """``alpha``: (K,) each client's mixing weight α_i as it last reported it."""

    alpha: np.ndarray


@register_algorithm
class APFL(Strategy):
    name = "apfl"
    eval_models = EvalModels("personal", "global", "the global model w (what a client that never trained uses)")

    @dataclass(frozen=True)
    class Config:
        alpha: float = 0.5  # initial α_i
        adaptive_alpha: bool = True  # learn α_i by gradient (Eq. 10); false: fixed α
        v_optimizer: str = "sgd"  # optimizer of the local model v: sgd | adam (the paper: the same as w's)
        v_lr: float = 0.005  # its learning rate (the paper: the same η as w)
        v_momentum: float = 0.9  # sgd momentum
        alpha_lr: float = 0.005  # η_α
        mix_with: str = "before"  # w in v̄ for the v- and α-steps: before this step's update (paper) | after

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        if not 0 <= cfg.alpha <= 1:
            raise ConfigError(f"{section}.alpha={cfg.alpha!r} is out of range; allowed: a number in [0, 1]")
        param_choice(section, cfg, "v_optimizer", ("sgd", "adam"))
        param_choice(section, cfg, "mix_with", ("before", "after"))
        for key in ("v_lr", "alpha_lr", "v_momentum"):
            if not getattr(cfg, key) >= 0:
                raise ConfigError(f"{section}.{key}={getattr(cfg, key)!r} is out of range; allowed: a number >= 0")

    def init_state(self, init_weights, rng, ops):
        state = ServerState(weights=init_weights.clone(), personal=self.info.client_store(default=init_weights.clone()))
        state.method = APFLState(alpha=np.full(self.info.num_clients, float(self.cfg.alpha)))
        return state

    def plan(self, state, client):
        cfg = self.cfg
        hook = PersonalMixture(state.personal.get(client), float(state.method.alpha[client]), cfg.v_lr,
                               cfg.alpha_lr, cfg.adaptive_alpha, cfg.v_optimizer, cfg.v_momentum, cfg.mix_with)
        return ClientPlan(weights=state.weights, hooks=(hook,))

    def aggregate(self, state, results, ops):
        if not results:
            return state
        state.weights = fedavg(results)
        for r in results:
            state.personal.set(r.client, r.extra["v"].to(state.weights.device))
            state.method.alpha[r.client] = r.extra["alpha"]
        return state

    def eval_weights(self, state, client):
        a = float(state.method.alpha[client])
        if not state.personal.has(client) or a == 0:
            return state.weights
        return a * state.personal.get(client) + (1 - a) * state.weights

    def round_metrics(self, state):
        return {"alpha_mean": float(np.mean(state.method.alpha))}
