"""Fully connected models: ``mlp``, ``mlp3x500`` and ``logreg``.

* ``logreg`` — the ACSIncome baseline of Clust-PSI-PFL (§IV-A-d, "a single fully connected layer with a
  softmax/sigmoid output"): flatten -> linear classifier. The body is the flattening step only, so
  ``features(x) == latent(x) == x.flatten(1)``.
* ``mlp3x500`` — the Serengeti model of Clust-PSI-PFL (§IV-A-d, "three hidden layers of 500 neurons each and ReLU
  non-linearities, ending with a softmax classification head").
* ``mlp`` — a small MLP for the ``digits`` and ``synthetic`` datasets (PLATFORM.md §4), also usable as the
  2-hidden-layer MLP of the other papers by setting ``hidden``.

Every model returns logits (the softmax lives in the loss). Inputs of any shape are flattened, so
``latent(x)`` (the input of the first fully connected layer) is the flattened input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from torch import nn

from flplat.models.base import SplitModel, check_dropout, check_sizes, dropout, register_model


@dataclass
class MLPConfig:
    """``mlp``: hidden layer widths (Linear -> ReLU -> Dropout each) and the dropout rate."""

    hidden: list[int] = field(default_factory=lambda: [128, 64])
    dropout: float = 0.0


@dataclass
class MLP3x500Config:
    """``mlp3x500`` (Serengeti, Clust-PSI-PFL): three hidden layers of 500 ReLU units by default."""

    hidden: list[int] = field(default_factory=lambda: [500, 500, 500])
    dropout: float = 0.0


@dataclass
class LogRegConfig:
    """``logreg`` (ACSIncome, Clust-PSI-PFL): a single linear layer; ``bias`` toggles its intercept."""

    bias: bool = True


class MLP(SplitModel):
    """Flatten -> [Linear -> ReLU -> Dropout] * len(hidden) -> Linear classifier."""

    def __init__(
        self, input_shape: tuple[int, ...], num_classes: int, hidden: list[int], p_dropout: float = 0.0
    ) -> None:
        in_features = math.prod(input_shape)
        layers: list[nn.Module] = []
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, int(h)), nn.ReLU(), dropout(float(p_dropout))]
            width = int(h)
        super().__init__(nn.Flatten(1), nn.Sequential(*layers), input_shape, num_classes)


class LogisticRegression(SplitModel):
    """Flatten -> Linear classifier (the body has no parameters)."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, bias: bool = True) -> None:
        super().__init__(nn.Flatten(1), nn.Identity(), input_shape, num_classes, head_bias=bias)


def _validate_mlp(cfg: MLPConfig | MLP3x500Config, section: str) -> None:
    check_sizes(section, "hidden", cfg.hidden, allow_empty=True)
    check_dropout(section, "dropout", cfg.dropout)


@register_model("mlp", MLPConfig, _validate_mlp)
def build_mlp(cfg: MLPConfig, input_shape: tuple[int, ...], num_classes: int) -> MLP:
    return MLP(input_shape, num_classes, list(cfg.hidden), cfg.dropout)


@register_model("mlp3x500", MLP3x500Config, _validate_mlp)
def build_mlp3x500(cfg: MLP3x500Config, input_shape: tuple[int, ...], num_classes: int) -> MLP:
    return MLP(input_shape, num_classes, list(cfg.hidden), cfg.dropout)


@register_model("logreg", LogRegConfig)
def build_logreg(cfg: LogRegConfig, input_shape: tuple[int, ...], num_classes: int) -> LogisticRegression:
    return LogisticRegression(input_shape, num_classes, bool(cfg.bias))
