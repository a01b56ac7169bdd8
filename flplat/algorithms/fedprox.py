"""FedProx — Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020.

FedAvg whose local objective adds the proximal term (μ/2)‖w − w_t‖² (Eq. 2 of the paper), w_t being the
global model the client received. With μ = 0 it is exactly FedAvg. The paper's other change (tolerating
partial local work from stragglers) is a systems aspect not simulated here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flplat.algorithms.fedavg import FedAvg
from flplat.api import ClientPlan, LocalHook, register_algorithm
from flplat.errors import ConfigError


class CentredHook(LocalHook):
    """A local hook that pulls towards a fixed centre ``c`` given as a flat vector (viewed per parameter at setup)."""

    def __init__(self, center: torch.Tensor):
        self.center = center

    def setup(self, ctx):
        self._centers = ctx.param_views(self.center)


class ProximalTerm(CentredHook):
    """(μ/2) Σ_l ‖w_l − c_l‖² over the parameters, against a fixed centre ``c`` given as a flat vector."""

    vectorizes = True  # loss is functional_loss

    def __init__(self, center: torch.Tensor, mu: float):
        super().__init__(center)
        self.mu = mu

    def loss(self, ctx):
        return self.functional_loss(ctx.params)

    def functional_loss(self, params):
        sq = sum(((p - c) ** 2).sum() for p, c in zip(params, self._centers))
        return 0.5 * self.mu * sq


@register_algorithm
class FedProx(FedAvg):
    name = "fedprox"

    @dataclass(frozen=True)
    class Config:
        mu: float = 0.01  # proximal coefficient μ (Clust-PSI-PFL Table II grid: 0.001, 0.01, 0.1)

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        if not cfg.mu >= 0:
            raise ConfigError(f"{section}.mu={cfg.mu!r} is out of range; allowed: a number >= 0")

    def plan(self, state, client):
        return ClientPlan(weights=state.weights, hooks=(ProximalTerm(state.weights, self.cfg.mu),))
