"""Several models of one architecture on one client's data, and the EM maths of mixture methods.

IFCA, FedDrift, FeSEM, FedSoft, FedEM and FedRC make a client score every one of M candidate models on its data. The
M flat weight vectors are stacked to ``(M, P)`` and run in one batched pass of the stacked forward the vectorised engine
trains with (:class:`~flplat.maths.stacked.StackedForward`: ``vmap`` over ``functional_call`` of the shared
network), so a linear layer becomes one batched matmul instead of M separate loads and forwards (a per-model loop
is the fallback for models ``vmap`` cannot run).

The pure functions here are tested on hand-computed values: per-sample losses, E-step responsibilities
(``softmax(log π − ℓ)``, FedEM Eq. 10 / FedRC's ratio with the label prior), and the mixture prediction. The
server side: :func:`random_models` (further random initialisations of the run's model), :func:`model_losses` (every
client's mean loss under each model, one batched pass per client) and :func:`plan_with_all_models` (train the
client's cluster model, counting the download of all of them).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from flplat.maths.losses import task_loss
from flplat.maths.stacked import StackedForward
from flplat.protocol.seeding import derive_seed
from flplat.protocol.state import ParamLayout
from flplat.protocol.strategy import ClientPlan

__all__ = ["losses_fn", "mixture_correct", "model_losses", "permuted_init", "plan_with_all_models", "random_models",
           "responsibilities", "sample_losses", "stacked_logits"]


def stacked_logits(net: nn.Module, layout: ParamLayout, models: torch.Tensor, x: torch.Tensor,
                   chunk: int = 1024, model_chunk: int = 64) -> torch.Tensor:
    """Logits ``(M, n, C)`` of the ``(M, P)`` flat models on ``x`` (``net`` in eval mode): one stacked pass
    (:class:`~flplat.maths.stacked.StackedForward`, every model on the same rows) per ``chunk`` samples and
    ``model_chunk`` models (bounds the activations' memory when M is large: FedDrift)."""
    if models.shape[0] > model_chunk:
        return torch.cat([stacked_logits(net, layout, models[i:i + model_chunk], x, chunk, model_chunk)
                          for i in range(0, models.shape[0], model_chunk)])
    m = models.shape[0]
    models = models.to(device=x.device, dtype=next(net.parameters()).dtype)
    tensors = [v.reshape(m, *shape) for v, shape in zip(models.split(layout.numels, dim=1), layout.shapes)]
    out = []
    try:
        run = StackedForward(net, layout.names, shared_input=True)
        for a in range(0, len(x), chunk):
            out.append(run(tensors, x[a:a + chunk]))
    except (RuntimeError, NotImplementedError):  # a layer vmap cannot batch: one model at a time
        out = []
        for a in range(0, len(x), chunk):
            out.append(torch.stack([functional_call(net, {n: t[i] for n, t in zip(layout.names, tensors)},
                                                    (x[a:a + chunk],)) for i in range(m)]))
    if not out:
        return torch.zeros(m, 0, 0, device=x.device)
    return torch.cat(out, dim=1)


def sample_losses(net: nn.Module, layout: ParamLayout, models: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                  chunk: int = 1024, model_chunk: int = 64) -> torch.Tensor:
    """Per-sample loss ``(M, n)`` of each of the ``(M, P)`` models on ``(x, y)``: cross-entropy, or binary
    cross-entropy for multi-label y (n, C) (:func:`flplat.maths.losses.task_loss`)."""
    logits = stacked_logits(net, layout, models, x, chunk, model_chunk).float()
    m, n = logits.shape[0], len(y)
    if n == 0:
        return torch.zeros(m, 0)
    yy = y.repeat(m, 1) if y.dim() == 2 else y.repeat(m)
    return task_loss(logits.reshape(m * n, -1), yy, reduction="none").view(m, n)


def losses_fn(models: torch.Tensor, chunk: int = 1024):
    """A client-side function for :meth:`FederationOps.compute`: the per-sample losses ``(M, n)`` of ``models``
    on the client's split (request it with weights ``None``: the models travel in the closure)."""

    def fn(view):
        with view.autocast():
            return sample_losses(view.net, view.layout, models, view.x, view.y, chunk).cpu()

    return fn


def responsibilities(losses: torch.Tensor, log_prior: torch.Tensor) -> torch.Tensor:
    """E-step: q_m(i) = π_m exp(−ℓ_m(i)) / Σ_m' π_m' exp(−ℓ_m'(i)) for ``(M, n)`` losses; ``log_prior`` is log π
    as ``(M,)`` or per sample ``(M, n)`` (FedRC divides by the cluster's label marginal: log π − log P_m(y_i))."""
    lp = log_prior if log_prior.dim() == 2 else log_prior[:, None]
    return torch.softmax(lp.double() - losses.double(), dim=0)


def mixture_correct(logits: torch.Tensor, weights: torch.Tensor, y: torch.Tensor) -> int:
    """Correct predictions of the mixture Σ_m w_m softmax(logits_m) (FedEM's personalised predictor); multi-label
    y (n, C): of Σ_m w_m sigmoid(logits_m), a sample being correct when every label's probability is on its side
    of 0.5."""
    w = weights.to(logits.device, torch.float32)[:, None, None]
    if y.dim() == 2:
        prob = (w * torch.sigmoid(logits.float())).sum(0)
        return int(((prob > 0.5) == (y > 0.5)).all(-1).sum())
    prob = (w * torch.softmax(logits.float(), dim=-1)).sum(0)
    return int((prob.argmax(-1) == y).sum())


def permuted_init(w: torch.Tensor, layout: ParamLayout, rng: np.random.Generator) -> torch.Tensor:
    """A fresh draw of an i.i.d.-initialised model: the entries of each parameter tensor of ``w`` shuffled with
    the server ``rng`` (PyTorch initialises each tensor i.i.d., so this is another random initialisation)."""
    out = w.clone()
    for a, b, is_p in zip(layout.offsets[:-1], layout.offsets[1:], layout.is_param):
        if is_p:
            out[a:b] = w[a:b][torch.as_tensor(rng.permutation(int(b - a)), device=w.device)]
    return out


def random_models(w: torch.Tensor, layout: ParamLayout, count: int, rng: np.random.Generator) -> torch.Tensor:
    """``(count, P)``: ``w`` itself and ``count − 1`` further random initialisations (:func:`permuted_init`)."""
    return torch.stack([w.clone()] + [permuted_init(w, layout, rng) for _ in range(count - 1)])


def model_losses(models: torch.Tensor, ops, clients, round: int, chunk: int = 1024) -> np.ndarray:
    """``(len(clients), M)`` mean train losses of each of the ``(M, P)`` models on each client (one batched pass per
    client, :func:`losses_fn`; a client without training data gets zeros). Seeded by the round."""
    out = ops.compute([(int(c), None) for c in clients], losses_fn(models, chunk), "train",
                      seed=derive_seed(0, "losses", round))
    return np.stack([o.mean(dim=1).double().numpy() if o.shape[1] else np.zeros(o.shape[0]) for o in out])


def plan_with_all_models(state, client: int) -> ClientPlan:
    """Train the client's cluster model ``state.clusters[state.assignment[client]]``; the download counts every
    cluster model (the client scores all of them to pick its cluster: IFCA, FedDrift)."""
    w = state.clusters[int(state.assignment[client])]
    return ClientPlan(weights=w, extra_bytes_down=(state.clusters.shape[0] - 1) * w.numel() * w.element_size())
