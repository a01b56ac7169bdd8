"""A method that runs another registered algorithm inside it (PQFed's inner federation: FedAvg, FedProx or FedDyn on
the target and its collaborators): the inner algorithm's keys are checked as ``algorithm.*`` is, and the inner
strategy is built from them on the same federation info.

The outer method owns the server state; the inner strategy's own state (``state.method``) is the outer's to keep
(e.g. a field of the outer's state dataclass, put in place around each call into the inner strategy).
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from flplat.config_sections import namespaced_section
from flplat.protocol.registry import ALGORITHMS
from flplat.protocol.strategy import FederationInfo, Strategy

__all__ = ["build_inner", "check_inner"]


def check_inner(section: str, name: str, params: dict[str, Any]) -> None:
    """Check ``params`` against the registered algorithm ``name``'s Config (and its ``validate_config``): a one-line
    ConfigError naming ``section.KEY`` otherwise (``section``: where the keys are written, e.g.
    ``algorithm.inner_params``)."""
    namespaced_section(section, ALGORITHMS, {"name": name, **dict(params)})


def build_inner(name: str, params: dict[str, Any], info: FederationInfo) -> Strategy:
    """The registered algorithm ``name`` with ``params`` over its Config's defaults, on ``info``."""
    cls = ALGORITHMS[name]
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls.Config), dict(params)))
    return cls(cfg, info)
