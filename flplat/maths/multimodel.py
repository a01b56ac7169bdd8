"""Moved: the multi-model helpers of the IFCA family are method blocks, :mod:`flplat.blocks.multimodel` (import them
from :mod:`flplat.api`); FedDrift's cluster maths is its own, :mod:`flplat.maths.feddrift`. This path works until
flplat 0.3.0, with a deprecation warning."""

from __future__ import annotations

from flplat.deprecation import moved

__getattr__ = moved(__name__, {
    **{n: "flplat.api" for n in ("stacked_logits", "sample_losses", "losses_fn", "responsibilities",
                                 "mixture_correct", "permuted_init", "random_models")},
    **{n: "flplat.maths.feddrift" for n in ("cluster_losses", "drift_distance", "merge_groups")}})
