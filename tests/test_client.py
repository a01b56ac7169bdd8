"""The Fabric client trainer: reuse across clients, order independence, precisions, hooks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flplat.api import ClientPlan, LocalHook
from flplat.experiment import prepare, run


def test_one_trainer_for_all_clients_and_order_independence(tiny_cfg):
    cfg = tiny_cfg()
    p = prepare(cfg)
    tr, w0 = p.trainer, p.init_weights
    idx = [p.data.indices(k, "train") for k in range(2)]
    net_id = id(tr.net)
    tr.train(0, ClientPlan(weights=w0), idx[0], seed=11)
    after_other = tr.train(1, ClientPlan(weights=w0), idx[1], seed=12)
    assert id(tr.net) == net_id and len(tr._optimizers) == 1  # nothing rebuilt per client
    fresh = prepare(cfg).trainer.train(1, ClientPlan(weights=w0), idx[1], seed=12)
    assert torch.equal(after_other.weights, fresh.weights)  # optimizer state does not leak between clients
    assert after_other.num_samples == len(idx[1]) and after_other.num_steps > 0


def test_train_does_not_modify_the_plan_weights(tiny_cfg):
    p = prepare(tiny_cfg())
    w0 = p.init_weights.clone()
    p.trainer.train(0, ClientPlan(weights=p.init_weights), p.data.indices(0, "train"), seed=1)
    assert torch.equal(p.init_weights, w0)


class Counting(LocalHook):
    def __init__(self):
        self.losses = self.steps = self.setups = 0

    def setup(self, ctx):
        self.setups += 1

    def loss(self, ctx):
        self.losses += 1
        return torch.zeros((), device=ctx.params[0].device)

    def after_step(self, ctx):
        self.steps += 1


def test_hooks_are_called_every_step(tiny_cfg):
    p = prepare(tiny_cfg())
    h = Counting()
    r = p.trainer.train(0, ClientPlan(weights=p.init_weights, hooks=(h,), epochs=2), p.data.indices(0, "train"), 3)
    assert h.setups == 1 and h.losses == h.steps == r.num_steps


def test_trainable_head_only_freezes_the_body(tiny_cfg):
    p = prepare(tiny_cfg())
    w0 = p.init_weights
    r = p.trainer.train(0, ClientPlan(weights=w0, trainable="head"), p.data.indices(0, "train"), seed=3)
    head = p.trainer.layout.mask("head.")
    assert torch.equal(r.weights[~head], w0[~head]) and not torch.equal(r.weights[head], w0[head])
    assert all(q.requires_grad for q in p.trainer.params)  # restored afterwards


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", "bf16-true", "64-true"])
def test_precisions_run_on_cpu(tiny_cfg, precision):
    s, _ = run(tiny_cfg(**{"fabric.precision": precision}), progress=False)
    assert np.isfinite(s.metrics["train_loss"]) and 0 <= s.metrics["global_accuracy"] <= 1


def test_compute_runs_a_client_function_on_the_requested_split_and_weights(tiny_cfg):
    from flplat.engine.executor import LocalExecutor
    from flplat.experiment import prepare

    p = prepare(tiny_cfg())
    ex = LocalExecutor(p.trainer, p.data, seed=3)
    w0 = p.init_weights
    zeros = torch.zeros_like(w0)

    def stats(view):
        logits = view.net(view.x)
        return {"n": len(view.y), "labels": torch.bincount(view.y, minlength=4), "logit_sum": logits.sum(),
                "seed": view.seed}

    out = ex.compute([(0, w0), (1, zeros), (0, None)], stats, split="test", seed=7)
    assert [o["n"] for o in out] == [len(p.data.indices(0, "test")), len(p.data.indices(1, "test")),
                                    len(p.data.indices(0, "test"))]
    assert torch.equal(out[0]["labels"], torch.as_tensor(p.data.label_counts("test")[0]))
    assert float(out[1]["logit_sum"]) == 0.0  # all-zero weights give zero logits
    assert float(out[2]["logit_sum"]) == 0.0  # None keeps the weights already loaded
    assert out[0]["seed"] == out[2]["seed"] != out[1]["seed"]
    assert out[0]["labels"].device.type == "cpu"


def test_evaluating_every_client_reads_one_model_at_a_time(tiny_cfg):
    """Personalised methods at 10,000 clients: evaluation must not hold every client's model at once."""
    import gc
    import weakref

    from flplat.engine.executor import LazyRequests, LocalExecutor
    from flplat.experiment import prepare

    p = prepare(tiny_cfg())
    ex = LocalExecutor(p.trainer, p.data, seed=0)
    refs, alive = [], []

    def weights(k):
        gc.collect()
        alive.append(sum(r() is not None for r in refs))
        w = p.init_weights.clone() * (1 + k)
        refs.append(weakref.ref(w))
        return w

    reqs = LazyRequests(range(p.data.num_clients), weights)
    assert len(reqs) == p.data.num_clients and reqs.clients == list(range(p.data.num_clients))
    res = ex.evaluate(reqs, "test")
    assert [r.client for r in res] == list(range(p.data.num_clients))
    assert max(alive) <= 1  # at most the previous client's model is still referenced when the next is made
