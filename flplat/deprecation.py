"""The one way flplat deprecates something: a :class:`FlplatDeprecationWarning` naming what replaces it.

A name, module path, key or call form that is going away keeps working for one more minor version and warns
through :func:`deprecated` (a name or path: what it is, since when, when it goes and its replacement) or
:func:`warn` (a message of its own, e.g. an old config key). There are no silent shims: an import path kept for old
code is a module-level ``__getattr__`` made by :func:`moved`, which warns on every use from a new call site and
hands back the object from its new home. CHANGELOG.md lists every deprecation with its replacement.

The warnings are a subclass of :class:`DeprecationWarning` (``pytest.warns(DeprecationWarning)`` and ``-W
error::DeprecationWarning`` see them) of their own, so that a filter can single out flplat's: the test suite turns
them into errors (pyproject.toml), so a test or tool that uses an old path fails. Python hides DeprecationWarning
outside ``__main__``; unless the interpreter was given ``-W`` options, importing this module shows flplat's once per
call site (the ``default`` action), so a plugin's author sees the line of their code that needs the change.

This module is at the bottom of the package (it imports nothing of flplat), so every layer can use it.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["NEXT_MINOR", "SINCE", "FlplatDeprecationWarning", "deprecated", "moved", "warn"]

#: the version that deprecates what is deprecated now, and the one that removes it
SINCE = "0.2.0"
NEXT_MINOR = "0.3.0"


class FlplatDeprecationWarning(DeprecationWarning):
    """Something of flplat that is going away; the message names its replacement."""


if not sys.warnoptions:  # the user's -W options win; otherwise flplat's deprecations show once per call site
    warnings.filterwarnings("default", category=FlplatDeprecationWarning)


def warn(message: str, stacklevel: int = 2) -> None:
    """Emit ``message`` as a :class:`FlplatDeprecationWarning` attributed to the caller's caller (``stacklevel`` as
    :func:`warnings.warn`'s, counted from the function that calls this one)."""
    warnings.warn(message, FlplatDeprecationWarning, stacklevel=stacklevel + 1)


def deprecated(old: str, new: str, since: str = SINCE, remove_in: str = NEXT_MINOR, stacklevel: int = 2) -> None:
    """Warn that ``old`` (a name, path or call form) is deprecated: ``new`` replaces it. Python's ``default``
    action shows it once per call site (the file and line ``stacklevel`` points at, counted from the caller)."""
    warn(f"{old} is deprecated since flplat {since} and will be removed in {remove_in}; use {new}",
         stacklevel=stacklevel + 1)


def moved(module: str, names: dict[str, str], since: str = SINCE,
          remove_in: str = NEXT_MINOR) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` for names that moved out of ``module``: ``names`` maps each old name to its
    new home, ``"package.module"`` (same name) or ``"package.module:new_name"``. Reading one (``from module import
    name`` or ``module.name``) warns with the replacement and returns the object from the new home; any other
    missing name is the usual AttributeError. Use: ``__getattr__ = moved(__name__, {...})``. The mapping stays
    readable as the function's ``moved`` attribute (the tests check that no test or tool uses an old path)."""

    def __getattr__(name: str) -> Any:
        target = names.get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        home, _, attr = target.partition(":")
        attr = attr or name
        deprecated(f"{module}.{name}", f"{home}.{attr}", since, remove_in, stacklevel=2)
        return getattr(importlib.import_module(home), attr)

    __getattr__.moved = dict(names)  # type: ignore[attr-defined]
    return __getattr__
