"""The papers' own networks: CAFA's VGG-19, PQFed's 2-conv CNN and DA-PFL's (FedRep's) CIFAR-10 CNN. Layer lists and
parameter counts by hand, the body/head split, vectorised clients against the per-client loop, the ready configs
and every train table naming the paper's model (or the header naming the stand-in), smoke cells that train the
paper's model end to end, and Clust-PSI-PFL's Figs. 5-8 on FMNIST in place of ACSIncome."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from test_vectorized import SGD, _assert_match, _jobs, _prepare
from torch import nn

from flplat.cli import main
from flplat.errors import ConfigError
from flplat.models import build_model
from flplat.studies import reproduce as rp
from flplat.studies.reproduction.grid import REPO, resolve_scale

VGG_TINY = {"model.name": "vgg19", "model.widths": "[4,4,8,8,8]", "model.classifier": "[8,8]"}
# the vectorised check: VGG-19's 16 convolutions at the smallest widths, on clients of about 20 digits
VGG_VEC = {"model.name": "vgg19", "model.widths": "[2,2,2,2,2]", "model.classifier": "[4]",
           "partition.num_clients": 60, "federation.local_epochs": 1}
PQFED_TINY = {"model.name": "pqfed_cnn", "model.channels": "[4,8]", "model.fc": 16}


def n_params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def _count(m: nn.Module, kind: type) -> int:
    return sum(isinstance(x, kind) for x in m.modules())


def _io(layers: list[nn.Module]) -> list[tuple[int, int]]:
    return [(x.in_channels, x.out_channels) if isinstance(x, nn.Conv2d) else (x.in_features, x.out_features)
            for x in layers]


# ------------------------------------------------------------------------------------------------------ VGG-19


def test_vgg19_is_configuration_e_with_the_authors_cifar_classifier() -> None:
    """Simonyan & Zisserman's configuration E (16 convs 3x3 in stages of 2, 2, 4, 4, 4; 64..512 maps; 5 pools) with the
    CAFA authors' CIFAR-10 form: batch norm after every conv, classifier 512 -> 512 -> 512 -> 10, no dropout."""
    m = build_model({"name": "vgg19"}, (3, 32, 32), 10)
    convs = [x for x in m.features.trunk if isinstance(x, nn.Conv2d)]
    pairs = [(3, 64), (64, 64), (64, 128), (128, 128), (128, 256), *[(256, 256)] * 3, (256, 512), *[(512, 512)] * 7]
    assert _io(convs) == pairs
    assert all(c.kernel_size == (3, 3) and c.padding == (1, 1) and c.stride == (1, 1) for c in convs)
    assert _count(m.features.trunk, nn.BatchNorm2d) == 16 and _count(m, nn.MaxPool2d) == 5
    assert _count(m, nn.Dropout) == 0
    assert _io([x for x in m.modules() if isinstance(x, nn.Linear)]) == [(512, 512), (512, 512), (512, 10)]
    assert m.latent_dim == 512 and m.feature_dim == 512 and m.head.in_features == 512
    conv = sum(9 * i * o + o + 2 * o for i, o in pairs)  # weights, biases, batch norm's weight and bias
    assert conv == 20_035_392
    assert n_params(m) == conv + 2 * (512 * 512 + 512) + (512 * 10 + 10) == 20_565_834
    stats = sum(b.numel() for k, b in m.named_buffers() if k.endswith(("running_mean", "running_var")))
    assert stats == 2 * sum(o for _, o in pairs) == 11_008
    x = torch.randn(2, 3, 32, 32)
    m.eval()
    assert m(x).shape == (2, 10)
    torch.testing.assert_close(m(x), m.head(m.features(x)))
    torch.testing.assert_close(m.features(x), m.features.dense(m.latent(x)))


def test_vgg19_options_and_small_inputs() -> None:
    """Without batch norm and with the 2014 dropout; VGG-11's stages on 28x28 (ceil-mode pools: 28 -> ... -> 1);
    8x8 digits still reach a 1x1 map; bad keys are one-line errors naming the key."""
    small = {"name": "vgg19", "widths": [4, 4, 8, 8, 8], "classifier": [8, 8]}  # the structure, at small widths
    plain = build_model({**small, "batch_norm": False, "dropout": 0.5}, (3, 32, 32), 10)
    assert _count(plain, nn.BatchNorm2d) == 0 and [d.p for d in plain.modules() if isinstance(d, nn.Dropout)] == [
        0.5, 0.5]
    # batch norm's weight and bias per channel: 2 * (4 * 2 + 4 * 2 + 8 * 4 * 3) = 224 parameters fewer
    assert n_params(build_model(small, (3, 32, 32), 10)) - n_params(plain) == 2 * (4 * 2 + 4 * 2 + 8 * 4 * 3) == 224
    vgg11 = build_model({**small, "convs": [1, 1, 2, 2, 2], "classifier": []}, (1, 28, 28), 7)
    assert _count(vgg11, nn.Conv2d) == 8 and vgg11.latent_dim == vgg11.feature_dim == 8
    assert build_model({"name": "vgg19", "widths": [2, 2, 4, 4, 4]}, (1, 8, 8), 3).latent_dim == 4
    with pytest.raises(ConfigError, match=r"^model.convs=\[2, 2\] is out of range; allowed: a list of 5 integers"):
        build_model({"name": "vgg19", "convs": [2, 2]}, (3, 32, 32), 10)
    with pytest.raises(ConfigError, match=r"^model.dropout=1.0 is out of range"):
        build_model({"name": "vgg19", "dropout": 1.0}, (3, 32, 32), 10)


# ---------------------------------------------------------------------------------------------- PQFed's CNN


@pytest.mark.parametrize("shape, latent, total", [((1, 28, 28), 64 * 12 * 12, 1_199_882),
                                                  ((3, 32, 32), 64 * 14 * 14, 1_626_442)])
def test_pqfed_cnn_is_fig2s_layer_list(shape: tuple[int, ...], latent: int, total: int) -> None:
    """Fig. 2 (a) CIFAR-10 and (b) MNIST: 2 convolutional layers, one max-pool, 2 fully connected layers; sizes as
    PyTorch's MNIST example (3x3 convs of 32 and 64 maps, FC 128), no dropout."""
    m = build_model({"name": "pqfed_cnn"}, shape, 10)
    kinds = [type(x).__name__ for x in m.modules() if isinstance(x, (nn.Conv2d, nn.MaxPool2d, nn.Linear, nn.Dropout))]
    assert kinds == ["Conv2d", "Conv2d", "MaxPool2d", "Linear", "Linear"]
    c = shape[0]
    assert n_params(m) == (9 * c * 32 + 32) + (9 * 32 * 64 + 64) + (latent * 128 + 128) + (128 * 10 + 10) == total
    assert m.latent_dim == latent and m.feature_dim == 128
    x = torch.randn(3, *shape)
    assert m(x).shape == (3, 10)
    drop = build_model({"name": "pqfed_cnn", "conv_dropout": 0.25, "fc_dropout": 0.5}, shape, 10)
    assert [d.p for d in drop.modules() if isinstance(d, nn.Dropout)] == [0.25, 0.5] and n_params(drop) == total
    with pytest.raises(ConfigError, match=r"^model.channels=\[32\] is out of range"):
        build_model({"name": "pqfed_cnn", "channels": [32]}, shape, 10)


def test_dapfl_cnn10_is_fedreps_cifar10_cnn() -> None:
    """FedRep's CNNCifar (DA-PFL §IV-D follows it): conv 5x5 3->64->64, FC 1600 -> 120 -> 64 -> classes; its dropout
    0.6 sits before the classifier (the head stays the final linear layer)."""
    m = build_model({"name": "dapfl_cnn10"}, (3, 32, 32), 10)
    assert _io([x for x in m.modules() if isinstance(x, nn.Conv2d)]) == [(3, 64), (64, 64)]
    assert _io([x for x in m.modules() if isinstance(x, nn.Linear)]) == [(1600, 120), (120, 64), (64, 10)]
    last = m.features.dense[-1]
    assert isinstance(last, nn.Dropout) and last.p == 0.6
    assert n_params(m) == 307_842


# (model section, the paper's input shape): VGG-19's 16 convolutions at small widths (the check is the structure's)
CONFORMANCE = {"vgg19": ({"name": "vgg19", "widths": [4, 4, 8, 8, 8], "classifier": [8, 8]}, (3, 32, 32)),
               "pqfed_cnn_mnist": ({"name": "pqfed_cnn"}, (1, 28, 28)),
               "pqfed_cnn_cifar10": ({"name": "pqfed_cnn"}, (3, 32, 32)),
               "dapfl_cnn10": ({"name": "dapfl_cnn10"}, (3, 32, 32)),
               "dapfl_cnn100": ({"name": "dapfl_cnn100"}, (3, 32, 32))}


@pytest.mark.parametrize("case", sorted(CONFORMANCE))
def test_papers_models_pass_the_model_check_on_the_papers_inputs(case: str) -> None:
    """``flplat check --model`` (flplat/studies/model_check.py: build, the features / head split, the same weights
    from the same seed, vectorisable) on the input the paper feeds the model (tests/test_model_check.py runs it on
    the check's own first shape, 28x28 grey); and another seed gives other weights."""
    from flplat.studies.model_check import check_model

    section, shape = CONFORMANCE[case]
    over = [f"model.{k}={v}" for k, v in section.items() if k != "name"]
    results = check_model(section["name"], over, input_shape=shape)
    assert [r.prop for r in results] == ["build", "split", "init", "vectorize"]
    assert all(r.ok for r in results), [r.line() for r in results]
    assert str(shape) in results[0].detail and results[3].detail.startswith("vectorisable: vmap")
    weights = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        weights.append(build_model(section, shape, 10).head.weight)
    assert not torch.equal(*weights)


@pytest.mark.parametrize("model", [pytest.param(VGG_VEC, marks=pytest.mark.slow), PQFED_TINY],
                         ids=["vgg19", "pqfed_cnn"])
def test_vectorised_clients_match_the_loop(model: dict) -> None:
    """tests/test_vectorized.py's check on the two new models (VGG: batch-norm statistics per client, float64 as
    there; see its batch-norm test for why). VGG's is slow (~10 s of CPU): the model check's probe covers its stacked
    forward and backward in the default suite."""
    p = _prepare(**{"data.name": "digits", "partition.num_clients": 24, **model}, **SGD,
                 **{"federation.batch_size": 12, "fabric.precision": "64-true"})
    jobs = _jobs(p)
    from flplat.engine.vectorized import VectorizedTrainer

    vt = VectorizedTrainer(p.trainer)
    assert vt.model_reason is None
    _assert_match(vt.train(jobs), [p.trainer.train(*j) for j in jobs])


# ------------------------------------------------------------------------------- the configs and the tables

PAPER_MODEL_CONFIGS = {"cafa/table5_cifar10.yaml": "vgg19", "dapfl/cifar10_*.yaml": "dapfl_cnn10",
                       "dapfl/cifar100_*.yaml": "dapfl_cnn100", "pqfed/*.yaml": "pqfed_cnn"}


def test_ready_configs_name_the_papers_models() -> None:
    for pattern, name in PAPER_MODEL_CONFIGS.items():
        files = sorted((REPO / "configs").glob(pattern))
        assert files, pattern
        for f in files:
            assert OmegaConf.load(f).model.name == name, f


# (paper, dataset) -> the paper's model there; every other model a table trains is a stand-in its header names
PAPER_MODEL = {("cafa", "cifar10"): "vgg19", ("dapfl", "cifar10"): "dapfl_cnn10",
               ("dapfl", "cifar100"): "dapfl_cnn100", ("dapfl", "femnist"): "mlp", ("pqfed", "mnist"): "pqfed_cnn",
               ("pqfed", "cifar10"): "pqfed_cnn", ("clust-psi-pfl", "fmnist"): "fmnist_cnn",
               ("clust-psi-pfl", "cifar10"): "cifar_cnn", ("clust-psi-pfl", "acs_income"): "logreg",
               ("clust-psi-pfl", "serengeti"): "mlp3x500", ("clust-psi-pfl", "sent140"): "sent140_lstm",
               ("clust-psi-pfl", "amazon_reviews"): "amazon_dnn"}
STAND_IN_NAMES = {"mlp": "MLP", "lenet5": "LeNet-5", "fmnist_cnn": "light CNN"}


def _data_and_model(config: str, overrides: list[str]) -> tuple[str, str]:
    """``data.name`` and ``model.name`` of a ready config under dotted overrides (the last one wins)."""
    cfg = OmegaConf.load(REPO / config)
    names = {"data.name": str(cfg.data.name), "model.name": str(cfg.model.name)}
    for o in overrides:
        key, _, value = o.partition("=")
        if key in names:
            names[key] = value
    return names["data.name"], names["model.name"]


@pytest.mark.parametrize("paper", ["cafa", "dapfl", "pqfed", "clust-psi-pfl"])
def test_tables_train_the_papers_model_or_say_which_stands_in(paper: str) -> None:
    """Every train table's cells at every scale train the paper's model for their dataset, or the table's header (the
    scale's note, the cell's or the table's substitute) names the model in its place."""
    seen = set()
    for t in rp.paper_tables(paper):
        if t.kind != "train":
            continue
        for scale in ("smoke", "reduced", "paper"):
            over, note = resolve_scale(t, scale)
            for cell in t.cells:
                data, model = _data_and_model(cell.config, [*cell.overrides, *over])
                header = f"{note} {cell.substitute or t.substitute or ''}"
                if model != PAPER_MODEL.get((paper, data)):
                    assert STAND_IN_NAMES[model] in header, (t.id, scale, cell.id, model, header)
                seen.add((scale, data, model))
    if paper != "clust-psi-pfl":
        assert {(s, d, m) for (p, d), m in PAPER_MODEL.items() if p == paper and d != "femnist"
                for s in ("reduced", "paper")} <= seen


# ------------------------------------------------------------------------------------- smoke cells, end to end


def _cifar10(root: Path) -> None:
    """CIFAR-10's python-pickle batches: 800 training and 200 test images of noise, the classes balanced."""
    rng = np.random.default_rng(0)
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True)
    for i, n in enumerate((160,) * 5 + (200,)):
        name = f"data_batch_{i + 1}" if i < 5 else "test_batch"
        with open(d / name, "wb") as fh:
            pickle.dump({"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                         "labels": [int(v) for v in rng.permutation(np.arange(n) % 10)]}, fh, protocol=2)
    (d / "batches.meta").write_bytes(pickle.dumps({"label_names": [f"c{i}" for i in range(10)]}, protocol=2))


def _runs(store: Path) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{store.resolve() / 'mlflow.db'}")
    return client.search_runs([e.experiment_id for e in client.search_experiments()])


@pytest.mark.parametrize("paper, table, cell, method, model", [
    ("pqfed", "table2", "exp2", "FedAvg", ["model.name=pqfed_cnn", "model.channels=[4,8]", "model.fc=16"]),
    ("dapfl", "table1", "cifar10_k20_low", "FedAvg", ["model.name=dapfl_cnn10", "model.channels=[4,8]",
                                                     "model.fc=[16,8]"]),
    # CAFA: the VGG-19 at small widths; 10 clients (on these 600 images seed 0's draw of 20 leaves one with 9 < 10)
    ("cafa", "table5", "cifar10", "CAFA", ["model.name=vgg19", "model.widths=[4,4,8,8,8]", "model.classifier=[8,8]",
                                           "partition.num_clients=10"]),
])
def test_smoke_cell_trains_the_papers_model(paper, table, cell, method, model, tmp_path, capsys, small_mnist):
    """The smoke scale trains the MLP; with the model put back (``--set``) the paper's cell runs its own network end
    to end (MNIST from the conftest's IDX files, CIFAR-10 from pickle batches written here) and has a number."""
    over = [*model] if paper == "pqfed" else [*model, f"data.root={tmp_path / 'data'}"]
    if paper != "pqfed":
        _cifar10(tmp_path / "data")
    store = tmp_path / "store"
    assert main(["reproduce", paper, table, "--scale", "smoke", "--cells", cell, "--methods", method, "--seeds", "0",
                 "--store-dir", str(store), "--set", *over]) == 0
    row = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(f"| {cell} | {method} |"))
    assert "not run" not in row and float(row.split("|")[3].split()[0]) >= 0, row
    (run,) = [r for r in _runs(store) if r.info.run_name == f"{table}/{cell}/{method}/s0"]
    assert run.data.params["model.name"] == model[0].split("=")[1] and run.info.status == "FINISHED"


def test_clust_psi_pfl_figures_5_to_8_on_fmnist(tmp_path, capsys, small_mnist) -> None:
    """Figs. 5-8 on FMNIST in place of ACSIncome (one K = 100 cell, FedAvg and Clust-PSI-PFL): the four tables share
    two runs, write their PNGs, and their headers say FMNIST stands in for ACSIncome."""
    store, out = str(tmp_path / "store"), tmp_path / "out"
    figs = [f"fig{i}_fmnist" for i in (5, 6, 7, 8)]
    args = ["--scale", "smoke", "--cells", "k100_similarity_0", "--seeds", "0", "--store-dir", store, "--out", str(out)]
    assert main(["reproduce", "clust-psi-pfl", *figs, "--methods", "Clust-PSI-PFL", *args]) == 0
    got = capsys.readouterr()
    assert "fig6_fmnist: 1 of 1 runs already finished, skipped" in got.err
    assert "The paper's dataset differs (FMNIST (Table III's configs" in got.out
    assert main(["reproduce", "clust-psi-pfl", "fig7_fmnist", "fig8_fmnist", "--methods", "FedAvg,Clust-PSI-PFL",
                 *args]) == 0
    err = capsys.readouterr().err
    assert "fig7_fmnist: 1 of 2 runs already finished, skipped" in err and "fig8_fmnist: 2 of 2 runs already" in err
    for t in figs:
        assert (out / f"clust-psi-pfl_{t}_smoke.png").stat().st_size > 5000, t
    assert {r.data.params["data.name"] for r in _runs(tmp_path / "store") if "data.name" in r.data.params} == {"fmnist"}
