"""Plugins: your own algorithms, datasets, models and partitions, registered from your package without touching
flplat, and imported in every process flplat starts.

A plugin is a module whose import registers entries with the decorators of :mod:`flplat.api`. flplat imports:

1. every module named by an entry point of the groups ``flplat.algorithms``, ``flplat.datasets``, ``flplat.models``
   and ``flplat.partitions`` of an installed distribution (``pyproject.toml``:
   ``[project.entry-points."flplat.algorithms"] my_algo = "my_pkg.my_algo"``; the value names a module);
2. the modules of ``$FLPLAT_PLUGINS`` (comma-separated), which ``--plugin MODULE`` on the command line adds to, so
   that every process the command starts inherits them (``reproduce --jobs`` workers, ``fabric.devices=N`` ranks);
3. the modules of the config's ``plugins:`` list (``plugins: [my_pkg.my_algo]`` or ``plugins=[my_pkg.my_algo]``),
   which every process that reads the config sees (``tune`` trials, ``sweep`` seeds, grid cells, torchrun nodes,
   a resumed run: the logged config records the modules of 2 and 3).

:func:`load_plugins` does all three, once per module and process, from the one config entry point
(:func:`flplat.configure.load_config`), a resumed run's config, the CLI before every command that takes ``--plugin``,
and the functions that look a name up before any config is read (``flplat check NAME``'s target,
``reproduce --add-method NAME``): an installed plugin's name must be registered by then. The
built-in registries are filled first, so a plugin that registers a name already taken (by a built-in or another
plugin), or whose import fails, raises :class:`~flplat.errors.ConfigError` with one line naming the module and
the cause: the CLI prints it and exits 2 before any MLflow run exists. ``plugins`` does not change a run's config
hash (:func:`flplat.config_io.config_key`): a built-in method's cached runs still count when a plugin is loaded.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Iterable
from typing import Any

from flplat.errors import ConfigError, first_line
from flplat.protocol.registry import RegistryClash, loading

__all__ = ["ENV", "GROUPS", "add_to_env", "env_plugins", "load_plugins", "normalise"]

ENV = "FLPLAT_PLUGINS"
#: entry-point group -> the registry its modules fill
GROUPS = {"flplat.algorithms": "algorithm", "flplat.datasets": "dataset", "flplat.models": "model",
          "flplat.partitions": "partition"}

_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_LOADED: dict[str, str] = {}  # module -> where it was named (its origin label), in this process
_ENTRY_POINTS_DONE = False


def normalise(value: Any, key: str = "plugins") -> list[str]:
    """The module names of a ``plugins`` value: a list of names, or one comma-separated string; checked."""
    if value is None:
        return []
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, Iterable) and not isinstance(value, dict):
        items = [str(v).strip() for v in value]
    else:
        items = None
    if items is None or not all(_MODULE.match(m) for m in items):
        raise ConfigError(f"{key}={value!r} is not valid; allowed: a list of module names to import, e.g. "
                          "[my_pkg.my_algo]")
    return list(dict.fromkeys(items))


def env_plugins() -> list[str]:
    """The modules of ``$FLPLAT_PLUGINS``."""
    return normalise(os.environ.get(ENV, ""), f"${ENV}")


def add_to_env(modules: Iterable[str]) -> None:
    """Add ``modules`` to ``$FLPLAT_PLUGINS``, so that every process started from now on imports them too."""
    os.environ[ENV] = ",".join(dict.fromkeys([*env_plugins(), *normalise(list(modules), "--plugin")]))


def _import(module: str, label: str) -> None:
    if module in _LOADED:
        return
    with loading(label, module):
        try:
            importlib.import_module(module)
        except RegistryClash as e:
            raise ConfigError(f"plugin {module!r}: {e}; allowed: a name no built-in or other plugin uses "
                              "(see `flplat list`)") from None
        except ConfigError as e:
            raise ConfigError(f"plugin {module!r}: {e}") from None
        except Exception as e:  # the plugin's own import failed: its module, then the cause
            raise ConfigError(f"plugin {module!r} failed to import: {type(e).__name__}: {first_line(e)}") from None
    _LOADED[module] = label


def _entry_points() -> list[tuple[str, str]]:
    """(module, origin label) of every entry point of the plugin groups, in a stable order."""
    from importlib.metadata import entry_points

    out = []
    for group in GROUPS:
        for ep in sorted(entry_points(group=group), key=lambda e: (e.name, e.value)):
            dist = getattr(ep, "dist", None)
            by = f"distribution {dist.name} {dist.version}, " if dist is not None else ""
            out.append((ep.module, f"plugin {ep.module} ({by}entry point {group}:{ep.name})"))
    return out


def load_plugins(modules: Any = ()) -> list[str]:
    """Fill the built-in registries, then import every plugin: the entry points, ``$FLPLAT_PLUGINS`` and
    ``modules`` (a config's ``plugins``). Returns the explicitly named modules (``$FLPLAT_PLUGINS`` + ``modules``,
    without repeats): what a config records as ``plugins``. Raises :class:`~flplat.errors.ConfigError` (one line:
    the module and the cause) for a plugin that fails to import or registers a name already taken."""
    global _ENTRY_POINTS_DONE
    import flplat.algorithms  # noqa: F401  (the built-ins first: a clash is the plugin's)
    import flplat.data.datasets  # noqa: F401
    import flplat.data.partitions  # noqa: F401
    import flplat.models  # noqa: F401

    if not _ENTRY_POINTS_DONE:
        for module, label in _entry_points():
            _import(module, label)
        _ENTRY_POINTS_DONE = True
    named = list(dict.fromkeys([*env_plugins(), *normalise(modules)]))
    for module in named:
        _import(module, f"plugin {module}")
    return named
