"""ATP — Bao, Wei, Wang, He, "Adaptive Test-Time Personalization for Federated Learning", NeurIPS 2023
(arXiv:2310.18816; Algorithm 1: training the adaptation rates; Algorithm 2: test-time adaptation).

The global model θ is trained with FedAvg. ATP additionally learns one adaptation rate α_l per module (here: per
parameter tensor of the network, l = 1..A), such that one unsupervised step of entropy minimisation,

    θ'_l(α) = θ_l − α_l ∇_{θ_l} H(θ; x),   H = mean over the batch of the prediction entropy −Σ_c p_c log p_c,

adapts θ to a client's distribution. α is trained on the labelled training clients by minimising the supervised
loss of the adapted model, CE(θ'(α); x, y): since ∇H does not depend on α,

    ∂CE(θ'(α)) / ∂α_l = −⟨∇_{θ'_l} CE(θ'; x, y), ∇_{θ_l} H(θ; x)⟩,

a first-order update (``alpha_lr``, ``alpha_epochs`` passes over the client's train split in batches of
``alpha_batch``; ``grad_norm`` optionally divides module l's gradient by its size |θ_l| (``numel``) or
sqrt(|θ_l|) (``sqrt_numel``), options of the authors' code; default ``none``). Each round, after the FedAvg
step, the sampled clients update α from the server's α with the new θ (client side, :meth:`FederationOps.compute`
with gradients enabled) and the server averages their α weighted by n_k.

At test time an unseen, unlabeled client downloads θ and α and takes ``adapt_steps`` steps
θ ← θ − α ⊙ ∇H(θ; x) on its unlabeled data (all of ``adapt_split`` as one batch: ATP's batch-level adaptation),
then predicts with the adapted model — :meth:`ATP.test_time_weights` (labels are never read there). The
authors' evaluation adapts each test batch separately from θ; one weight vector per client needs one batch.

Simplifications: ATP also adapts batch-norm running statistics (with rates of their own); here only the
parameters are modules and the statistics stay as trained. α starts at ``alpha_init`` (0, as in the authors'
code) for every module; the traffic of α (A floats) is not counted. Seen clients are evaluated with the global θ
(ATP is a test-time method); ``tta_eval`` also logs ``tta_accuracy``, their test accuracy after adapting on their
own unlabeled test split (ATP's protocol, run on the training clients).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call

from flplat.api import (
    ConfigError,
    EvalModels,
    ServerState,
    Strategy,
    derive_seed,
    fedavg,
    param_choice,
    register_algorithm,
)


def _up(t: torch.Tensor) -> torch.Tensor:
    """16-bit logits in float32 (others as they are)."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Mean prediction entropy −Σ_c p_c log p_c over the rows of ``logits``."""
    logp = torch.log_softmax(_up(logits), dim=1)
    return -(logp.exp() * logp).sum(dim=1).mean()


def _named(net) -> tuple[list[str], list[torch.Tensor], dict[str, torch.Tensor]]:
    names, params = zip(*net.named_parameters())
    return list(names), [p.detach() for p in params], {n: b.clone() for n, b in net.named_buffers()}


def entropy_grad(net, names, params, buffers, x) -> list[torch.Tensor]:
    """∇_θ H(θ; x) per parameter tensor."""
    leaves = [p.detach().requires_grad_(True) for p in params]
    with torch.enable_grad():
        h = entropy(functional_call(net, {**dict(zip(names, leaves)), **buffers}, (x,)))
        return list(torch.autograd.grad(h, leaves))


def adapt(net, alpha: torch.Tensor, x: torch.Tensor, steps: int = 1) -> list[torch.Tensor]:
    """θ after ``steps`` module-wise entropy-minimisation steps θ_l ← θ_l − α_l ∇_{θ_l} H(θ; x) (net unchanged)."""
    names, params, buffers = _named(net)
    for _ in range(steps):
        g = entropy_grad(net, names, params, buffers, x)
        params = [p - a * gi for p, a, gi in zip(params, alpha.tolist(), g)]
    return params


def alpha_grad(net, alpha: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """∂CE(θ'(α); x, y)/∂α_l = −⟨∇_{θ'_l} CE, ∇_{θ_l} H(θ; x)⟩ for θ'(α) = θ − α ⊙ ∇H (one step)."""
    names, params, buffers = _named(net)
    g = entropy_grad(net, names, params, buffers, x)
    adapted = [(p - a * gi).requires_grad_(True) for p, a, gi in zip(params, alpha.tolist(), g)]
    with torch.enable_grad():
        loss = F.cross_entropy(_up(functional_call(net, {**dict(zip(names, adapted)), **buffers}, (x,))), y)
        gl = torch.autograd.grad(loss, adapted)
    return -torch.stack([(a * b).sum() for a, b in zip(gl, g)]).double().cpu()


GRAD_NORMS = ("none", "numel", "sqrt_numel")


def _train_alpha_fn(alpha: torch.Tensor, lr: float, epochs: int, batch: int, grad_norm: str = "none"):
    def fn(view):
        a = alpha.clone()
        sizes = torch.tensor([p.numel() for p in view.net.parameters()], dtype=torch.float64)
        scale = {"none": torch.ones_like(sizes), "numel": sizes, "sqrt_numel": sizes.sqrt()}[grad_norm]
        n = len(view.y)
        gen = torch.Generator().manual_seed(view.seed)
        for _ in range(epochs):
            order = torch.randperm(n, generator=gen).to(view.device)
            for s in range(0, n, batch):
                sel = order[s:s + batch]
                a = a - lr * alpha_grad(view.net, a, view.x[sel], view.y[sel]) / scale
        return a

    return fn


def _adapt_fn(alpha: torch.Tensor, steps: int):
    def fn(view):  # unlabeled: only view.x is read
        params = adapt(view.net, alpha, view.x, steps) if len(view.x) else [p.detach() for p in view.net.parameters()]
        with torch.no_grad():
            torch._foreach_copy_(list(view.net.parameters()), params)
        return view.layout.flatten()

    return fn


@dataclass
class ATPState:
    """``alpha``: the learned adaptation rate of every parameter tensor (float64); ``tta_accuracy``: the clients'
    test accuracy after adapting, last round (None before it is scored)."""

    alpha: torch.Tensor
    tta_accuracy: float | None = None


@register_algorithm
class ATP(Strategy):
    name = "atp"
    eval_models = EvalModels("global", "test_time", "θ adapted to the client's unlabeled data with the learned rates")
    multilabel_unsupported = ("its unsupervised adaptation minimises a softmax entropy over classes (Flux App. F.4 "
                              "omits ATP on CheXpert: 'designed for multi-class classification')")

    @dataclass(frozen=True)
    class Config:
        alpha_init: float = 0.0  # initial adaptation rate of every module
        alpha_lr: float = 0.01  # learning rate of α on the training clients
        alpha_epochs: int = 1  # passes over a client's train split per round for α
        alpha_batch: int = 64  # batch size of those passes
        grad_norm: str = "none"  # divide module l's α-gradient by: none | numel (|θ_l|) | sqrt_numel
        alpha_start_round: int = 1  # α is trained from this round on (θ alone before: FedAvg warm-up)
        adapt_steps: int = 1  # entropy-minimisation steps at test time
        adapt_split: str = "test"  # the unlabeled client data adapted on (train | val | test)
        tta_eval: bool = True  # log tta_accuracy: every client's test accuracy after adapting on its test split

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        if not cfg.alpha_lr >= 0:
            raise ConfigError(f"{section}.alpha_lr={cfg.alpha_lr!r} is out of range; allowed: a number >= 0")
        for key in ("alpha_epochs", "alpha_batch", "alpha_start_round", "adapt_steps"):
            if getattr(cfg, key) < 1:
                raise ConfigError(f"{section}.{key}={getattr(cfg, key)!r} is out of range; allowed: an integer >= 1")
        param_choice(section, cfg, "grad_norm", GRAD_NORMS)
        param_choice(section, cfg, "adapt_split", ("train", "val", "test"))

    def init_state(self, init_weights, rng, ops):
        modules = int(sum(self.info.layout.is_param))
        state = ServerState(weights=init_weights.clone())
        state.method = ATPState(alpha=torch.full((modules,), float(self.cfg.alpha_init), dtype=torch.float64))
        return state

    def aggregate(self, state, results, ops):
        if not results:
            return state
        state.weights = fedavg(results)
        cfg = self.cfg
        if state.round >= cfg.alpha_start_round:
            fn = _train_alpha_fn(state.method.alpha, cfg.alpha_lr, cfg.alpha_epochs, cfg.alpha_batch, cfg.grad_norm)
            alphas = ops.compute([(r.client, state.weights) for r in results], fn, "train",
                                 seed=derive_seed(0, "atp", state.round))
            n = np.array([r.num_samples for r in results], dtype=np.float64)
            state.method.alpha = torch.as_tensor(n / n.sum()) @ torch.stack(alphas)
        if cfg.tta_eval:
            clients = range(self.info.num_clients)
            res = ops.evaluate(list(zip(clients, self.test_time_weights(state, ops, clients))), "test")
            state.method.tta_accuracy = sum(r.correct for r in res) / max(sum(r.num_samples for r in res), 1)
        return state

    def round_metrics(self, state):
        a = state.method.alpha
        out = {"alpha_mean": float(a.mean()), "alpha_abs_max": float(a.abs().max())}
        if state.method.tta_accuracy is not None:
            out["tta_accuracy"] = float(state.method.tta_accuracy)
        return out

    def test_time_weights(self, state, ops, clients: Sequence[int]) -> list[torch.Tensor] | None:
        """θ adapted to each client's unlabeled ``adapt_split`` data with the learned rates (ATP's test phase)."""
        fn = _adapt_fn(state.method.alpha.float(), self.cfg.adapt_steps)
        return ops.compute([(int(k), state.weights) for k in clients], fn, self.cfg.adapt_split,
                           seed=derive_seed(0, "atp-test", state.round))
