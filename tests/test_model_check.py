"""`flplat check --model NAME` (flplat/studies/model_check.py): every registered model passes; deliberately broken
models registered the way a plugin registers one fail the property they break."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import nn

from flplat.cli import main
from flplat.models import MODELS, SplitModel, register_model
from flplat.studies.model_check import check_model


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_registered_model_passes(name):
    results = check_model(name)
    assert [r.prop for r in results] == ["build", "split", "init", "vectorize"]
    failed = [r.line() for r in results if not r.ok]
    assert not failed, "\n".join(failed)


@dataclass
class Width:
    width: int = 8


class Tiny(SplitModel):
    def __init__(self, input_shape, num_classes, cfg):
        n = 1
        for s in input_shape:
            n *= s
        super().__init__(nn.Flatten(1), nn.Sequential(nn.Linear(n, cfg.width), nn.ReLU()), input_shape, num_classes)


class AfterHead(Tiny):
    """A layer after the head: the head is not the final layer (FedRep would keep the wrong part local)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.calibrate = nn.Linear(self.num_classes, self.num_classes)

    def forward(self, x):
        return self.calibrate(super().forward(x))


class OwnGenerator(Tiny):
    """Draws its head from a generator of its own, seeded from the OS: the seed does not fix its weights."""

    def __init__(self, *args):
        super().__init__(*args)
        g = torch.Generator()
        g.seed()
        with torch.no_grad():
            self.head.weight.copy_(torch.randn(self.head.weight.shape, generator=g))


class DataDependent(Tiny):
    """Branches on its input's values: vmap cannot run it (the check says so; its clients use the loop)."""

    def forward(self, x):
        return super().forward(x) * (2.0 if bool(x.sum() > 0) else 1.0)


@pytest.fixture
def registered():
    names = []

    def add(name, cls):  # what a plugin's @register_model does
        register_model(name, Width)(lambda cfg, shape, c: cls(shape, c, cfg))
        names.append(name)
        return name

    yield add
    for name in names:
        del MODELS[name]


def test_a_layer_after_the_head_fails_split(registered, capsys):
    name = registered("_test_after_head", AfterHead)
    assert main(["check", "--model", name]) == 1
    out = capsys.readouterr()
    assert "FAIL  split           model(x) != head(features(x)): the head is not the final layer" in out.out
    assert f"flplat check {name}: 1 of 4 properties fail: split" in out.err


def test_weights_not_fixed_by_the_seed_fail_init(registered):
    (r,) = check_model(registered("_test_own_generator", OwnGenerator), only=["init"])
    assert not r.ok and r.detail.startswith("the same seed gives different initial weights")
    (ok,) = check_model(registered("_test_tiny", Tiny), only=["init"])
    assert ok.ok


def test_a_model_vmap_cannot_run_passes_vectorize_with_the_reason(registered):
    (r,) = check_model(registered("_test_data_dependent", DataDependent), only=["vectorize"])
    assert r.ok and r.detail.startswith("not vectorisable, clients train with the per-client loop: vmap cannot run")


def test_model_overrides_and_input_shape(registered, capsys):
    name = registered("_test_tiny", Tiny)
    (r,) = check_model(name, ["model.width=3"], [2, 5], only=["split"])
    assert r.ok and r.detail == "features -> (B, 3), head Linear 3 -> 5, latent (B, 10)"
    assert main(["check", "--model", name, "width=3"]) == 2
    assert "flplat check --model takes model.KEY=VALUE overrides" in capsys.readouterr().err
    assert main(["check", "--model", name, "--only", "nope"]) == 2


def test_check_model_through_the_cli_input_shape_and_kind(registered, capsys):
    """``--model`` is a NAME-kind flag beside ``--dataset`` / ``--partition``; ``--input-shape`` reaches the model and
    is refused, in one line, without ``--model`` or when it is not integers."""
    name = registered("_test_tiny", Tiny)
    assert main(["check", "--model", name, "--input-shape", "2,5", "--only", "split", "--json"]) == 0
    assert '"detail": "features -> (B, 8), head Linear 8 -> ' in capsys.readouterr().out
    assert main(["check", "fedavg", "--input-shape", "1,28,28"]) == 2
    assert capsys.readouterr().err.strip().endswith("--input-shape is only for --model NAME")
    assert main(["check", "--model", name, "--input-shape", "a,b"]) == 2
    assert "--input-shape='a,b' is not valid; allowed: positive integers" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["check", "--model", "--dataset", name])
    assert e.value.code == 2
