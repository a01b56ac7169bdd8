"""Strategy bases that several methods build on.

:class:`FedAvgStrategy` is FedAvg's server (McMahan et al., AISTATS 2017): the protocol's defaults (uniform client
sampling, every client trains from the global model) and the sample-weighted mean of the returned models. The
``fedavg`` algorithm registers it as it is; FedProx, the FedOpt family, Power-of-Choice, HACCS and FedCLS change
one part of it. A plugin that changes only the local objective or the selection subclasses it too.
"""

from __future__ import annotations

from flplat.blocks.aggregation import fedavg
from flplat.protocol.strategy import Strategy

__all__ = ["FedAvgStrategy"]


class FedAvgStrategy(Strategy):
    """w_{t+1} = Σ_k (n_k / n) w_k^{t+1} over the round's clients; the rest is :class:`Strategy`'s default."""

    reduces_across_shards = True  # the sample-weighted mean of the round's models is all aggregate reads

    def aggregate(self, state, results, ops):
        state.weights = fedavg(results)
        return state
