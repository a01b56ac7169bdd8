"""FedAMP — Huang, Chu, Zhou, Wang, Liu, Pei & Zhang, "Personalized Cross-Silo Federated Learning on Non-IID
Data", AAAI 2021 (attentive message passing, Algorithm 1 and HeurFedAMP).

Every client k keeps a personalised model w_k (one row of a client store; the initial model before its first
round). Each round the server builds, for each participant i, a personalised cloud model from the participants'
current models,

    u_i = ξ_ii w_i + Σ_{j≠i} ξ_ij w_j,                                                            (Eq. 6)

and client i minimises F_i(w) + λ/(2α_k) ‖w − u_i‖² from w_i (Eq. 7); the result is its new w_i, with which it is
evaluated. The attention weights ξ (``attention``):

* ``exp_dist`` (FedAMP): ξ_ij = α_k A'(‖w_i − w_j‖²) for j ≠ i with the attention-inducing function
  A(x) = 1 − e^{−x/σ}, i.e. A'(x) = e^{−x/σ}/σ, and ξ_ii = 1 − Σ_{j≠i} ξ_ij. Where Σ_{j≠i} ξ_ij > 1 (the step
  size α_k is too large for the paper's condition) the off-diagonal weights are scaled to sum 1 and ξ_ii = 0;
* ``exp_cos`` (HeurFedAMP, the paper's heuristic for deep networks): ξ_ii = ``self_weight`` and the rest shared
  in proportion to exp(σ · cos(w_i, w_j)).

Both are computed for all participants at once from one (m, m) distance or cosine matrix over the parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flplat.api import (
    ClientPlan,
    ConfigError,
    PersonalizedStrategy,
    ProximalTerm,
    pairwise_distances,
    param_choice,
    register_algorithm,
    sample_uniform,
)


def attention_weights(w: torch.Tensor, attention: str, sigma: float, alpha_k: float = 1.0,
                      self_weight: float = 0.5) -> torch.Tensor:
    """The (m, m) message-passing weights ξ for the models in the rows of ``w`` (rows sum to 1)."""
    m = w.shape[0]
    eye = torch.eye(m, dtype=torch.bool, device=w.device)
    if m == 1:
        return torch.ones(1, 1, dtype=torch.float64, device=w.device)
    if attention == "exp_dist":
        xi = alpha_k * torch.exp(-pairwise_distances(w, 2.0) / sigma) / sigma
        xi = xi.masked_fill(eye, 0.0)
        off = xi.sum(dim=1, keepdim=True)
        xi = torch.where(off > 1, xi / off, xi)
        return xi + torch.diag(1.0 - xi.sum(dim=1))
    x = torch.nn.functional.normalize(w.to(torch.float64), dim=1)
    e = torch.exp(sigma * (x @ x.T)).masked_fill(eye, 0.0)
    return (1.0 - self_weight) * e / e.sum(dim=1, keepdim=True) + self_weight * eye.to(e.dtype)


@dataclass
class FedAMPState:
    """This round's ``participants`` and their cloud models u_i (``cloud``, (m, P) in participant order); None
    before round 1."""

    participants: torch.Tensor | None = None
    cloud: torch.Tensor | None = None


@register_algorithm
class FedAMP(PersonalizedStrategy):
    name = "fedamp"

    @dataclass(frozen=True)
    class Config:
        attention: str = "exp_cos"  # exp_cos (HeurFedAMP) | exp_dist (FedAMP with A(x) = 1 − e^{−x/σ})
        sigma: float = 1.0  # σ of the attention-inducing function
        alpha_k: float = 1.0  # α_k: message-passing step size (exp_dist) and the proximal scale λ/α_k
        lam: float = 1.0  # λ of the local objective
        self_weight: float = 0.5  # ξ_ii for exp_cos

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        param_choice(section, cfg, "attention", ("exp_cos", "exp_dist"))
        for key in ("sigma", "alpha_k"):
            if not getattr(cfg, key) > 0:
                raise ConfigError(f"{section}.{key}={getattr(cfg, key)!r} is out of range; allowed: a number > 0")
        if not cfg.lam >= 0:
            raise ConfigError(f"{section}.lam={cfg.lam!r} is out of range; allowed: a number >= 0")
        if not 0 <= cfg.self_weight <= 1:
            raise ConfigError(f"{section}.self_weight={cfg.self_weight!r} is out of range; allowed: a number in [0, 1]")

    def init_state(self, init_weights, rng, ops):
        state = super().init_state(init_weights, rng, ops)
        state.personal = self.info.client_store(default=state.weights)
        state.method = FedAMPState()
        return state

    def select(self, state, rng, ops):
        chosen = sample_uniform(self.info.num_clients, self.info.client_fraction, rng)
        w = torch.stack([state.personal.get(int(k)) for k in chosen])
        mask = self.info.layout.mask("", params_only=True).to(w.device)
        cfg = self.cfg
        xi = attention_weights(w[:, mask], cfg.attention, cfg.sigma, cfg.alpha_k, cfg.self_weight)
        state.method.participants = torch.as_tensor(chosen)
        state.method.cloud = xi.to(w.dtype) @ w
        return chosen

    def plan(self, state, client):
        part = state.method.participants
        hit = torch.nonzero(part == client) if part is not None else torch.zeros(0, 1)
        # a client planned outside `select` (not a participant) is a lone participant: u_i = w_i
        cloud = state.method.cloud[int(hit[0, 0])] if len(hit) else state.personal.get(client)
        mu = self.cfg.lam / self.cfg.alpha_k
        hooks = (ProximalTerm(cloud, mu),) if mu > 0 else ()
        return ClientPlan(weights=state.personal.get(client), hooks=hooks)

