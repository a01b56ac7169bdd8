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

Where the paper leaves things open: d < m is raised to m (the trained set must come from A) and d > K lowered
to K; clients with n_k = 0 become candidates only once the clients with data are exhausted, and a candidate
without training data ranks last. The paper's cheaper variants (cpow-d: loss on a mini-batch; rpow-d: stale
losses from the last participation) are not implemented. Clust-PSI-PFL (Table II) tuned d ∈ {6, 8, 10, 16}
and used d = 8.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from flplat.algorithms import register
from flplat.algorithms.fedavg import FedAvg
from flplat.errors import ConfigError
from flplat.maths.aggregation import stack, weighted_mean

WEIGHTINGS = ("uniform", "samples")


def num_selected(num_clients: int, fraction: float) -> int:
    """m = max(1, round(q·K)), as in uniform sampling."""
    return max(1, int(round(fraction * num_clients)))


def sample_proportional(rng: np.random.Generator, weights, size: int) -> np.ndarray:
    """``size`` distinct indices drawn one after another with probability ∝ ``weights`` (successive sampling
    without replacement); once the positive-weight entries are used up, the rest come uniformly at random."""
    w = np.nan_to_num(np.asarray(weights, dtype=np.float64), nan=0.0)
    pos, rest = np.flatnonzero(w > 0), np.flatnonzero(w <= 0)
    k = min(size, len(pos))
    first = rng.choice(pos, size=k, replace=False, p=w[pos] / w[pos].sum()) if k else pos[:0]
    second = rng.choice(rest, size=size - k, replace=False) if size > k else rest[:0]
    return np.concatenate([first, second]).astype(np.int64)


def client_losses(ops, clients: Sequence[int], weights: torch.Tensor) -> np.ndarray:
    """F_k(w) on each client's training split (NaN for a client without training data)."""
    res = ops.evaluate([(int(k), weights) for k in clients], split="train")
    return np.array([r.loss for r in res], dtype=np.float64)


@register
class PowerOfChoice(FedAvg):
    name = "poc"

    @dataclass(frozen=True)
    class Config:
        d: int = 8  # candidate set size (Clust-PSI-PFL Table II grid: 6, 8, 10, 16)
        weighting: str = "uniform"  # uniform: (1/m) Σ w_k (the paper) | samples: FedAvg's n_k / n

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        if not cfg.d >= 1:
            raise ConfigError(f"{section}.d={cfg.d!r} is out of range; allowed: an integer >= 1")
        if cfg.weighting not in WEIGHTINGS:
            raise ConfigError(f"{section}.weighting={cfg.weighting!r} is not valid; choose one of: "
                              f"{', '.join(WEIGHTINGS)}")

    def select(self, state, rng, ops):
        k = self.info.num_clients
        m = num_selected(k, self.info.client_fraction)
        d = min(k, max(int(self.cfg.d), m))
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
