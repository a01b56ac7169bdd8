"""Moved: the FedOpt family's server optimizers are FedOpt's own maths, :mod:`flplat.maths.fedopt`. This path works
until flplat 0.3.0, with a deprecation warning."""

from __future__ import annotations

from flplat.deprecation import moved

__getattr__ = moved(__name__, {n: "flplat.maths.fedopt" for n in (
    "KINDS", "ADAPTIVE", "BIAS_CORRECTIONS", "ServerOpt", "step_size", "init", "step")})
