"""Model registry and the :class:`SplitModel` base every architecture derives from.

Personalised and clustered FL methods need to address the two halves of a network separately: FedRep and
CReFF train/share the body and the classifier on different schedules, APFL mixes heads, and Flux describes a
client by the latent representation entering the first fully connected layer (PLATFORM.md §4). So each model
here is a :class:`SplitModel`::

    model.features        # body: every layer but the final classifier -> flat (B, D) representation
      .trunk              #   layers before the first fully connected layer, ending with a Flatten
      .dense              #   fully connected layers of the body (may be empty)
    model.head            # the final nn.Linear classifier -> logits (no softmax)
    model(x)        == model.head(model.features(x))
    model.latent(x) == model.features.trunk(x)   # flattened input of the first fully connected layer

Models are registered with :func:`register_model` under a name, with a ``Config`` dataclass whose fields are the
model's tunable hyperparameters; :mod:`flplat.config` validates the ``model:`` section of an experiment against
it, and :func:`build_model` turns a (validated or plain) section into a module for a given input shape and class
count. Forward passes have no data-dependent Python control flow (shape-only decisions are taken once, at
construction), so ``torch.func.functional_call`` + ``vmap`` over stacked parameter copies works; dropout then
needs ``randomness="different"`` (or ``"same"``), and batch norm in training mode, which mutates its running
statistics in place, runs through :class:`flplat.maths.stacked.StackedForward` (statistics per model). Nothing here
seeds a random generator: parameter initialisation draws from torch's global generator, which the caller seeds.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from flplat.config import namespaced_section
from flplat.errors import ConfigError
from flplat.protocol.registry import add

BuildFn = Callable[[Any, tuple[int, ...], int], "SplitModel"]
ValidateFn = Callable[[Any, str], None]


class FeatureExtractor(nn.Module):
    """The body of a :class:`SplitModel`: ``dense(trunk(x))``; ``trunk`` ends with the flattening step."""

    def __init__(self, trunk: nn.Module, dense: nn.Module) -> None:
        super().__init__()
        self.trunk = trunk
        self.dense = dense

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense(self.trunk(x))


class SplitModel(nn.Module):
    """A classifier with an explicit body/head split (see the module docstring).

    Subclasses build ``trunk`` (everything before the first fully connected layer, flattened) and ``dense`` (the
    body's fully connected layers) and call ``super().__init__``, which adds the linear ``head`` and records
    ``latent_dim`` (width of :meth:`latent`) and ``feature_dim`` (width of ``features``, the head's input).
    """

    features: FeatureExtractor
    head: nn.Linear

    def __init__(
        self,
        trunk: nn.Module,
        dense: nn.Module,
        input_shape: tuple[int, ...],
        num_classes: int,
        *,
        head_bias: bool = True,
    ) -> None:
        super().__init__()
        self.input_shape: tuple[int, ...] = tuple(int(s) for s in input_shape)
        self.num_classes: int = int(num_classes)
        self.features = FeatureExtractor(trunk, dense)
        self.latent_dim: int = output_size(trunk, self.input_shape)
        self.feature_dim: int = output_size(self.features, self.input_shape)
        self.head = nn.Linear(self.feature_dim, self.num_classes, bias=head_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))

    def latent(self, x: torch.Tensor) -> torch.Tensor:
        """Flattened input of the first fully connected layer, shape (B, ``latent_dim``) (Flux descriptors)."""
        return self.features.trunk(x)


def output_size(module: nn.Module, input_shape: tuple[int, ...]) -> int:
    """Width of ``module``'s flat output for one sample of ``input_shape`` (a dummy forward in eval mode).

    Eval mode keeps batch-norm statistics untouched and dropout off; the module's training flags are restored.
    Raises :class:`ConfigError` when the input is too small for the layers (e.g. a kernel larger than the map).
    """
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        with torch.no_grad():
            ref = next(iter(module.parameters()), None)
            device = ref.device if ref is not None else None
            dtype = ref.dtype if ref is not None and ref.is_floating_point() else None
            out = module(torch.zeros((1, *input_shape), device=device, dtype=dtype))
    except RuntimeError as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"input shape {tuple(input_shape)} is too small or malformed for this model: {msg}") from None
    finally:
        for m, mode in modes:
            m.training = mode
    if out.dim() != 2:
        raise ConfigError(f"the body must output a flat (B, D) tensor, got shape {tuple(out.shape)}")
    return int(out.shape[1])


@dataclass(frozen=True)
class ModelSpec:
    """A registered model: its name, hyperparameter ``Config`` dataclass, builder and optional validator.

    ``build(cfg, input_shape, num_classes)`` receives a ``Config`` instance. ``validate_config(cfg, section)``
    (called by :mod:`flplat.config` with the merged section) raises :class:`ConfigError` on bad values.
    """

    name: str
    Config: type
    build: BuildFn
    validate_config: ValidateFn | None = None


MODELS: dict[str, ModelSpec] = {}


def register_model(name: str, Config: type, validate_config: ValidateFn | None = None) -> Callable[[BuildFn], BuildFn]:
    """Decorator registering ``build(cfg, input_shape, num_classes) -> SplitModel`` under ``name``."""
    if not dataclasses.is_dataclass(Config):
        raise TypeError(f"model {name!r}: Config must be a dataclass type, got {Config!r}")
    if "name" in {f.name for f in dataclasses.fields(Config)}:
        raise TypeError(f"model {name!r}: Config must not define a 'name' field (it is the registry key)")

    def deco(build: BuildFn) -> BuildFn:
        add("model", MODELS, name, ModelSpec(name=name, Config=Config, build=build, validate_config=validate_config),
            getattr(build, "__module__", None))
        return build

    return deco


def _section_dict(cfg: Any) -> dict[str, Any]:
    if isinstance(cfg, DictConfig):
        return dict(OmegaConf.to_container(cfg, resolve=True))  # type: ignore[arg-type]
    if isinstance(cfg, Mapping):
        return dict(cfg)
    if hasattr(cfg, "__dict__"):
        return {k: v for k, v in vars(cfg).items() if not k.startswith("_")}
    name = getattr(cfg, "name", None)
    spec = MODELS.get(name) if isinstance(name, str) else None
    fields = dataclasses.fields(spec.Config) if spec is not None else ()
    return {"name": name, **{f.name: getattr(cfg, f.name) for f in fields if hasattr(cfg, f.name)}}


def build_model(cfg: Any, input_shape: tuple[int, ...] | list[int] | torch.Size, num_classes: int) -> SplitModel:
    """Build the model named ``cfg.name`` with ``cfg``'s hyperparameters (missing ones take their defaults).

    ``cfg`` is the ``model`` section: an OmegaConf ``DictConfig``, a mapping, or an object with a ``name``
    attribute and Config fields as attributes. It is validated like :func:`flplat.config.validate` does (unknown
    name or key, wrong type, out-of-range value: :class:`ConfigError`). ``input_shape`` excludes the batch
    dimension, e.g. ``(1, 28, 28)`` for images or ``(20,)`` for tabular features.
    """
    raw = _section_dict(cfg)
    name = raw.get("name")
    if name not in MODELS:
        raise ConfigError(f"model.name={name!r} is not valid; choose one of: {', '.join(sorted(MODELS))}")
    shape = tuple(input_shape)
    if not shape or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in shape):
        raise ConfigError(f"model {name!r}: input shape {shape!r} must be a non-empty tuple of positive integers")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ConfigError(f"model {name!r}: num_classes={num_classes!r} must be an integer >= 1")
    spec = MODELS[name]
    section = namespaced_section("model", MODELS, raw)
    params = {k: v for k, v in OmegaConf.to_container(section, resolve=True).items() if k != "name"}  # type: ignore[union-attr]
    try:
        return spec.build(spec.Config(**params), shape, num_classes)
    except ConfigError as e:
        raise ConfigError(f"model {name!r}: {e}") from None


# ----------------------------------------------------------------------------------------- shared helpers


def require(cond: bool, section: str, key: str, value: Any, allowed: str) -> None:
    """Raise the one-line :class:`ConfigError` used across the platform unless ``cond`` holds."""
    if not cond:
        raise ConfigError(f"{section}.{key}={_plain(value)!r} is out of range; allowed: {allowed}")


def _plain(value: Any) -> Any:
    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value)
    return value


def check_dropout(section: str, key: str, p: Any) -> None:
    require(isinstance(p, (int, float)) and math.isfinite(p) and 0.0 <= p < 1.0, section, key, p, "a number in [0, 1)")


def check_sizes(section: str, key: str, sizes: Any, *, allow_empty: bool = False, length: int | None = None) -> None:
    values = list(sizes)
    ok = all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values)
    ok = ok and (allow_empty or len(values) > 0) and (length is None or len(values) == length)
    what = "a list of integers >= 1" if length is None else f"a list of {length} integers >= 1"
    require(ok, section, key, sizes, what + ("" if allow_empty or length is not None else " (non-empty)"))


def dropout(p: float) -> nn.Module:
    """``nn.Dropout(p)``, or ``nn.Identity()`` when ``p == 0`` (keeps ``vmap``'s default randomness="error" usable)."""
    return nn.Dropout(p) if p > 0 else nn.Identity()


def image_shape(input_shape: tuple[int, ...]) -> tuple[int, int, int]:
    """``input_shape`` as (C, H, W); a (H, W) shape is not accepted (add the channel dimension in the data)."""
    if len(input_shape) != 3:
        raise ConfigError(
            f"needs an image input shape (C, H, W), got {tuple(input_shape)}; use mlp/logreg for flat features"
        )
    c, h, w = input_shape
    return int(c), int(h), int(w)
