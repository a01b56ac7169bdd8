"""Clust-PSI-PFL — Jimenez-Gutierrez et al., "Clust-PSI-PFL: A Population Stability Index Approach for
Clustered Non-IID Personalized Federated Learning" (Sec. III).

Before round 1 every client reports its label counts; the server computes the client PSI (Eq. 1) and its
per-class terms (Eq. 2) against the pooled label pmf (:func:`flplat.metrics.noniid.client_psi`, eps added to
both pmfs), builds the descriptors x_i = [PSI_i, PSI_i,1, ..., PSI_i,C], standardises them (StandardScaler)
and picks the number of clusters tau with the paper's silhouette search over K-means++ (Algorithm "PSI-based
selection of the number of clusters", :func:`flplat.maths.clustering.silhouette_kmeans`: smallest j at the maximum
silhouette). Training is then FedAvg inside each cluster: a client starts from, and is evaluated with, its
cluster's model, and each cluster model is the sample-weighted mean of its own clients' results.

Choices where the paper is open (all config keys):

* ``max_clusters`` (null): the paper's Algorithm scans every j = 2..K-1 (``null``, the default: no cap); an
  integer >= 2 caps the candidates at min(max_clusters, K - 1), an opt-in deviation that makes the search cheap
  (the full scan costs one K-means per j: 2 CPU s at K = 100, 305 CPU s at K = 1,000, docs/performance.md). On
  FMNIST K = 100 Dirichlet the full scan picks tau = 32-59 where a cap of 20 picks 2-20.
* ``search_jobs`` (1): processes fitting the candidates' K-means in parallel; the result does not depend on it.
* ``silhouette_sample`` (1000): silhouettes on one random subset of that many clients, as the paper suggests for
  very large federations; exact for K <= 1000 (every experiment of the paper).
* ``n_init`` (10): K-means++ restarts per j (the paper does not say; 10 is scikit-learn's classic default).
* ``nonpositive_rule``: every s(j) <= 0 means no structure -> ``one_cluster`` (plain FedAvg); ``argmax`` takes
  the best j anyway. K <= 2 clients and all-identical descriptors also give one cluster.
* ``participation``: ``global`` samples q·K clients uniformly as in the paper (Sec. IV-A) and aggregates per
  cluster (a cluster with no sampled client keeps its model); ``per_cluster`` samples ceil(q·|c|) clients in
  every cluster c so every cluster trains each round.
* ``tau``: a fixed number of clusters (the authors' ``--tau-clusters``); null: the silhouette search.
* a client with no training samples has an undefined PSI; its descriptor is set to 0 before standardising.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from flplat.api import (
    NONPOSITIVE_RULES,
    ClientPlan,
    ClusteredStrategy,
    ServerState,
    client_psi,
    kmeans,
    param_choice,
    param_out_of_range,
    register_algorithm,
    sample_uniform,
    silhouette_kmeans,
    stack,
    weighted_mean,
)

PARTICIPATION = ("global", "per_cluster")


@dataclass
class ClustPSIState:
    """The clustering made before round 1: the clients' PSI ``descriptors`` (K, C + 1), the silhouette of each
    candidate j ``silhouette_by_k`` ((n, 2): j, s), the chosen one's ``silhouette`` (NaN: undefined) and why it
    was chosen, ``clustering_reason`` (None: the arg max of the silhouette)."""

    descriptors: np.ndarray
    silhouette_by_k: np.ndarray
    silhouette: float
    clustering_reason: str | None


def psi_descriptors(label_counts: np.ndarray, eps: float) -> np.ndarray:
    """``(K, C + 1)`` rows [PSI_i, PSI_i,1..C] (Eqs. 1-2); clients without samples get a row of 0."""
    total, per_class = client_psi(label_counts, eps)
    return np.nan_to_num(np.column_stack([total, per_class]), nan=0.0)


@register_algorithm
class ClustPSIPFL(ClusteredStrategy):
    name = "clust_psi_pfl"

    @dataclass(frozen=True)
    class Config:
        eps: float = 1e-6  # added to both pmfs inside the PSI logarithm (authors' code)
        max_clusters: int | None = None  # cap on the candidate j; None: no cap, j = 2..K - 1 (the paper)
        search_jobs: int = 1  # processes for the candidates' K-means fits (same result for any value)
        silhouette_sample: int | None = 1000  # silhouette on a subsample of this many clients; None: all
        n_init: int = 10  # K-means++ restarts per candidate j
        participation: str = "global"  # global | per_cluster
        nonpositive_rule: str = "one_cluster"  # one_cluster | argmax, when every silhouette <= 0
        tau: int | None = None  # fixed number of clusters; None: silhouette search

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        def bad(key, allowed):
            param_out_of_range(section, cfg, key, allowed)

        if not (cfg.eps > 0 and math.isfinite(cfg.eps)):
            bad("eps", "a finite number > 0")
        if cfg.max_clusters is not None and cfg.max_clusters < 2:
            bad("max_clusters", "an integer >= 2 or null (no cap: j up to K - 1, the paper)")
        if cfg.search_jobs < 1:
            bad("search_jobs", "an integer >= 1")
        if cfg.silhouette_sample is not None and cfg.silhouette_sample < 3:
            bad("silhouette_sample", "an integer >= 3 or null (all clients)")
        if cfg.n_init < 1:
            bad("n_init", "an integer >= 1")
        if cfg.tau is not None and cfg.tau < 1:
            bad("tau", "an integer >= 1 or null (silhouette search)")
        for key, allowed in (("participation", PARTICIPATION), ("nonpositive_rule", NONPOSITIVE_RULES)):
            param_choice(section, cfg, key, allowed)

    def init_state(self, init_weights, rng, ops):
        from sklearn.preprocessing import StandardScaler

        cfg, K = self.cfg, self.info.num_clients
        desc = psi_descriptors(self.info.label_counts, cfg.eps)
        X = StandardScaler().fit_transform(desc)
        sub = rng.spawn(1)[0]  # a child stream: the parent's client-sampling sequence stays FedAvg's
        if cfg.tau is None:
            res = silhouette_kmeans(X, k_max=cfg.max_clusters, n_init=cfg.n_init, subsample=cfg.silhouette_sample,
                                    rng=sub, nonpositive=cfg.nonpositive_rule, jobs=cfg.search_jobs)
            labels, sil, reason = res.labels, res.silhouette, res.reason
            curve = np.array(sorted(res.scores.items()), dtype=np.float64).reshape(-1, 2)
        else:
            if cfg.tau > K:
                raise ValueError(f"algorithm.tau={cfg.tau} exceeds the number of clients K={K}")
            labels, _ = kmeans(X, cfg.tau, int(sub.integers(2**31 - 1)), cfg.n_init)
            sil, reason, curve = float("nan"), f"tau fixed to {cfg.tau}", np.zeros((0, 2))
        tau = int(labels.max()) + 1
        st = ClustPSIState(descriptors=desc, silhouette_by_k=curve, silhouette=sil, clustering_reason=reason)
        return ServerState(clusters=init_weights.clone().repeat(tau, 1), assignment=labels, method=st)

    def select(self, state, rng, ops):
        q = self.info.client_fraction
        if self.cfg.participation == "global":
            return sample_uniform(self.info.num_clients, q, rng)
        picks = []
        for c in range(state.clusters.shape[0]):
            members = np.flatnonzero(state.assignment == c)
            picks.append(rng.choice(members, size=math.ceil(q * len(members)), replace=False))
        return np.sort(np.concatenate(picks))

    def plan(self, state, client):
        return ClientPlan(weights=state.clusters[int(state.assignment[client])])

    def aggregate(self, state, results, ops):
        # FedAvg within each cluster; per cluster with weighted_mean so one cluster is FedAvg bit for bit
        if results:
            w, n = stack(results)
            groups = np.array([state.assignment[r.client] for r in results])
            clusters = state.clusters.clone()
            for c in np.unique(groups):
                mask = torch.as_tensor(groups == c)
                clusters[c] = weighted_mean(w[mask], n[mask])
            state.clusters = clusters
        return state

    reduces_across_shards = True  # each cluster's sample-weighted mean model is all aggregate reads

    def mean_groups(self, state, plans):
        if not self.reduces_across_shards:
            return None
        return [int(state.assignment[k]) for k, _ in plans]

    def round_metrics(self, state):
        out = super().round_metrics(state)
        if np.isfinite(state.method.silhouette):  # undefined for one cluster: left out, not NaN
            out["silhouette"] = float(state.method.silhouette)
        return out

    def series(self, state):
        return {"silhouette_by_k": [(int(j), float(s)) for j, s in state.method.silhouette_by_k]}

    def artifacts(self, state):
        out = super().artifacts(state)
        sizes = np.bincount(state.assignment, minlength=state.clusters.shape[0])
        out["clustering/cluster_sizes.csv"] = "cluster,size\n" + "".join(f"{c},{s}\n" for c, s in enumerate(sizes))
        desc = state.method.descriptors
        head = "client,cluster,num_samples,psi," + ",".join(f"psi_{c}" for c in range(desc.shape[1] - 1))
        rows = [f"{k},{int(state.assignment[k])},{int(self.info.num_samples[k])}," + ",".join(f"{v:.8g}" for v in d)
                for k, d in enumerate(desc)]
        out["clustering/psi_descriptors.csv"] = head + "\n" + "\n".join(rows) + "\n"
        out["clustering/reason.txt"] = (state.method.clustering_reason or "arg max of the silhouette") + "\n"
        return out
