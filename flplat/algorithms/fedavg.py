"""FedAvg — McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized Data",
AISTATS 2017.

Each round a fraction q of the K clients is sampled uniformly without replacement, each runs E local epochs
from the global model w_t, and the server sets w_{t+1} = Σ_k (n_k / n) w_k^{t+1} over the sampled clients
(n_k: local training-set size).
"""

from __future__ import annotations

from flplat.api import Strategy, register_algorithm
from flplat.maths.aggregation import fedavg


@register_algorithm
class FedAvg(Strategy):
    name = "fedavg"
    reduces_across_shards = True  # the sample-weighted mean of the round's models is all aggregate reads

    def aggregate(self, state, results, ops):
        state.weights = fedavg(results)
        return state
