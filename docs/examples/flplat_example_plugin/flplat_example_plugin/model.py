"""``tiny_mlp``: flatten -> Linear(hidden) -> ReLU (the body) -> Linear (the head), as a :class:`~flplat.api.SplitModel`
so that head/body methods (FedRep, CReFF, Flux's descriptors) work with it too."""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import nn

from flplat.api import SplitModel, check_range, register_model


@dataclass
class TinyMLPConfig:
    """``model.hidden``: width of the one hidden layer (the model's only hyperparameter; no ``name`` field)."""

    hidden: int = 16


def _validate(cfg, section: str) -> None:
    check_range(cfg.hidden >= 1, f"{section}.hidden", cfg.hidden, "an integer >= 1")


@register_model("tiny_mlp", TinyMLPConfig, _validate)
def build(cfg: TinyMLPConfig, input_shape: tuple[int, ...], num_classes: int) -> SplitModel:
    dense = nn.Sequential(nn.Linear(math.prod(input_shape), int(cfg.hidden)), nn.ReLU())
    return SplitModel(nn.Flatten(1), dense, input_shape, num_classes)
