"""Power-of-Choice (π_pow-d) — Cho, Wang, Joshi, "Towards Understanding Biased Client Selection in Federated
Learning", AISTATS 2022 (preprint: "Client Selection in Federated Learning: Convergence Analysis and
Power-of-Choice Selection Strategies", arXiv:2010.01243).

Each round, with m = max(1, round(q·K)) and p_k = n_k / n:

1. the server samples a candidate set A of d clients without replacement, with probability ∝ p_k;
2. it sends w_t to the candidates, which report their local loss F_k(w_t) = (1/n_k) Σ_{ξ∈B_k} f(w_t, ξ) over
   their whole training split (``ops.evaluate(..., split="train")``: a forward pass over every candidate's
   data each round — the computation and the extra round trip the paper counts as the price of pow-d);
3. the m candidates with the highest F_k(w_t) train (ties: the one sampled first).

Aggregation (``weighting``): the paper's global update averages the selected clients' models uniformly,
w_{t+1} = (1/m) Σ_{k∈S_t} w_k^{t+1}, since sampling already weights clients by p_k (``uniform``, default);
``samples`` is FedAvg's n_k-weighted mean.

The candidate set size: the paper samples a candidate set of size d with m ≤ d ≤ K (its π_pow-d
definition). Clust-PSI-PFL (Table II) tuned d ∈ {6, 8, 10, 16} and used d = 8, below m = 25 and 50 in its
K = 50 and K = 100 cells at q = 0.5. ``small_d`` says what happens when d < m, checked when the strategy is
built (before any run is created):

* ``error`` (default, the paper): a ConfigError naming d, m, q and K;
* ``raise_d``: d_eff = m, so every candidate trains (selection is plain size-proportional sampling);
* ``train_d``: m_eff = d, the d candidates all train (fewer participants than q·K).

d > K is lowered to K (every client a candidate). The effective values are logged every round (``poc_d``,
``poc_m``). Clients with n_k = 0 become candidates only once the clients with data are exhausted, and a candidate
without training data ranks last. The paper's cheaper variants (cpow-d: loss on a mini-batch; rpow-d: stale
losses from the last participation) are not implemented. The sampling and loss helpers
(:func:`~flplat.api.sample_proportional`, :func:`~flplat.api.client_losses`, :func:`~flplat.api.num_selected`) are
method blocks HACCS and FedCLS share.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from flplat.api import (
    ConfigError,
    FedAvgStrategy,
    client_losses,
    num_selected,
    param_choice,
    register_algorithm,
    sample_proportional,
    stack,
    weighted_mean,
)

WEIGHTINGS = ("uniform", "samples")
SMALL_D = ("error", "raise_d", "train_d")


@register_algorithm
class PowerOfChoice(FedAvgStrategy):
    name = "poc"

    @dataclass(frozen=True)
    class Config:
        d: int = 8  # candidate set size (Clust-PSI-PFL Table II grid: 6, 8, 10, 16)
        weighting: str = "uniform"  # uniform: (1/m) Σ w_k (the paper) | samples: FedAvg's n_k / n
        small_d: str = "error"  # d < m: error (the paper: m <= d <= K) | raise_d (d = m) | train_d (m = d)

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        if not cfg.d >= 1:
            raise ConfigError(f"{section}.d={cfg.d!r} is out of range; allowed: an integer >= 1")
        for key, allowed in (("weighting", WEIGHTINGS), ("small_d", SMALL_D)):
            param_choice(section, cfg, key, allowed)

    def __init__(self, cfg, info):
        super().__init__(cfg, info)
        k = info.num_clients
        m = num_selected(k, info.client_fraction)
        d = min(k, int(cfg.d))
        if d < m:
            if cfg.small_d == "error":
                raise ConfigError(f"algorithm.d={cfg.d} is below m={m} (federation.client_fraction="
                                  f"{info.client_fraction} x {k} clients); Power-of-Choice needs m <= d <= K: allowed: "
                                  f"an integer in [{m}, {k}], or algorithm.small_d=raise_d (d = m) or train_d (m = d)")
            d, m = (m, m) if cfg.small_d == "raise_d" else (d, d)
        self.d, self.m = d, m  # the effective candidate-set size and number of trained clients

    def select(self, state, rng, ops):
        d, m = self.d, self.m
        cand = sample_proportional(rng, self.info.num_samples, d)
        loss = np.nan_to_num(client_losses(ops, cand, state.weights), nan=-np.inf)
        best = np.argsort(-loss, kind="stable")[:m]
        return np.sort(cand[best])

    def aggregate(self, state, results, ops):
        if self.cfg.weighting == "samples":
            return super().aggregate(state, results, ops)
        w, n = stack(results)
        state.weights = weighted_mean(w, torch.ones_like(n))
        return state

    def round_metrics(self, state):
        return {**super().round_metrics(state), "poc_d": float(self.d), "poc_m": float(self.m)}
