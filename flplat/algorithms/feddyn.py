"""FedDyn — Acar, Zhao, Matas, Mattina, Whatmough & Saligrama, "Federated Learning Based on Dynamic
Regularization", ICLR 2021 (Algorithm 1).

Each sampled client k minimises the dynamically regularised objective

    L_k(θ) − ⟨∇L_k(θ_k^{t−1}), θ⟩ + (α/2) ‖θ − θ^{t−1}‖²

from the server model θ^{t−1}, and updates its state h_k := ∇L_k(θ_k^t) = h_k − α (θ_k^t − θ^{t−1}) (h_k = 0
initially; one row of a client store). The server keeps h and sets

    h^t = h^{t−1} − α (1/K) Σ_{k∈P_t} (θ_k^t − θ^{t−1}),      θ^t = (1/|P_t|) Σ_{k∈P_t} θ_k^t − h^t / α

(K: the clients of the federation, P_t: the round's participants; the paper's uniform mean). K is all the
clients unless another method runs FedDyn on a subset (``Strategy.population``: PQFed's inner federation of the
target and its collaborators, where K is that group's size). The linear term, the proximal term and
the h-correction act on the model's parameters only; normalisation buffers are plainly averaged. A standard
single-model strategy (evaluated with θ^t), so other methods (PQFed) can run it as their inner algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flplat.api import ClientPlan, ConfigError, LocalHook, Strategy, register_algorithm, stack


class DynamicRegularizer(LocalHook):
    """−⟨g, θ⟩ + (α/2) ‖θ − c‖² over the parameters, with g and c given as flat vectors."""

    vectorizes = True  # loss is functional_loss

    def __init__(self, grad: torch.Tensor, center: torch.Tensor, alpha: float):
        self.grad, self.center, self.alpha = grad, center, alpha

    def setup(self, ctx):
        self._grads = ctx.param_views(self.grad)
        self._centers = ctx.param_views(self.center)

    def loss(self, ctx):
        return self.functional_loss(ctx.params)

    def functional_loss(self, params):
        lin = sum((p * g).sum() for p, g in zip(params, self._grads))
        sq = sum(((p - c) ** 2).sum() for p, c in zip(params, self._centers))
        return 0.5 * self.alpha * sq - lin


@dataclass
class FedDynState:
    """``h``: the server's correction h (Eq. 4 of the paper; 0 at start); ``param_mask``: which entries of the flat
    vector are parameters (the correction leaves the batch-norm statistics out)."""

    h: torch.Tensor
    param_mask: torch.Tensor


@register_algorithm
class FedDyn(Strategy):
    name = "feddyn"

    @dataclass(frozen=True)
    class Config:
        alpha: float = 0.01  # α (the paper's grid: 0.1, 0.01, 0.001)

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        if not cfg.alpha > 0:
            raise ConfigError(f"{section}.alpha={cfg.alpha!r} is out of range; allowed: a number > 0")

    def init_state(self, init_weights, rng, ops):
        state = super().init_state(init_weights, rng, ops)
        state.personal = self.info.client_store(default=torch.zeros_like(init_weights), name="feddyn_grad")
        state.method = FedDynState(h=torch.zeros_like(init_weights),
                                   param_mask=self.info.layout.mask("", params_only=True))
        return state

    def plan(self, state, client):
        return ClientPlan(weights=state.weights,
                          hooks=(DynamicRegularizer(state.personal.get(client), state.weights, self.cfg.alpha),))

    def aggregate(self, state, results, ops):
        if not results:
            return state
        a, prev = self.cfg.alpha, state.weights
        w, _ = stack(results)
        mask = state.method.param_mask.to(w.device)
        delta = (w - prev) * mask  # parameters only
        for r, d in zip(results, delta):
            state.personal.set(r.client, state.personal.get(r.client).to(d.device) - a * d)
        k = self.population or self.info.num_clients
        state.method.h = state.method.h.to(w.device) - a * delta.sum(dim=0) / k
        state.weights = w.mean(dim=0) - state.method.h / a
        return state
