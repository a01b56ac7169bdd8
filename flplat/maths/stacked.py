"""A stack of models of one architecture run at once: one ``vmap`` over ``functional_call``, and one probe.

Several models that share a network's architecture but not its weights -- G clients trained together
(:mod:`flplat.engine.vectorized`), G personal models scored together (:mod:`flplat.engine.batched_eval`), the M
candidate models of IFCA, FeSEM, FedEM, FedRC and FedDrift on one client's data (:mod:`flplat.blocks.multimodel`)
-- are run as one batched call: the models' tensors are stacked ``(G, ...)`` and ``torch.func.vmap`` maps
``functional_call`` of the shared network over them, so a linear layer becomes one batched matmul. This module is the
one place that builds that call (:class:`StackedForward`) and the one probe that says whether a network can be run
this way (:func:`probe`); it sits below the engine and the algorithms, which both import it.

Batch norm. In evaluation mode it reads each model's running statistics from the stacked tensors. In training mode
(and whenever a layer has no running statistics) it normalises with the statistics of each model's own batch, and a
batch may be padded to the widest one of the stack: padded rows must not count. Each ``BatchNorm1d/2d/3d`` layer
therefore runs, during a stacked call, a batch norm that takes a per-row mask: the mean and the biased variance over
the real rows only (padded rows are normalised with them, and their outputs are masked out of the loss by the
caller), and the updated running statistics (``momentum``-weighted, the unbiased variance over the real rows, as
``F.batch_norm`` updates them) are returned per model instead of being written in place -- the caller keeps them
with the model's other tensors. Without a mask (no padding at that step) the layer is ``F.batch_norm`` itself, and
only the running statistics are computed beside it. ``num_batches_tracked`` is not advanced (it is read only with
``momentum=None``, which :func:`stack_reason` turns away, as it does other normalisation layers that keep running
statistics).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


def stack_reason(net: nn.Module) -> str | None:
    """Why ``net`` cannot be trained as a stack (a layer whose state the stack cannot keep per model), or None."""
    for name, m in net.named_modules():
        if type(m) in _BATCH_NORMS and m.track_running_stats and m.momentum is None:
            return (f"the model's {type(m).__name__} ({name}) has momentum=None: its running statistics are a "
                    "cumulative average over num_batches_tracked, which is not kept per model")
        if isinstance(m, nn.modules.batchnorm._NormBase) and type(m) not in _BATCH_NORMS and m.track_running_stats:
            return f"the model's {type(m).__name__} ({name}) keeps running statistics the stack does not update"
    return None


def _stats(x: torch.Tensor, mask: torch.Tensor | None):
    """Per-channel (mean, biased variance, unbiased variance) of ``x`` (N, C, ...) over its rows where ``mask``."""
    dims = [0, *range(2, x.dim())]
    if mask is None:
        var, mean = torch.var_mean(x, dim=dims, correction=0)
        n = x.numel() // x.shape[1]
        return mean, var, var * (n / max(n - 1, 1))
    w = mask.to(x.dtype).view(-1, *[1] * (x.dim() - 1))
    n = mask.to(x.dtype).sum() * (x[0, 0].numel())
    mean = (x * w).sum(dims) / n
    d = x - mean.view(1, -1, *[1] * (x.dim() - 2))
    sq = (d * d * w).sum(dims)
    return mean, sq / n, sq / (n - 1).clamp_min(1)


def _batch_norm(m: nn.Module, stash: dict, name: str, mask: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
    """``m``'s forward during a stacked call (see the module docstring): ``mask`` (N,) marks the real rows."""
    batch_stats = m.training or m.running_mean is None
    if not batch_stats:
        return type(m).forward(m, x)
    xf = x.float() if x.element_size() < 4 else x  # 16-bit inputs: statistics in float32
    if mask is None:
        out = F.batch_norm(x, None, None, m.weight, m.bias, True, 0.0, m.eps)
        if m.running_mean is None:
            return out
        with torch.no_grad():
            mean, _, unbiased = _stats(xf.detach(), None)
    else:
        shape = (1, -1, *[1] * (x.dim() - 2))
        mean, var, unbiased = _stats(xf, mask)
        y = (xf - mean.view(shape)) * torch.rsqrt(var + m.eps).view(shape)
        if m.weight is not None:
            y = y * m.weight.view(shape) + m.bias.view(shape)
        out = y.to(x.dtype)
        mean, unbiased = mean.detach(), unbiased.detach()
    if m.training and m.running_mean is not None:
        mom = m.momentum
        stash[f"{name}.running_mean"] = m.running_mean * (1 - mom) + mean * mom
        stash[f"{name}.running_var"] = m.running_var * (1 - mom) + unbiased * mom
    return out


@contextlib.contextmanager
def _masked_norms(norms: dict[str, nn.Module], stash: dict, mask: torch.Tensor | None):
    for name, m in norms.items():
        m.forward = functools.partial(_batch_norm, m, stash, name, mask)
    try:
        yield
    finally:
        for m in norms.values():
            del m.forward


class StackedForward:
    """``net`` run over stacked tensors: ``tensors[i]`` is ``(G, ...)`` for ``names[i]`` (parameters and buffers;
    those not named are the module's own, shared by every model), the input ``x`` is ``(G, N, ...)`` per model or
    ``(N, ...)`` shared by all (``shared_input``). ``randomness`` is ``vmap``'s: ``"different"`` lets dropout draw
    its own mask per model (training), ``"error"`` refuses random ops (evaluation).

    ``self(tensors, x, mask)`` returns the logits ``(G, N, C)``; ``mask`` (``(G, N)``, or None when every row is
    real) marks the rows batch norm may use. :meth:`with_stats` also returns the batch-norm layers' updated running
    statistics in training mode, ``{buffer name: (G, ...)}``."""

    def __init__(self, net: nn.Module, names: Sequence[str], shared_input: bool = False,
                 randomness: str = "error"):
        self.net, self.names = net, list(names)
        self.norms = {n: m for n, m in net.named_modules() if type(m) in _BATCH_NORMS}
        self.stat_names = [f"{n}.{b}" for n, m in self.norms.items() if m.track_running_stats
                           for b in ("running_mean", "running_var")]
        x_dim = None if shared_input else 0
        # without batch norm: the bare call (no mask to carry, one output: the least vmap work per call)
        self._bare = vmap(self._call, in_dims=(0, x_dim), randomness=randomness)
        self._plain = vmap(self._one, in_dims=(0, x_dim, None), randomness=randomness)
        self._masked = vmap(self._one, in_dims=(0, x_dim, 0), randomness=randomness)

    def _call(self, tensors, x):
        return functional_call(self.net, dict(zip(self.names, tensors)), (x,))

    def _one(self, tensors, x, mask):
        stash: dict[str, torch.Tensor] = {}
        with _masked_norms(self.norms, stash, mask):
            out = functional_call(self.net, dict(zip(self.names, tensors)), (x,))
        return out, [stash[n] for n in self.stat_names if n in stash]

    def with_stats(self, tensors: Sequence[torch.Tensor], x: torch.Tensor, mask: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        if not self.norms:
            return self._bare(tensors, x), {}
        fn = self._plain if mask is None else self._masked
        out, stats = fn(list(tensors), x, mask)
        names = self.stat_names if self.net.training and stats else []
        return out, dict(zip(names, stats))

    def __call__(self, tensors: Sequence[torch.Tensor], x: torch.Tensor, mask: torch.Tensor | None = None
                 ) -> torch.Tensor:
        return self.with_stats(tensors, x, mask)[0]


def probe(forward: StackedForward, net: nn.Module, tensors: Sequence[torch.Tensor], x: torch.Tensor,
          autocast: Callable = contextlib.nullcontext, train: bool = False
          ) -> tuple[str | None, list[torch.Tensor] | None]:
    """Whether ``forward`` can run ``net``: two copies of the model's ``tensors`` (its own, in ``forward.names``
    order) on the rows ``x``. In evaluation mode the stacked output must equal the module's own (within the rounding
    of its dtype: 16-bit kernels differ in their last bits); with ``train`` a training-mode forward and backward must
    run too, and its parameters' gradients ``(2, ...)`` are returned (their memory layout is the one to store the
    stack in). Returns ``(reason or None, gradients or None)``; the module is left in evaluation mode, the global
    random generator untouched."""
    stacked = [t.detach().unsqueeze(0).repeat(2, *[1] * t.dim()) for t in tensors]
    params = {id(p) for p in net.parameters()}
    named = dict(net.named_parameters())
    grads = None
    try:  # a data-dependent forward (or an op without a batching rule) fails here, once
        with torch.random.fork_rng(devices=[]), autocast():
            if train:
                net.train()
                leaves = [s.requires_grad_() if id(named.get(n)) in params else s
                          for n, s in zip(forward.names, stacked)]
                out = forward(leaves, x.unsqueeze(0).expand(2, *x.shape))
                grads = list(torch.autograd.grad(out.float().sum(), [t for t in leaves if t.requires_grad]))
            net.eval()
            with torch.no_grad():
                got = forward([s.detach() for s in stacked], x.unsqueeze(0).expand(2, *x.shape))
                want = net(x)
    except Exception as e:  # noqa: BLE001 -- any failure means "run the models one by one"
        net.eval()
        return f"vmap cannot run the model ({type(e).__name__}: {str(e).strip().splitlines()[0][:120]})", None
    eps = max(torch.finfo(got.dtype).eps, torch.finfo(want.dtype).eps)
    tol = max(1e-3, 8 * eps)
    if got.shape[1:] != want.shape or not torch.allclose(got.float(), want.float().expand_as(got), rtol=tol, atol=tol):
        return "the vmapped model's output disagrees with the module's", None
    return None, grads
