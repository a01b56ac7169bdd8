"""The registries' bookkeeping: one way to add an entry, one error for a name taken twice, and where each entry
comes from (built-in, or which plugin module / distribution registered it: ``flplat list``).

Every registry (algorithms here; datasets in :mod:`flplat.data.datasets`, partitions in
:mod:`flplat.data.partitions`, models in :mod:`flplat.models.base`) adds its entries with :func:`add`. The plugin
loader (:mod:`flplat.plugins`) says which plugin is being imported (:func:`loading`), so an entry registered
meanwhile is labelled with it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["ALGORITHMS", "BUILTIN", "RegistryClash", "add", "entry_modules", "loading", "origin", "register_algorithm"]

BUILTIN = "built-in"

_ORIGINS: dict[tuple[str, str], str] = {}  # (kind, name) -> where the entry comes from
_LOADING: list[tuple[str, str | None]] = []  # the plugins being imported now (label, module), innermost last
_MODULES: dict[tuple[str, str], tuple[str, ...]] = {}  # (kind, name) -> the modules outside flplat behind the entry


class RegistryClash(ValueError):
    """A name registered a second time (a plugin clashing with a built-in or with another plugin)."""


def origin(kind: str, name: str) -> str:
    """Where entry ``name`` of registry ``kind`` (algorithm | dataset | model | partition) comes from:
    ``"built-in"``, ``"plugin MODULE (distribution DIST VERSION)"`` or ``"module MODULE"`` (registered by an import
    outside the plugin loader)."""
    return _ORIGINS.get((kind, name), BUILTIN)


def entry_modules(kind: str, name: str) -> tuple[str, ...]:
    """The modules outside flplat whose code entry ``name`` of registry ``kind`` is: the module that defines it and
    the plugin module whose import registered it (empty for a built-in). What a run records as the code of its
    plugins (:mod:`flplat.tracking.provenance`)."""
    return _MODULES.get((kind, name), ())


@contextmanager
def loading(label: str, module: str | None = None) -> Iterator[None]:
    """Entries registered inside this block come from the plugin ``label`` (the import of ``module``)."""
    _LOADING.append((label, module))
    try:
        yield
    finally:
        _LOADING.pop()


def add(kind: str, registry: dict, name: str, entry: Any, module: str | None) -> None:
    """Add ``entry`` under ``name``; :class:`RegistryClash` (naming who holds the name) when it is taken.
    ``module``: the module that defines the entry (a built-in is one of flplat's own)."""
    if name in registry:
        raise RegistryClash(f"{kind} {name!r} is already registered ({origin(kind, name)})")
    registry[name] = entry
    outside = bool(module) and module != "flplat" and not module.startswith("flplat.")
    if _LOADING:
        _ORIGINS[(kind, name)] = _LOADING[-1][0]
    elif outside:
        _ORIGINS[(kind, name)] = f"module {module}"
    mods = [*([module] if outside else []), *([_LOADING[-1][1]] if _LOADING and _LOADING[-1][1] else [])]
    if mods:
        _MODULES[(kind, name)] = tuple(dict.fromkeys(mods))


#: algorithm name -> its :class:`~flplat.protocol.strategy.Strategy` subclass. Filled by :func:`register_algorithm`;
#: :mod:`flplat.algorithms` imports every built-in (read it from there to see them all).
ALGORITHMS: dict[str, type] = {}


def register_algorithm(cls: type) -> type:
    """Class decorator: add a :class:`~flplat.protocol.strategy.Strategy` subclass to :data:`ALGORITHMS` under
    ``cls.name`` (the value of ``algorithm.name`` in configs)."""
    if not getattr(cls, "name", ""):
        raise ValueError(f"{cls.__qualname__} has no name")
    add("algorithm", ALGORITHMS, cls.name, cls, cls.__module__)
    return cls
