"""FedDrift's cluster maths (Jothimurugesan et al., AISTATS 2023, Algorithm 1) as pure functions: the clusters' loss
table from the clients' losses, the cluster distance D(i, j) and the hierarchical merging (complete linkage)."""

from __future__ import annotations

import numpy as np


def cluster_losses(losses: np.ndarray, groups: np.ndarray, weights: np.ndarray, num_clusters: int) -> np.ndarray:
    """L[c, j] = weighted mean over the clients of cluster c of their mean loss under model j, from the per-client
    ``(m, J)`` loss table, the clients' clusters ``groups`` and their ``weights`` (sample counts); rows of clusters
    without a client are NaN."""
    out = np.full((num_clusters, losses.shape[1]), np.nan)
    for c in np.unique(groups):
        sel = groups == c
        out[c] = weights[sel] @ losses[sel] / weights[sel].sum()
    return out


def drift_distance(cl: np.ndarray) -> np.ndarray:
    """FedDrift's cluster distance D(i, j) = max(L_i(θ_j) − L_i(θ_i), L_j(θ_i) − L_j(θ_j), 0) from the square
    table ``cl[i, j]`` = loss of cluster i's data under model j (symmetric, zero diagonal; NaN where unknown)."""
    gap = cl - np.diag(cl)[:, None]
    d = np.maximum(np.maximum(gap, gap.T), 0.0)
    np.fill_diagonal(d, 0.0)
    return d


def merge_groups(dist: np.ndarray, threshold: float) -> np.ndarray:
    """Hierarchical merging: repeatedly merge the two closest groups while their distance is below ``threshold``,
    the distance of a merged group to another being the larger of its parts' (complete linkage). Returns a label
    per item (the smallest member index of its group)."""
    n = dist.shape[0]
    d = np.where(np.isnan(dist), np.inf, dist).astype(float)
    np.fill_diagonal(d, np.inf)
    labels = np.arange(n)
    alive = np.ones(n, dtype=bool)
    while alive.sum() > 1:
        sub = np.where(alive[:, None] & alive[None, :], d, np.inf)
        i, j = np.unravel_index(np.argmin(sub), sub.shape)
        if not sub[i, j] < threshold:
            break
        i, j = min(i, j), max(i, j)
        labels[labels == j] = i
        d[i, :] = d[:, i] = np.maximum(d[i], d[j])
        d[i, i] = np.inf
        alive[j] = False
    return labels
