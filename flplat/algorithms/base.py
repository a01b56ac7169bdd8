"""The strategy interface, re-exported from its home :mod:`flplat.protocol.strategy` (below both the engine and the
algorithms) so that ``from flplat.algorithms.base import Strategy`` keeps working. New code imports
:mod:`flplat.api`."""

from __future__ import annotations

from flplat.protocol.strategy import (  # noqa: F401 (re-exports)
    TRUE_M,
    ClientFn,
    ClientPlan,
    ClientResult,
    ClientView,
    ClusteredStrategy,
    EvalResult,
    FederationInfo,
    FederationOps,
    HookContext,
    LocalHook,
    NoConfig,
    PersonalizedStrategy,
    Strategy,
    __all__,  # noqa: F401
    sample_uniform,
    true_m,
)
