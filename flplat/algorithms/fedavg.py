"""FedAvg — McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized Data",
AISTATS 2017.

Each round a fraction q of the K clients is sampled uniformly without replacement, each runs E local epochs
from the global model w_t, and the server sets w_{t+1} = Σ_k (n_k / n) w_k^{t+1} over the sampled clients
(n_k: local training-set size). The server is :class:`~flplat.api.FedAvgStrategy`, which the methods that change
one part of FedAvg (FedProx, FedOpt, Power-of-Choice, HACCS, FedCLS) subclass too.
"""

from __future__ import annotations

from flplat.api import FedAvgStrategy, register_algorithm


@register_algorithm
class FedAvg(FedAvgStrategy):
    name = "fedavg"
