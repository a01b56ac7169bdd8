"""Local hooks several methods share: a pull towards a fixed centre.

:class:`CentredHook` views a flat centre vector per parameter at setup; :class:`ProximalTerm` adds FedProx's
(μ/2)‖w − c‖² (Li et al., MLSys 2020, Eq. 2) to every batch loss. FedProx pulls towards the global model, Ditto
towards it from the personal model, FedAMP towards the client's cloud model, DA-PFL towards its aggregated model
and FedSoft towards the clients' mixture centre (a weighted sum of proximal terms is one proximal term around the
weighted centre). ``functional_loss`` is a pure function of the parameters, so vectorised clients keep it.
"""

from __future__ import annotations

import torch

from flplat.protocol.strategy import LocalHook

__all__ = ["CentredHook", "ProximalTerm"]


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
