"""Loading a config: the one validation entry point, where the registries meet the config.

:func:`load_config` parses a YAML file plus ``dotted.key=value`` overrides (:func:`flplat.config_load.parse_config`,
with the translation of the keys older versions spelled otherwise, :func:`flplat.data.legacy.upgrade_layer`),
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

from flplat.config import SWITCHABLE, Registries, validate
from flplat.config_load import parse_config

log = logging.getLogger("flplat")


def registries() -> Registries:
    """The registered names every config is checked against."""
    from flplat.algorithms import ALGORITHMS
    from flplat.data.datasets import DATASETS
    from flplat.data.partitions import PARTITIONS
    from flplat.models import MODELS

    return Registries(datasets=DATASETS, partitions=PARTITIONS, models=MODELS, algorithms=ALGORITHMS)


def load_config(path=None, overrides=()) -> DictConfig:
    """Build the validated config from an optional YAML file plus ``dotted.key=value`` overrides; raises
    :class:`~flplat.errors.ConfigError` (one line naming the key and the allowed values) on bad input."""
    from flplat.data.legacy import upgrade_layer
    from flplat.plugins import load_plugins

    cfg = parse_config(path, overrides, upgrade=upgrade_layer)
    cfg.plugins = load_plugins(cfg.plugins)  # before the names are checked: plugins add names
    cfg = validate(cfg, registries())
    warn_unused(cfg)
    return cfg


def warn_unused(cfg: DictConfig) -> None:
    """One warning per section whose file keys were set aside (``<section>_unused``)."""
    for section in SWITCHABLE:
        unused = cfg.get(f"{section}_unused")
        if unused:
            log.warning("%s.name=%s does not use the config's %s (keys of another %s); they are carried, not "
                        "used, and logged as %s_unused.*", section, cfg[section].name,
                        ", ".join(f"{section}.{k}" for k in unused), "dataset" if section == "data" else section,
                        section)
