"""The bottom of the package: the input error and the one-line checks every layer uses.

Every bad input the user can give (a config value, a CLI flag, a data file) ends as :class:`ConfigError`, whose
message is one line naming the key and the allowed values; the CLI prints it and exits with status 2. This module
imports nothing of flplat, so config, data, models, algorithms and the engine can all raise the same error
without importing each other.
"""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """Bad user input: the message is one line naming the key and the allowed values."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, ``timeout``, SLURM preemption) raised in the main thread: ends the run like Ctrl-C
    (KILLED, artifacts and a checkpoint written); the CLI exits 143."""


# SIGINT / SIGTERM received by this process and not yet ended by (flplat.cli.signals installs the handlers): the
# round loop raises the interrupt again at its next safe point when the first one was swallowed on its way
# (raised inside a finaliser, a weakref callback or a library's `except BaseException`)
STOP_SIGNALS: list[int] = []


def raise_if_stopped() -> None:
    """Raise :class:`KeyboardInterrupt` (SIGINT) or :class:`Terminated` (SIGTERM) when one came and was swallowed:
    a Ctrl-C always ends the run at its next round or client."""
    if STOP_SIGNALS:
        import signal

        raise Terminated() if STOP_SIGNALS[0] == signal.SIGTERM else KeyboardInterrupt()


class RunFailed(RuntimeError):
    """A run that cannot go on (one-line reason): the MLflow run ends FAILED, the CLI prints the line, exit 1."""


class TrackingStoreError(RunFailed):
    """The tracking store failed mid-run (one-line reason); the run ends FAILED."""


def _not_valid(key: str, value: Any, allowed: str) -> ConfigError:
    # a YAML file's off/no/on/yes reach a string key as 'False'/'True' (YAML 1.1 booleans); overrides keep the word
    hint = " (YAML reads off/no/on/yes as booleans: quote the word)" if value in ("False", "True", False, True) else ""
    return ConfigError(f"{key}={value!r} is not valid; choose one of: {allowed}{hint}")


def check_choice(key: str, value: Any, allowed) -> None:
    """Raise unless ``value`` is one of ``allowed`` (listed sorted in the message)."""
    if value not in allowed:
        raise _not_valid(key, value, ", ".join(sorted(allowed)))


def check_range(cond: bool, key: str, value: Any, allowed: str) -> None:
    """Raise the out-of-range error for ``key=value`` unless ``cond`` holds; ``allowed`` describes the range."""
    if not cond:
        raise ConfigError(f"{key}={value!r} is out of range; allowed: {allowed}")


def param_out_of_range(section: str, cfg: Any, key: str, allowed: str):
    """Raise the one-line error for an algorithm/model parameter ``section.key`` outside ``allowed``."""
    raise ConfigError(f"{section}.{key}={getattr(cfg, key)!r} is out of range; allowed: {allowed}")


def param_choice(section: str, cfg: Any, key: str, allowed) -> None:
    """Raise the one-line error when parameter ``section.key`` is not one of ``allowed`` (listed in that order)."""
    if getattr(cfg, key) not in allowed:
        raise _not_valid(f"{section}.{key}", getattr(cfg, key), ", ".join(allowed))


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (its type name when it has none)."""
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
