"""IFCA — Ghosh, Chung, Yin, Ramchandran, "An Efficient Framework for Clustered Federated Learning",
NeurIPS 2020 (Algorithm 1, model averaging).

k cluster models θ_1..θ_k (``num_clusters``, the number of distributions assumed known), randomly initialised
from the server rng (θ_1 is the run's initial model, the others are further random initialisations). Each round
the server sends all k models to the sampled clients; client i estimates its cluster identity

    ĵ_i = argmin_j F_i(θ_j),   F_i = the mean cross-entropy on its train split,

(one batched pass of the k models over its data, :func:`~flplat.api.model_losses`) and runs E local epochs on
θ_ĵ; the server averages the returned models per cluster (θ_j = Σ_{i: ĵ_i = j} n_i w_i / Σ n_i; a cluster without a
client this round keeps its model). The k-model download is counted in ``bytes_down``.

Evaluation: every client uses the model of its estimated cluster. Clients that were not sampled have no fresh
estimate; ``refresh``: ``all`` (default) re-estimates every client's identity on the new models after each round
(what the paper's evaluation does: each client picks its argmin model), ``participants`` keeps their last
estimate (clients never sampled use θ_1).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from flplat.api import (
    TRUE_M,
    ClusteredStrategy,
    ConfigError,
    ServerState,
    fedavg_by_group,
    model_losses,
    param_choice,
    plan_with_all_models,
    random_models,
    register_algorithm,
    sample_uniform,
    true_m,
)

REFRESH = ("all", "participants")


def cluster_losses(state, ops, clients) -> np.ndarray:
    """``(len(clients), k)`` mean train losses of every cluster model on each client (one batched pass each)."""
    return model_losses(state.clusters, ops, clients, state.round)


@register_algorithm
class IFCA(ClusteredStrategy):
    name = "ifca"

    @dataclass(frozen=True)
    class Config:
        num_clusters: int = 2  # k; 0: the partition's true M (Flux App. E.1)
        refresh: str = "all"  # all: every client re-estimates its cluster after each round | participants

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        if cfg.num_clusters < 0:
            raise ConfigError(f"{section}.num_clusters={cfg.num_clusters!r} is out of range; allowed: an integer >= 1, "
                              f"or {TRUE_M}")
        param_choice(section, cfg, "refresh", REFRESH)

    def __init__(self, cfg, info):
        super().__init__(replace(cfg, num_clusters=true_m(cfg.num_clusters, info, "algorithm.num_clusters")), info)

    def init_state(self, init_weights, rng, ops):
        clusters = random_models(init_weights, self.info.layout, self.cfg.num_clusters, rng)
        return ServerState(clusters=clusters, assignment=np.zeros(self.info.num_clients, dtype=np.int64))

    def select(self, state, rng, ops):
        chosen = sample_uniform(self.info.num_clients, self.info.client_fraction, rng)
        if state.clusters.shape[0] > 1:
            state.assignment[chosen] = cluster_losses(state, ops, chosen).argmin(axis=1)
        return chosen

    def plan(self, state, client):
        return plan_with_all_models(state, client)

    def aggregate(self, state, results, ops):
        if results:
            groups = [int(state.assignment[r.client]) for r in results]
            state.clusters = fedavg_by_group(results, groups, state.clusters)
        if self.cfg.refresh == "all" and state.clusters.shape[0] > 1:
            state.assignment = cluster_losses(state, ops, range(self.info.num_clients)).argmin(axis=1)
        return state

