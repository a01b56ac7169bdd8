"""Moved: FedAvg, per-group FedAvg, weighted means and stacking are method blocks, :mod:`flplat.blocks.aggregation`
(import them from :mod:`flplat.api`). This path works until flplat 0.3.0, with a deprecation warning."""

from __future__ import annotations

from flplat.deprecation import moved

__getattr__ = moved(__name__, {n: "flplat.api" for n in ("fedavg", "fedavg_by_group", "stack", "weighted_mean")})
