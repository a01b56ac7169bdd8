"""Algorithm registry: one file per algorithm, each registering a :class:`~flplat.protocol.strategy.Strategy`
subclass by name with :func:`~flplat.api.register_algorithm` (the same decorator a plugin uses).

Importing this package imports every built-in algorithm module; :data:`ALGORITHMS` (and the decorator, also as
``register``) live in :mod:`flplat.protocol.registry`, below the algorithms, so that :mod:`flplat.api` can export it.
"""

from __future__ import annotations

from flplat.protocol.registry import ALGORITHMS, register_algorithm

register = register_algorithm  # the name the built-ins used before flplat.api

__all__ = ["ALGORITHMS", "register", "register_algorithm"]


def _import_all() -> None:
    """Import every module of this package so each algorithm file registers itself (no list to maintain)."""
    import importlib
    import pkgutil

    for mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        if mod != "base" and not mod.startswith("_"):
            importlib.import_module(f"{__name__}.{mod}")


_import_all()
