"""``vgg19`` — the VGG-19 of CAFA (Zhang et al., §IV-A: "The VGG19 [14] was used as the image classification model
in all clients and the global server"; [14] is Simonyan & Zisserman, 2014), for its CIFAR-10 tables.

The paper names the network and nothing else. Its configuration E (Simonyan & Zisserman, Table 1) fixes the
convolutional stack: five stages of 3×3 convolutions (stride 1, padding 1, ReLU) with 2, 2, 4, 4, 4 layers of 64,
128, 256, 512, 512 maps, each stage closed by a 2×2 max-pool (stride 2). The rest is the CIFAR-10 form of the
authors' public code (§IV-A: "The codes are available at:
https://github.com/Gengsheng-Li/Non-IID-Robust-Federated-Learning-Algorithms.git"; its ``models/vgg.py``,
``VGG('VGG19')``), which is the default here:

* batch normalisation after every convolution (Conv -> BatchNorm -> ReLU; the 2014 network has none) —
  ``batch_norm``;
* on 32×32 inputs the five pools leave 512 maps of 1×1, so the classifier takes 512 features: Linear 512 -> 512 ->
  ReLU -> Linear 512 -> 512 -> ReLU -> Linear 512 -> classes (the 2014 network, built for 224×224 ImageNet
  images, has 4096 -> 4096) — ``classifier``;
* no dropout (the 2014 network has dropout 0.5 after each hidden fully connected layer) — ``dropout`` (its place
  when set: after each hidden layer's ReLU, as the 2014 network).

``widths`` and ``convs`` set the stages (VGG-11/13/16 are other ``convs``: [1,1,2,2,2], [2,2,2,2,2], [2,2,3,3,3]).
The pools use ``ceil_mode=True``, which on 32×32 inputs changes nothing (32 -> 16 -> 8 -> 4 -> 2 -> 1) and lets the
model take smaller images (28×28: 28 -> 14 -> 7 -> 4 -> 2 -> 1; 8×8 digits: 8 -> 4 -> 2 -> 1 -> 1 -> 1); the
authors' ``AvgPool2d(1, 1)`` after the last pool is the identity and is left out. With 10 classes the default
network has 20,565,834 parameters (20,035,392 in the convolutions and batch norms, 530,442 in the three linear
layers) and the running mean and variance of 5,504 batch-norm channels, which travel in the flat model vector like
every batch-norm model's (:mod:`flplat.engine.state`); vectorised clients keep them per client
(:mod:`flplat.maths.stacked`).

``latent(x)`` is the flattened output of the last pool (512 on 32×32), ``features(x)`` the output of the last
hidden classifier layer (the head's input, 512).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from flplat.models.base import (
    SplitModel,
    check_dropout,
    check_sizes,
    dropout,
    image_shape,
    output_size,
    register_model,
    require,
)


@dataclass
class VGGConfig:
    """``vgg19``: per-stage widths and convolution counts (same length), hidden classifier widths, batch norm,
    dropout after each hidden classifier layer."""

    widths: list[int] = field(default_factory=lambda: [64, 128, 256, 512, 512])
    convs: list[int] = field(default_factory=lambda: [2, 2, 4, 4, 4])
    classifier: list[int] = field(default_factory=lambda: [512, 512])
    batch_norm: bool = True
    dropout: float = 0.0


class VGG(SplitModel):
    """[(Conv 3×3 -> BatchNorm -> ReLU) × convs[i] -> MaxPool 2×2] per stage -> Flatten -> [Linear -> ReLU -> Dropout]
    per ``classifier`` width -> linear head."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, cfg: VGGConfig) -> None:
        c_in, _, _ = image_shape(input_shape)
        bn = bool(cfg.batch_norm)
        layers: list[nn.Module] = []
        for width, n in zip(cfg.widths, cfg.convs):
            w = int(width)
            for _ in range(int(n)):
                layers += [nn.Conv2d(c_in, w, 3, padding=1), nn.BatchNorm2d(w) if bn else nn.Identity(), nn.ReLU()]
                c_in = w
            layers.append(nn.MaxPool2d(2, ceil_mode=True))
        trunk = nn.Sequential(*layers, nn.Flatten(1))
        width = output_size(trunk, input_shape)
        dense: list[nn.Module] = []
        for h in cfg.classifier:
            dense += [nn.Linear(width, int(h)), nn.ReLU(), dropout(float(cfg.dropout))]
            width = int(h)
        super().__init__(trunk, nn.Sequential(*dense), input_shape, num_classes)


def _validate(cfg: VGGConfig, section: str) -> None:
    check_sizes(section, "widths", cfg.widths)
    check_sizes(section, "convs", cfg.convs, length=len(cfg.widths))
    check_sizes(section, "classifier", cfg.classifier, allow_empty=True)
    require(isinstance(cfg.batch_norm, bool), section, "batch_norm", cfg.batch_norm, "true or false")
    check_dropout(section, "dropout", cfg.dropout)


@register_model("vgg19", VGGConfig, _validate)
def build_vgg19(cfg: VGGConfig, input_shape: tuple[int, ...], num_classes: int) -> VGG:
    return VGG(input_shape, num_classes, cfg)
