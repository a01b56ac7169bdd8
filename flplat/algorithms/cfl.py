"""CFL — Sattler, Müller, Samek, "Clustered Federated Learning: Model-Agnostic Distributed Multitask Optimization
Under Privacy Constraints", IEEE TNNLS 32(8), 2021 (Algorithm 1).

All clients start in one cluster. Each round every cluster c trains FedAvg-style from its model θ_c; a client's
update is Δ_i = w_i − θ_c. For each cluster whose participating clients number at least ``min_split_clients``:

* stationarity of the cluster: ‖Σ_i n_i Δ_i / Σ_i n_i‖ < ε1 (``eps1``) and max_i ‖Δ_i‖ > ε2 (``eps2``);
* then the optimal bipartition c1, c2 = argmin max_{i∈c1, j∈c2} α_ij of the cosine similarities α_ij of the
  updates (Eq. 26 / Algorithm 2 of the paper). Minimising the largest cross similarity is solved exactly by the
  top split of single-linkage clustering on 1 − α (the paper's Algorithm 2 merges pairs by decreasing
  similarity until two groups remain) — ``linkage: single``; ``complete`` (what the authors' demo code uses)
  and ``average`` are options;
* the split is accepted when γ_max = sqrt((1 − α_max^cross) / 2) > γ (``gamma``), α_max^cross being the largest
  similarity between the two groups (γ_max is the paper's bound on the relative gradient norm the split can
  certify, Corollary 1). At most one split per cluster and round.

Then, as in Algorithm 1, every (new) cluster averages its own clients' updates into its model, so both children
start from the parent's model θ_c plus their own group's mean update. Only participating clients' updates are
used. Choices where the paper (which assumes full participation) is silent, as config keys:

* ``assign_absent``: members of a split cluster that did not take part this round join the child whose new
  model has the lower loss on their train split (``loss``), or stay with the child keeping the parent's id
  (``first``);
* Δ and the norms cover the trainable parameters only (not batch-norm running statistics), and n_i weights the
  mean update as in Algorithm 1 (|D_i| / |D_c|).

Defaults are the Clust-PSI-PFL grid optimum (Table II): ε1 = 1e-5, ε2 = 0.1, γ = 0.5.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from flplat.api import (
    ClientPlan,
    ClusteredStrategy,
    ConfigError,
    ServerState,
    fedavg_by_group,
    param_choice,
    register_algorithm,
    stack,
)

LINKAGES = ("single", "complete", "average")
ABSENT = ("loss", "first")


def cosine_matrix(dw: torch.Tensor) -> np.ndarray:
    """Pairwise cosine similarities α_ij of the rows of ``dw`` (zero rows have similarity 0 to everything)."""
    u = F.normalize(dw.double(), dim=1)
    return (u @ u.T).cpu().numpy()


def bipartition(sim: np.ndarray, method: str = "single") -> tuple[np.ndarray, float]:
    """Split items into two groups by hierarchical clustering on 1 − ``sim``; returns (labels in {0, 1} with
    item 0 in group 0, α_max^cross = the largest similarity between the groups)."""
    from scipy.cluster.hierarchy import cut_tree, linkage
    from scipy.spatial.distance import squareform

    d = np.clip(1.0 - sim, 0.0, 2.0)
    d = (d + d.T) / 2
    np.fill_diagonal(d, 0.0)
    labels = cut_tree(linkage(squareform(d, checks=False), method), n_clusters=2).ravel()
    labels = (labels != labels[0]).astype(np.int64)
    cross = sim[np.ix_(labels == 0, labels == 1)]
    return labels, float(cross.max())


@register_algorithm
class CFL(ClusteredStrategy):
    name = "cfl"

    @dataclass(frozen=True)
    class Config:
        eps1: float = 1e-5  # split only when the cluster's mean update norm is below ε1 (stationary)
        eps2: float = 0.1  # ... and some client's update norm is above ε2
        gamma: float = 0.5  # accept a split when sqrt((1 − α_max^cross) / 2) > γ
        linkage: str = "single"  # bipartition: single (exact argmin of max cross similarity) | complete | average
        min_split_clients: int = 2  # participating clients a cluster needs this round to be split
        assign_absent: str = "loss"  # non-participants of a split cluster: loss (lower train loss) | first

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        for key in ("eps1", "eps2"):
            if not getattr(cfg, key) >= 0:
                raise ConfigError(f"{section}.{key}={getattr(cfg, key)!r} is out of range; allowed: a number >= 0")
        if not 0 <= cfg.gamma <= 1:
            raise ConfigError(f"{section}.gamma={cfg.gamma!r} is out of range; allowed: a number in [0, 1]")
        param_choice(section, cfg, "linkage", LINKAGES)
        if cfg.min_split_clients < 2:
            raise ConfigError(f"{section}.min_split_clients={cfg.min_split_clients!r} is out of range; "
                              "allowed: an integer >= 2")
        param_choice(section, cfg, "assign_absent", ABSENT)

    def init_state(self, init_weights, rng, ops):
        return ServerState(clusters=init_weights.clone()[None],
                           assignment=np.zeros(self.info.num_clients, dtype=np.int64))

    def plan(self, state, client):
        return ClientPlan(weights=state.clusters[int(state.assignment[client])])

    def split_groups(self, dw: torch.Tensor, n: torch.Tensor, groups: np.ndarray) -> dict[int, np.ndarray]:
        """For each cluster that splits this round: the indices (into the results) of the clients that move to
        the new child. ``dw`` are the updates (m, P), ``n`` the sample counts, ``groups`` the clusters."""
        cfg, out = self.cfg, {}
        for c in np.unique(groups):
            idx = np.flatnonzero(groups == c)
            if len(idx) < cfg.min_split_clients:
                continue
            d = dw[idx]
            mean_norm = float(((n[idx] / n[idx].sum()) @ d).norm())
            max_norm = float(d.norm(dim=1).max())
            if not (mean_norm < cfg.eps1 and max_norm > cfg.eps2):
                continue
            labels, cross = bipartition(cosine_matrix(d), cfg.linkage)
            if np.sqrt(max(1.0 - cross, 0.0) / 2) > cfg.gamma:
                out[int(c)] = idx[labels == 1]
        return out

    def aggregate(self, state, results, ops):
        if not results:
            return state
        w, n = stack(results)
        clients = np.array([r.client for r in results])
        groups = state.assignment[clients].copy()
        mask = self.info.layout.mask("", params_only=True).to(w.device)
        dw = (w - state.clusters[torch.as_tensor(groups, device=w.device)])[:, mask]
        splits = self.split_groups(dw, n, groups)
        assignment, clusters = state.assignment.copy(), state.clusters
        children = {}
        for c, moving in splits.items():
            new = clusters.shape[0]
            clusters = torch.cat([clusters, clusters[c][None]])
            groups[moving] = new
            assignment[clients[moving]] = new
            children[c] = new
        state.clusters = fedavg_by_group(results, groups, clusters)
        absent = [(int(k), c, m) for c, m in children.items()
                  for k in np.setdiff1d(np.flatnonzero(state.assignment == c), clients)]
        if absent and self.cfg.assign_absent == "loss":
            views = list(state.clusters)  # one object per model, so the executor loads each once
            res = ops.evaluate([(k, views[c]) for k, c, _ in absent] + [(k, views[m]) for k, _, m in absent], "train")
            for (k, _, m), a, b in zip(absent, res[:len(absent)], res[len(absent):]):
                if b.loss < a.loss:
                    assignment[k] = m
        state.assignment = assignment
        return state
