"""Old import path of the strategy interface: its names are :mod:`flplat.api`'s (defined in
:mod:`flplat.protocol.strategy`). ``from flplat.algorithms.base import Strategy`` works until flplat 0.3.0 with a
deprecation warning; import from :mod:`flplat.api`."""

from __future__ import annotations

from flplat.deprecation import moved

__getattr__ = moved(__name__, {
    **{n: "flplat.api" for n in ("TRUE_M", "ClientPlan", "ClientResult", "ClientView", "ClusteredStrategy",
                                 "EvalResult", "FederationInfo", "FederationOps", "HookContext", "LocalHook",
                                 "NoConfig", "PersonalizedStrategy", "Strategy", "sample_uniform", "true_m")},
    "ClientFn": "flplat.protocol.strategy"})
