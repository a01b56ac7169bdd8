"""The papers' models and the multi-label metrics (issue 23 item 2): shapes and parameter counts by hand, the
vocabulary filled from the data, BCE training with macro ROC AUC end to end on CheXpert-format files, an LSTM run on
Sent140-format files, batch-norm buffers in the flat model vector, and the vectorised path's fallbacks."""

from __future__ import annotations

import contextlib
import logging
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from test_paper_datasets import CHEX_HEADER, _grey, _sent140_csv, write_csv

from flplat.errors import ConfigError
from flplat.models import build_model


def n_params(m: torch.nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


# ------------------------------------------------------------------------------------------------ the models


def test_sent140_lstm_shapes_and_parameter_count_by_hand() -> None:
    m = build_model({"name": "sent140_lstm", "vocab_size": 50, "embedding_dim": 8}, (6,), 3)
    # embedding 50*8 = 400; LSTM 4*10*8 (input) + 4*10*10 (recurrent) + 4*10 (bias) = 760; head 10*3 + 3 = 33
    assert n_params(m) == 400 + 760 + 33
    x = torch.randint(0, 50, (5, 6))
    assert m(x).shape == (5, 3) and m.latent(x).shape == (5, 10) and m.latent_dim == m.feature_dim == 10
    d = build_model({"name": "sent140_lstm", "vocab_size": 50}, (6,), 3)  # the paper's values as defaults
    lstm = d.features.trunk[2]
    assert d.features.trunk[1].p == 0.5 and lstm.hidden == 10 and (lstm.p_input, lstm.p_recurrent) == (0.2, 0.2)


def test_lstm_cell_matches_torch_lstm_without_dropout() -> None:
    """The written-out LSTM (for Keras' recurrent dropout) computes what nn.LSTM computes, gates i, f, g, o."""
    from flplat.models.text import KerasLSTM

    torch.manual_seed(0)
    mine, ref = KerasLSTM(4, 3), torch.nn.LSTM(4, 3, batch_first=True)
    with torch.no_grad():
        ref.weight_ih_l0.copy_(mine.weight_ih)
        ref.weight_hh_l0.copy_(mine.weight_hh)
        ref.bias_ih_l0.copy_(mine.bias)
        ref.bias_hh_l0.zero_()
    x = torch.randn(2, 5, 4)
    assert torch.allclose(mine(x), ref(x)[1][0][0], atol=1e-6)
    drop = KerasLSTM(4, 3, 0.5, 0.5).train()
    torch.manual_seed(1)
    a = drop(x)
    assert not torch.allclose(a, drop.eval()(x))  # the dropouts act in training mode only


def test_amazon_dnn_shapes_and_parameter_count_by_hand() -> None:
    m = build_model({"name": "amazon_dnn", "vocab_size": 50, "embedding_dim": 4}, (6,), 6)
    # embedding 50*4 = 200; flatten 6*4 = 24 -> 8: 24*8 + 8 = 200; head 8*6 + 6 = 54
    assert n_params(m) == 200 + 200 + 54
    x = torch.randint(0, 50, (3, 6))
    assert m(x).shape == (3, 6) and m.latent_dim == 24 and m.feature_dim == 8


def test_dapfl_cnns_parameter_counts_by_hand() -> None:
    """FedRep's CIFAR-10 / CIFAR-100 CNNs (DA-PFL §V-A follows [34]): 2 conv (5x5) + 3 fully connected."""
    m10 = build_model({"name": "dapfl_cnn10"}, (3, 32, 32), 10)
    # conv 3->64: 3*64*25+64; conv 64->64: 64*64*25+64; 32 -> 28 -> 14 -> 10 -> 5: 64*5*5 = 1600
    # fc 1600->120, 120->64, head 64->10
    assert m10.latent_dim == 1600
    assert n_params(m10) == (4864 + 102464) + (1600 * 120 + 120) + (120 * 64 + 64) + (64 * 10 + 10)
    m100 = build_model({"name": "dapfl_cnn100"}, (3, 32, 32), 20)
    assert m100.latent_dim == 3200 and m100.feature_dim == 128
    assert n_params(m100) == (4864 + 64 * 128 * 25 + 128) + (3200 * 256 + 256) + (256 * 128 + 128) + (128 * 20 + 20)
    assert m100(torch.randn(2, 3, 32, 32)).shape == (2, 20)


def test_resnet9_parameter_count_by_hand_and_any_image_size() -> None:
    def block(i: int, o: int) -> int:  # conv 3x3 with bias + batch norm (weight, bias)
        return 9 * i * o + o + 2 * o

    m = build_model({"name": "resnet9"}, (3, 32, 32), 20)
    body = (block(3, 64) + block(64, 128) + 2 * block(128, 128) + block(128, 256) + block(256, 512)
            + 2 * block(512, 512))
    assert n_params(m) == body + 512 * 20 + 20 == 6_580_500
    grey = build_model({"name": "resnet9", "widths": [4, 8, 8, 16]}, (1, 64, 64), 14)  # CheXpert-like input
    assert grey(torch.randn(2, 1, 64, 64)).shape == (2, 14) and grey.latent_dim == 16


def test_clust_psi_pfl_cifar_cnn_parameter_count_by_hand() -> None:
    """§IV-A-d: blocks of two 3x3 convs with batch norm, 32/64/128 filters, dense 128 with batch norm."""
    m = build_model({"name": "cifar_cnn"}, (3, 32, 32), 10)

    def conv(i: int, o: int) -> int:
        return 9 * i * o + o + 2 * o

    trunk = conv(3, 32) + conv(32, 32) + conv(32, 64) + conv(64, 64) + conv(64, 128) + conv(128, 128)
    assert m.latent_dim == 128 * 4 * 4
    assert n_params(m) == trunk + (2048 * 128 + 128 + 2 * 128) + (128 * 10 + 10)


@pytest.mark.parametrize("model,shape", [
    ({"name": "sent140_lstm", "vocab_size": 20, "embedding_dim": 4}, (5,)),
    ({"name": "amazon_dnn", "vocab_size": 20, "embedding_dim": 4}, (5,)),
    ({"name": "dapfl_cnn10", "channels": [2, 3], "fc": [4, 4]}, (3, 16, 16)),
    ({"name": "dapfl_cnn100", "channels": [2, 3], "fc": [4, 4]}, (3, 16, 16)),
    ({"name": "resnet9", "widths": [2, 2, 2, 2]}, (1, 12, 12)),
])
def test_new_models_split_and_train(model: dict, shape: tuple[int, ...]) -> None:
    """head(features(x)) is the model, latent feeds dense, and a training step reaches every parameter."""
    torch.manual_seed(0)
    m = build_model(model, shape, 3)
    x = torch.randint(1, 20, (4, *shape)) if len(shape) == 1 else torch.randn(4, *shape)
    m.eval()
    torch.testing.assert_close(m(x), m.head(m.features.dense(m.latent(x))))
    m.train()
    torch.nn.functional.cross_entropy(m(x), torch.tensor([0, 1, 2, 0])).backward()
    missing = [n for n, p in m.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert missing == [], missing


def test_text_models_need_a_vocabulary_and_token_inputs() -> None:
    with pytest.raises(ConfigError, match="model.vocab_size=0 is not set"):
        build_model({"name": "sent140_lstm"}, (6,), 3)
    with pytest.raises(ConfigError, match=r"token ids of shape \(L,\)"):
        build_model({"name": "amazon_dnn", "vocab_size": 9}, (1, 8, 8), 3)


def test_text_model_on_float_features_is_refused_by_name() -> None:
    from flplat.data.containers import Dataset
    from flplat.experiment import check_token_inputs

    digits = Dataset(name="digits", x_train=torch.zeros(2, 3), y_train=torch.tensor([0, 1]), num_classes=2)
    with pytest.raises(ConfigError, match="model.name='sent140_lstm' embeds token ids.*float features"):
        check_token_inputs(digits, "sent140_lstm")


# ------------------------------------------------------------------------------------------------ the metric


def test_macro_auroc_on_a_hand_made_four_sample_example() -> None:
    """Label 0: positives score 0.9, 0.3, negatives 0.8, 0.1: 3 of the 4 (pos, neg) pairs ordered right -> 0.75.
    Label 1: the one positive (0.7) is above all three negatives -> 1.0. Macro: 0.875."""
    from flplat.metrics.multilabel import macro_auroc, per_label_auroc

    s = torch.tensor([[0.9, 0.1], [0.8, 0.4], [0.3, 0.2], [0.1, 0.7]])
    t = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    assert per_label_auroc(s, t).tolist() == [0.75, 1.0]
    assert macro_auroc(s, t) == pytest.approx(0.875)
    assert macro_auroc(torch.logit(s), t) == pytest.approx(0.875)  # order only: logits give the same
    # a label without positives has no ROC curve: left out (torchmetrics' macro would count it as 0 -> 0.375)
    t[3, 1] = 0.0
    assert macro_auroc(s, t) == pytest.approx(0.75)
    assert np.isnan(macro_auroc(s, torch.zeros_like(t)))


def test_auroc_summary_ad_sdad_analogues_and_pooling() -> None:
    from flplat.metrics.multilabel import summarize_auroc

    s = torch.tensor([[0.9, 0.1], [0.8, 0.4], [0.3, 0.2], [0.1, 0.7]])
    t = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    out = summarize_auroc(np.array([0.5, 1.0, np.nan]), [s[:2], s[2:]], [t[:2], t[2:]])
    assert out["global_auroc"] == pytest.approx(0.875)  # the pooled predictions
    assert out["mean_local_auroc"] == pytest.approx(0.75)
    assert out["ad_auroc"] == pytest.approx(0.25) and out["sdad_auroc"] == pytest.approx(0.25)  # |A-1| = .5, 0


def test_bce_loss_and_exact_match_hits() -> None:
    from flplat.engine.client import hits, task_loss

    logits = torch.tensor([[2.0, -1.0], [0.5, 0.5]])
    y = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    want = torch.nn.functional.binary_cross_entropy_with_logits(logits, y, reduction="none").mean(1)
    assert torch.allclose(task_loss(logits, y, "none"), want)
    assert torch.allclose(task_loss(logits, y), want.mean()) and torch.allclose(task_loss(logits, y, "sum"), want.sum())
    assert hits(logits, y).tolist() == [True, False]  # sample 2 predicts label 1 too: not an exact match
    assert hits(logits, torch.tensor([0, 1])).tolist() == [True, False]  # single-label: argmax


# ------------------------------------------------------------------------------------------ end to end runs


def _chexpert_files(root: Path, n: int = 48) -> Path:
    d = root / "CheXpert-v1.0-small"
    rng = random.Random(0)
    rows, valid = [], []
    for i in range(n + 8):
        labels = ["1.0" if rng.random() < 0.4 else "" for _ in range(14)]
        labels[1] = "1.0" if i % 2 else "0.0"  # bright images: label 1 (learnable)
        split = "train" if i < n else "valid"
        path = f"CheXpert-v1.0-small/{split}/patient{i:05d}/study1/view1_frontal.jpg"
        _grey(root / path, 230 if i % 2 else 20, size=16)
        (rows if i < n else valid).append([path, "Female" if i % 3 else "Male", str(30 + i), "Frontal", "AP",
                                           *labels])
    write_csv(d / "train.csv", rows, header=CHEX_HEADER)
    write_csv(d / "valid.csv", valid, header=CHEX_HEADER)
    return d


def _run(overrides: list[str]):
    from flplat.experiment import load_config, run

    cfg = load_config(None, ["tracking.enabled=false", "fabric.num_threads=1", "federation.eval_every=1",
                             *overrides])
    return run(cfg, progress=False)[0]


def test_chexpert_files_train_with_bce_and_report_macro_auroc(isolated: Path, caplog) -> None:
    d = _chexpert_files(isolated / "chex")
    base = ["data.name=chexpert", f"data.root={d}", "data.image_size=8", "model.name=resnet9",
            "model.widths=[4,8,8,8]", "partition.name=iid", "partition.num_clients=3",
            "partition.train_fraction=0.6", "partition.val_fraction=0.15", "partition.test_fraction=0.25",
            "federation.rounds=2", "federation.local_epochs=1", "federation.batch_size=8", "algorithm.name=fedavg"]
    with caplog.at_level(logging.INFO, logger="flplat"):
        s = _run(base + ["federation.vectorize=true"])
    m = s.metrics
    for key in ("global_auroc", "mean_local_auroc", "ad_auroc", "sdad_auroc", "global_test_auroc", "global_accuracy",
                "val_auroc"):
        assert key in m and np.isfinite(m[key]), key
    assert 0.0 <= m["global_auroc"] <= 1.0 and m["ad_auroc"] == pytest.approx(1 - m["mean_local_auroc"])
    assert s.client_table["auroc"].shape == (3,)
    assert m["mean_local_auroc"] == pytest.approx(np.nanmean(s.client_table["auroc"]))
    assert np.isfinite(m["train_loss"]) and m["train_loss"] < 1.0  # BCE averaged over 14 labels (CE would fail)
    assert "per-client loop" not in caplog.text  # multi-label data and ResNet-9's batch norm train vectorised
    with pytest.raises(ConfigError, match="partition.name='dirichlet' needs one class per sample.*allowed: iid"):
        _run(base + ["partition.name=dirichlet"])


def test_sent140_files_train_the_lstm_with_the_vocabulary_filled_in(isolated: Path, caplog, monkeypatch) -> None:
    root = isolated / "data"
    _sent140_csv(root / "sent140")
    more = root / "sent140" / "training.1600000.processed.noemoticon.csv"
    lines = more.read_text(encoding="latin-1").splitlines() * 6
    more.write_text("\n".join(lines) + "\n", encoding="latin-1")
    from flplat.experiment import load_config, prepare

    over = ["data.name=sent140", f"data.root={root}", "data.max_length=4", "model.name=sent140_lstm",
            "partition.name=iid", "partition.num_clients=2", "partition.train_fraction=0.7",
            "partition.test_fraction=0.3", "federation.rounds=2",
            "federation.batch_size=4", "algorithm.name=fedavg"]
    cfg = load_config(None, ["tracking.enabled=false", "fabric.num_threads=1", *over])
    p = prepare(cfg)
    assert p.cfg.model.vocab_size == 6 and cfg.model.vocab_size == 0  # the run's copy is filled, not the input
    from flplat.config_io import config_key, flatten, loggable

    assert flatten(loggable(p.cfg))["model.vocab_size"] == 6  # what MLflow logs
    assert config_key(p.cfg) != config_key(cfg)  # (studies find runs by the written config's hash)
    import flplat.tracking.runs as runs
    from flplat.engine.events import Callback
    from flplat.experiment import run

    class Tracker(Callback):  # what run() hands MLflow, without a store (the real one: the slow test below)
        run_id = None

        def __init__(self, tcfg, params, config_yaml, *args):
            seen.update(params=params, yaml=config_yaml)

    seen: dict = {}
    monkeypatch.setattr(runs, "MlflowCallback", Tracker)
    tracked = load_config(None, ["fabric.num_threads=1", f"tracking.store_dir={isolated / 'store'}",
                                 "federation.vectorize=true", *over])
    with caplog.at_level(logging.INFO, logger="flplat"):
        s, _ = run(tracked, progress=False)  # the paper's dropouts, vmap's randomness="different"
    assert "per-client loop" not in caplog.text
    assert np.isfinite(s.metrics["global_accuracy"]) and np.isfinite(s.metrics["train_loss"])
    assert seen["params"]["model.vocab_size"] == 6 and "vocab_size: 6" in seen["yaml"]  # logged filled in
    with pytest.raises(ConfigError, match="model.vocab_size=3 does not match.*vocabulary of 6 words"):
        prepare(load_config(None, ["tracking.enabled=false", *over, "model.vocab_size=3"]))


def test_test_phase_ensemble_of_multi_label_models_uses_sigmoids_and_reports_auroc() -> None:
    """Flux's test phase for methods without a test-time mechanism (Σ_c n_c/Σn · model_c's output) on multi-label
    data: the ensemble of per-label probabilities, scored by exact match and by macro ROC AUC."""
    from types import SimpleNamespace

    from flplat.api import ClusteredStrategy, ServerState
    from flplat.engine.evaluation import Evaluator, ensemble_accuracy, known_association
    from flplat.engine.executor import _softmax_and_labels

    y = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    probs = {0.0: torch.tensor([[0.9, 0.2], [0.2, 0.1], [0.6, 0.3]]),  # model θ_0 = [0]
             1.0: torch.tensor([[0.1, 0.2], [0.2, 0.9], [0.2, 0.9]])}  # model θ_1 = [1]

    class Ops:
        def compute(self, requests, fn, split="train", seed=0):
            return [(probs[float(w[0])], y) for _, w in requests]

    state = ServerState(clusters=torch.tensor([[0.0], [1.0]]), assignment=np.array([0, 0, 0, 1]))
    strategy = ClusteredStrategy.__new__(type("C", (ClusteredStrategy,), {"aggregate": None}))
    models = Evaluator(strategy, Ops(), SimpleNamespace(num_clients=4)).ensemble(state)
    aurocs: list[float] = []
    # 3:1 -> [[.7, .2], [.2, .3], [.5, .45]]: exact match only on row 0 (row 2: 0.5 is not > 0.5) -> 1/3
    assert ensemble_accuracy(Ops(), models, [4], aurocs) == [pytest.approx(1 / 3)]
    # label 0: positives .7, .5 vs negative .2 -> 1; label 1: positives .3, .45 vs negative .2 -> 1
    assert aurocs == [pytest.approx(1.0)]
    # known association: the unweighted mean of the training clients' own AUROCs (NaN: a client without one)
    table = {"accuracy": np.array([0.5, 0.0, np.nan]), "auroc": np.array([0.9, 0.7, np.nan])}
    assert known_association(table) == {"known_association_accuracy": 0.25,
                                        "known_association_auroc": pytest.approx(0.8)}
    view = SimpleNamespace(net=lambda x: x, x=torch.tensor([[0.0, 2.0]]), y=torch.tensor([[0.0, 1.0]]),
                           autocast=contextlib.nullcontext)
    p, _ = _softmax_and_labels(view)
    assert torch.allclose(p, torch.sigmoid(torch.tensor([[0.0, 2.0]])))  # per-label sigmoid, not a softmax


def test_text_model_saved_by_mlflow_rebuilds_with_the_filled_vocabulary(isolated: Path) -> None:
    """models/model.yaml takes the model section from the logged params, so the run's LSTM loads back."""
    from mlflow.tracking import MlflowClient

    import flplat
    from flplat.experiment import load_config, run

    root = isolated / "data"
    _sent140_csv(root / "sent140")
    store = isolated / "store"
    cfg = load_config(None, ["fabric.num_threads=1", f"tracking.store_dir={store}", "tracking.plots=false",
                             "data.name=sent140", f"data.root={root}", "data.max_length=4",
                             "model.name=sent140_lstm", "partition.name=iid", "partition.num_clients=2",
                             "partition.train_fraction=0.5", "partition.test_fraction=0.5", "federation.rounds=1",
                             "algorithm.name=fedavg"])
    s, run_id = run(cfg, progress=False)
    assert MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}").get_run(run_id).data.params[
        "model.vocab_size"] == "6"
    net = flplat.load_model(run_id, store_dir=str(store))
    assert torch.equal(torch.cat([p.detach().flatten() for p in net.parameters()]), s.state.weights)


def test_methods_own_losses_and_flux_descriptors_take_multi_label_targets() -> None:
    """The multi-model losses (IFCA, FedEM, FeSEM, FedDrift, FedSoft), FedEM's mixture predictor and Flux's
    label-conditional moments read y (n, C) of 0/1 as labels, not as class probabilities."""
    from flplat.api import ParamLayout, mixture_correct, sample_losses
    from flplat.maths.flux_descriptors import moments

    net = build_model({"name": "logreg"}, (2,), 2)
    lay = ParamLayout(net)
    models = torch.stack([lay.flatten(), lay.flatten() + 0.5])
    x, y = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]]), torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    got = sample_losses(net, lay, models, x, y)
    for m in range(2):
        lay.load(models[m])
        want = torch.nn.functional.binary_cross_entropy_with_logits(net(x), y, reduction="none").mean(1)
        assert torch.allclose(got[m], want, atol=1e-6)
    logits = torch.tensor([[[3.0, -3.0], [-3.0, 3.0], [3.0, -3.0]], [[3.0, -3.0], [3.0, -3.0], [3.0, 3.0]]])
    # mixture 0.5/0.5 of sigmoids: only row 0 (rows 1, 2: label 1 at (σ(-3)+σ(3))/2 = 0.5, not > 0.5 -> wrong)
    assert mixture_correct(logits, torch.tensor([0.5, 0.5]), y) == 1
    assert mixture_correct(logits, torch.tensor([0.0, 1.0]), y) == 2  # model 1 alone: rows 0 and 2
    z = torch.tensor([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])
    _, cond, counts = moments(z, y, 2, min_class_samples=2)
    assert counts.tolist() == [2, 2]
    assert cond[0].tolist() == [2.0, 3.0, 2.0, 2.0]  # label 0: samples 0 and 2 -> mean (2, 3), std (2, 2)
    assert cond[1].tolist() == [3.0, 4.0, 1.0, 1.0]  # label 1: samples 1 and 2


def test_apfl_personal_step_uses_binary_cross_entropy_on_multi_label_batches() -> None:
    """APFL's v-step differentiates the task loss: BCE for y (B, C), not a soft-label cross-entropy."""
    from flplat.algorithms.apfl import PersonalMixture
    from flplat.api import HookContext, ParamLayout

    torch.manual_seed(0)
    net = build_model({"name": "logreg"}, (3,), 2)
    lay = ParamLayout(net)
    ctx = HookContext(net, lay, list(net.parameters()))
    x, y = torch.randn(4, 3), torch.tensor([[1.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    w = lay.flatten()
    hook = PersonalMixture(w.clone(), alpha=0.5, v_lr=0.1, alpha_lr=0.0, adaptive=False)
    hook.setup(ctx)
    ctx.batch = (x, y)
    hook.after_step(ctx)  # v starts at w, so the mixture is w: v <- w - lr * alpha * grad BCE(w)
    net.zero_grad()
    torch.nn.functional.binary_cross_entropy_with_logits(net(x), y).backward()
    want = [p.detach() - 0.1 * 0.5 * p.grad for p in net.parameters()]
    for got, exp in zip(hook._v, want):
        assert torch.allclose(got, exp, atol=1e-6)


@pytest.mark.parametrize("algorithm", ["atp", "creff", "fedrc"])
def test_methods_that_need_one_class_per_sample_refuse_multi_label_data(algorithm: str) -> None:
    from flplat.data.containers import Dataset
    from flplat.experiment import check_multilabel

    multi = Dataset(name="chexpert", x_train=torch.zeros(2, 1, 8, 8), y_train=torch.zeros(2, 14), num_classes=14,
                    multilabel=True)
    with pytest.raises(ConfigError, match=f"algorithm.name='{algorithm}' cannot train on multi-label"):
        check_multilabel(multi, algorithm)
    check_multilabel(multi, "flux")  # Flux Table 59's methods train (BCE through the one loss)
    single = Dataset(name="digits", x_train=torch.zeros(2, 3), y_train=torch.tensor([0, 1]), num_classes=2)
    check_multilabel(single, algorithm)


def test_flplat_evaluate_reports_the_runs_auroc_on_multi_label_data(isolated: Path) -> None:
    """``flplat evaluate`` on the saved global model of a FedAvg CheXpert run reproduces the run's AUROC keys."""
    from flplat.experiment import load_config, run
    from flplat.studies.evaluate import evaluate_run

    d = _chexpert_files(isolated / "chex")
    store = isolated / "store"
    cfg = load_config(None, ["fabric.num_threads=1", f"tracking.store_dir={store}", "tracking.plots=false",
                             "data.name=chexpert", f"data.root={d}", "data.image_size=8", "model.name=mlp",
                             "model.hidden=[8]", "partition.name=iid", "partition.num_clients=3",
                             "partition.train_fraction=0.75", "partition.test_fraction=0.25", "federation.rounds=2",
                             "algorithm.name=fedavg"])
    s, run_id = run(cfg, progress=False)
    got = evaluate_run(run_id, store_dir=str(store))
    for key in ("global_auroc", "mean_local_auroc", "ad_auroc", "global_test_auroc", "global_accuracy"):
        assert got[key] == pytest.approx(s.metrics[key], abs=1e-6), key


# ---------------------------------------------------------------------------------------------- batch norm


def test_batch_norm_running_statistics_travel_in_the_flat_vector_and_are_averaged() -> None:
    """Decision: BN running mean/var are float buffers of the state_dict, so they are part of the flat model vector
    (flplat/engine/state.py): clients send the statistics they updated, FedAvg averages them like parameters
    (sample-weighted), and a client evaluates with the loaded ones. num_batches_tracked (int) is not carried: with
    the default momentum it is never read."""
    from flplat.api import ParamLayout

    net = build_model({"name": "cifar_cnn", "widths": [2], "block_dropout": [0.0], "dense": 3, "dense_dropout": 0.0},
                      (1, 4, 4), 2)
    lay = ParamLayout(net)
    bn = [n for n in lay.names if "running_" in n]
    assert bn and all(not p for n, p in zip(lay.names, lay.is_param) if n in bn)
    assert not any("num_batches_tracked" in n for n in lay.names)
    start = lay.flatten()
    rm = lay.mask("features.trunk.2.running_mean")
    net.train()
    net(torch.randn(8, 1, 4, 4) + 3.0)  # a training forward moves the running mean towards the batch mean
    a = lay.flatten()
    assert not torch.equal(a[rm], start[rm])
    lay.load(start)  # loading a vector restores the statistics too
    assert torch.equal(lay.flatten(), start)
    from flplat.api import ClientResult, fedavg

    agg = fedavg([ClientResult(0, a, 3, 0.0), ClientResult(1, start, 1, 0.0)])
    assert torch.allclose(agg[rm], 0.75 * a[rm] + 0.25 * start[rm])


@pytest.mark.parametrize("model", ["sent140_lstm", "amazon_dnn"])
def test_text_models_train_vectorised_like_the_loop(isolated: Path, caplog, model: str) -> None:
    """torch.func runs the embedding models (the LSTM's time loop is shape-only): no fallback, and without dropout
    the vectorised clients give the loop's metrics."""
    root = isolated / "data"
    _sent140_csv(root / "sent140")
    over = ["data.name=sent140", f"data.root={root}", "data.max_length=4", f"model.name={model}",
            "model.dropout=0.0", "partition.name=iid", "partition.num_clients=2", "partition.train_fraction=0.7",
            "partition.test_fraction=0.3", "federation.rounds=2", "federation.batch_size=2", "algorithm.name=fedavg"]
    if model == "sent140_lstm":
        over += ["model.lstm_dropout=0.0", "model.recurrent_dropout=0.0"]
    loop = _run(over)
    with caplog.at_level(logging.INFO, logger="flplat"):
        vec = _run(over + ["federation.vectorize=true"])
    assert "per-client loop" not in caplog.text
    assert vec.metrics["train_loss"] == pytest.approx(loop.metrics["train_loss"], rel=1e-4)
    assert vec.metrics["global_accuracy"] == loop.metrics["global_accuracy"]


def test_vectorised_clients_run_resnet9_and_the_dapfl_cnn() -> None:
    """ResNet-9 (batch norm: statistics per client, tests/test_vectorized.py) and DA-PFL's CNN run under vmap."""
    from types import SimpleNamespace

    from lightning.fabric import Fabric

    from flplat.engine.client import ClientTrainer
    from flplat.engine.vectorized import VectorizedTrainer

    fabric = Fabric(accelerator="cpu", devices=1)
    opt = SimpleNamespace(name="sgd", lr=0.1, momentum=0.0, weight_decay=0.0)
    x, y = torch.randn(6, 3, 16, 16), torch.tensor([0, 1, 2, 0, 1, 2])

    def reason(model):
        trainer = ClientTrainer(fabric, build_model(model, (3, 16, 16), 3), x, y, opt, 2, 1)
        return VectorizedTrainer(trainer).model_reason

    assert reason({"name": "resnet9", "widths": [2, 2, 2, 2]}) is None
    assert reason({"name": "dapfl_cnn10", "channels": [2, 2], "fc": [4, 4]}) is None
