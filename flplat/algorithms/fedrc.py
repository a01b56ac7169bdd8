"""FedRC — Guo, Tang, Lin, "FedRC: Tackling Diverse Distribution Shifts Challenge in Federated Learning by
Robust Clustering", ICML 2024 (arXiv:2301.12379; Algorithm 1).

FedRC maximises the robust-clustering objective

    L(θ, ω) = (1/N) Σ_i Σ_j log Σ_k ω_ik I(x_ij, y_ij; θ_k),   I(x, y; θ_k) = P(y | x; θ_k) / P(y; θ_k),

which, unlike the mixture likelihood of FedEM, divides each component's conditional by its label marginal
P(y; θ_k): clients with the same P(y | x) but different label (or feature) distributions are not pulled apart,
only concept shifts separate clusters. Its alternating optimisation (Algorithm 1) per sampled client i:

* γ_ijk = ω_ik I(x_ij, y_ij; θ_k) / Σ_n ω_in I(x_ij, y_ij; θ_n)   (with P(y|x; θ_k) = exp(−ℓ_k));
* ω_ik = (1/N_i) Σ_j γ_ijk;
* P(y = c; θ_k) = Σ_i Σ_j 1{y_ij = c} γ_ijk / Σ_i Σ_j γ_ijk — the label marginal of cluster k, aggregated by
  the server from the clients' soft label counts Σ_j 1{y_ij = c} γ_ijk (a (K, M, C) array; each client's last
  report is kept, initialised to its label counts / M);
* every θ_k is trained on the γ-weighted loss and the server averages with weights Σ_j γ_ijk (``aggregation:
  responsibility``; ``samples`` weights by n_i like FedEM).

It shares FedEM's machinery (:class:`~flplat.api.MixtureStrategy`): the γ-weighted local loss is realised by giving
every sample to one cluster drawn from γ, and evaluation uses the cluster of largest ω_ik plus the mixture
``mixture_accuracy``. Simplifications: the paper's optional creation/removal of clusters during training is not
implemented (M = ``num_clusters`` is fixed, as in Flux's comparison, App. E.1); a small ``prior_floor`` keeps
P(y; θ_k) away from 0 for labels a cluster has not seen.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from flplat.api import (
    MIXTURE_AGGREGATIONS,
    TRUE_M,
    ConfigError,
    MixtureState,
    MixtureStrategy,
    param_choice,
    param_out_of_range,
    register_algorithm,
)


@dataclass
class FedRCState(MixtureState):
    """FedEM's mixture state plus ``label_mass``: the (K, M, C) soft label counts Σ_j 1{y_ij = c} γ_ijk each client
    last reported (its label counts / M at start)."""

    label_mass: np.ndarray | None = None


@register_algorithm
class FedRC(MixtureStrategy):
    name = "fedrc"
    multilabel_unsupported = "its label prior P(y) is over one class label per sample"
    m_key = "num_clusters"
    State = FedRCState

    @dataclass(frozen=True)
    class Config:
        num_clusters: int = 3  # M; 0: the partition's true M (Flux App. E.1)
        min_component_samples: int = 2  # a cluster with fewer drawn samples is not trained on that client
        aggregation: str = "responsibility"  # responsibility (Σ_j γ_ijk) | samples (n_i)
        prior_floor: float = 1e-6  # lower bound of P(y; θ_k)
        mixture_eval: bool = True  # log the ω-weighted mixture's test accuracy each round (mixture_accuracy)

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        if cfg.num_clusters < 0:
            param_out_of_range(section, cfg, "num_clusters", f"an integer >= 1, or {TRUE_M}")
        if cfg.min_component_samples < 1:
            param_out_of_range(section, cfg, "min_component_samples", "an integer >= 1")
        param_choice(section, cfg, "aggregation", MIXTURE_AGGREGATIONS)
        if not 0 < cfg.prior_floor < 1:
            raise ConfigError(f"{section}.prior_floor={cfg.prior_floor!r} is out of range; allowed: a number in (0, 1)")

    def init_state(self, init_weights, rng, ops):
        state = super().init_state(init_weights, rng, ops)
        state.method.label_mass = np.repeat(self.info.label_counts[:, None, :] / self.num_models,
                                            self.num_models, axis=1).astype(np.float64)
        return state

    @staticmethod
    def label_prior(label_mass: np.ndarray, floor: float) -> np.ndarray:
        """P(y = c; θ_k) as (M, C) from the (K, M, C) soft label counts."""
        tot = label_mass.sum(axis=0)
        return np.maximum(tot / np.maximum(tot.sum(axis=1, keepdims=True), 1e-300), floor)

    def log_prior(self, state, client, y):
        log_pi = super().log_prior(state, client, y)
        return log_pi[:, None] - self._log_py[:, y.long()]

    def e_step(self, state, clients, ops):
        self._log_py = torch.as_tensor(np.log(self.label_prior(state.method.label_mass, self.cfg.prior_floor)))
        out = super().e_step(state, clients, ops)
        c_num = self.info.num_classes
        for c, (q, y) in zip(clients, out):
            onehot = torch.nn.functional.one_hot(y.long(), c_num).double()
            state.method.label_mass[c] = (q @ onehot).numpy()
        return out
