"""Aggregation maths as pure functions on stacked flat weights and sample counts."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def stack(results: Sequence) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W, n)``: client weight vectors as rows of one ``(m, P)`` tensor and their sample counts ``(m,)``."""
    w = torch.stack([r.weights for r in results])
    n = torch.tensor([float(r.num_samples) for r in results], dtype=w.dtype, device=w.device)
    return w, n


def weighted_mean(w: torch.Tensor, coef: torch.Tensor) -> torch.Tensor:
    """Σ_i coef_i w_i / Σ_i coef_i over the rows of ``w`` (FedAvg when ``coef`` are sample counts)."""
    total = coef.sum()
    if not total > 0:
        raise ValueError("aggregation weights must have a positive sum")
    return (coef / total) @ w


def fedavg(results: Sequence) -> torch.Tensor:
    """McMahan et al. 2017, Eq. (FedAvg): the sample-size weighted mean of the client models."""
    w, n = stack(results)
    return weighted_mean(w, n)


def fedavg_by_group(results: Sequence, groups, current: torch.Tensor) -> torch.Tensor:
    """Per-group FedAvg: row g of the output is the sample-weighted mean of the results in group g.

    ``groups[i]`` is the group (cluster) of ``results[i]``; ``current`` is the ``(G, P)`` stack of group models,
    whose rows without any result this round are kept unchanged (one model per cluster, Clust-PSI-PFL/IFCA).
    """
    out = current.clone()
    if not len(results):
        return out
    w, n = stack(results)
    g = torch.as_tensor(list(groups), dtype=torch.long, device=w.device)
    for k in torch.unique(g).tolist():  # same arithmetic as `fedavg`, so one group reproduces FedAvg exactly
        sel = g == k
        out[k] = weighted_mean(w[sel], n[sel])
    return out
