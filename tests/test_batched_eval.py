"""Batched evaluation (flplat/engine/batched_eval.py): clients sharing a model are scored in one pass, personal
models in vmap groups, with the same per-client counts as scoring them one by one."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from flplat.api import ClusteredStrategy, EvalModels, PersonalizedStrategy, ServerState, Strategy
from flplat.engine.batched_eval import EvalColumns, StackedScorer, shared_model_groups
from flplat.engine.client import ClientTrainer
from flplat.engine.executor import LocalExecutor


def _run(tiny_cfg, batched: bool, **extra):
    from flplat.experiment import run

    cfg = tiny_cfg(**{"partition.num_clients": 12, "federation.rounds": 3,
                      "federation.batched_eval": str(batched).lower(), **extra})
    summary, _ = run(cfg, progress=False)
    return summary


@pytest.mark.parametrize("extra", [{"algorithm.name": "fedavg"},
                                   {"algorithm.name": "ifca", "algorithm.num_clusters": 3}],
                         ids=["fedavg", "ifca"])
def test_batched_evaluation_gives_the_per_client_metrics(tiny_cfg, extra, monkeypatch):
    calls = {"one": 0, "many": 0}
    one, many = ClientTrainer.evaluate, ClientTrainer.score_rows

    def count_one(self, *a, **k):
        calls["one"] += 1
        return one(self, *a, **k)

    def count_many(self, *a, **k):
        calls["many"] += 1
        return many(self, *a, **k)

    monkeypatch.setattr(ClientTrainer, "evaluate", count_one)
    monkeypatch.setattr(ClientTrainer, "score_rows", count_many)
    per_client = _run(tiny_cfg, False, **extra)
    assert calls["many"] == 0 and calls["one"] > 0
    calls.update(one=0, many=0)
    batched = _run(tiny_cfg, True, **extra)
    if extra["algorithm.name"] == "fedavg":
        assert calls["one"] == 0 and calls["many"] == 3  # one pass per round (the single model)
    else:
        assert calls["one"] == 0 and calls["many"] >= 3  # one pass per cluster that has clients
    _same_metrics(batched, per_client)


def _same_metrics(batched, per_client):
    """Per-client counts equal, losses within float tolerance, every logged metric the same (accuracies, fairness,
    per-class buckets, cluster accuracies) except the round time."""
    for key in ("client", "num_train", "num_test", "correct"):
        np.testing.assert_array_equal(batched.client_table[key], per_client.client_table[key])
    np.testing.assert_allclose(batched.client_table["test_loss"], per_client.client_table["test_loss"], rtol=1e-5)
    for h_b, h_p in zip(batched.history, per_client.history):
        assert set(h_b) == set(h_p)
        for k in h_b:
            if k != "round_time_s":
                assert h_b[k] == (pytest.approx(h_p[k], rel=1e-5) if "loss" in k else h_p[k]), k


def test_shared_model_groups_follow_the_strategy_declaration():
    w, clusters = torch.zeros(3), torch.arange(6.0).view(2, 3)

    class Plain(Strategy):
        pass

    class Clustered(ClusteredStrategy):
        pass

    class Mixed(ClusteredStrategy):  # its clients use other models than their cluster's, and it says so
        eval_models = EvalModels("personal", "cluster_ensemble")

        def eval_weights(self, state, client):
            return state.weights

    class Fallback(ClusteredStrategy):  # an unassigned client uses the first cluster's model (FeSEM's rule)
        def unassigned_weights(self, state):
            return state.clusters[0]

    def make(cls):  # only the classes matter: skip the abstract methods and __init__
        cls.__abstractmethods__ = frozenset()
        return object.__new__(cls)

    plain, clustered, mixed, fallback = (make(cls) for cls in (Plain, Clustered, Mixed, Fallback))
    (g,) = shared_model_groups(plain, ServerState(weights=w), 4)
    assert g[0] is w and g[1].tolist() == [0, 1, 2, 3]
    groups = shared_model_groups(clustered, ServerState(weights=w, clusters=clusters,
                                                        assignment=np.array([1, -1, 1, 0])), 4)
    assert [(gw.tolist(), cl.tolist()) for gw, cl in groups] == [([0.0, 1.0, 2.0], [3]), ([3.0, 4.0, 5.0], [0, 2]),
                                                      ([0.0, 0.0, 0.0], [1])]
    assert shared_model_groups(mixed, ServerState(weights=w), 4) is None  # declared personal: per client
    *_, (rest, who) = shared_model_groups(fallback, ServerState(weights=w, clusters=clusters,
                                                                assignment=np.array([1, -1, 1, -1])), 4)
    assert rest.tolist() == [0.0, 1.0, 2.0] and who.tolist() == [1, 3]
    personal = make(type("Personal", (PersonalizedStrategy,), {}))
    assert shared_model_groups(personal, ServerState(weights=w), 4) is None


# ---- personal models: vmap groups (StackedScorer) -----------------------------------------------------------

def _spy(monkeypatch, cls, name, calls):
    orig = getattr(cls, name)

    def spy(self, *a, **k):
        calls[name] = calls.get(name, 0) + 1
        return orig(self, *a, **k)

    monkeypatch.setattr(cls, name, spy)


@pytest.mark.parametrize("name", ["ditto", "fedrep", "apfl"])
def test_personal_models_in_vmap_groups_give_the_per_client_metrics(tiny_cfg, name, monkeypatch):
    calls: dict[str, int] = {}
    _spy(monkeypatch, StackedScorer, "score", calls)
    per_client = _run(tiny_cfg, False, **{"algorithm.name": name})
    assert calls.get("score", 0) == 0
    batched = _run(tiny_cfg, True, **{"algorithm.name": name})
    assert calls["score"] >= 3  # the vectorised path ran (at least one group per evaluation)
    _same_metrics(batched, per_client)


def _personal_requests(p, num_clients):
    g = torch.Generator().manual_seed(0)
    ws = [p.init_weights + 0.1 * torch.randn(p.init_weights.shape, generator=g) for _ in range(num_clients)]
    ws[3] = ws[5] = ws[7] = p.init_weights  # one tensor object for several clients: scored as a shared group
    return [(k, ws[k]) for k in range(num_clients)]


# batch norm: eval mode reads each client's running statistics from its flat vector
BN_CNN = {"data.name": "digits", "model.name": "cifar_cnn", "model.widths": "[4,8]", "model.block_dropout": "[0.1,0.1]",
          "model.dense": 16, "federation.eval_batch_size": 16}


@pytest.mark.parametrize(("group_size", "model"), [(0, {}), (2, {}), (0, BN_CNN)], ids=["mlp", "mlp-g2", "bn-cnn"])
def test_evaluate_columns_matches_the_per_client_loop(group_size, model, monkeypatch):
    from conftest import tiny_overrides

    from flplat.experiment import load_config, prepare

    over = tiny_overrides(**{"partition.num_clients": 24, "federation.eval_batch_size": 8, **model})
    budget = int(dict(o.split("=", 1) for o in over)["federation.eval_batch_size"])
    p = prepare(load_config(None, [o for o in over if not (model and o.startswith("model.hidden"))]))
    p.data.clients[4].test = p.data.clients[4].test[:0]  # a client without test rows
    sizes = p.data.num_samples("test")
    assert sizes.max() > budget and (sizes[sizes > 0] <= budget).sum() > 2  # some clients alone, some in groups
    ex = LocalExecutor(p.trainer, p.data, 0, eval_group_size=group_size)
    calls: dict[str, int] = {}
    _spy(monkeypatch, StackedScorer, "score", calls)
    _spy(monkeypatch, LocalExecutor, "evaluate_groups", calls)
    for split in ("test", "train"):
        req = _personal_requests(p, p.data.num_clients)
        loop = EvalColumns.from_results(ex.evaluate(req, split))
        vec = ex.evaluate_columns(req, split)
        np.testing.assert_array_equal(vec.client, np.arange(p.data.num_clients))
        for f in ("client", "correct", "num_samples", "class_correct", "class_total"):
            np.testing.assert_array_equal(getattr(vec, f), getattr(loop, f), err_msg=f)
        np.testing.assert_allclose(vec.loss_sum, loop.loss_sum, rtol=1e-5, atol=1e-6)
    assert calls["score"] >= 2  # vmap groups ran
    if group_size == 0:  # clients 3, 5, 7 share one tensor and are read in one window: one shared pass
        assert calls["evaluate_groups"] >= 1
    assert vec.num_samples[4] > 0 and loop.num_samples[4] > 0  # train split: client 4 has rows
    assert p.data.num_samples("test")[4] == 0


class _Branchy(torch.nn.Module):
    """A network vmap cannot run: its forward branches on a tensor's value."""

    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(12, 4)

    def forward(self, x):
        out = self.head(x)
        return out if out.sum() > 0 else -out


def test_personal_models_fall_back_to_the_loop_visibly(caplog, monkeypatch):
    from conftest import tiny_overrides
    from lightning.fabric import Fabric

    from flplat.engine.client import ClientTrainer
    from flplat.experiment import load_config, prepare

    cfg = load_config(None, tiny_overrides(**{"partition.num_clients": 8}))
    p = prepare(cfg)
    torch.manual_seed(0)
    tr = ClientTrainer(Fabric(accelerator="cpu", devices=1), _Branchy(), p.data.x, p.data.y,
                       cfg.federation.optimizer, 16, 1)
    ex = LocalExecutor(tr, p.data, 0)
    calls: dict[str, int] = {}
    _spy(monkeypatch, StackedScorer, "score", calls)
    w = tr.layout.flatten()
    req = [(k, w + 0.1 * k) for k in range(p.data.num_clients)]
    with caplog.at_level(logging.INFO, logger="flplat"):
        cols = ex.evaluate_columns(req, "test")
        ex.evaluate_columns(req, "test")
    lines = [r.getMessage() for r in caplog.records if "scoring personal models one by one" in r.getMessage()]
    assert len(lines) == 1 and "vmap cannot run the model" in lines[0]  # once per executor, naming why
    assert calls.get("score", 0) == 0
    loop = EvalColumns.from_results(ex.evaluate(req, "test"))
    for f in ("client", "correct", "num_samples", "loss_sum"):
        np.testing.assert_array_equal(getattr(cols, f), getattr(loop, f))


def test_eval_group_size_is_validated():
    from conftest import tiny_overrides

    from flplat.errors import ConfigError
    from flplat.experiment import load_config

    with pytest.raises(ConfigError, match="federation.eval_group_size"):
        load_config(None, tiny_overrides(**{"federation.eval_group_size": -1}))


@pytest.mark.parametrize("precision", ["bf16-mixed", "bf16-true"])
def test_16_bit_precision_keeps_the_vmap_path(precision):
    """The probe's tolerance follows the logits' dtype: bfloat16 rounding differences between kernels are no reason
    to score personal models one by one."""
    from conftest import tiny_overrides

    from flplat.experiment import load_config, prepare

    p = prepare(load_config(None, tiny_overrides(**{"fabric.precision": precision})))
    assert StackedScorer(p.trainer).reason() is None
