"""From text to one config: a YAML file and ``dotted.key=value`` overrides merged over the schema's defaults (not yet
validated: :func:`flplat.configure.load_config` parses and validates).

Each layer (the file, the overrides) is first brought to the current form by the ``upgrade`` hook the caller hands
in (:func:`flplat.data.legacy.upgrade_layer`: keys older versions spelled otherwise, one warning each), reading it
for the entry the layer names (else the one the merged config chooses). Then, when the overrides switch a section's
entry (``algorithm.name``, ``data.name``, ``partition.name``) away from the file's, the file's keys of that section
are set aside in ``<section>_unused`` (see :mod:`flplat.config`). Bad text is one line naming the file or key.

Kept apart from :mod:`flplat.config` (the run frame and its validation), on the same floor.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from flplat.config import SHARED, SWITCHABLE, ExperimentConfig, field_names, structured_schema
from flplat.errors import ConfigError, first_line

__all__ = ["Upgrade", "dotlist", "parse_config"]

#: ``upgrade(layer, names) -> layer``: a layer (a config file or the overrides, as a plain dict) in the current
#: form, the very same dict when it already is; ``names`` maps each switchable section to the entry the layer is
#: read for (see parse_config)
Upgrade = Callable[[dict, dict], dict]


def _set_aside_switched_keys(file_layer: DictConfig, override_layer: DictConfig, section: str) -> None:
    """When the overrides switch ``<section>.name`` away from the file's entry, the file's keys of that section
    are that entry's settings: move them to ``<section>_unused`` (carried, reported, not used), so the chosen entry
    starts from its own defaults plus the overrides -- also where both define a key of the same name with another
    meaning. The shared keys of ``data`` / ``partition`` (:data:`SHARED`) stay."""
    sec = file_layer.get(section) if isinstance(file_layer, DictConfig) else None
    chosen = OmegaConf.select(override_layer, f"{section}.name", default=None)
    if not isinstance(sec, DictConfig) or chosen is None or sec.get("name") in (None, chosen):
        return
    keep = set(field_names(SHARED[section])) if section in SHARED else {"name"}
    items = OmegaConf.to_container(sec)
    moved = {k: v for k, v in items.items() if k not in keep}
    if moved:
        before = file_layer.get(f"{section}_unused")
        file_layer[section] = {k: v for k, v in items.items() if k in keep}
        file_layer[f"{section}_unused"] = {**(OmegaConf.to_container(before) if before else {}), **moved}


def _chosen_names(layers: list[DictConfig]) -> dict[str, str]:
    """Each switchable section's entry after merging: the last layer that names it, else the default."""
    base = ExperimentConfig()
    out = {s: getattr(base, s)["name"] for s in SWITCHABLE}
    for layer in layers:
        for s in SWITCHABLE:
            name = OmegaConf.select(layer, f"{s}.name", default=None)
            out[s] = name if name is not None else out[s]
    return out


def _prepare_layers(layers: list[DictConfig], upgrade: Upgrade | None) -> list[DictConfig]:
    """Each layer in the current form (``upgrade``, read for the entry it names, else the chosen one), then the
    file's keys of a switched entry set aside."""
    if upgrade is not None:
        chosen = _chosen_names(layers)
        out = []
        for layer in layers:
            plain = OmegaConf.to_container(layer)
            new = upgrade(plain, {s: OmegaConf.select(layer, f"{s}.name", default=None) or chosen[s]
                                  for s in SWITCHABLE})
            out.append(layer if new is plain else OmegaConf.create(new))  # (the current form: kept as it is)
        layers = out
    if len(layers) == 2:
        for section in SWITCHABLE:
            _set_aside_switched_keys(*layers, section)
    return layers


# YAML 1.1 reads these words as booleans; an override such as algorithm.knee_guard=off must stay the string "off"
# for a string key (a boolean key still accepts it: OmegaConf turns "off" into False)
_YAML_BOOL_WORDS = frozenset({"on", "off", "yes", "no"})


def dotlist(overrides) -> DictConfig:
    """``OmegaConf.from_dotlist`` of ``key=value`` overrides, with on/off/yes/no kept as strings."""
    fixed = []
    for o in overrides:
        key, _, value = o.partition("=")
        fixed.append(f"{key}='{value}'" if value.strip().lower() in _YAML_BOOL_WORDS else o)
    return OmegaConf.from_dotlist(fixed)


def _yaml_kind(path: Path) -> str | None:
    """None when the YAML document at ``path`` is a mapping (or empty), else what it is: list, str, int, ..."""
    import yaml

    try:
        doc = yaml.safe_load(path.read_text())
    except Exception:  # OmegaConf read it: a tag safe_load does not know; leave the judgement to OmegaConf
        return None
    if doc is None or isinstance(doc, dict):
        return None
    return {"str": "string", "NoneType": "null"}.get(type(doc).__name__, type(doc).__name__)


_SECTIONS_HINT = "allowed: a mapping of sections (seed, data, partition, model, algorithm, ...)"


def _load_file(path: str | Path) -> DictConfig:
    """A config file as one layer; one-line errors for a missing, unreadable, non-mapping or empty file."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist; pass a YAML file such as configs/quickstart.yaml")
    try:
        loaded = OmegaConf.load(p)
    except Exception as e:  # yaml errors (and a bare number: OmegaConf refuses to load it)
        kind = _yaml_kind(p)
        if kind is not None:
            raise ConfigError(f"config file {str(path)!r} is not a mapping of config keys (it holds a YAML "
                              f"{kind}); {_SECTIONS_HINT}") from None
        raise ConfigError(f"config file {str(path)!r} is not valid YAML: {first_line(e)}; allowed: a YAML "
                          "mapping of sections (seed, data, partition, model, algorithm, ...)") from None
    kind = _yaml_kind(p) if isinstance(loaded, DictConfig) else type(loaded).__name__.replace("Config", "").lower()
    if kind is not None:  # (OmegaConf reads a bare scalar `just a string` as the key {'just a string': None})
        raise ConfigError(f"config file {str(path)!r} is not a mapping of config keys (it holds a YAML {kind}); "
                          f"{_SECTIONS_HINT}")
    if len(loaded) == 0:
        raise ConfigError(f"config file {str(path)!r} is empty; allowed: a mapping of sections such as "
                          "configs/quickstart.yaml (or no file: `flplat run` needs one, overrides go after it)")
    return loaded


def parse_config(path: str | Path | None = None, overrides: tuple[str, ...] | list[str] = (),
                 upgrade: Upgrade | None = None) -> DictConfig:
    """Merge the schema defaults, an optional YAML file and ``dotted.key=value`` overrides (not yet validated:
    :func:`flplat.configure.load_config` parses with ``upgrade`` and validates)."""
    base = structured_schema(ExperimentConfig)
    layers = [_load_file(path)] if path is not None else []
    for o in overrides:
        if "=" not in o:
            raise ConfigError(f"override {o!r} must look like dotted.key=value")
        key = o.split("=", 1)[0].strip()
        if not key or any(part == "" for part in key.split(".")):
            raise ConfigError(f"override key {key!r} (in {o!r}) has an empty part; allowed: dotted.key=value with "
                              "keys of configs/quickstart.yaml, e.g. federation.rounds=5")
    try:
        layers.append(dotlist(overrides))
        layers = _prepare_layers(layers, upgrade)
        cfg = OmegaConf.merge(base, *layers)
    except (ConfigKeyError, ConfigAttributeError) as e:
        key = getattr(e, "full_key", None) or first_line(e)
        raise ConfigError(f"unknown config key {key!r}; valid keys are those of configs/quickstart.yaml "
                          "and flplat/config.py") from None
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        raise ConfigError(f"{key}: {first_line(e)}" if key else first_line(e)) from None
    except TypeError as e:  # OmegaConf: "Cannot merge incompatible container types" (a mapping for a list, ...)
        found = next((m for layer in layers if (m := _shape_mismatch(base, layer))), None)
        raise ConfigError(found or first_line(e)) from None
    return cfg


def _shape(node: Any) -> str:
    return "a mapping" if isinstance(node, DictConfig) else "a list" if isinstance(node, ListConfig) else "a value"


_SHAPE_EXAMPLE = {"a mapping": "{key: value}", "a list": "[a, b]"}


def _shape_mismatch(schema: DictConfig, layer: DictConfig, prefix: str = "") -> str | None:
    """The first key of ``layer`` that holds a mapping where ``schema`` holds a list or the other way round (what
    OmegaConf's merge refuses with a bare TypeError), as a one-line message; None when there is none."""
    for k in layer:
        if k not in schema:
            continue
        want, got = _shape(schema._get_node(k)), _shape(layer._get_node(k))
        if want != got and "a value" not in (want, got):
            return (f"{prefix}{k} is {got} where {want} is expected; allowed: {want}, "
                    f"e.g. {prefix}{k}={_SHAPE_EXAMPLE[want]}")
        if want == got == "a mapping":
            found = _shape_mismatch(schema[k], layer[k], f"{prefix}{k}.")
            if found:
                return found
    return None


