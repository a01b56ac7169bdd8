"""FedProx — Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020.

FedAvg whose local objective adds the proximal term (μ/2)‖w − w_t‖² (Eq. 2 of the paper), w_t being the
global model the client received. With μ = 0 it is exactly FedAvg. The paper's other change (tolerating
partial local work from stragglers) is a systems aspect not simulated here. The proximal term is
:class:`~flplat.api.ProximalTerm`, which Ditto, FedAMP, DA-PFL and FedSoft use too.
"""

from __future__ import annotations

from dataclasses import dataclass

from flplat.api import ClientPlan, ConfigError, FedAvgStrategy, ProximalTerm, register_algorithm


@register_algorithm
class FedProx(FedAvgStrategy):
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
