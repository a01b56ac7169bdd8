"""The ``data`` / ``partition`` keys as older versions spelled them, translated to the current form (deprecated: this
translation goes in the next minor version).

Before every dataset and partition declared its own keys, ``data`` and ``partition`` were two flat schemas that held
every dataset's and every protocol's keys at once (``data.synthetic_samples``, ``data.acs.states``,
``partition.pqfed_rates``, ``partition.shift_type``, ...). :data:`OLD_KEYS` maps each old key to the entries that used
it and its name there now (a key whose name did not change maps to itself). A config layer (a file, the overrides)
that holds a key the current form has under no entry (:func:`old_only_keys`) is read in the old form
(:func:`upgrade_layer`, the hook :func:`flplat.configure.load_config` hands to the parser): every key of the chosen
entry takes its current name, with one deprecation warning per key (a
:class:`~flplat.deprecation.FlplatDeprecationWarning`, a :class:`DeprecationWarning`, and a logged
warning line); a key of another entry is carried in ``<section>_unused`` (not used, warned about) unless it holds
its default -- an old config's full dump (``--print-config``, a run's logged ``config.yaml``) holds every key --
in which case it is dropped. A layer without such keys is in the current form and is checked as written.

:func:`upgrade_config` does the same to a whole config: what re-keys run records made by older versions (their
logged ``config.yaml``; the config hash, :func:`flplat.config_io.config_key`, changed with the form).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
from typing import Any

from flplat.config import SHARED, field_names
from flplat.data.registry import DATASETS, PARTITIONS, load_builtins
from flplat.deprecation import warn

__all__ = ["OLD_KEYS", "deprecated", "old_only_keys", "upgrade_config", "upgrade_layer"]

log = logging.getLogger("flplat")

_TEXT = ("max_length", "min_freq", "max_vocab", "padding", "truncation")
_USER = {"path": ("imagefolder", "npz", "table"), "test_path": ("imagefolder", "table"), "label_column": ("table",),
         "feature_columns": ("table",), "categorical": ("table",), "standardize": ("imagefolder", "table"),
         "client_column": ("imagefolder", "npz", "table"), "meta_columns": ("imagefolder", "npz", "table"),
         "folder_levels": ("imagefolder",), "index_file": ("imagefolder",), "image_size": ("imagefolder",),
         "grey": ("imagefolder",)}
_GROUPS = {"acs": ("acs_income", ("year", "horizon", "states", "scaler")),
           "serengeti": ("serengeti", ("num_classes", "classes", "features", "scaler")),
           "sent140": ("sent140", ("source", "labels")), "amazon": ("amazon_reviews", ("source", "fields")),
           "femnist": ("femnist", ("classes",)),
           "chexpert": ("chexpert", ("image_size", "uncertain", "age_threshold", "max_train_rows")),
           "officehome": ("office_home", ("num_classes", "image_size", "domains"))}
_PQFED = ("rates", "sources", "target_sources", "samples_per_source", "target_test_per_source", "public_size",
          "pca_components", "diff")

#: section -> old key (a nested group's key as ``group.key``) -> {entry: the key's name there now}
OLD_KEYS: dict[str, dict[str, dict[str, str]]] = {
    "data": {
        **{f"synthetic_{k}": {"synthetic": k} for k in ("samples", "features", "classes", "separation")},
        "cifar100_classes": {"cifar100": "classes"},
        **{f"text.{k}": {"sent140": k, "amazon_reviews": k} for k in _TEXT},
        **{f"{group}.{k}": {entry: k} for group, (entry, keys) in _GROUPS.items() for k in keys},
        **{k: {entry: k for entry in entries} for k, entries in _USER.items()},
    },
    "partition": {
        "alpha": {"dirichlet": "alpha"}, "similarity": {"similarity": "similarity"},
        "min_samples": {"dirichlet": "min_samples", "cafa": "min_samples"}, "max_retries": {"dirichlet": "max_retries"},
        **{f"pqfed_{k}": {"pqfed": k} for k in _PQFED},
        "shift_type": {"shift": "type"}, "shift_level": {"shift": "level"},
        "label_bank_size": {"shift": "label_bank_size"}, "train_copies": {"shift": "train_copies"},
        **{k: {"shift": k, "metadata": k} for k in ("num_unseen_clients", "samples_per_client")},
        "natural_min_samples": {"natural": "min_samples"}, "natural_max_clients": {"natural": "max_clients"},
        "natural_test": {"natural": "test"},
        **{f"meta_{k}": {"metadata": k} for k in ("columns", "bins", "assign")},
        **{k: {"cafa": k} for k in ("iid_fraction", "class_fraction_min", "class_fraction_max", "size_min",
                                    "size_max")},
    },
}
_OLD_GROUPS = {"data": {"text", *_GROUPS}, "partition": set()}
_REGISTRY = {"data": DATASETS, "partition": PARTITIONS}
_WARNED: set[str] = set()


def deprecated(message: str) -> None:
    """One deprecation notice: a :class:`~flplat.deprecation.FlplatDeprecationWarning` (flplat's one deprecation
    helper) and a logged warning line (what a user running ``flplat`` sees), once per message and process."""
    if message in _WARNED:
        return
    _WARNED.add(message)
    warn(message, stacklevel=3)
    log.warning("%s", message)


@functools.cache
def old_only_keys(section: str) -> frozenset[str]:
    """The old keys the current form has under no entry: their presence marks a layer as written in the old form."""
    return frozenset(k for k, where in OLD_KEYS[section].items() if all(new != k for new in where.values()))


def _flatten_groups(sec: dict, groups: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in sec.items():
        if k in groups and isinstance(v, dict):
            out.update({f"{k}.{kk}": vv for kk, vv in v.items()})
        else:
            out[k] = v
    return out


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in flat.items():
        group, _, key = k.rpartition(".")
        (out.setdefault(group, {}) if group else out)[key] = v
    return out


def _default(section: str, entry: str, key: str) -> Any:
    spec = _REGISTRY[section].get(entry)
    fields = {f.name: f for f in dataclasses.fields(spec.Config)} if spec and dataclasses.is_dataclass(spec.Config) \
        else {}
    f = fields.get(key)
    if f is None:
        return dataclasses.MISSING
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


def _at_old_default(section: str, key: str, value: Any) -> bool:
    """Whether ``value`` is the default the old schema gave ``key`` (that of the entries that used it)."""
    return any(_default(section, entry, new) == value for entry, new in OLD_KEYS[section][key].items())


def _translate(section: str, flat: dict[str, Any], entry: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """One old-form section read for ``entry``: (its keys now, the keys carried as unused)."""
    table, shared = OLD_KEYS[section], set(field_names(SHARED[section]))
    spec = _REGISTRY[section].get(entry)
    own = set(field_names(spec.Config)) if spec is not None else set()
    kept, renamed, unused = {}, {}, {}
    for k, v in flat.items():
        where = table.get(k)
        if k in shared or where is None:
            kept[k] = v  # a shared key, or no key of the old schema: checked as written
        elif entry in where and where[entry] != k:
            renamed[where[entry]] = v
            deprecated(f"{section}.{k} is deprecated and goes in the next minor version: it is {section}."
                       f"{where[entry]} (with {section}.name={entry}); see CHANGELOG.md")
        elif entry in where or (k in own and not _at_old_default(section, k, v)):
            kept[k] = v  # the chosen entry's key of the same name (or one of the current form, written beside)
        elif not _at_old_default(section, k, v):
            unused[k] = v
            deprecated(f"{section}.{k} (an old key of {', '.join(sorted(where))}) is not a key of {section}.name="
                       f"{entry}: carried in {section}_unused, not used")
    return {**kept, **renamed}, unused


def upgrade_layer(layer: dict, names: dict[str, str]) -> dict:
    """A config layer (a plain dict) in the current form: each of its ``data`` / ``partition`` sections that holds an
    old-only key is read in the old form for the entry ``names[section]`` (module docstring). Returns ``layer`` itself
    when it is in the current form, else a new dict (``layer`` unchanged)."""
    out = layer
    for section in ("data", "partition"):
        sec = layer.get(section)
        if not isinstance(sec, dict):
            continue
        flat = _flatten_groups(sec, _OLD_GROUPS[section])
        if not set(flat) & old_only_keys(section):
            continue
        load_builtins()
        kept, unused = _translate(section, flat, names.get(section) or SHARED[section].name)
        out = dict(out) if out is layer else out
        out[section] = kept
        if unused:
            out[f"{section}_unused"] = {**(out.get(f"{section}_unused") or {}), **_nest(unused)}
    return out


def upgrade_config(cfg: Any) -> dict:
    """A whole config written by an older version (a mapping or an OmegaConf config: a YAML file, a run's logged
    ``config.yaml``) in the current form, read for the entries it names; the same translation as a run's layers."""
    from omegaconf import DictConfig, OmegaConf

    d = OmegaConf.to_container(cfg) if isinstance(cfg, DictConfig) else copy.deepcopy(dict(cfg))
    names = {s: (d.get(s) or {}).get("name") or SHARED[s].name for s in ("data", "partition")}
    return upgrade_layer(d, names)
