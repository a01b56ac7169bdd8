"""Ditto — Li, Hu, Beirami & Smith, "Ditto: Fair and Robust Federated Learning Through Personalization",
ICML 2021 (Algorithm 1).

Two models: a global model w trained by FedAvg, and a personalised model v_k per client. Each round a sampled
client k receives w^t and runs two local phases (one :class:`~flplat.protocol.strategy.ClientPlan` with a second
phase):

1. the personal objective  h_k(v; w^t) = F_k(v) + (λ/2) ‖v − w^t‖²  from its stored v_k (initially w^0), for
   ``personal_epochs`` epochs (the paper's s local steps; None: ``federation.local_epochs``);
2. the global objective F_k(w) from w^t for ``federation.local_epochs`` epochs (the paper's local solver for G);

v_k stays on the client (the store), only the global update travels up, and w^{t+1} is the sample-size weighted
mean of the global updates (FedAvg). Clients are evaluated with v_k. With λ = 0 the personal models are exactly
local training (:mod:`flplat.algorithms.local`) and the global model is exactly FedAvg's: both phases use the
client-round seed of a stand-alone plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from flplat.api import ClientPlan, ConfigError, EvalModels, ProximalTerm, Strategy, fedavg, register_algorithm


@register_algorithm
class Ditto(Strategy):
    name = "ditto"
    eval_models = EvalModels("personal", "global", "the global model w (trained by FedAvg)")

    @dataclass(frozen=True)
    class Config:
        lam: float = 0.1  # λ (Ditto's grid: 0.01, 0.1, 1, 2)
        personal_epochs: int | None = None  # epochs on the personal objective (None: federation.local_epochs)

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        if not cfg.lam >= 0:
            raise ConfigError(f"{section}.lam={cfg.lam!r} is out of range; allowed: a number >= 0")
        if cfg.personal_epochs is not None and cfg.personal_epochs < 1:
            raise ConfigError(f"{section}.personal_epochs={cfg.personal_epochs!r} is out of range; "
                              "allowed: an integer >= 1 or null")

    def init_state(self, init_weights, rng, ops):
        state = super().init_state(init_weights, rng, ops)
        state.personal = self.info.client_store(default=state.weights)
        return state

    def plan(self, state, client):
        hooks = (ProximalTerm(state.weights, self.cfg.lam),) if self.cfg.lam > 0 else ()
        return ClientPlan(weights=state.personal.get(client), hooks=hooks, epochs=self.cfg.personal_epochs,
                          phases=(ClientPlan(weights=state.weights),))

    def aggregate(self, state, results, ops):
        if not results:
            return state
        for r in results:
            state.personal.set(r.client, r.extra["phase_weights"][0])
        state.weights = fedavg(results)
        return state

    def eval_weights(self, state, client):
        return state.personal.get(client)
