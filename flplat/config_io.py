"""A resolved config as text, parameters and a hash: what runs log, studies match on and the CLI prints.

* :func:`to_yaml` — the resolved config as YAML (``flplat run --print-config``);
* :func:`loggable` / :func:`loggable_yaml` — the resolved config with environment lookups left unresolved, so
  secrets never reach MLflow params, the logged ``config.yaml`` or checkpoints;
* :func:`config_key` — the hash that identifies what a run computes;
* :func:`flatten` — ``{"dotted.key": value}`` (MLflow params, tables).

Kept apart from :mod:`flplat.config` (the schema and its validation): everything above the config layer uses these,
and none of them needs the schema.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

__all__ = ["ENV_LOOKUPS", "config_key", "flatten", "loggable", "loggable_yaml", "to_yaml"]


def to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg, resolve=True)


ENV_LOOKUPS = ("${oc.env:", "${env:")


def loggable(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config as a plain dict, except that values read from the environment (``${oc.env:VAR}``)
    keep their unresolved expression: secrets (tokens, passwords in URIs) never reach MLflow params, the logged
    ``config.yaml`` or checkpoints (a resumed run resolves them again from its environment)."""
    raw = OmegaConf.to_container(cfg, resolve=False)
    res = OmegaConf.to_container(cfg, resolve=True)

    def walk(r, v):
        if isinstance(r, dict):
            return {k: walk(r[k], v[k]) for k in r}
        if isinstance(r, list):
            return [walk(a, b) for a, b in zip(r, v)]
        return r if isinstance(r, str) and any(e in r for e in ENV_LOOKUPS) else v

    return walk(raw, res)


def loggable_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.create(loggable(cfg)), resolve=False)


# Keys that say where a run's inputs are, not what it computes: the same files under another directory. They are
# part of :func:`config_key` (a store keeps the keys its runs were tagged with), so a run record imported on another
# machine takes the importing command's value for them (:func:`flplat.studies.reproduction.importing.record_cfg`).
LOCATION_KEYS = ("data.root",)


def config_key(cfg: DictConfig) -> str:
    """The hash that identifies what a run computes: the resolved config without ``tracking.*``, ``plugins`` and
    ``fabric.num_threads``, which do not change its result. Runs carry it as the tag ``flplat.config_key``; studies
    find a finished run, or an unfinished one to resume, by it (:func:`flplat.experiment.run_or_resume`,
    ``flplat reproduce``)."""
    import hashlib

    d = OmegaConf.to_container(cfg, resolve=True)
    d.pop("tracking", None)
    d.pop("plugins", None)  # which modules were imported names no result: the algorithm's name does
    d.get("fabric", {}).pop("num_threads", None)
    text = OmegaConf.to_yaml(OmegaConf.create(d), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def flatten(cfg: DictConfig | dict, prefix: str = "") -> dict[str, Any]:
    """Flatten to ``{"dotted.key": value}`` (MLflow params, tables)."""
    d = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out
