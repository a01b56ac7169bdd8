"""OneShotKMeans: a clustered method -- FedAvg warm-up, one k-means clustering of the client updates, then one
FedAvg model per cluster.

The scheme of FL+HC (Briggs, Fan & Andras, "Federated learning with hierarchical clustering of local updates to
improve training on non-IID data", IJCNN 2020) with k-means and a fixed number of clusters k in place of the
hierarchical clustering:

1. rounds 1..W (``warmup_rounds``): FedAvg on one global model; no client is in a cluster
   (``state.assignment[k] = -1``, scored with the global model: ``unassigned_weights``);
2. round W (or the first later round that returns results): the server clusters the round's participants by
   their updates Δ_k = w_k − w_global (k-means++ with ``num_clusters`` clusters, :func:`~flplat.api.kmeans`);
   cluster c's model is the sample-weighted mean of its members' models (:func:`~flplat.api.fedavg_by_group`);
3. rounds > W: each participant trains its cluster's model and the server averages per cluster. A late joiner (a
   client sampled for the first time after round W) receives all k models and joins the cluster whose model has the
   lowest loss on its train split (IFCA's rule, :func:`~flplat.api.model_losses`); the extra k − 1 models count in
   ``bytes_down``. It keeps that cluster from then on.

Evaluation (``ClusteredStrategy``'s declaration): a training client is scored with its cluster's model, a client
not in a cluster yet with the global model of the warm-up; an unseen client with the prediction ensemble of the
cluster models weighted by their trained clients (``cluster_ensemble``). What the run logs: ``tau`` (the number of
cluster models) once the clusters exist, ``late_joiners`` (clients that joined after the clustering), and, from
:mod:`flplat.api`'s evaluation, ``ari`` / ``assigned_clients`` on a partition with planted distributions and
``cluster_accuracy_<c>`` on every evaluated round after round W.

Written from :mod:`flplat.api` alone; the method's state between rounds is :class:`OneShotState`
(``state.method``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flplat.api import (
    ClientPlan,
    ClusteredStrategy,
    ConfigError,
    ServerState,
    check_range,
    fedavg,
    fedavg_by_group,
    kmeans,
    model_losses,
    num_selected,
    register_algorithm,
    stack,
)


@dataclass
class OneShotState:
    """``joined[k]``: the round in which client k entered its cluster (0: not in a cluster yet); W's participants
    have W, late joiners a later round."""

    joined: np.ndarray  # (K,) int
    clustered_round: int  # the round whose updates were clustered (0: not yet)
    seed: int  # k-means' seed, drawn from the server's generator (the run's seed decides the clustering)


@register_algorithm
class OneShotKMeans(ClusteredStrategy):
    name = "oneshot_kmeans"

    @dataclass(frozen=True)
    class Config:
        num_clusters: int = 2  # k
        warmup_rounds: int = 1  # W: FedAvg rounds; the clustering runs on round W's updates

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        check_range(cfg.num_clusters >= 1, f"{section}.num_clusters", cfg.num_clusters, "an integer >= 1")
        check_range(cfg.warmup_rounds >= 1, f"{section}.warmup_rounds", cfg.warmup_rounds, "an integer >= 1")

    def init_state(self, init_weights, rng, ops) -> ServerState:
        m = num_selected(self.info.num_clients, self.info.client_fraction)
        if m < self.cfg.num_clusters:  # needs the federation: checked here, before any run exists
            raise ConfigError(f"algorithm.num_clusters={self.cfg.num_clusters} needs at least that many clients per "
                              f"round, but federation.client_fraction={self.info.client_fraction} selects {m}; "
                              f"allowed: num_clusters <= {m}")
        state = ServerState(weights=init_weights.clone(),
                            assignment=np.full(self.info.num_clients, -1, dtype=np.int64))
        state.method = OneShotState(joined=np.zeros(self.info.num_clients, dtype=np.int64), clustered_round=0,
                                    seed=int(rng.integers(2**31)))
        return state

    def select(self, state, rng, ops):
        chosen = super().select(state, rng, ops)
        late = [int(k) for k in chosen if state.assignment[k] < 0] if state.clusters is not None else []
        if late:  # late joiners: the cluster whose model fits their train split best
            state.assignment[late] = model_losses(state.clusters, ops, late, state.round).argmin(axis=1)
            state.method.joined[late] = state.round
        return chosen

    def plan(self, state, client):
        if state.clusters is None:
            return ClientPlan(weights=state.weights)
        w = state.clusters[int(state.assignment[client])]
        fresh = state.method.joined[client] == state.round  # a late joiner, assigned in this round's select
        extra = (state.clusters.shape[0] - 1) * w.numel() * w.element_size() if fresh else 0
        return ClientPlan(weights=w, extra_bytes_down=extra)  # a late joiner downloaded every cluster model

    def aggregate(self, state, results, ops):
        if state.clusters is not None:
            groups = [int(state.assignment[r.client]) for r in results]
            state.clusters = fedavg_by_group(results, groups, state.clusters)
            return state
        start = state.weights
        state.weights = fedavg(results)
        if state.round >= self.cfg.warmup_rounds:  # round W, or the first later round with results
            self._cluster(state, results, start)
        return state

    def _cluster(self, state, results, start) -> None:
        """Round W: k-means of the participants' updates; each cluster's model the FedAvg of its members."""
        w, _ = stack(results)
        updates = (w - start.to(w.device)).double().cpu().numpy()
        labels, _ = kmeans(updates, self.cfg.num_clusters, seed=state.method.seed)
        k = self.cfg.num_clusters
        state.clusters = fedavg_by_group(results, labels.tolist(), state.weights.expand(k, -1))
        clients = [r.client for r in results]
        state.assignment[clients] = labels
        state.method.joined[clients] = state.method.clustered_round = state.round

    def unassigned_weights(self, state):
        return state.weights  # the warm-up's global model

    def round_metrics(self, state) -> dict[str, float]:
        out = super().round_metrics(state)  # tau, once the clusters exist
        if state.clusters is not None:
            out["late_joiners"] = float((state.method.joined > state.method.clustered_round).sum())
        return out
