"""The dataset and partition registries: the contract models and algorithms already have.

Every entry registers under a name with a ``Config`` dataclass whose fields are its own keys, flat in its section
beside the keys every entry shares (:class:`~flplat.config.DataConfig`: ``root``, ``cache``, ``max_train_samples``,
...; :class:`~flplat.config.PartitionConfig`: ``num_clients`` and the local split fractions)::

    @dataclass
    class BlobsConfig:
        samples: int = 600                                  # data.samples (when data.name=blobs)

        def check(self) -> None:                            # value checks: one line naming data.KEY
            check_range(self.samples >= 2, "data.samples", self.samples, "an integer >= 2")

    @register_dataset("blobs", BlobsConfig)
    def load_blobs(cfg, seed: int) -> Dataset: ...          # cfg.samples, cfg.root, cfg.max_train_samples, ...

    @register_partition("halves", HalvesConfig, plants=True)
    def halves(dataset: Dataset, cfg, seed: int) -> Partition: ...

The config is checked against the chosen entry's Config exactly as ``model.*`` and ``algorithm.*`` are
(:func:`flplat.config.namespaced_section`): an unknown key is a one-line error naming the valid keys, a key of
another entry one naming its owners; the Config's optional ``check()`` method checks values. A loader / partition
receives ``cfg`` as an instance of the Config extended by the shared keys (:func:`flplat.config.with_common`), so
its own methods and every key are attributes.

**Datasets**: ``load(cfg, seed) -> Dataset`` (the whole dataset in memory; ``seed`` for any sampling it does).

**Partitions** take the dataset: ``fn(dataset, cfg, seed) -> Partition`` (:class:`~flplat.data.containers.Partition`:
each client's pool indices or fixed splits, and optionally a new pool, unseen clients, planted distribution ids, a
public sample), so protocols that transform the data (``shift``), read its client ids or metadata (``natural``,
``metadata``) or its features (``pqfed``) are ordinary entries and the federation builder only cuts local splits and
assembles (:func:`flplat.data.partitions.build_federation`). ``seed`` is the partition's integer seed, not a
generator: a protocol spawns as many independent streams as it needs (``np.random.SeedSequence(seed).spawn(n)``),
and the built-ins keep the streams they always drew (the same clients as before the registry took the dataset).
The builder's own streams (each client's local split) are ``SeedSequence(seed).spawn(2)[1].spawn(K)``.
``plants=True`` says the protocol plants distributions (``Partition.distribution`` for every training client,
``unseen_distribution`` for every unseen one; ``flplat check --partition`` holds it to that); ``multilabel=True``
that it takes multi-label data (it reads no class per sample).

A protocol that only needs the pool's labels registers with ``takes="labels"``: ``fn(labels, cfg, rng) -> list of
index arrays`` (or a ``Partition`` of them with more to say), ``rng`` its generator
(``default_rng(SeedSequence(seed).spawn(2)[0])``); :func:`flplat.data.partitions.partition` runs it on labels alone.

**Older plugins.** ``@register_partition("name")`` without a Config on the old signature ``fn(labels, cfg, rng)``
(its first parameter not named ``dataset``) still works for one minor version, with a deprecation warning: it runs
as a label protocol whose keys are the ones the old shared ``PartitionConfig`` gave every protocol (those of the
built-in label protocols: ``alpha``, ``similarity``, ``min_samples``, ...; :func:`legacy_partition_config`).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from flplat.config import DataConfig, PartitionConfig
from flplat.config_sections import field_names, namespaced_section, same_default, structured_schema, with_common
from flplat.data.containers import Dataset, Partition
from flplat.data.splits import as_labels, run_label_protocol
from flplat.deprecation import warn
from flplat.protocol.registry import BUILTIN, add, origin
from flplat.protocol.strategy import NoConfig

__all__ = ["DATASETS", "PARTITIONS", "DatasetSpec", "NoConfig", "Partition", "PartitionSpec", "data_config",
           "load_builtins", "partition_config", "register_dataset", "register_partition"]

log = logging.getLogger("flplat")


@dataclass(frozen=True)
class DatasetSpec:
    """A registered dataset: its name, its keys (``Config``) and its loader ``load(cfg, seed) -> Dataset``."""

    name: str
    Config: type
    load: Callable[[Any, int], Dataset]


@dataclass(frozen=True)
class PartitionSpec:
    """A registered partition: its name, its keys (``Config``), ``build(dataset, cfg, seed) -> Partition``, whether it
    plants distribution ids and takes multi-label data, and ``labels`` (``fn(labels, cfg, rng)``) for a label
    protocol."""

    name: str
    Config: type
    build: Callable[[Dataset, Any, int], Partition]
    plants: bool = False
    multilabel: bool = False
    labels: Callable | None = None
    legacy: bool = False


DATASETS: dict[str, DatasetSpec] = {}
PARTITIONS: dict[str, PartitionSpec] = {}


def _checked_config(kind: str, name: str, config: type, common: type) -> type:
    if config is not NoConfig and not dataclasses.is_dataclass(config):
        raise TypeError(f"{kind} {name!r}: Config must be a dataclass type (or NoConfig), got {config!r}")
    clash = sorted(set(field_names(config)) & set(field_names(common)))
    if clash:
        raise TypeError(f"{kind} {name!r}: Config must not define {', '.join(clash)} (keys every {kind} shares: "
                        f"{', '.join(field_names(common))})")
    return config


def register_dataset(name: str, Config: type = NoConfig) -> Callable:  # noqa: N803  (the registries' spelling)
    """Decorator: register ``load(cfg, seed) -> Dataset`` under ``name`` (``data.name=NAME``) with its keys
    ``Config`` (module docstring)."""
    _checked_config("dataset", name, Config, DataConfig)

    def deco(fn: Callable) -> Callable:
        add("dataset", DATASETS, name, DatasetSpec(name, Config, fn), getattr(fn, "__module__", None))
        return fn

    return deco


def register_partition(name: str, Config: type | None = None, *, takes: str = "dataset",  # noqa: N803
                       plants: bool = False, multilabel: bool = False) -> Callable:
    """Decorator: register a partition protocol under ``name`` (``partition.name=NAME``) with its keys ``Config``:
    ``fn(dataset, cfg, seed) -> Partition``, or with ``takes="labels"`` ``fn(labels, cfg, rng) -> list of index
    arrays``. Without a Config on a function whose first parameter is not ``dataset``: the old signature
    (deprecated; module docstring)."""
    if takes not in ("dataset", "labels"):
        raise TypeError(f"partition {name!r}: takes={takes!r}; allowed: 'dataset', 'labels'")
    config = _checked_config("partition", name, Config or NoConfig, PartitionConfig)

    def deco(fn: Callable) -> Callable:
        if Config is None and takes == "dataset" and _first_parameter(fn) != "dataset":
            spec = _legacy_spec(name, fn)
        else:
            build = label_protocol(fn) if takes == "labels" else fn
            spec = PartitionSpec(name, config, build, plants, multilabel, fn if takes == "labels" else None)
        add("partition", PARTITIONS, name, spec, getattr(fn, "__module__", None))
        return fn

    return deco


def _first_parameter(fn: Callable) -> str | None:
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None
    return params[0] if params else None


#: the built-in label protocols whose keys the old shared PartitionConfig gave every protocol
LEGACY_KEY_SOURCES = ("iid", "dirichlet", "similarity", "cafa")


def legacy_partition_config() -> type:
    """The keys an old-signature plugin partition reads (deprecated): the union of the built-in label protocols'
    Configs, with their defaults -- what the old shared ``PartitionConfig`` held for them."""
    global _LEGACY_CONFIG
    if _LEGACY_CONFIG is None:
        load_builtins()
        fields: dict[str, tuple] = {}
        for source in LEGACY_KEY_SOURCES:
            config = PARTITIONS[source].Config
            if dataclasses.is_dataclass(config):
                hints = typing.get_type_hints(config)
                for f in dataclasses.fields(config):
                    fields.setdefault(f.name, (f.name, hints[f.name], same_default(f)))
        _LEGACY_CONFIG = dataclasses.make_dataclass("LegacyPartitionConfig", list(fields.values()))
    return _LEGACY_CONFIG


_LEGACY_CONFIG: type | None = None


def _legacy_spec(name: str, fn: Callable) -> PartitionSpec:
    msg = (f"partition {name!r}: register_partition(name) on fn(labels, cfg, rng) without a Config is deprecated "
           "and works for one more minor version (it reads the keys the old shared PartitionConfig held: "
           f"{', '.join(field_names(legacy_partition_config()))}); register it with its own keys: "
           "register_partition(name, Config, takes='labels'), or take (dataset, cfg, seed) and return a Partition "
           "(docs/extending.md)")
    warn(msg, stacklevel=3)
    log.warning("%s", msg)
    return PartitionSpec(name, legacy_partition_config(), label_protocol(fn), labels=fn, legacy=True)


def label_protocol(fn: Callable) -> Callable[[Dataset, Any, int], Partition]:
    """``fn(labels, cfg, rng)`` as a protocol of the dataset: the pool's labels (zeros for multi-label data, which
    only a label-free protocol gets), the generator ``default_rng(SeedSequence(seed).spawn(2)[0])``."""
    def build(dataset: Dataset, cfg: Any, seed: int) -> Partition:
        labels = np.zeros(len(dataset.y_train), np.int64) if dataset.multilabel else as_labels(dataset.y_train)
        rng = np.random.default_rng(np.random.SeedSequence(int(seed)).spawn(2)[0])
        return run_label_protocol(fn, labels, cfg, rng)

    build.__doc__, build.__name__ = fn.__doc__, getattr(fn, "__name__", "label_protocol")
    return build


# ------------------------------------------------------------------------------------------------ config objects


def _as_dict(cfg: Any) -> dict[str, Any]:
    if cfg is None:
        return {}
    if isinstance(cfg, DictConfig):
        return dict(OmegaConf.to_container(cfg, resolve=True))
    if isinstance(cfg, dict):
        return dict(cfg)
    if dataclasses.is_dataclass(cfg):
        return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    return {k: v for k, v in vars(cfg).items() if not k.startswith("_")}


def _resolve(section: str, registry: dict, common: type, what: str, cfg: Any, keys: dict) -> Any:
    name = getattr(cfg, "name", None) if cfg is not None and not isinstance(cfg, dict) else None
    entry = registry.get(keys.get("name", name))
    if not keys and entry is not None and type(cfg) is with_common(entry.Config, common):
        return cfg  # already whole and checked
    raw = {"name": common.name, **_as_dict(cfg), **keys}
    section_cfg = namespaced_section(section, registry, raw, common, what)
    entry = registry[section_cfg.name]
    return OmegaConf.to_object(OmegaConf.merge(structured_schema(with_common(entry.Config, common)), section_cfg))


def data_config(cfg: Any = None, /, **keys) -> Any:
    """The whole ``data`` section as the object a loader receives (the dataset's Config with the shared keys),
    checked: from a validated section, a mapping, a :class:`~flplat.config.DataConfig`, and/or keys, e.g.
    ``data_config(name="synthetic", samples=100)``."""
    load_builtins()
    return _resolve("data", DATASETS, DataConfig, "dataset", cfg, keys)


def partition_config(cfg: Any = None, /, **keys) -> Any:
    """The whole ``partition`` section as the object a protocol receives, checked (as :func:`data_config`), e.g.
    ``partition_config(name="dirichlet", num_clients=7, alpha=0.5)``."""
    load_builtins()
    return _resolve("partition", PARTITIONS, PartitionConfig, "partition", cfg, keys)


# ------------------------------------------------------------------------------------------------------ built-ins

_BUILTINS_LOADED = False


def load_builtins() -> None:
    """Import every module of :mod:`flplat.data`, so each file's datasets and partitions register themselves (no
    list to maintain: adding one is adding its file)."""
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    _BUILTINS_LOADED = True
    import importlib
    import pkgutil

    import flplat.data

    for mod in sorted(m.name for m in pkgutil.iter_modules(flplat.data.__path__)):
        importlib.import_module(f"flplat.data.{mod}")


def builtin_names(registry: dict, kind: str) -> list[str]:
    """The names of ``registry`` that flplat itself registers."""
    return sorted(n for n in registry if origin(kind, n) == BUILTIN)
