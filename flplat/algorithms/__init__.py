"""Algorithm registry: one file per algorithm, each registering a :class:`Strategy` subclass by name."""

from __future__ import annotations

from flplat.algorithms.base import Strategy

ALGORITHMS: dict[str, type[Strategy]] = {}


def register(cls: type[Strategy]) -> type[Strategy]:
    """Class decorator: add a strategy to :data:`ALGORITHMS` under ``cls.name``."""
    if not cls.name:
        raise ValueError(f"{cls.__qualname__} has no name")
    if cls.name in ALGORITHMS:
        raise ValueError(f"algorithm {cls.name!r} registered twice")
    ALGORITHMS[cls.name] = cls
    return cls


# Import the algorithm modules so they register themselves.
from flplat.algorithms import centralized, fedavg, fedprox, local  # noqa: E402,F401
