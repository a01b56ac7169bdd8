"""TrimProx: FedProx's local proximal term with a coordinate-wise trimmed mean on the server.

Local objective of client k (a :class:`~flplat.api.LocalHook`): its loss plus (μ/2)‖w − w_t‖², w_t the global
model it received (Li et al., MLSys 2020, Eq. 2). Server rule: the coordinate-wise β-trimmed mean of the clients'
models (Yin et al., "Byzantine-robust distributed learning", ICML 2018, Def. 2): for every coordinate, drop the
⌊β·m⌋ largest and ⌊β·m⌋ smallest of the m client values and average the rest (unweighted). β = 0 is the plain
mean of the client models.

Everything here comes from :mod:`flplat.api`, as for the built-in algorithms: the proximal term is the api's
:class:`~flplat.api.ProximalTerm` (FedProx's, which Ditto, FedAMP, DA-PFL and FedSoft use too) and the clients'
models come as one ``(m, P)`` stack from :func:`~flplat.api.stack`; only the server rule is this plugin's own.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flplat.api import ClientPlan, ProximalTerm, ServerState, Strategy, check_range, register_algorithm, stack


def trimmed_mean(rows: torch.Tensor, beta: float) -> torch.Tensor:
    """Coordinate-wise β-trimmed mean of the rows of ``rows`` (m, P): per column, the ⌊β·m⌋ smallest and largest
    values are dropped and the rest averaged."""
    m = rows.shape[0]
    b = int(beta * m)
    if 2 * b >= m:
        raise ValueError(f"trimming {b} of {m} values at each end leaves nothing")
    kept = torch.sort(rows, dim=0).values[b:m - b]
    return kept.mean(dim=0)


@register_algorithm
class TrimProx(Strategy):
    name = "trimprox"

    @dataclass(frozen=True)
    class Config:
        mu: float = 0.01  # proximal coefficient μ
        trim: float = 0.1  # β: fraction of the client values dropped at each end, per coordinate

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        check_range(cfg.mu >= 0, f"{section}.mu", cfg.mu, "a number >= 0")
        check_range(0 <= cfg.trim < 0.5, f"{section}.trim", cfg.trim, "a number in [0, 0.5)")

    def plan(self, state: ServerState, client: int) -> ClientPlan:
        return ClientPlan(weights=state.weights, hooks=(ProximalTerm(state.weights, self.cfg.mu),))

    def aggregate(self, state: ServerState, results, ops) -> ServerState:
        state.weights = trimmed_mean(stack(results)[0], self.cfg.trim)
        return state
