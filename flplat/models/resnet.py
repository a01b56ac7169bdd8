"""``resnet9`` — the ResNet-9 Flux uses for CIFAR-100, CheXpert and Office-Home.

Flux (Fenoglio et al.), App. B.2: "For the MNIST, FMNIST, and CIFAR-10 datasets, we use LeNet-5 [lenet] as the base
model; for CIFAR-100, CheXpert, and Office-Home, we use ResNet-9 [resnet]." The paper gives no layer list and
says nothing of pretrained weights, so the model starts from a random initialisation (no download, no
``pretrained_path``). The layers are the common ResNet-9 (Page's DAWNBench network, as in most public ResNet-9
code), each ``block`` being Conv 3×3 (padding 1) -> BatchNorm -> ReLU::

    block(C_in, 64) -> block(64, 128) + MaxPool 2 -> residual[block(128, 128) -> block(128, 128)]
    -> block(128, 256) + MaxPool 2 -> block(256, 512) + MaxPool 2 -> residual[block(512, 512) -> block(512, 512)]
    -> global max-pool -> Flatten (latent 512) -> (Dropout) -> linear classifier

where ``residual[f](x) = x + f(x)``. The global max-pool (``AdaptiveMaxPool2d(1)``) equals the usual
``MaxPool2d(4)`` on 32×32 inputs and lets the model take any image size (CheXpert / Office-Home resolutions are
data keys). ``widths`` sets the four widths (64, 128, 256, 512); ``dropout`` before the head is 0 (the paper
states none). The many batch-norm layers make the model train on the per-client loop only (see
:mod:`flplat.engine.vectorized`); their running statistics travel in the flat model vector
(:mod:`flplat.protocol.state`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from flplat.models.base import SplitModel, check_dropout, check_sizes, dropout, image_shape, register_model


def conv_block(c_in: int, c_out: int, pool: bool = False) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU()]
    if pool:
        layers.append(nn.MaxPool2d(2, ceil_mode=True))
    return nn.Sequential(*layers)


class Residual(nn.Module):
    """``x + body(x)``."""

    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


@dataclass
class ResNet9Config:
    """``resnet9``: the four stage widths and the dropout before the classifier."""

    widths: list[int] = field(default_factory=lambda: [64, 128, 256, 512])
    dropout: float = 0.0


class ResNet9(SplitModel):
    """See the module docstring."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, cfg: ResNet9Config) -> None:
        c_in, _, _ = image_shape(input_shape)
        w1, w2, w3, w4 = (int(w) for w in cfg.widths)
        trunk = nn.Sequential(
            conv_block(c_in, w1),
            conv_block(w1, w2, pool=True),
            Residual(nn.Sequential(conv_block(w2, w2), conv_block(w2, w2))),
            conv_block(w2, w3, pool=True),
            conv_block(w3, w4, pool=True),
            Residual(nn.Sequential(conv_block(w4, w4), conv_block(w4, w4))),
            nn.AdaptiveMaxPool2d(1),
            nn.Flatten(1),
        )
        super().__init__(trunk, dropout(float(cfg.dropout)), input_shape, num_classes)


def _validate(cfg: ResNet9Config, section: str) -> None:
    check_sizes(section, "widths", cfg.widths, length=4)
    check_dropout(section, "dropout", cfg.dropout)


@register_model("resnet9", ResNet9Config, _validate)
def build_resnet9(cfg: ResNet9Config, input_shape: tuple[int, ...], num_classes: int) -> ResNet9:
    return ResNet9(input_shape, num_classes, cfg)
