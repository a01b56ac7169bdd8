"""Vectorised clients (flplat/engine/vectorized.py) against the per-client loop they replace."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import platform
import sys

import numpy as np
import pytest
import torch
from conftest import tiny_overrides
from lightning.fabric import Fabric
from lightning.fabric.plugins.precision import MixedPrecision

from flplat.algorithms.apfl import PersonalMixture, StackedMixture
from flplat.algorithms.dapfl import ProximalStep
from flplat.algorithms.pfedme import MoreauEnvelope
from flplat.api import ClientPlan, LocalHook, ProximalTerm
from flplat.engine.client import ClientTrainer, batch_bounds
from flplat.engine.executor import LocalExecutor
from flplat.engine.optim import FunctionalOptimizer
from flplat.engine.vectorized import VectorizedTrainer
from flplat.errors import ConfigError
from flplat.experiment import load_config, prepare, run

CNN = {"data.name": "digits", "partition.num_clients": 24, "model.name": "fmnist_cnn", "model.channels": "[4,8]",
       "model.dense": 16, "federation.batch_size": 32}
SGD = {"federation.optimizer.name": "sgd", "federation.optimizer.lr": 0.05, "federation.optimizer.momentum": 0.9,
       "federation.optimizer.weight_decay": 1e-3}


def _prepare(**extra):
    over = tiny_overrides(**{"federation.local_epochs": 2, **extra})
    if extra.get("model.name", "mlp") != "mlp":
        over = [o for o in over if not o.startswith("model.hidden")]
    return prepare(load_config(None, over))


def _jobs(p, clients=range(4), **plan):
    """Clients of different sizes, each from its own start weights; client 2 runs one more epoch."""
    jobs = []
    for k in clients:
        kw = {"epochs": 3} if k == 2 else {}
        jobs.append((k, ClientPlan(weights=p.init_weights + 0.01 * k, **{**kw, **plan}), p.data.indices(k, "train"),
                     100 + k))
    assert len({len(j[2]) for j in jobs}) == len(jobs)  # different data sizes
    return jobs


def _assert_match(vec, loop):
    for a, b in zip(vec, loop):
        assert (a.client, a.num_samples, a.num_steps) == (b.client, b.num_samples, b.num_steps)
        torch.testing.assert_close(a.weights, b.weights, rtol=1e-4, atol=1e-6)
        assert a.train_loss == pytest.approx(b.train_loss, rel=1e-5)


@pytest.mark.parametrize("model", [{}, CNN], ids=["mlp", "fmnist_cnn"])
@pytest.mark.parametrize("opt", [{}, SGD], ids=["adam", "sgd_momentum"])
def test_matches_the_per_client_loop(model, opt):
    p = _prepare(**model, **opt)
    jobs = _jobs(p)
    vt = VectorizedTrainer(p.trainer)
    assert vt.model_reason is None
    vec = vt.train(jobs)
    _assert_match(vec, [p.trainer.train(*j) for j in jobs])
    assert vec[2].num_steps > max(r.num_steps for r in vec[:2])  # ragged: clients finish at different steps


def test_adamw_and_small_groups_match():
    p = _prepare(**{"federation.optimizer.name": "adamw", "federation.optimizer.weight_decay": 0.1})
    jobs = _jobs(p)
    _assert_match(VectorizedTrainer(p.trainer, group_size=3).train(jobs), [p.trainer.train(*j) for j in jobs])


def test_fedprox_hook_with_per_client_centres_matches():
    p = _prepare()
    jobs = [(k, ClientPlan(weights=w.weights, hooks=(ProximalTerm(p.init_weights * (1 + k), 0.5),)), i, s)
            for k, w, i, s in _jobs(p)]
    vt = VectorizedTrainer(p.trainer)
    assert all(vt.reason(plan) is None for _, plan, _, _ in jobs)
    _assert_match(vt.train(jobs), [p.trainer.train(*j) for j in jobs])


def test_trainable_head_matches_and_freezes_the_body():
    p = _prepare()
    jobs = _jobs(p, trainable="head")
    vec = VectorizedTrainer(p.trainer).train(jobs)
    _assert_match(vec, [p.trainer.train(*j) for j in jobs])
    body = ~p.trainer.layout.mask("head.")
    for r, (_, plan, _, _) in zip(vec, jobs):
        assert torch.equal(r.weights[body], plan.weights[body])


class AfterStep(LocalHook):
    def after_step(self, ctx):
        return None


class LossOnly(LocalHook):
    def loss(self, ctx):
        return torch.zeros(())


def test_unsupported_hooks_fall_back_per_client_and_log_once(caplog):
    p = _prepare()
    ex = LocalExecutor(p.trainer, p.data, seed=0, vectorize=True)
    hooks = [(), (AfterStep(),), (LossOnly(),), ()]
    plans = [(k, ClientPlan(weights=p.init_weights, hooks=h)) for k, h in enumerate(hooks)]
    assert [ex.vectorized.reason(pl) is None for _, pl in plans] == [True, False, False, True]
    with caplog.at_level(logging.WARNING, logger="flplat"):
        got = ex.train(plans, round=1)
        ex.train(plans, round=2)
    assert len(caplog.records) == 1
    assert "hook AfterStep declares neither vectorizes nor a Stacked form" in caplog.records[0].getMessage()
    _assert_match(got, LocalExecutor(p.trainer, p.data, seed=0).train(plans, round=1))


def test_plans_with_several_steps_per_batch_match_the_loop():
    """``ClientPlan.batch_steps`` (pFedMe's inner solve): each batch is used for that many consecutive steps, as the
    loop does; clients with 1 and 3 steps per batch train in groups of their own."""
    p = _prepare()
    jobs = [(k, ClientPlan(weights=w.weights, epochs=w.epochs, batch_steps=3 if k % 2 else 1,
                           hooks=(ProximalTerm(p.init_weights, 0.5),)), i, s) for k, w, i, s in _jobs(p)]
    vt = VectorizedTrainer(p.trainer)
    assert all(vt.reason(plan) is None for _, plan, _, _ in jobs)
    vec = vt.train(jobs)
    _assert_match(vec, [p.trainer.train(*j) for j in jobs])
    assert vec[1].num_steps == 3 * len(batch_bounds(len(jobs[1][2]), p.trainer.batch_size)) * 2  # 2 local epochs
    assert "batch_steps" in vt.reason(ClientPlan(weights=p.init_weights, batch_steps=0))


def _apfl_jobs(p, alphas, **settings):
    """APFL clients with their own local models v and mixing weights α (client 2 runs one more epoch)."""
    cfg = {"v_lr": 0.05, "alpha_lr": 0.05, "adaptive": True, "v_optimizer": "sgd", "v_momentum": 0.9, **settings}
    return [(k, ClientPlan(weights=w.weights, epochs=w.epochs,
                           hooks=(PersonalMixture(p.init_weights - 0.02 * k, a, **cfg),)), i, s)
            for (k, w, i, s), a in zip(_jobs(p), alphas)]


def _assert_reports_match(vec, loop, keys):
    for a, b in zip(vec, loop):
        assert sorted(a.extra) == sorted(b.extra) == sorted(keys)
        for key in keys:
            if isinstance(b.extra[key], torch.Tensor):
                torch.testing.assert_close(a.extra[key], b.extra[key], rtol=1e-4, atol=1e-6)
            else:
                assert a.extra[key] == pytest.approx(b.extra[key], rel=1e-5, abs=1e-8), key


@pytest.mark.parametrize("settings", [{}, {"mix_with": "after"}, {"v_optimizer": "adam", "v_lr": 0.01},
                                      {"adaptive": False}],
                         ids=["paper", "mix_after", "adam", "fixed_alpha"])
def test_apfl_stacked_mixture_matches_the_loop_per_client(settings):
    """APFL's v- and α-steps after every step (:class:`StackedMixture`): weights, v and α as the loop's, for clients
    with their own v, α and number of steps; α stays in [0, 1] and moves when adaptive."""
    p = _prepare(**SGD)
    jobs = _apfl_jobs(p, [0.5, 0.0, 0.25, 1.0], **settings)
    vt = VectorizedTrainer(p.trainer)
    assert all(vt.reason(plan) is None for _, plan, _, _ in jobs)
    vec = vt.train(jobs)
    loop = [p.trainer.train(*j) for j in _apfl_jobs(p, [0.5, 0.0, 0.25, 1.0], **settings)]
    _assert_match(vec, loop)
    _assert_reports_match(vec, loop, ["v", "alpha"])
    alphas = [r.extra["alpha"] for r in vec]
    assert all(0 <= a <= 1 for a in alphas)
    assert (alphas != [0.5, 0.0, 0.25, 1.0]) == settings.get("adaptive", True)
    assert not torch.equal(vec[0].extra["v"], jobs[0][1].hooks[0].v0)  # v trained


def test_apfl_with_alpha_zero_and_fixed_leaves_v_untouched():
    p = _prepare()
    vec = VectorizedTrainer(p.trainer).train(_apfl_jobs(p, [0.0] * 4, adaptive=False))
    for r, (_, plan, _, _) in zip(vec, _apfl_jobs(p, [0.0] * 4, adaptive=False)):
        assert torch.equal(r.extra["v"], plan.hooks[0].v0) and r.extra["alpha"] == 0.0  # the MLP has no buffers


def test_pfedme_stacked_envelope_matches_the_loop():
    """pFedMe's proximal term around w and w's move after every K-th step (:class:`StackedEnvelope`), K steps on
    each batch: weights and the local model w as the loop's."""
    p = _prepare()

    def jobs():
        return [(k, ClientPlan(weights=w.weights, epochs=w.epochs, lr=0.05, batch_steps=3,
                               optimizer={"name": "sgd", "momentum": 0.0},
                               hooks=(MoreauEnvelope(2.0 + k, 0.1, 3),)), i, s) for k, w, i, s in _jobs(p)]

    with pytest.raises(ValueError, match="share pFedMe"):  # one group: the hooks' settings must agree
        VectorizedTrainer(p.trainer).train(jobs())
    same = [(k, dataclasses.replace(plan, hooks=(MoreauEnvelope(5.0, 0.1, 3),)), i, s) for k, plan, i, s in jobs()]
    vec = VectorizedTrainer(p.trainer).train(same)
    loop = [p.trainer.train(k, dataclasses.replace(plan, hooks=(MoreauEnvelope(5.0, 0.1, 3),)), i, s)
            for k, plan, i, s in jobs()]
    _assert_match(vec, loop)
    _assert_reports_match(vec, loop, ["local"])


def test_dapfl_post_step_pull_writes_the_stacked_parameters_as_the_loop():
    """DA-PFL's ``pull=step`` (:class:`StackedPull`) changes the trained parameters after every step, each client
    towards its own centre; with momentum the pulled parameters feed the next step, as in the loop."""
    p = _prepare(**SGD)

    def jobs():
        return [(k, ClientPlan(weights=w.weights, epochs=w.epochs,
                               hooks=(ProximalStep(p.init_weights * (1 + k), 2.0),)), i, s) for k, w, i, s in _jobs(p)]

    vec = VectorizedTrainer(p.trainer).train(jobs())
    loop = [p.trainer.train(*j) for j in jobs()]
    _assert_match(vec, loop)
    plain = VectorizedTrainer(p.trainer).train(_jobs(p))
    assert not torch.allclose(vec[0].weights, plain[0].weights)  # the pull did something


def test_a_hook_that_redefines_what_its_stacked_form_does_falls_back():
    class Tweaked(PersonalMixture):  # a change of after_step: the inherited stacked form would not do it
        def after_step(self, ctx):
            return None

    class Renamed(PersonalMixture):  # no change of behaviour: the stacked form still applies
        pass

    assert PersonalMixture.Stacked is StackedMixture and Renamed.Stacked is StackedMixture
    assert Tweaked.Stacked is None and not Tweaked.vectorizes
    p = _prepare()
    vt = VectorizedTrainer(p.trainer)
    hook = Tweaked(p.init_weights, 0.5, 0.1, 0.1, True)
    assert "Tweaked declares neither" in vt.reason(ClientPlan(weights=p.init_weights, hooks=(hook,)))


def test_plans_with_their_own_optimizer_are_grouped_by_it_and_match():
    """``ClientPlan.optimizer`` (and ``lr``) resolve as in the loop (:func:`resolve_plan`): such clients train in
    a group of their own optimizer."""
    p = _prepare()
    own = [{}, {"optimizer": {"name": "sgd", "momentum": 0.9}}, {"optimizer": {"name": "sgd", "momentum": 0.9}},
           {"optimizer": {"name": "adamw", "weight_decay": 0.05}, "lr": 0.01}]
    jobs = [(k, ClientPlan(weights=w.weights, epochs=w.epochs, **own[k]), i, s) for k, w, i, s in _jobs(p)]
    vt = VectorizedTrainer(p.trainer)
    assert all(vt.reason(plan) is None for _, plan, _, _ in jobs)
    groups = []
    train_group = vt._train_group
    vt._train_group = lambda js, st: groups.append([j[0] for j in js]) or train_group(js, st)
    _assert_match(vt.train(jobs), [p.trainer.train(*j) for j in jobs])
    assert sorted(map(sorted, groups)) == [[0], [1, 2], [3]]


# batch norm: cifar_cnn (Conv-ReLU-BN blocks, Linear-ReLU-BatchNorm1d) and ResNet-9 (Conv-BN-ReLU, residuals)
BN_CNN = {"data.name": "digits", "partition.num_clients": 24, "model.name": "cifar_cnn", "model.widths": "[4]",
          "model.block_dropout": "[0.0]", "model.dense": 8, "model.dense_dropout": 0.0}
RESNET9 = {"data.name": "digits", "partition.num_clients": 24, "model.name": "resnet9", "model.widths": "[4,4,8,8]"}


@pytest.mark.parametrize("model", [BN_CNN, RESNET9], ids=["cifar_cnn", "resnet9"])
def test_batch_norm_models_match_the_loop_with_per_client_statistics(model):
    """Each client keeps its own running statistics (returned in its flat weights, as the loop's), and a step padded
    to a wider client's batch normalises with the client's real samples only.

    In float64 (``64-true``): both paths then give the same float32 weights. In float32 these tiny networks are
    chaotic where a ReLU channel dies right before batch norm (its variance ~0 divides rounding by sqrt(eps)): a
    1e-7 relative change of the start weights moves the loop's own result by up to 6e-4, and the two paths differ by
    less than that. Adam would add its own noise: it turns the rounding of a gradient that is zero in exact
    arithmetic (a bias right before batch norm: ResNet-9's convolutions) into steps of ±lr, in either path."""
    p = _prepare(**model, **SGD, **{"federation.batch_size": 12, "fabric.precision": "64-true"})
    jobs = _jobs(p)
    vt = VectorizedTrainer(p.trainer)
    assert vt.model_reason is None and vt.buffer_names
    masks, with_stats = [], vt.forward.with_stats
    vt.forward.with_stats = lambda ts, x, mask=None: masks.append(mask is not None) or with_stats(ts, x, mask)
    vec = vt.train(jobs)
    assert any(masks) and not all(masks)  # ragged clients: padded steps (masked statistics) and full ones
    _assert_match(vec, [p.trainer.train(*j) for j in jobs])
    stats = ~p.trainer.layout.mask(params_only=True)
    moved = [r.weights[stats] for r in vec]
    assert all(not torch.equal(m, plan.weights[stats]) for m, (_, plan, _, _) in zip(moved, jobs))
    assert not torch.equal(moved[0], moved[1])


def test_multi_label_data_train_vectorised_with_binary_cross_entropy(tmp_path):
    """CheXpert-style multi-label targets: the vectorised step's loss is task_loss's BCE, as the loop's."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(240, 12)).astype(np.float32)
    np.savez(tmp_path / "ml.npz", x=x, y=(x[:, :3] + 0.3 * rng.normal(size=(240, 3)) > 0).astype(np.int64))
    p = _prepare(**{"data.name": "npz", "data.path": str(tmp_path / "ml.npz"), "partition.name": "iid"})
    assert p.trainer.y.dim() == 2
    jobs = [(k, ClientPlan(weights=p.init_weights + 0.01 * k, epochs=1 + (k == 2)),
             p.data.indices(k, "train")[:n], 100 + k) for k, n in zip(range(4), (33, 20, 27, 18))]
    vt = VectorizedTrainer(p.trainer)
    assert vt.model_reason is None
    vec = vt.train(jobs)
    _assert_match(vec, [p.trainer.train(*j) for j in jobs])
    assert all(0.3 < r.train_loss < 1.0 for r in vec)  # BCE over 3 labels (cross-entropy would not even run)


def test_dropout_runs_and_is_deterministic():
    p = _prepare(**{"model.dropout": 0.5})
    jobs = _jobs(p)
    a, b = VectorizedTrainer(p.trainer).train(jobs), VectorizedTrainer(p.trainer).train(jobs)
    for x, y in zip(a, b):
        assert torch.equal(x.weights, y.weights) and np.isfinite(x.train_loss)


# every registered algorithm's plans trained vectorised against the per-client loop (or falling back with a logged
# reason): the `vectorize` property of `flplat check`, run registry-wide by test_algorithms.py::test_conformance


@pytest.mark.parametrize("algorithm", ["fedavg", "fedprox", "ditto", "fedrep", "apfl", "pfedme",
                                       "pfedme algorithm.inner_batch=fresh", "dapfl algorithm.pull=step"])
def test_whole_run_matches_with_vectorize_on(algorithm, caplog):
    name, *more = algorithm.split()
    hist = {}
    for v in ("false", "true"):
        cfg = load_config(None, tiny_overrides(**{"algorithm.name": name, "federation.rounds": 3,
                                                  "federation.vectorize": v, "federation.eval_every": 3,
                                                  **dict(m.split("=") for m in more)}))
        with caplog.at_level(logging.WARNING, logger="flplat"):
            hist[v] = run(cfg, progress=False)[0].history
    assert not [r for r in caplog.records if "per-client loop" in r.getMessage()]  # every client ran vectorised
    for a, b in zip(hist["false"], hist["true"]):
        for k in a.keys() - {"round_time_s"}:
            assert a[k] == pytest.approx(b[k], rel=1e-4, abs=1e-6), k


def test_vectorize_group_is_validated():
    with pytest.raises(ConfigError, match="federation.vectorize_group"):
        load_config(None, tiny_overrides(**{"federation.vectorize_group": -1}))


def test_steps_compute_only_the_columns_of_the_widest_live_batch():
    # a 33-sample client (its single-sample tail merged: one batch of 33), a 64-sample one (32, 32) and a 70-sample
    # one (32, 32, 6): the group pads to 33, but step 2 needs 32 columns and step 3 only 6
    p = _prepare(**{"federation.local_epochs": 1, "federation.batch_size": 32})
    jobs = [(k, ClientPlan(weights=p.init_weights + 0.01 * k), p.data.indices(k, "train")[:n], 100 + k)
            for k, n in zip(range(3), (33, 64, 70))]
    vt = VectorizedTrainer(p.trainer)
    seen, with_stats = [], vt.forward.with_stats
    vt.forward.with_stats = lambda ts, x, mask=None: (seen.append(tuple(x.shape[:2])), with_stats(ts, x, mask))[1]
    vec = vt.train(jobs)
    assert seen == [(3, 33), (2, 32), (1, 6)]  # (live clients, columns) per step
    _assert_match(vec, [p.trainer.train(*j) for j in jobs])


@pytest.mark.parametrize("shared", [True, False], ids=["one_start_model", "own_start_models"])
def test_start_weights_are_stacked_once_in_the_gradient_layout(shared):
    p = _prepare()
    w = [p.init_weights if shared else p.init_weights + 0.01 * k for k in range(3)]
    jobs = [(k, ClientPlan(weights=w[k]), p.data.indices(k, "train"), 100 + k) for k in range(3)]
    vt = VectorizedTrainer(p.trainer)
    unperm = [tuple(sorted(range(len(o)), key=o.__getitem__)) for o in vt.orders]
    stacked = vt._stack_start(jobs, unperm)
    for (a, b, shape), t, u in zip(vt.slots, stacked, unperm):
        assert t.is_contiguous()
        for k in range(3):
            assert torch.equal(t.permute(u)[k], w[k][a:b].view(shape))
    if shared:  # FedAvg's plans: one global model for every client
        _assert_match(vt.train(jobs), [p.trainer.train(*j) for j in jobs])


def test_kept_buffers_are_reused_and_start_clean():
    p = _prepare()
    jobs = _jobs(p)
    vt = VectorizedTrainer(p.trainer)  # federation.vectorize_keep_mib's default: these few clients fit
    first = vt.train(jobs)
    ptrs = [b.data_ptr() for bufs in vt._kept for b in bufs]
    second = vt.train(jobs)  # on the kept buffers, which still hold the first call's parameters and Adam moments
    assert [b.data_ptr() for bufs in vt._kept for b in bufs] == ptrs
    for a, b in zip(first, second):  # the first call's results are not views of the reused buffers either
        assert torch.equal(a.weights, b.weights) and a.train_loss == b.train_loss
    _assert_match(second, [p.trainer.train(*j) for j in jobs])
    off = VectorizedTrainer(p.trainer, keep_mib=0)
    _assert_match(off.train(jobs), second)
    assert off._kept is None


def test_vectorize_keep_mib_is_validated():
    with pytest.raises(ConfigError, match="federation.vectorize_keep_mib"):
        load_config(None, tiny_overrides(**{"federation.vectorize_keep_mib": -1}))


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_keep_mib_lets_the_allocator_keep_freed_memory(monkeypatch):
    import flplat.engine.memory as memory

    calls = []
    monkeypatch.setattr(memory, "_mallopt", lambda param, value: calls.append((param, value)) or True)
    monkeypatch.setattr(memory, "_retained_mib", 0)
    p = _prepare()
    VectorizedTrainer(p.trainer, keep_mib=0)
    assert calls == []  # federation.vectorize_keep_mib=0: the allocator's defaults stay
    VectorizedTrainer(p.trainer, keep_mib=64)
    assert calls == [(memory.M_MMAP_THRESHOLD, 32 << 20), (memory.M_TRIM_THRESHOLD, 64 << 20)]
    VectorizedTrainer(p.trainer, keep_mib=32)  # already retaining more: nothing to change
    assert len(calls) == 2


# ---- 16-mixed: the gradient scaler per client ---------------------------------------------------------------------

class _ScaledFloat32(MixedPrecision):
    """``16-mixed``'s gradient scaling (Fabric's own plugin and scaler) without its float16 autocast: on CPU
    ``vmap``'s matmuls escape autocast, so only in float32 do the two paths compute the same numbers -- and overflow
    at the same steps, which a scale near float32's range provokes."""

    def forward_context(self):
        return contextlib.nullcontext()

    def convert_input(self, data):
        return data


def _scaled_trainer(p, **scaler) -> ClientTrainer:
    """A trainer whose gradients overflow float32 at scales near 2^127 (inputs × 30: losses and gradients of tens),
    some steps of some clients more than others."""
    plugin = _ScaledFloat32("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", **scaler))
    f = p.cfg.federation
    return ClientTrainer(Fabric(accelerator="cpu", devices=1, plugins=[plugin]), copy.deepcopy(p.trainer.net),
                         p.data.x * 30, p.data.y, f.optimizer, f.batch_size, f.local_epochs)


@pytest.mark.parametrize("opt", [{}, {**SGD, "federation.optimizer.lr": 0.002}], ids=["adam", "sgd_momentum"])
def test_gradient_scaling_matches_the_loop_with_skipped_steps_per_client(opt):
    """Each client scales its loss by its own scale, skips the steps whose gradients overflow (float32's range
    here: a scale of 2^124), backs off and grows (every 2 clean steps) as Fabric's GradScaler does in the loop; its
    Adam step count only counts the steps it took."""
    p = _prepare(**opt)
    tr = _scaled_trainer(p, init_scale=2.0 ** 124, growth_interval=2)
    jobs = _jobs(p)
    vt = VectorizedTrainer(tr)
    assert vt.model_reason is None and vt.scaler is tr.scaler
    skipped, step = [], FunctionalOptimizer.step
    FunctionalOptimizer.step = lambda self, grads, g, skip=None: skipped.append(
        None if skip is None else skip.tolist()) or step(self, grads, g, skip)
    try:
        vec = vt.train(jobs)
    finally:
        FunctionalOptimizer.step = step
    assert any(s and any(s) and not all(s) for s in skipped)  # some clients skip a step that others take
    loop = [tr.train(*j) for j in jobs]
    _assert_match(vec, loop)
    assert [r.loss_scale for r in vec] == [r.loss_scale for r in loop]
    assert len({r.loss_scale for r in vec}) > 1  # each client ends with its own scale


def test_stacked_hooks_step_after_skipped_steps_as_the_loop():
    """Under gradient scaling the loop runs a hook's ``after_step`` also after a step the scaler skipped: APFL's v- and
    α-steps (:class:`StackedMixture`) match it client by client."""
    p = _prepare()
    tr = _scaled_trainer(p, init_scale=2.0 ** 124, growth_interval=2)
    vec = VectorizedTrainer(tr).train(_apfl_jobs(p, [0.5, 0.0, 0.25, 1.0], v_lr=0.002, alpha_lr=0.001))
    loop = [tr.train(*j) for j in _apfl_jobs(p, [0.5, 0.0, 0.25, 1.0], v_lr=0.002, alpha_lr=0.001)]
    _assert_match(vec, loop)
    _assert_reports_match(vec, loop, ["v", "alpha"])
    assert len({r.loss_scale for r in vec}) > 1  # steps were skipped, some clients more than others


def test_gradient_scaler_state_does_not_carry_from_one_client_to_the_next():
    """16-mixed in the loop: a client's result does not depend on the clients trained before it (one scaler carried
    over did), and the executor hands the next call the smallest scale its clients ended with."""
    p = _prepare()
    tr = _scaled_trainer(p, init_scale=2.0 ** 124, growth_interval=2)
    a, b = _jobs(p)[:2]
    first_b = tr.train(*b)
    tr.train(*a)
    second_b = tr.train(*b)
    assert torch.equal(first_b.weights, second_b.weights) and first_b.loss_scale == second_b.loss_scale
    ex = LocalExecutor(tr, p.data, seed=0)
    results = ex.train([(0, ClientPlan(weights=p.init_weights)), (1, ClientPlan(weights=p.init_weights))], round=1)
    assert tr.loss_scale == min(r.loss_scale for r in results) < 2.0 ** 124


# ---- plans with several local phases (Ditto, FedRep): phase by phase, as the loop runs them
def test_ditto_shaped_phases_match_the_loop():
    """Each client's own start weights with a proximal pull to a shared centre, then a phase from one weight vector
    shared by every client (Ditto: the personal model, then the global one)."""
    p = _prepare()
    centre = p.init_weights * 0.5
    jobs = [(k, ClientPlan(weights=w.weights, epochs=w.epochs, hooks=(ProximalTerm(centre, 0.3),),
                           phases=(ClientPlan(weights=p.init_weights),)), i, s) for k, w, i, s in _jobs(p)]
    vt = VectorizedTrainer(p.trainer)
    assert all(vt.reason(plan) is None for _, plan, _, _ in jobs)
    vec, loop = vt.train(jobs), [p.trainer.train(*j) for j in jobs]
    _assert_match(vec, loop)
    for a, b in zip(vec, loop):
        assert len(a.extra["phase_weights"]) == 1
        torch.testing.assert_close(a.extra["phase_weights"][0], b.extra["phase_weights"][0], rtol=1e-4, atol=1e-6)
        assert not torch.equal(a.extra["phase_weights"][0], a.weights)


def test_fedrep_shaped_phases_continue_from_the_previous_phase_and_match():
    """Head epochs, then body epochs from the weights the head phase ended with (``weights=None``), one client with
    a phase on other pool rows and one with a second further phase."""
    p = _prepare()
    jobs = []
    for k, w, i, s in _jobs(p):
        phases = [ClientPlan(weights=None, trainable="features", epochs=1 + k % 2,
                             indices=p.data.indices(0, "train") if k == 3 else None)]
        if k == 1:
            phases.append(ClientPlan(weights=None, trainable="head", lr=0.01))
        jobs.append((k, ClientPlan(weights=w.weights, trainable="head", epochs=w.epochs, phases=tuple(phases)), i, s))
    vt = VectorizedTrainer(p.trainer)
    assert all(vt.reason(plan) is None for _, plan, _, _ in jobs)
    vec, loop = vt.train(jobs), [p.trainer.train(*j) for j in jobs]
    _assert_match(vec, loop)
    assert [len(r.extra["phase_weights"]) for r in vec] == [1, 2, 1, 1]
    for a, b in zip(vec, loop):
        for x, y in zip(a.extra["phase_weights"], b.extra["phase_weights"]):
            torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-6)


def test_a_phase_the_vectorised_trainer_cannot_run_sends_the_whole_plan_to_the_loop():
    p = _prepare()
    vt = VectorizedTrainer(p.trainer)
    w = p.init_weights
    assert "AfterStep" in vt.reason(ClientPlan(weights=w, phases=(ClientPlan(weights=None, hooks=(AfterStep(),)),)))
    assert "batch_steps" in vt.reason(ClientPlan(weights=w, phases=(ClientPlan(weights=None, batch_steps=0),)))
    assert "its own" in vt.reason(ClientPlan(weights=w, phases=(ClientPlan(weights=None, phases=(
        ClientPlan(weights=None),)),)))
