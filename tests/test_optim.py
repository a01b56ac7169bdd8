"""The client optimizers (flplat/engine/optim.py): the stacked functional optimizer and the per-client gradient scaler
against ``torch.optim`` (as :func:`make_optimizer` builds it) and ``torch.amp.GradScaler``, step by step."""

from __future__ import annotations

import pytest
import torch

from flplat.config import OPTIMIZERS
from flplat.engine.optim import FunctionalOptimizer, StackedGradScaler, make_optimizer

SHAPES = [(3, 4, 2), (3, 5)]  # two parameters of three clients
CASES = [("adam", 0, 0), ("adam", 0, 0.01), ("adamw", 0, 0.01), ("sgd", 0, 0), ("sgd", 0.9, 0.01)]


def _clients(gen):
    stacked = [torch.randn(s, generator=gen) for s in SHAPES]
    refs = [[s[k].clone().requires_grad_() for s in stacked] for k in range(3)]  # one model per client
    return stacked, refs


@pytest.mark.parametrize("name,momentum,wd", CASES, ids=[f"{n}-m{m}-wd{w}" for n, m, w in CASES])
@pytest.mark.parametrize("fused", [False, True], ids=["formulas", "fused"])
def test_functional_optimizer_is_torch_optim_step_by_step(name, momentum, wd, fused):
    """Each client's slice after every step equals its own ``make_optimizer`` optimizer (bit for bit with the
    spelled-out formulas, float rounding with the fused kernels); finished clients (g shrinks) get no update and no
    state change."""
    gen = torch.Generator().manual_seed(0)
    stacked, refs = _clients(gen)
    opts = [make_optimizer(name, r, 0.01, momentum, wd) for r in refs]
    opt = FunctionalOptimizer(name, stacked, 0.01, momentum, wd, fused=fused)
    tol = {"rtol": 0, "atol": 0} if not fused else {"rtol": 1e-6, "atol": 1e-7}
    for t in range(6):
        g = 3 if t < 2 else 2 if t < 4 else 1  # client 2 finishes after two steps, client 1 after four
        grads = [torch.randn(s, generator=gen) for s in SHAPES]
        before = [s[g:].clone() for s in stacked] + [s[g:].clone() for st in opt.state for s in st]
        opt.step([d[:g] for d in grads], g)
        for k in range(g):
            for r, d in zip(refs[k], grads):
                r.grad = d[k].clone()
            opts[k].step()
        for k in range(3):  # every client after every step
            for s, r in zip(stacked, refs[k]):
                torch.testing.assert_close(s[k], r.detach(), **tol)
        after = [s[g:] for s in stacked] + [s[g:] for st in opt.state for s in st]
        assert all(torch.equal(a, b) for a, b in zip(after, before))


def test_both_optimizers_know_the_configs_names():
    p = [torch.zeros(2, 3)]
    for name in OPTIMIZERS:
        make_optimizer(name, [torch.zeros(3, requires_grad=True)], 0.1, 0.0, 0.0)
        FunctionalOptimizer(name, p, 0.1, 0.0, 0.0)
    for build in (lambda: make_optimizer("rmsprop", p, 0.1, 0.0, 0.0),
                  lambda: FunctionalOptimizer("rmsprop", p, 0.1, 0.0, 0.0)):
        with pytest.raises(ValueError, match="unknown optimizer 'rmsprop'; choose one of adam, adamw, sgd"):
            build()


@pytest.mark.parametrize("name,momentum,wd", [("adam", 0, 0.01), ("adamw", 0, 0.01), ("sgd", 0.9, 0.01)],
                         ids=["adam", "adamw", "sgd"])
@pytest.mark.parametrize("fused", [False, True], ids=["formulas", "fused"])
def test_per_client_gradient_scaling_is_grad_scaler_and_torch_optim(name, momentum, wd, fused):
    """16-mixed: each client with its own ``GradScaler`` and optimizer (the loop) against one stacked scaler and
    optimizer. Infs in a client's gradients skip that client's step (Adam's step count then differs between
    clients) and back its scale off; clean steps grow it every ``growth_interval`` steps."""
    gen = torch.Generator().manual_seed(1)
    stacked, refs = _clients(gen)
    kw = {"init_scale": 2.0 ** 10, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2}
    scalers = [torch.amp.GradScaler("cpu", **kw) for _ in range(3)]
    opts = [make_optimizer(name, r, 0.01, momentum, wd) for r in refs]
    opt = FunctionalOptimizer(name, stacked, 0.01, momentum, wd, fused=fused)
    sc = StackedGradScaler(scalers[0], kw["init_scale"], 3, torch.device("cpu"))
    infs = {(0, 0), (1, 0), (2, 2), (1, 3), (0, 5)}  # (client, step): an inf in its gradient
    for t in range(7):
        g = 3 if t < 5 else 2
        grads = [torch.randn(s, generator=gen) for s in SHAPES]
        losses = torch.ones(g)
        scaled = sc.scale(losses)  # d(Σ_g scale_g · loss_g)/dθ_g = scale_g · dloss_g/dθ_g
        raw = [d[:g] * scaled.view(-1, *[1] * (d.dim() - 1)) for d in grads]
        for k, step in infs:
            if step == t and k < g:
                raw[0][k, 0] = float("inf")
        unscaled, found = sc.unscale(raw, g)
        opt.step(unscaled, g, skip=found)
        sc.update(found, g)
        for k in range(g):
            s = scalers[k]
            s.scale(torch.ones(()))  # (the scaler's scale is created on its first use)
            for r, d in zip(refs[k], raw):
                r.grad = d[k].clone()  # the same scaled gradient
            s.step(opts[k])
            s.update()
            assert sc.scales[k].item() == s.get_scale(), (t, k)
        assert found.tolist() == [(k, t) in infs for k in range(g)]
    for k in range(3):
        for s, r in zip(stacked, refs[k]):
            torch.testing.assert_close(s[k], r.detach(), rtol=1e-6, atol=1e-7)
    assert opt.skipped.tolist() == [2, 2, 1]
    if name != "sgd":
        assert [opts[k].state[refs[k][0]]["step"].item() for k in range(3)] == [5, 5, 4]


class _HostOps(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the operators that, on a GPU, move data between host and device: a tensor made from host data
    (``lift_fresh``: a host-to-device copy) and a value read back (``_local_scalar_dense``: ``.item()`` / ``bool()``,
    a device-to-host copy and a stream sync)."""

    NAMES = ("lift_fresh", "_local_scalar_dense", "is_nonzero")

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += any(n in str(func) for n in self.NAMES)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name,momentum,wd", [("adam", 0, 0.01), ("adamw", 0, 0.01), ("sgd", 0.9, 0.01)],
                         ids=["adam", "adamw", "sgd"])
@pytest.mark.parametrize("fused,scaled", [(True, False), (False, False), (True, True)],
                         ids=["fused", "formulas", "gradient-scaler"])
def test_functional_optimizer_steps_move_nothing_between_host_and_device(name, momentum, wd, fused, scaled):
    """The vectorised engine's steps on a GPU: no step makes a tensor from host data or reads one back, so the
    number of such operations does not grow with the number of steps (was: a step-count tensor per parameter per
    step for fused Adam, ``bool(skip.any())`` per step under a gradient scaler)."""
    gen = torch.Generator().manual_seed(2)

    def ops(steps: int) -> int:
        stacked, _ = _clients(gen)
        opt = FunctionalOptimizer(name, stacked, 0.01, momentum, wd, fused=fused)
        grads = [torch.randn(s, generator=gen) for s in SHAPES]
        skip = torch.tensor([False, True, False]) if scaled else None
        with _HostOps() as mode:
            for _ in range(steps):
                opt.step(grads, 3, skip)
        return mode.count

    assert ops(8) == ops(2)


@pytest.mark.parametrize("name,momentum,wd", CASES, ids=[f"{n}-m{m}-wd{w}" for n, m, w in CASES])
def test_the_loops_fused_optimizer_is_its_default_one_to_rounding(name, momentum, wd):
    """``make_optimizer(fused=True)`` (the per-client loop's choice on CUDA) takes the same steps as the default
    single-tensor optimizer, to float rounding."""
    gen = torch.Generator().manual_seed(3)
    plain = _clients(gen)[1][0]  # one client's parameters
    fused = [p.detach().clone().requires_grad_() for p in plain]
    opts = [make_optimizer(name, plain, 0.01, momentum, wd), make_optimizer(name, fused, 0.01, momentum, wd, True)]
    assert opts[1].defaults["fused"] and not opts[0].defaults.get("fused")
    for _ in range(5):
        grads = [torch.randn(p.shape, generator=gen) for p in plain]
        for params, opt in zip((plain, fused), opts):
            for p, d in zip(params, grads):
                p.grad = d.clone()
            opt.step()
    for a, b in zip(plain, fused):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
