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


def _import_all() -> None:
    """Import every module of this package so each algorithm file registers itself (no list to maintain)."""
    import importlib
    import pkgutil

    for mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        if mod != "base" and not mod.startswith("_"):
            importlib.import_module(f"{__name__}.{mod}")


_import_all()
