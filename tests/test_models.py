"""Tests for the model registry and architectures (:mod:`flplat.models`)."""

from __future__ import annotations

import copy
import dataclasses
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from flplat.config import namespaced_section
from flplat.errors import ConfigError
from flplat.models import MODELS, ModelSpec, SplitModel, build_model, register_model

IMAGE_MODELS = ("fmnist_cnn", "cifar_cnn", "lenet5")
FLAT_MODELS = ("mlp", "mlp3x500", "logreg")
SHAPES = ((1, 8, 8), (1, 28, 28), (3, 32, 32))

# expected width of latent(x) (input of the first fully connected layer) per model and input shape
LATENT_DIMS = {
    # fmnist_cnn: 3 stages, 2×2 ceil-mode pool after each: 8->4->2->1, 28->14->7->4, 32->16->8->4; 32 maps
    "fmnist_cnn": {(1, 8, 8): 32 * 1 * 1, (1, 28, 28): 32 * 4 * 4, (3, 32, 32): 32 * 4 * 4},
    # cifar_cnn: 3 blocks, one pool each: 8->4->2->1, 28->14->7->4, 32->16->8->4; 128 maps
    "cifar_cnn": {(1, 8, 8): 128 * 1 * 1, (1, 28, 28): 128 * 4 * 4, (3, 32, 32): 128 * 4 * 4},
    # lenet5: conv1 pad 2 keeps the side, pool halves it; conv2 (pad 0, or 2 when its input is < 5) then pool:
    # 8->8->4 ->(pad 2) 4->2; 28->28->14->10->5; 32->32->16->12->6; 16 maps
    "lenet5": {(1, 8, 8): 16 * 2 * 2, (1, 28, 28): 16 * 5 * 5, (3, 32, 32): 16 * 6 * 6},
    # fully connected models flatten the input
    "mlp": {s: s[0] * s[1] * s[2] for s in SHAPES},
    "mlp3x500": {s: s[0] * s[1] * s[2] for s in SHAPES},
    "logreg": {s: s[0] * s[1] * s[2] for s in SHAPES},
}
FEATURE_DIMS = {"fmnist_cnn": 2048, "cifar_cnn": 128, "lenet5": 84, "mlp": 64, "mlp3x500": 500}


def _n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_registry_contents() -> None:
    assert set(IMAGE_MODELS + FLAT_MODELS) <= set(MODELS)
    for name, spec in MODELS.items():
        assert isinstance(spec, ModelSpec) and spec.name == name
        assert dataclasses.is_dataclass(spec.Config)
        spec.Config()  # every field has a default
        with pytest.raises(dataclasses.FrozenInstanceError):
            spec.name = "x"  # type: ignore[misc]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", sorted(IMAGE_MODELS + FLAT_MODELS))
def test_forward_split_and_latent(name: str, shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    model = build_model({"name": name}, shape, 7)
    assert isinstance(model, SplitModel)
    assert isinstance(model.head, nn.Linear) and model.head.out_features == 7
    x = torch.randn(4, *shape)
    model.eval()  # deterministic (dropout off, batch-norm running stats) for the equality checks
    logits = model(x)
    assert logits.shape == (4, 7)
    torch.testing.assert_close(logits, model.head(model.features(x)))
    z = model.latent(x)
    assert z.shape == (4, LATENT_DIMS[name][shape]) and model.latent_dim == z.shape[1]
    feats = model.features(x)
    assert feats.shape == (4, model.feature_dim) and model.head.in_features == model.feature_dim
    if name in FEATURE_DIMS:
        assert model.feature_dim == FEATURE_DIMS[name]
    torch.testing.assert_close(feats, model.features.dense(z))
    # training mode works too (batch norm with batch statistics, dropout active) and backpropagates
    model.train()
    loss = nn.functional.cross_entropy(model(x), torch.tensor([0, 1, 2, 3]))
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_flat_models_accept_tabular_and_cnns_reject_it() -> None:
    for name in FLAT_MODELS:
        model = build_model({"name": name}, (20,), 3)
        assert model(torch.randn(5, 20)).shape == (5, 3)
        assert model.latent(torch.randn(5, 20)).shape == (5, 20)
    for name in IMAGE_MODELS:
        with pytest.raises(ConfigError, match=rf"model '{name}'.*\(C, H, W\)"):
            build_model({"name": name}, (20,), 3)


def test_logreg_is_one_linear_layer() -> None:
    model = build_model({"name": "logreg"}, (1, 28, 28), 10)
    assert [n for n, _ in model.named_parameters()] == ["head.weight", "head.bias"]
    assert _n_params(model) == 28 * 28 * 10 + 10  # 7850
    x = torch.randn(2, 1, 28, 28)
    torch.testing.assert_close(model.features(x), x.flatten(1))
    no_bias = build_model({"name": "logreg", "bias": False}, (20,), 2)
    assert no_bias.head.bias is None


def test_parameter_counts_by_hand() -> None:
    # fmnist_cnn on 1×28×28, 10 classes: 3×3 convs (weights in·out·9 + out biases), 2×2 pools 28->14->7->4
    conv1 = 1 * 8 * 9 + 8  # 80
    conv2 = 8 * 16 * 9 + 16  # 1168
    conv3 = 16 * 32 * 9 + 32  # 4640
    dense = (32 * 4 * 4) * 2048 + 2048  # 1050624
    head = 2048 * 10 + 10  # 20490
    assert conv1 + conv2 + conv3 + dense + head == 1_077_002
    assert _n_params(build_model({"name": "fmnist_cnn"}, (1, 28, 28), 10)) == 1_077_002

    # lenet5 on 1×28×28, 10 classes: conv 6@5×5 pad 2 (28) -> pool 14 -> conv 16@5×5 (10) -> pool 5 -> 400
    conv1 = 1 * 6 * 25 + 6  # 156
    conv2 = 6 * 16 * 25 + 16  # 2416
    fc1 = 400 * 120 + 120  # 48120
    fc2 = 120 * 84 + 84  # 10164
    head = 84 * 10 + 10  # 850
    assert conv1 + conv2 + fc1 + fc2 + head == 61_706
    assert _n_params(build_model({"name": "lenet5"}, (1, 28, 28), 10)) == 61_706

    # mlp3x500 on 20 features, 4 classes
    expected = (20 * 500 + 500) + 2 * (500 * 500 + 500) + (500 * 4 + 4)
    assert _n_params(build_model({"name": "mlp3x500"}, (20,), 4)) == expected

    # cifar_cnn on 3×32×32, 10 classes: (conv + BN gamma/beta) ×2 per block; dense 2048->128 + BN1d
    def block(c_in: int, w: int) -> int:
        return (c_in * w * 9 + w) + 2 * w + (w * w * 9 + w) + 2 * w

    cifar = block(3, 32) + block(32, 64) + block(64, 128) + (2048 * 128 + 128) + 2 * 128 + (128 * 10 + 10)
    assert cifar == 551_722
    assert _n_params(build_model({"name": "cifar_cnn"}, (3, 32, 32), 10)) == cifar


def test_config_fields_change_the_architecture() -> None:
    m = build_model({"name": "mlp", "hidden": [32], "dropout": 0.25}, (10,), 3)
    assert m.feature_dim == 32 and any(isinstance(x, nn.Dropout) for x in m.modules())
    assert not any(isinstance(x, nn.Dropout) for x in build_model({"name": "mlp"}, (10,), 3).modules())
    one_pool = build_model({"name": "fmnist_cnn", "pool_every_stage": False}, (1, 28, 28), 10)
    assert one_pool.latent_dim == 32 * 14 * 14
    assert sum(isinstance(x, nn.MaxPool2d) for x in one_pool.modules()) == 1
    narrow = build_model(
        {"name": "cifar_cnn", "widths": [8, 16], "block_dropout": [0.1, 0.0], "dense": 32, "batch_norm": False},
        (3, 32, 32),
        10,
    )
    assert narrow.latent_dim == 16 * 8 * 8 and narrow.feature_dim == 32
    assert not any(isinstance(x, nn.modules.batchnorm._BatchNorm) for x in narrow.modules())
    classic = build_model({"name": "lenet5", "conv1_padding": 0}, (3, 32, 32), 10)
    assert classic.latent_dim == 400 and classic.conv2_padding == 0
    assert build_model({"name": "lenet5"}, (1, 8, 8), 10).conv2_padding == 2


def test_build_model_accepts_dictconfig_and_plain_objects() -> None:
    section = namespaced_section("model", MODELS, {"name": "mlp", "hidden": [16, 8]})
    assert list(section.keys()) == ["name", "hidden", "dropout"]
    m1 = build_model(section, (1, 8, 8), 10)
    m2 = build_model(OmegaConf.create({"name": "mlp", "hidden": [16, 8]}), (1, 8, 8), 10)
    m3 = build_model(SimpleNamespace(name="mlp", hidden=(16, 8), dropout=0.0), torch.Size([1, 8, 8]), 10)
    shapes = [[tuple(p.shape) for p in m.parameters()] for m in (m1, m2, m3)]
    assert shapes[0] == shapes[1] == shapes[2]
    assert m1.feature_dim == 8


def test_registry_and_config_errors() -> None:
    with pytest.raises(ConfigError, match="model.name='resnet1000' is not valid; choose one of: .*cifar_cnn.*mlp"):
        build_model({"name": "resnet1000"}, (1, 28, 28), 10)
    with pytest.raises(ConfigError, match="not valid"):
        build_model(SimpleNamespace(), (1, 28, 28), 10)
    with pytest.raises(ConfigError, match="unknown key model.mu for model 'mlp'; valid keys: name, hidden, dropout"):
        build_model({"name": "mlp", "mu": 1.0}, (10,), 2)
    with pytest.raises(ConfigError, match=r"model.dropout=1.5 is out of range"):
        build_model({"name": "mlp", "dropout": 1.5}, (10,), 2)
    with pytest.raises(ConfigError, match=r"model.hidden="):
        namespaced_section("model", MODELS, {"name": "mlp3x500", "hidden": [500, 0]})
    with pytest.raises(ConfigError, match=r"model.kernel_size=4"):
        namespaced_section("model", MODELS, {"name": "fmnist_cnn", "kernel_size": 4})
    with pytest.raises(ConfigError, match=r"model.block_dropout="):
        namespaced_section("model", MODELS, {"name": "cifar_cnn", "block_dropout": [0.2, 0.3]})
    with pytest.raises(ConfigError, match=r"model.channels="):
        namespaced_section("model", MODELS, {"name": "lenet5", "channels": [6, 16, 32]})
    with pytest.raises(ConfigError, match=r"model.hidden"):
        namespaced_section("model", MODELS, {"name": "mlp", "hidden": ["wide"]})
    with pytest.raises(ConfigError, match="num_classes"):
        build_model({"name": "mlp"}, (10,), 0)
    with pytest.raises(ConfigError, match="input shape"):
        build_model({"name": "mlp"}, (10, 0), 2)
    # an input too small for the layers is a one-line ConfigError, not a RuntimeError from torch
    with pytest.raises(ConfigError, match="model 'lenet5'.*too small"):
        build_model({"name": "lenet5", "conv1_padding": 0}, (1, 3, 3), 10)


def test_register_model_rejects_duplicates_and_bad_configs() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_model("mlp", MODELS["mlp"].Config)(MODELS["mlp"].build)
    with pytest.raises(TypeError, match="dataclass"):
        register_model("not_a_dataclass", dict)

    @dataclasses.dataclass
    class TinyConfig:
        width: int = 3

    @register_model("_test_tiny", TinyConfig)
    def build_tiny(cfg: TinyConfig, input_shape: tuple[int, ...], num_classes: int) -> SplitModel:
        return SplitModel(
            nn.Flatten(1), nn.Sequential(nn.Linear(input_shape[0], cfg.width), nn.ReLU()), input_shape, num_classes
        )

    try:
        model = build_model({"name": "_test_tiny", "width": 5}, (4,), 2)
        assert model.feature_dim == 5 and model(torch.randn(3, 4)).shape == (3, 2)
    finally:
        del MODELS["_test_tiny"]


def test_construction_does_not_touch_rng_or_batchnorm_stats() -> None:
    torch.manual_seed(123)
    a = build_model({"name": "cifar_cnn"}, (3, 32, 32), 10)
    torch.manual_seed(123)
    b = build_model({"name": "cifar_cnn"}, (3, 32, 32), 10)
    for (na, ta), (nb, tb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert na == nb and torch.equal(ta, tb)
    bn = next(m for m in a.modules() if isinstance(m, nn.BatchNorm2d))
    assert int(bn.num_batches_tracked) == 0 and torch.all(bn.running_mean == 0)
    assert a.training and all(m.training for m in a.modules())


@pytest.mark.parametrize(
    ("section", "shape"),
    [
        ({"name": "mlp", "dropout": 0.3}, (1, 8, 8)),
        ({"name": "fmnist_cnn"}, (1, 28, 28)),
        ({"name": "fmnist_cnn"}, (1, 8, 8)),
    ],
)
def test_functional_call_vmap_over_stacked_copies(section: dict, shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    models = [build_model(section, shape, 10) for _ in range(3)]
    params, buffers = stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")
    x = torch.randn(4, *shape)

    def run(p: dict, b: dict, inp: torch.Tensor) -> torch.Tensor:
        return functional_call(base, (p, b), (inp,))

    # training mode (dropout active for the mlp): each copy draws its own mask
    out = vmap(run, in_dims=(0, 0, None), randomness="different")(params, buffers, x)
    assert out.shape == (3, 4, 10)
    # eval mode: the vmapped forward equals each copy's own forward
    base.eval()
    out = vmap(run, in_dims=(0, 0, None))(params, buffers, x)
    for i, m in enumerate(models):
        m.eval()
        torch.testing.assert_close(out[i], m(x), rtol=1e-5, atol=1e-5)

    # gradients through the vmapped call (per-copy training as a later vectorised trainer would do)
    def loss_fn(p: dict, b: dict, inp: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(functional_call(base, (p, b), (inp,)), y)

    y = torch.tensor([0, 1, 2, 3])
    grads = vmap(torch.func.grad(loss_fn), in_dims=(0, 0, None, None))(params, buffers, x, y)
    assert set(grads) == set(params) and all(g.shape == params[k].shape for k, g in grads.items())
