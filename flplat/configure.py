"""Loading a config: the one validation entry point, where the registries meet the config.

:func:`load_config` parses a YAML file plus ``dotted.key=value`` overrides (:func:`flplat.config.parse_config`),
imports the plugins that add to the registries (:func:`flplat.plugins.load_plugins`: entry points,
``$FLPLAT_PLUGINS``, the config's ``plugins``) and validates the config against the registered datasets,
partitions, models and algorithms (:func:`flplat.config.validate` with :func:`registries`). It sits above the
registries and below the engine, so reading a config imports torch (the model and algorithm registries) but not
Lightning Fabric, the engine or MLflow: ``flplat run`` starts a sharded run's other processes right after it
(:mod:`flplat.engine.launch`), and they import the rest in parallel. :mod:`flplat.experiment` re-exports
:func:`load_config`.
"""

from __future__ import annotations

import logging

from omegaconf import DictConfig

from flplat.config import Registries, parse_config, validate

log = logging.getLogger("flplat")


def registries() -> Registries:
    """The registered names every config is checked against."""
    from flplat.algorithms import ALGORITHMS
    from flplat.data.datasets import DATASETS
    from flplat.data.partitions import PARTITIONS
    from flplat.data.shift_partition import SHIFT_TYPES
    from flplat.models import MODELS

    return Registries(datasets=DATASETS, partitions=PARTITIONS, shift_types=SHIFT_TYPES, models=MODELS,
                      algorithms=ALGORITHMS)


def load_config(path=None, overrides=()) -> DictConfig:
    """Build the validated config from an optional YAML file plus ``dotted.key=value`` overrides; raises
    :class:`~flplat.errors.ConfigError` (one line naming the key and the allowed values) on bad input."""
    from flplat.plugins import load_plugins

    cfg = parse_config(path, overrides)
    cfg.plugins = load_plugins(cfg.plugins)  # before the names are checked: plugins add names
    cfg = validate(cfg, registries())
    if cfg.algorithm_unused:
        log.warning("algorithm.name=%s does not use the config file's %s (keys of its algorithm); they are carried, "
                    "not used, and logged as algorithm_unused.*", cfg.algorithm.name,
                    ", ".join(f"algorithm.{k}" for k in cfg.algorithm_unused))
    return cfg
