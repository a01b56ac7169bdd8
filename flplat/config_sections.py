"""The namespaced sections of a config: one registered entry's keys checked against its ``Config`` dataclass.

The four component sections (``data``, ``partition``, ``model``, ``algorithm``) share this contract
(:func:`namespaced_section`): the entry the section's ``name`` chooses declares its keys as a dataclass; an unknown
key is a one-line :class:`~flplat.errors.ConfigError` naming the valid keys (for ``data`` / ``partition`` also the
entries that define it), a wrong type one naming the key, and the entry's value checks run (``check()`` of a
dataset's / partition's Config, ``validate_config`` of a model / algorithm). ``data`` and ``partition`` add the keys
every entry shares (a ``common`` dataclass with a ``check_shared`` static method, :class:`flplat.config.DataConfig`
/ :class:`~flplat.config.PartitionConfig`): :func:`with_common` builds the dataclass of the whole section, what a
dataset loader or partition receives. Kept apart from :mod:`flplat.config` (the run frame), on its floor; it
imports nothing of flplat but the errors.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import field
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from flplat.errors import ConfigError, first_line

__all__ = ["field_names", "namespaced_section", "owners", "same_default", "structured_schema", "with_common"]

_SCHEMAS: dict[type, DictConfig] = {}
_COMBINED: dict[tuple[type, type], type] = {}


def structured_schema(cls: type) -> DictConfig:
    """``OmegaConf.structured(cls)``, built once per dataclass (the slowest part of loading a config: a grid plans
    hundreds). Only ever read: pass it as the first config of ``OmegaConf.merge``, which copies it."""
    if cls not in _SCHEMAS:
        _SCHEMAS[cls] = OmegaConf.structured(cls)
    return _SCHEMAS[cls]


def with_common(config: type, common: type) -> type:
    """The dataclass of a whole ``data`` / ``partition`` section: an entry's ``Config`` (its keys, its methods such
    as ``check``) extended by the shared keys of ``common`` (:class:`DataConfig`, :class:`PartitionConfig`); what a
    dataset loader / partition receives as ``cfg``. Built once per pair."""
    key = (config, common)
    if key not in _COMBINED:
        hints = typing.get_type_hints(common)
        extra = [(f.name, hints[f.name], same_default(f)) for f in dataclasses.fields(common)]
        frozen = dataclasses.is_dataclass(config) and config.__dataclass_params__.frozen
        _COMBINED[key] = dataclasses.make_dataclass(f"{config.__name__}With{common.__name__}", extra,
                                                    bases=(config,), frozen=frozen)
        _COMBINED[key].__module__ = config.__module__
    return _COMBINED[key]


def same_default(f: dataclasses.Field) -> Any:
    """A new ``field()`` with ``f``'s default (or default factory)."""
    if f.default is not dataclasses.MISSING:
        return field(default=f.default)
    return field(default_factory=f.default_factory)


def field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else []


def owners(registry: dict, key: str) -> list[str]:
    """The registered entries whose Config defines ``key``."""
    return sorted(n for n, e in registry.items() if key in field_names(e.Config))


def namespaced_section(section: str, registry: dict, raw: Any, common: type | None = None,
                       what: str | None = None) -> DictConfig:
    """Validate a ``{name: ..., **params}`` section against the registered entry's Config dataclass (with the
    shared keys of ``common`` for ``data`` / ``partition``, whose values ``common.check_shared`` checks); the full
    section, defaults filled in."""
    raw = OmegaConf.to_container(raw) if isinstance(raw, DictConfig) else dict(raw or {})
    name = raw.get("name")
    if name not in registry:
        raise ConfigError(f"{section}.name={name!r} is not valid; choose one of: {', '.join(sorted(registry))}")
    entry = registry[name]
    schema_cls = with_common(entry.Config, common) if common else entry.Config
    shared = field_names(common) if common else ["name"]
    own = [k for k in field_names(entry.Config) if k not in shared]
    params = {k: v for k, v in raw.items() if k != "name"}
    unknown = sorted(set(params) - set(shared) - set(own))
    if unknown:
        raise _unknown_key(section, registry, name, unknown[0], shared + own if common else None, what)
    try:
        merged = OmegaConf.merge(structured_schema(schema_cls), params)
    except OmegaConfBaseException as e:
        raise ConfigError(f"{section}.{getattr(e, 'full_key', '') or ''}: {first_line(e)}") from None
    values = OmegaConf.to_container(merged)
    out = OmegaConf.create({"name": name, **{k: values[k] for k in (shared + own) if k != "name"}})
    if common is not None:
        obj = OmegaConf.to_object(merged)
        common.check_shared(obj)
        if hasattr(obj, "check"):
            obj.check()
    check = getattr(entry, "validate_config", None)
    if check is not None:
        check(merged, section)
    return out


def _unknown_key(section: str, registry: dict, name: str, key: str, valid: list[str] | None,
                 what: str | None) -> ConfigError:
    """The one-line error for a key the chosen entry lacks: the valid keys, and (``data`` / ``partition``) the
    entries that do define it."""
    if valid is None:  # model, algorithm: as before
        known = ", ".join(field_names(registry[name].Config)) or "(none)"
        return ConfigError(f"unknown key {section}.{key} for {section} {name!r}; valid keys: name, {known}")
    whose = [o for o in owners(registry, key) if o != name]
    owned = f" (a key of {', '.join(whose)})" if whose else ""
    return ConfigError(f"unknown key {section}.{key} for {what or section} {name!r}{owned}; valid keys: "
                       f"{', '.join(valid)}")
