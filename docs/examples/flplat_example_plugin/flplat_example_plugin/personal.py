"""LocalHead: a personalised method -- FedPer's shared body with a head kept on each client.

FedPer (Arivazhagan, Aggarwal, Singh & Choudhary, "Federated Learning with Personalization Layers", 2019): the
model is split into a shared body (``features.*``) and a head (``head.*``, the final linear layer) that never leaves
its client. Each round a sampled client k starts from the global body and its own head h_k (the initial head before
its first round), trains both jointly for the round's local epochs, and sends back the body only; the server takes
the sample-weighted mean of the bodies (FedAvg on the body) and every client keeps its head. A training client is
scored with the global body and its own head (``eval_models.seen = "personal"``).

Unseen clients (test-only clients, whose labels are never shown) have no head. ``algorithm.unseen`` states what they
are scored with: ``client_ensemble`` (default) -- the equally weighted prediction ensemble of the trained clients'
models (body + h_k), Flux App. F.1's rule for a method without a global model; ``not_applicable`` -- no test-phase
number (a new client would first have to fit a head on labels it does not show). Never with the body and the
initial head, which no client trained.

Written from :mod:`flplat.api` alone: the per-client heads live in a :class:`~flplat.api.ClientStore` of head size
(``info.client_store``), the head mask in the method's own state (:class:`LocalHeadState`, ``state.method``), and
``local_prefixes`` keeps the head out of the bytes each round counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flplat.api import ClientPlan, EvalModels, ServerState, Strategy, fedavg, param_choice, register_algorithm

UNSEEN = {
    "client_ensemble": EvalModels("personal", "client_ensemble", "the equally weighted prediction ensemble of the "
                                                                 "trained clients' models (shared body, own head)"),
    "not_applicable": EvalModels("personal", "not_applicable", "a client without a head of its own has no model "
                                                               "until it fits one on its labels"),
}


@dataclass
class LocalHeadState:
    """The method's state between rounds (``state.method``): which entries of the flat vector are the head.
    The heads themselves are rows of ``state.personal`` (a ClientStore of head size)."""

    head_mask: torch.Tensor  # (P,) bool


@register_algorithm
class LocalHead(Strategy):
    name = "localhead"
    local_prefixes = ("head.",)  # h_k stays on client k: a round's bytes count the body only
    eval_models = UNSEEN["client_ensemble"]

    @dataclass(frozen=True)
    class Config:
        unseen: str = "client_ensemble"  # the model an unseen client is scored with: client_ensemble | not_applicable

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        param_choice(section, cfg, "unseen", tuple(UNSEEN))

    def __init__(self, cfg, info):
        super().__init__(cfg, info)
        self.eval_models = UNSEEN[cfg.unseen]  # the declaration depends on the config: set per instance

    def init_state(self, init_weights, rng, ops) -> ServerState:
        state = super().init_state(init_weights, rng, ops)  # state.weights: the global body (head slice unused)
        mask = self.info.layout.mask(self.local_prefixes)
        state.method = LocalHeadState(head_mask=mask)
        # one head per client, stored compactly; a client that never trained reads the initial head
        state.personal = self.info.client_store(default=init_weights[mask].clone(), size=int(mask.sum()),
                                                name="heads")
        return state

    def client_model(self, state: ServerState, client: int) -> torch.Tensor:
        """The global body with client ``client``'s own head."""
        mask = state.method.head_mask.to(state.weights.device)
        w = state.weights.clone()
        w[mask] = state.personal.get(client).to(w.device, w.dtype)
        return w

    def plan(self, state, client):
        return ClientPlan(weights=self.client_model(state, client))  # body and head trained jointly (FedPer)

    def aggregate(self, state, results, ops):
        mask = state.method.head_mask.to(state.weights.device)
        for r in results:
            state.personal.set(r.client, r.weights[mask])  # each client keeps its trained head
        state.weights = torch.where(mask, state.weights, fedavg(results))  # FedAvg of the bodies
        return state

    def eval_weights(self, state, client):
        return self.client_model(state, client)

    def global_weights(self, state):
        return None  # no single model that clients use: no pooled global test accuracy
