"""FedRep — Collins, Hassani, Mokhtari & Shakkottai, "Exploiting Shared Representations for Personalized
Federated Learning", ICML 2021 (Algorithm 1).

The model is split into a shared body φ (``features.*``) and a local head h_k (``head.*``). Each round a sampled
client starts from the global body φ^t and its own head h_k (the initial head before its first round), trains the
head for ``head_epochs`` epochs with the body frozen, then the body for ``body_epochs`` epochs with the head frozen
(one plan with a second phase). The server averages the bodies, φ^{t+1} = (1/|S_t|) Σ_k φ_k (the paper's
uniform mean), and each client keeps its head: heads are stored per client as the head slice of the flat vector
only (``layout.mask("head.")``). A client is evaluated with φ^t and its own head. Normalisation buffers belong to
the body and are averaged with it.

Unseen clients (Flux's test phase: test-only clients whose labels are never shown) have no head of their own, and
the paper's answer for a new client (§5: learn a head h on the fixed φ) needs labels. They are scored with the equally
weighted prediction ensemble of the trained clients' models, (1/|T|) Σ_{k∈T} softmax(h_k(φ(x))), T the training
clients that have trained: Flux App. F.1's rule for a method without a test-time mechanism, each client a cluster of
one (``eval_models.unseen = client_ensemble``, logged as ``flplat.eval.unseen_model``). Never with φ and the initial
head (the head slice of the global vector, which no client trains).

Traffic: the head never leaves its client, so a round counts the body only, both ways (``local_prefixes``:
``bytes_down`` = ``bytes_up`` = 4 bytes × the body's entries × the sampled clients).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flplat.api import ClientPlan, ConfigError, EvalModels, Strategy, register_algorithm, stack


@dataclass
class FedRepState:
    """``head_mask``: the entries of the flat vector that are the head (kept per client in ``state.personal``)."""

    head_mask: torch.Tensor


@register_algorithm
class FedRep(Strategy):
    name = "fedrep"
    eval_models = EvalModels("personal", "client_ensemble", "the equally weighted prediction ensemble of the trained "
                                                            "clients' models (φ with each one's head h_k)")
    local_prefixes = ("head.",)  # h_k stays on client k: only φ travels (bytes_down / bytes_up)

    @dataclass(frozen=True)
    class Config:
        head_epochs: int = 10  # τ_h: local epochs on the head (paper: 10)
        body_epochs: int = 1  # τ_φ: local epochs on the body (paper: 1)

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        for key in ("head_epochs", "body_epochs"):
            if getattr(cfg, key) < 1:
                raise ConfigError(f"{section}.{key}={getattr(cfg, key)!r} is out of range; allowed: an integer >= 1")

    def init_state(self, init_weights, rng, ops):
        state = super().init_state(init_weights, rng, ops)
        mask = self.info.layout.mask(self.local_prefixes)
        if not mask.any():
            raise ValueError("FedRep needs a model with a `head` (every flplat model is a SplitModel)")
        state.method = FedRepState(head_mask=mask)
        state.personal = self.info.client_store(default=init_weights[mask].clone(), size=int(mask.sum()),
                                                name="heads")
        return state

    def _with_head(self, state, client: int) -> torch.Tensor:
        mask = state.method.head_mask.to(state.weights.device)
        w = state.weights.clone()
        w[mask] = state.personal.get(client).to(w.device, w.dtype)
        return w

    def plan(self, state, client):
        return ClientPlan(weights=self._with_head(state, client), trainable="head", epochs=self.cfg.head_epochs,
                          phases=(ClientPlan(weights=None, trainable="features", epochs=self.cfg.body_epochs),))

    def aggregate(self, state, results, ops):
        if not results:
            return state
        w, _ = stack(results)
        mask = state.method.head_mask.to(w.device)
        for r in results:
            state.personal.set(r.client, r.weights[mask])
        body = w.mean(dim=0)
        state.weights = torch.where(mask, state.weights, body)  # the head slice of the global vector is unused
        return state

    def eval_weights(self, state, client):
        return self._with_head(state, client)

    def global_weights(self, state):
        return None
