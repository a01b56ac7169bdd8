"""Client-side training and evaluation: one LightningModule and one Fabric loop, reused for every client.

The trainer holds a single network wrapped in :class:`ClientModule` (a LightningModule). For each client it
loads the planned start weights into that network, clears the optimizer state (a fresh optimizer in effect),
and runs the local epochs over in-memory tensors: a batch is ``x[idx]`` on the pooled data, so there is no
DataLoader on the hot path. Fabric supplies the device, the precision (autocast / gradient scaling through
``fabric.backward`` and its optimizer wrapper) and, later, the collectives; the network is never wrapped in
DDP, because different processes train different clients.

Randomness: each (round, client) gets its own derived seed for batch order and dropout, so a client's
result does not depend on which other clients ran before it or in which process.

Batches: the last batch of an epoch is merged into the previous one when it would hold a single sample
(batch norm cannot train on one sample); otherwise batches are exactly ``batch_size`` with a smaller last one.

The client-execution core both trainers share (the vectorised one, :mod:`flplat.engine.vectorized`, trains groups
of clients with it): :func:`client_batches` (a client's batch order), :func:`resolve_plan` (a plan's defaults),
:func:`~flplat.maths.losses.task_loss` (the loss) and :mod:`flplat.engine.optim` (the optimizers).

``16-mixed``: every client starts from the trainer's ``loss_scale`` with a fresh growth tracker (as it starts with
a fresh optimizer), and the executor sets ``loss_scale`` after each ``train`` call to the smallest scale those
clients ended with. One scaler carried from client to client made a client's result depend on which clients the
process had trained before it (so two processes, or a vectorised group, could not give one process's result).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass

import lightning as L
import numpy as np
import torch
from lightning.fabric import Fabric
from lightning.fabric.plugins.precision import Precision
from torch import nn

from flplat.engine.optim import make_optimizer
from flplat.maths.losses import hits, task_loss
from flplat.metrics.multilabel import macro_auroc
from flplat.protocol.state import ParamLayout
from flplat.protocol.strategy import ClientPlan, ClientResult, EvalResult, HookContext, LocalHook

_NVML_VAR = "PYTORCH_NVML_BASED_CUDA_CHECK"


class ClientModule(L.LightningModule):
    """A client's model: cross-entropy (multi-label data: binary cross-entropy) training step plus the plan's extra
    loss terms."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net
        self.hooks: Sequence[LocalHook] = ()
        self.hook_ctx: HookContext | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = task_loss(self.net(x), y)
        for h in self.hooks:
            extra = h.loss(self.hook_ctx)
            if extra is not None:
                loss = loss + extra
        return loss


def batch_bounds(n: int, batch_size: int) -> list[tuple[int, int]]:
    """Batch [start, end) ranges covering n samples; a trailing single-sample batch joins the previous one."""
    bounds = [(i, min(i + batch_size, n)) for i in range(0, n, batch_size)]
    if len(bounds) > 1 and bounds[-1][1] - bounds[-1][0] == 1:
        bounds[-2] = (bounds[-2][0], n)
        bounds.pop()
    return bounds


def client_batches(indices, seed: int, epochs: int, batch_size: int
                   ) -> tuple[list[torch.Tensor], list[tuple[int, int]]]:
    """A client's batches, the one definition both trainers use: per local epoch, the pool rows ``indices`` in the
    order of ``randperm`` drawn from ``torch.Generator().manual_seed(seed)`` (the epochs in turn from that one
    generator), each order cut into the same :func:`batch_bounds`. Returns (orders, bounds)."""
    idx = torch.as_tensor(indices, dtype=torch.long)
    gen = torch.Generator().manual_seed(seed)
    return [idx[torch.randperm(len(idx), generator=gen)] for _ in range(epochs)], batch_bounds(len(idx), batch_size)


@dataclass(frozen=True)
class LocalSettings:
    """A plan's local training with the federation's defaults filled in (:func:`resolve_plan`)."""

    trainable: str
    lr: float
    epochs: int
    optimizer: tuple[str, float, float]  # (name, momentum, weight decay)


def resolve_plan(plan: ClientPlan, defaults: LocalSettings) -> LocalSettings:
    """The one resolution of a plan's defaults, for both trainers: ``plan.lr`` / ``plan.epochs`` (None: the
    federation's ``optimizer.lr`` / ``local_epochs``, in ``defaults``) and ``plan.optimizer``'s name, momentum and
    weight decay (each missing key: the federation optimizer's)."""
    o, (name, momentum, wd) = plan.optimizer or {}, defaults.optimizer
    return LocalSettings(plan.trainable, float(plan.lr) if plan.lr is not None else defaults.lr,
                         int(plan.epochs) if plan.epochs is not None else defaults.epochs,
                         (str(o.get("name", name)), float(o.get("momentum", momentum)),
                          float(o.get("weight_decay", wd))) if o else defaults.optimizer)


class ClientTrainer:
    """Trains and evaluates clients with one reusable network through Lightning Fabric."""

    def __init__(self, fabric: Fabric, net: nn.Module, x: torch.Tensor, y: torch.Tensor, optimizer_cfg,
                 batch_size: int, local_epochs: int, eval_batch_size: int = 1024):
        self.fabric = fabric
        self.module = ClientModule(net)
        self.module = fabric.strategy.precision.convert_module(self.module).to(fabric.device)
        self.net = self.module.net
        self.layout = ParamLayout(self.net)
        self.params = [p for p in self.net.parameters()]
        self.hook_ctx = HookContext(self.net, self.layout, self.params)
        self.module.hook_ctx = self.hook_ctx
        self.x = fabric.strategy.precision.convert_input(fabric.to_device(x))  # e.g. bf16 for "bf16-true"
        self.y = fabric.to_device(y)
        self.opt_cfg = optimizer_cfg
        self.batch_size = batch_size
        self.local_epochs = local_epochs
        # the federation's settings, read once (a plan's None fields fall back to them: resolve_plan)
        self.defaults = LocalSettings("all", float(optimizer_cfg.lr), int(local_epochs),
                                      (str(optimizer_cfg.name), float(optimizer_cfg.momentum),
                                       float(optimizer_cfg.weight_decay)))
        self.eval_batch_size = eval_batch_size
        self._optimizers: dict[str, torch.optim.Optimizer] = {}
        # fp32: Fabric's backward/step wrappers only add per-step overhead -- also under the DDP strategy of sharded
        # runs, since client models are never wrapped in DDP (nothing for the strategy to synchronise)
        self._plain = type(fabric.strategy.precision) is Precision
        # 16-mixed: Fabric's gradient scaler. Every client (every phase) starts from ``loss_scale`` with a fresh
        # growth tracker, as it starts with fresh optimizer state; the executor sets ``loss_scale`` after each
        # train call to the smallest scale its clients ended with (see flplat/engine/executor.py)
        scaler = getattr(fabric.strategy.precision, "scaler", None)
        self.scaler = scaler if scaler is not None and scaler.is_enabled() else None
        self._scaler_init = self.scaler.state_dict() if self.scaler is not None else None
        self.loss_scale = float(self._scaler_init["scale"]) if self.scaler is not None else None
        self._part_params = {
            "all": self.params,
            "features": list(net.features.parameters()) if hasattr(net, "features") else self.params,
            "head": list(net.head.parameters()) if hasattr(net, "head") else self.params,
        }

    def _seed_device_rng(self, seed: int) -> None:
        # torch.manual_seed would also seed (and record stack traces for) every lazily-initialised backend
        torch.default_generator.manual_seed(seed)
        if self.fabric.device.type == "cuda":
            torch.cuda.manual_seed(seed)

    @contextlib.contextmanager
    def _cpu_env(self):
        """On CPU, train without ``PYTORCH_NVML_BASED_CUDA_CHECK`` (set by ``import lightning``): with it, every
        optimizer step queries NVML for CUDA availability (~70–100 µs; see docs/performance.md)."""
        if self.fabric.device.type != "cpu" or _NVML_VAR not in os.environ:
            yield
            return
        saved = os.environ.pop(_NVML_VAR)
        try:
            yield
        finally:
            os.environ[_NVML_VAR] = saved

    def initial_weights(self) -> torch.Tensor:
        return self.layout.flatten()

    def _optimizer(self, settings: LocalSettings):
        """The optimizer of ``settings`` (one per trainable part and optimizer), with fresh state."""
        key = (settings.trainable, *settings.optimizer)
        opt = self._optimizers.get(key)
        if opt is None:
            name, momentum, wd = settings.optimizer
            # CUDA: torch.optim's fused kernels (with 16-mixed, GradScaler then reads no inf flag back per batch)
            raw = make_optimizer(name, self._part_params[settings.trainable], settings.lr, momentum, wd,
                                 fused=self.fabric.device.type == "cuda")
            opt = self._optimizers[key] = self.fabric.setup_optimizers(raw)
        opt.optimizer.state.clear()  # fresh optimizer state for every client
        for g in opt.param_groups:
            g["lr"] = settings.lr
        return opt

    def _set_trainable(self, trainable: str) -> None:
        keep = {id(p) for p in self._part_params[trainable]}
        for p in self.params:
            p.requires_grad_(id(p) in keep)

    def train(self, client: int, plan: ClientPlan, indices: np.ndarray, seed: int) -> ClientResult:
        """Run one client's local epochs from ``plan.weights``, then its ``plan.phases`` in order; returns its new
        flat weights (the last phase's; earlier phases' weights in ``extra["phase_weights"]``)."""
        loss_sum, steps, extra = self._train_phase(plan, indices, seed)
        if plan.phases:
            extra["phase_weights"] = []
            for phase in plan.phases:
                extra["phase_weights"].append(self.layout.flatten())
                idx = phase.indices if phase.indices is not None else indices
                more, n_steps, more_extra = self._train_phase(phase, idx, seed)
                loss_sum, steps = loss_sum + more, steps + n_steps
                extra.update(more_extra)
        mean_loss = (loss_sum / max(steps, 1)).item()
        scale = float(self.scaler.get_scale()) if self.scaler is not None else None
        return ClientResult(client=client, weights=self.layout.flatten(), num_samples=len(indices),
                            train_loss=mean_loss, num_steps=steps, extra=extra, loss_scale=scale)

    def _train_phase(self, plan: ClientPlan, indices: np.ndarray, seed: int) -> tuple[torch.Tensor, int, dict]:
        """One plan's local epochs (from its weights, or from the loaded ones when None): (summed loss, steps,
        what its hooks' ``finalize`` report)."""
        if plan.trainable not in self._part_params:
            raise ValueError(f"ClientPlan.trainable={plan.trainable!r}; choose all, features or head")
        settings = resolve_plan(plan, self.defaults)
        if plan.weights is not None:
            self.layout.load(plan.weights)
        self._set_trainable(plan.trainable)
        opt = self._optimizer(settings)
        if self.scaler is not None:
            self.scaler.load_state_dict({**self._scaler_init, "scale": self.loss_scale, "_growth_tracker": 0})
        self.hook_ctx.lr = settings.lr
        module, fabric = self.module, self.fabric
        module.hooks = plan.hooks
        for h in plan.hooks:
            h.setup(self.hook_ctx)
        self._seed_device_rng(seed)  # dropout and other in-model randomness of this client-round
        orders, bounds = client_batches(indices, seed, settings.epochs, self.batch_size)
        module.train()
        loss_sum = torch.zeros((), device=fabric.device)
        steps = 0
        with self._cpu_env():
            for order in orders:
                order = order.to(fabric.device)
                for a, b in bounds:
                    sel = order[a:b]
                    batch = self.hook_ctx.batch = (self.x[sel], self.y[sel])  # hooks may read it (APFL)
                    for _ in range(plan.batch_steps):  # > 1: several steps on this batch (pFedMe's inner solve)
                        if self._plain:
                            loss = module.training_step(batch, steps)
                            opt.optimizer.zero_grad(set_to_none=True)
                            loss.backward()
                            opt.optimizer.step()
                        else:
                            with fabric.autocast():
                                loss = module.training_step(batch, steps)
                            opt.zero_grad(set_to_none=True)
                            fabric.backward(loss)
                            opt.step()
                        for h in plan.hooks:
                            h.after_step(self.hook_ctx)
                        loss_sum += loss.detach().float()
                        steps += 1
        self.hook_ctx.batch = None
        extra = {}
        for h in plan.hooks:
            extra.update(h.finalize(self.hook_ctx) or {})
        module.hooks = ()
        self._set_trainable("all")
        return loss_sum, steps, extra

    def evaluate(self, client: int, weights: torch.Tensor | None, indices: np.ndarray) -> EvalResult:
        """Score ``weights`` (None: the weights already loaded) on the pool rows ``indices``."""
        idx = torch.as_tensor(indices, dtype=torch.long, device=self.fabric.device)
        return self._score(client, weights, self.x, self.y, idx)

    @property
    def num_outputs(self) -> int:
        """Classes of the network's ``head`` (per-class counts are computed when > 0), else 0."""
        return self.net.head.out_features if hasattr(self.net, "head") else 0

    @torch.no_grad()
    def score_rows(self, weights: torch.Tensor | None, rows: torch.Tensor, loss_out: torch.Tensor,
                   hit_out: torch.Tensor) -> None:
        """Score one model (None: the loaded one) on the pool rows ``rows`` (a device index tensor) in chunks of
        ``eval_batch_size``, writing each row's loss (:func:`task_loss`) into ``loss_out`` and whether its prediction
        is right into ``hit_out`` (batched evaluation: :mod:`flplat.engine.batched_eval` sums them per client)."""
        if weights is not None:
            self.layout.load(weights)
        self.module.eval()
        bs = self.eval_batch_size
        for a in range(0, len(rows), bs):
            sel = rows[a:a + bs]
            with self.fabric.autocast():
                logits = self.net(self.x.index_select(0, sel))  # index_select: much faster than x[sel] on CPU
            yb = self.y.index_select(0, sel)
            loss_out[a:a + bs] = task_loss(logits.float(), yb, reduction="none")
            hit_out[a:a + bs] = hits(logits, yb)

    def compute(self, client: int, weights: torch.Tensor | None, indices: np.ndarray, fn, seed: int):
        """Run a strategy's client-side function ``fn(ClientView)`` with ``weights`` on the pool rows ``indices``."""
        from flplat.protocol.strategy import ClientView

        if weights is not None:
            self.layout.load(weights)
        self.module.eval()
        idx = torch.as_tensor(indices, dtype=torch.long, device=self.fabric.device)
        view = ClientView(client, self.net, self.layout, self.x[idx], self.y[idx], seed, self.fabric.device,
                          self.fabric.autocast)
        with self._cpu_env(), torch.no_grad():
            out = fn(view)
        return _to_cpu(out)

    def evaluate_tensors(self, weights: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> EvalResult:
        """Score ``weights`` on separate tensors (the pooled global test set)."""
        x = self.fabric.strategy.precision.convert_input(self.fabric.to_device(x))
        return self._score(-1, weights, x, self.fabric.to_device(y), None)

    @torch.no_grad()
    def _score(self, client, weights, x, y, idx) -> EvalResult:
        if weights is not None:
            self.layout.load(weights)
        self.module.eval()
        n = len(idx) if idx is not None else len(y)
        loss_sum = torch.zeros((), device=self.fabric.device)
        correct = torch.zeros((), dtype=torch.long, device=self.fabric.device)
        multilabel = y.dim() == 2
        c = self.net.head.out_features if hasattr(self.net, "head") and not multilabel else None
        by_class = torch.zeros(2, c or 0, dtype=torch.long, device=self.fabric.device)
        scores: list[torch.Tensor] = []
        for a in range(0, n, self.eval_batch_size):
            sel = idx[a:a + self.eval_batch_size] if idx is not None else slice(a, a + self.eval_batch_size)
            with self.fabric.autocast():
                logits = self.net(x[sel])
            yb = y[sel]
            loss_sum += task_loss(logits.float(), yb, reduction="sum")
            hit = hits(logits, yb)
            correct += hit.sum()
            if c:  # per-class counts (Few/Medium/Many accuracy, DA-PFL Table IV)
                by_class[0] += torch.bincount(yb[hit], minlength=c)
                by_class[1] += torch.bincount(yb, minlength=c)
            if multilabel:
                scores.append(torch.sigmoid(logits.float()).cpu())
        cc, ct = (tuple(v.tolist()) for v in by_class.cpu())
        if not multilabel:
            return EvalResult(client, float(loss_sum), int(correct), n, cc, ct)
        s = torch.cat(scores) if scores else torch.zeros(0, y.shape[1])
        t = (y[idx] if idx is not None else y).float().cpu()
        return EvalResult(client, float(loss_sum), int(correct), n, cc, ct, macro_auroc(s, t), s, t)


def _to_cpu(obj):
    """Tensors (also inside tuples, lists and dicts) moved to CPU, so client results can be gathered/pickled."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    return obj
