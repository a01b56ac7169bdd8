"""Convolutional models: ``fmnist_cnn``, ``cifar_cnn``, ``lenet5``, ``dapfl_cnn10``, ``dapfl_cnn100`` and
``pqfed_cnn``. All take ``(C, H, W)`` inputs of any size.

``fmnist_cnn`` — the light FMNIST CNN of Clust-PSI-PFL (Jimenez-Gutierrez et al., §IV-A-d): "three convolutional
stages with 8, 16, and 32 feature maps, respectively; the convolutional stack is followed by max-pooling and a
dense layer with 2048 ReLU units before the final classifier". Kernel size and pooling are not given; the
choices here are 3×3 convolutions with same padding and ReLU, and — with ``pool_every_stage=True``, the
default — a 2×2 max-pool (``ceil_mode=True``) after every stage, so 28×28 -> 14 -> 7 -> 4 (latent 32·4·4 = 512)
and 8×8 digits -> 4 -> 2 -> 1 (latent 32). With ``pool_every_stage=False`` a single 2×2 max-pool follows the
last stage (28×28 -> 14, latent 6272, a 12.8M-parameter dense layer). ``ceil_mode`` keeps odd or tiny maps from
collapsing to zero.

``cifar_cnn`` — the CIFAR-10 CNN of Clust-PSI-PFL (§IV-A-d): three blocks with 32, 64, 128 filters; each block is
two 3×3 convolutions (ReLU, same padding) regularised with batch normalisation, a 2×2 max-pool and dropout
0.2 / 0.3 / 0.4; then flatten -> dense 128 (ReLU, batch norm, dropout 0.5) -> classifier. The layer order
inside a block follows the common Keras formulation of this model: Conv -> ReLU -> BatchNorm, twice, then
MaxPool -> Dropout; the dense layer is Linear -> ReLU -> BatchNorm1d -> Dropout. Batch norm in training mode
needs more than one sample per batch (drop a final batch of size 1); vectorised clients keep its statistics per
client (:mod:`flplat.maths.stacked`).

``lenet5`` — LeNet-5 (LeCun et al., 1998), the MNIST/FMNIST/CIFAR-10 backbone of Flux (Fenoglio et al., §5), in its
modern form: conv 6@5×5 (padding 2) -> ReLU -> 2×2 max-pool -> conv 16@5×5 -> ReLU -> 2×2 max-pool -> FC 120 ->
ReLU -> FC 84 -> ReLU -> classifier. On 28×28 inputs the latent is 16·5·5 = 400. For small inputs (e.g. 8×8
digits, where the second 5×5 convolution would see a 4×4 map) the second convolution gets padding 2 when its
input is smaller than 5×5 (``conv2_padding=None``, automatic; set an integer to force it): 8×8 -> 8 -> 4 -> 4 ->
2, latent 64. On 32×32 CIFAR inputs conv1 keeps its padding 2 (latent 16·6·6 = 576); ``conv1_padding=0`` gives
the original 32×32 LeNet (latent 400).

``dapfl_cnn10`` / ``dapfl_cnn100`` — DA-PFL's two CIFAR CNNs (§IV-D: "For the CIFAR10 and CIFAR100 datasets, we
follow [34], [64] and use the two different CNN models. These CNN models are composed of two convolutional layers
and three fully connected layers, but each layer has different scales."). DA-PFL gives the layer counts only; every
size comes from [34], FedRep (Collins et al., 2021), whose public code (``models/Nets.py``, ``CNNCifar`` and
``CNNCifar100``) defines the two networks ([64], LEAF, has no CIFAR model):

* conv1: 5×5, no padding, ReLU, 2×2 max-pool; 64 maps in both (FedRep: ``Conv2d(3, 64, 5)``);
* conv2: 5×5, no padding, ReLU, 2×2 max-pool; 64 maps for CIFAR-10 (``Conv2d(64, 64, 5)``), 128 for CIFAR-100
  (``Conv2d(64, 128, 5)``); 32 -> 28 -> 14 -> 10 -> 5, so the latent is 64·5·5 = 1600 / 128·5·5 = 3200;
* fc1, fc2: 120 and 64 (CIFAR-10: ``Linear(1600, 120)``, ``Linear(120, 64)``), 256 and 128 (CIFAR-100:
  ``Linear(3200, 256)``, ``Linear(256, 128)``), ReLU each; then the classifier (fc3) on 64 / 128 features;
* dropout 0.6: FedRep's CIFAR-100 network drops the classifier's input (``self.drop(F.relu(self.fc2(x)))``), its
  CIFAR-10 network the logits (``self.drop(self.fc3(x))``). A layer after the classifier would break the split
  (the head must be the final linear layer: FedRep's and CReFF's personalised heads, APFL's mixing), so both
  models here drop the classifier's input, FedRep's CIFAR-100 placement; ``dropout=0`` removes it.

These are the defaults (keys ``channels``, ``fc``, ``dropout``); with 10 classes ``dapfl_cnn10`` has 307,842
parameters, with DA-PFL's 20 CIFAR-100 classes ``dapfl_cnn100`` has 1,064,724.

``pqfed_cnn`` — PQFed's CNN for MNIST and CIFAR-10 (Yue et al., §V-A, Fig. 2: "(a) For CIFAR-10 model, each image has
input size of [32, 32, 3], and includes 2 convolutional layers followed by one max pooling layer and 2 fully
connected layers. (b) For MNIST model, each image has input size of [28, 28, 1], and consists of 2 convolutional
layers followed by one max pooling layer and 2 fully connected layers."). The layer list is the paper's, the same
for both datasets (one model, built on each input shape); the sizes are in the figure's drawing only, and PQFed has
no public code. They are chosen as PyTorch's MNIST example (``examples/mnist``), the common network of exactly this
layer list: conv 3×3 with 32 then 64 maps (stride 1, no padding, ReLU each) -> one 2×2 max-pool (ceil mode, which
only matters for odd maps) -> flatten -> FC 128 (ReLU) -> classifier, so 28×28 -> 26 -> 24 -> 12 (latent
64·12·12 = 9216, 1,199,882 parameters for 10 classes) and 32×32 -> 30 -> 28 -> 14 (latent 12,544, 1,626,442
parameters). The example's dropouts (0.25 after the pool, 0.5 after FC 128) are not layers the paper lists, so they
are 0 by default (keys ``conv_dropout``, ``fc_dropout``); the sizes are keys too (``channels``, ``kernel_size``,
``fc``).

For every model ``latent(x)`` is the flattened output of the convolutional stack (the input of the first fully
connected layer), and ``features(x)`` is the output of the last hidden dense layer (the head's input).
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

# ----------------------------------------------------------------------------------------------- fmnist_cnn


@dataclass
class FMNISTCNNConfig:
    """``fmnist_cnn``: conv widths, kernel size (odd), dense width, pooling placement, dropout before the head."""

    channels: list[int] = field(default_factory=lambda: [8, 16, 32])
    kernel_size: int = 3
    dense: int = 2048
    pool_every_stage: bool = True
    dropout: float = 0.0


class FMNISTCNN(SplitModel):
    """[Conv k×k same -> ReLU (-> MaxPool 2×2)] per stage (-> MaxPool) -> Flatten -> Linear(dense) -> ReLU."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, cfg: FMNISTCNNConfig) -> None:
        c_in, _, _ = image_shape(input_shape)
        k = int(cfg.kernel_size)
        layers: list[nn.Module] = []
        for i, c_out in enumerate(cfg.channels):
            layers += [nn.Conv2d(c_in, int(c_out), k, padding=k // 2), nn.ReLU()]
            if cfg.pool_every_stage or i == len(cfg.channels) - 1:
                layers.append(nn.MaxPool2d(2, ceil_mode=True))
            c_in = int(c_out)
        trunk = nn.Sequential(*layers, nn.Flatten(1))
        latent = output_size(trunk, input_shape)
        dense = nn.Sequential(nn.Linear(latent, int(cfg.dense)), nn.ReLU(), dropout(float(cfg.dropout)))
        super().__init__(trunk, dense, input_shape, num_classes)


def _validate_fmnist(cfg: FMNISTCNNConfig, section: str) -> None:
    check_sizes(section, "channels", cfg.channels)
    k = cfg.kernel_size
    require(k >= 1 and k % 2 == 1, section, "kernel_size", k, "an odd integer >= 1 (same padding)")
    require(cfg.dense >= 1, section, "dense", cfg.dense, "an integer >= 1")
    check_dropout(section, "dropout", cfg.dropout)


@register_model("fmnist_cnn", FMNISTCNNConfig, _validate_fmnist)
def build_fmnist_cnn(cfg: FMNISTCNNConfig, input_shape: tuple[int, ...], num_classes: int) -> FMNISTCNN:
    return FMNISTCNN(input_shape, num_classes, cfg)


# ------------------------------------------------------------------------------------------------ cifar_cnn


@dataclass
class CIFARCNNConfig:
    """``cifar_cnn``: per-block filters and dropouts (same length), dense width and dropout, batch norm on/off."""

    widths: list[int] = field(default_factory=lambda: [32, 64, 128])
    block_dropout: list[float] = field(default_factory=lambda: [0.2, 0.3, 0.4])
    dense: int = 128
    dense_dropout: float = 0.5
    batch_norm: bool = True


class CIFARCNN(SplitModel):
    """[(Conv 3×3 -> ReLU -> BN) ×2 -> MaxPool 2×2 -> Dropout] per block -> Flatten -> Linear -> ReLU -> BN -> Drop."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, cfg: CIFARCNNConfig) -> None:
        c_in, _, _ = image_shape(input_shape)
        bn = bool(cfg.batch_norm)
        layers: list[nn.Module] = []
        for width, p in zip(cfg.widths, cfg.block_dropout):
            w = int(width)
            for c in (c_in, w):
                layers += [nn.Conv2d(c, w, 3, padding=1), nn.ReLU(), nn.BatchNorm2d(w) if bn else nn.Identity()]
            layers += [nn.MaxPool2d(2, ceil_mode=True), dropout(float(p))]
            c_in = w
        trunk = nn.Sequential(*layers, nn.Flatten(1))
        latent = output_size(trunk, input_shape)
        d = int(cfg.dense)
        dense = nn.Sequential(
            nn.Linear(latent, d),
            nn.ReLU(),
            nn.BatchNorm1d(d) if bn else nn.Identity(),
            dropout(float(cfg.dense_dropout)),
        )
        super().__init__(trunk, dense, input_shape, num_classes)


def _validate_cifar(cfg: CIFARCNNConfig, section: str) -> None:
    check_sizes(section, "widths", cfg.widths)
    n = len(cfg.widths)
    require(
        len(cfg.block_dropout) == n,
        section,
        "block_dropout",
        cfg.block_dropout,
        f"a list of {n} numbers in [0, 1) (one per entry of widths)",
    )
    for i, p in enumerate(cfg.block_dropout):
        check_dropout(section, f"block_dropout[{i}]", p)
    require(cfg.dense >= 1, section, "dense", cfg.dense, "an integer >= 1")
    check_dropout(section, "dense_dropout", cfg.dense_dropout)


@register_model("cifar_cnn", CIFARCNNConfig, _validate_cifar)
def build_cifar_cnn(cfg: CIFARCNNConfig, input_shape: tuple[int, ...], num_classes: int) -> CIFARCNN:
    return CIFARCNN(input_shape, num_classes, cfg)


# --------------------------------------------------------------------------------------------------- lenet5


@dataclass
class LeNet5Config:
    """``lenet5``: the two conv widths, the hidden FC widths, conv paddings (conv2 None: automatic), FC dropout."""

    channels: list[int] = field(default_factory=lambda: [6, 16])
    fc: list[int] = field(default_factory=lambda: [120, 84])
    conv1_padding: int = 2
    conv2_padding: int | None = None
    dropout: float = 0.0


class LeNet5(SplitModel):
    """Conv 5×5 -> ReLU -> MaxPool -> Conv 5×5 -> ReLU -> MaxPool -> Flatten -> [Linear -> ReLU] per ``fc``."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, cfg: LeNet5Config) -> None:
        c_in, _, _ = image_shape(input_shape)
        c1, c2 = (int(c) for c in cfg.channels)
        stage1 = nn.Sequential(
            nn.Conv2d(c_in, c1, 5, padding=int(cfg.conv1_padding)), nn.ReLU(), nn.MaxPool2d(2, ceil_mode=True)
        )
        pad2 = cfg.conv2_padding
        if pad2 is None:  # construction-time, shape-only decision: keep the classic 0 unless the map is < 5×5
            pad2 = 0 if min(_stage1_side(s, int(cfg.conv1_padding)) for s in input_shape[1:]) >= 5 else 2
        trunk = nn.Sequential(
            *stage1,
            nn.Conv2d(c1, c2, 5, padding=int(pad2)),
            nn.ReLU(),
            nn.MaxPool2d(2, ceil_mode=True),
            nn.Flatten(1),
        )
        width = output_size(trunk, input_shape)
        layers: list[nn.Module] = []
        for h in cfg.fc:
            layers += [nn.Linear(width, int(h)), nn.ReLU(), dropout(float(cfg.dropout))]
            width = int(h)
        super().__init__(trunk, nn.Sequential(*layers), input_shape, num_classes)
        self.conv2_padding: int = int(pad2)


def _stage1_side(side: int, padding: int) -> int:
    """Side of the map after conv 5×5 (``padding``) and a 2×2 ceil-mode max-pool."""
    return -(-(side + 2 * padding - 4) // 2)


def _validate_lenet(cfg: LeNet5Config, section: str) -> None:
    check_sizes(section, "channels", cfg.channels, length=2)
    check_sizes(section, "fc", cfg.fc, allow_empty=True)
    require(cfg.conv1_padding >= 0, section, "conv1_padding", cfg.conv1_padding, "an integer >= 0")
    require(
        cfg.conv2_padding is None or cfg.conv2_padding >= 0,
        section,
        "conv2_padding",
        cfg.conv2_padding,
        "null (automatic) or an integer >= 0",
    )
    check_dropout(section, "dropout", cfg.dropout)


@register_model("lenet5", LeNet5Config, _validate_lenet)
def build_lenet5(cfg: LeNet5Config, input_shape: tuple[int, ...], num_classes: int) -> LeNet5:
    return LeNet5(input_shape, num_classes, cfg)


# ---------------------------------------------------------------------------------- dapfl_cnn10 / dapfl_cnn100


@dataclass
class DAPFLCNNConfig:
    """``dapfl_cnn10`` / ``dapfl_cnn100``: the two conv widths (5×5), the two hidden FC widths, dropout before the
    head (FedRep's 0.6)."""

    channels: list[int] = field(default_factory=lambda: [64, 64])
    fc: list[int] = field(default_factory=lambda: [120, 64])
    dropout: float = 0.6


@dataclass
class DAPFLCNN100Config(DAPFLCNNConfig):
    channels: list[int] = field(default_factory=lambda: [64, 128])
    fc: list[int] = field(default_factory=lambda: [256, 128])


class DAPFLCNN(SplitModel):
    """Conv 5×5 -> ReLU -> MaxPool 2 -> Conv 5×5 -> ReLU -> MaxPool 2 -> Flatten -> [Linear -> ReLU] ×2 -> Dropout."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, cfg: DAPFLCNNConfig) -> None:
        c_in, _, _ = image_shape(input_shape)
        c1, c2 = (int(c) for c in cfg.channels)
        trunk = nn.Sequential(nn.Conv2d(c_in, c1, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(c1, c2, 5), nn.ReLU(),
                              nn.MaxPool2d(2), nn.Flatten(1))
        width = output_size(trunk, input_shape)
        f1, f2 = (int(f) for f in cfg.fc)
        dense = nn.Sequential(nn.Linear(width, f1), nn.ReLU(), nn.Linear(f1, f2), nn.ReLU(),
                              dropout(float(cfg.dropout)))
        super().__init__(trunk, dense, input_shape, num_classes)


def _validate_dapfl(cfg: DAPFLCNNConfig, section: str) -> None:
    check_sizes(section, "channels", cfg.channels, length=2)
    check_sizes(section, "fc", cfg.fc, length=2)
    check_dropout(section, "dropout", cfg.dropout)


@register_model("dapfl_cnn10", DAPFLCNNConfig, _validate_dapfl)
def build_dapfl_cnn10(cfg: DAPFLCNNConfig, input_shape: tuple[int, ...], num_classes: int) -> DAPFLCNN:
    return DAPFLCNN(input_shape, num_classes, cfg)


@register_model("dapfl_cnn100", DAPFLCNN100Config, _validate_dapfl)
def build_dapfl_cnn100(cfg: DAPFLCNN100Config, input_shape: tuple[int, ...], num_classes: int) -> DAPFLCNN:
    return DAPFLCNN(input_shape, num_classes, cfg)


# ---------------------------------------------------------------------------------------------------- pqfed_cnn


@dataclass
class PQFedCNNConfig:
    """``pqfed_cnn``: the two conv widths, their kernel size, the hidden FC width, dropout after the pool and after
    the hidden FC layer (sizes the paper's Fig. 2 does not state in its text: see the module docstring)."""

    channels: list[int] = field(default_factory=lambda: [32, 64])
    kernel_size: int = 3
    fc: int = 128
    conv_dropout: float = 0.0
    fc_dropout: float = 0.0


class PQFedCNN(SplitModel):
    """Conv k×k -> ReLU -> Conv k×k -> ReLU -> MaxPool 2×2 -> Dropout -> Flatten -> Linear -> ReLU -> Dropout."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, cfg: PQFedCNNConfig) -> None:
        c_in, _, _ = image_shape(input_shape)
        c1, c2 = (int(c) for c in cfg.channels)
        k = int(cfg.kernel_size)
        trunk = nn.Sequential(nn.Conv2d(c_in, c1, k), nn.ReLU(), nn.Conv2d(c1, c2, k), nn.ReLU(),
                              nn.MaxPool2d(2, ceil_mode=True), dropout(float(cfg.conv_dropout)), nn.Flatten(1))
        width = output_size(trunk, input_shape)
        dense = nn.Sequential(nn.Linear(width, int(cfg.fc)), nn.ReLU(), dropout(float(cfg.fc_dropout)))
        super().__init__(trunk, dense, input_shape, num_classes)


def _validate_pqfed(cfg: PQFedCNNConfig, section: str) -> None:
    check_sizes(section, "channels", cfg.channels, length=2)
    require(cfg.kernel_size >= 1, section, "kernel_size", cfg.kernel_size, "an integer >= 1")
    require(cfg.fc >= 1, section, "fc", cfg.fc, "an integer >= 1")
    check_dropout(section, "conv_dropout", cfg.conv_dropout)
    check_dropout(section, "fc_dropout", cfg.fc_dropout)


@register_model("pqfed_cnn", PQFedCNNConfig, _validate_pqfed)
def build_pqfed_cnn(cfg: PQFedCNNConfig, input_shape: tuple[int, ...], num_classes: int) -> PQFedCNN:
    return PQFedCNN(input_shape, num_classes, cfg)
