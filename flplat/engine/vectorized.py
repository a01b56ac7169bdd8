"""Vectorised clients: a group of clients trained at once with ``torch.func`` on stacked parameters.

The per-client loop (:meth:`flplat.engine.client.ClientTrainer.train`) pays Python, dispatcher and optimizer overhead
per client and step; for the small models of these papers that overhead dominates. Here the G clients of a group
keep their parameters as ``(G, ...)`` tensors; each step runs one ``vmap``-ed ``functional_call`` of the shared
network (so a linear layer becomes one batched matmul), one backward of the summed per-client losses (clients are
independent, so each client's slice of the gradient is the gradient of its own loss), and one functional optimizer
update on the stacked tensors.

What is the same as the per-client loop (up to floating-point summation order):

* batches: each client draws ``randperm`` from ``torch.Generator().manual_seed(seed)`` per epoch and cuts it with
  :func:`~flplat.engine.client.batch_bounds`, exactly as the loop does. A step's batches are padded to the widest
  batch among the clients still training at that step and the loss is the mean over the client's real samples (a
  per-sample mask), so padding changes nothing;
* the optimizer: Adam, AdamW and SGD (momentum, weight decay) with torch.optim's update formulas and fresh state
  per client. Clients are sorted by their number of steps, so at step t the clients still training are a prefix of
  the group; finished clients get neither an update nor an optimizer-state change (Adam's step does not advance);
* ``plan.trainable`` (only that part is updated; the rest gets no update and no state), ``plan.lr``, ``plan.epochs``;
* hooks that define :meth:`~flplat.protocol.strategy.LocalHook.functional_loss` (FedProx's proximal term): it is
  evaluated per client on its slices of the stacked parameters and added to its loss;
* precision: the forward runs under ``fabric.autocast()``.

What differs: dropout draws its masks from the global generator with ``vmap(randomness="different")``, seeded once
per group with the group's first client seed, so with dropout > 0 the masks (and results) differ from the loop's.

Not vectorised (the executor trains these clients with the loop and logs why, once): multi-label data (binary
cross-entropy), models with normalisation layers (batch norm mixes the padded samples into its batch statistics
and updates running buffers in place: ``cifar_cnn``, ``resnet9``), models ``vmap`` cannot run, 16-bit mixed
precision (gradient scaler), and clients whose hooks define ``after_step``, ``finalize`` or a ``loss`` without
``functional_loss``. The embedding models (``sent140_lstm``, whose time loop depends on the input's shape only, and
``amazon_dnn``) run vectorised.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

from flplat.engine.client import ClientTrainer, batch_bounds
from flplat.engine.memory import retain_freed_memory
from flplat.engine.optim import FunctionalOptimizer
from flplat.protocol.strategy import ClientPlan, ClientResult, LocalHook

Job = tuple[int, ClientPlan, np.ndarray, int]  # (client, plan, train indices, seed): ClientTrainer.train's arguments
KEEP_MIB = 512  # federation.vectorize_keep_mib's default
def hook_reason(h: LocalHook) -> str | None:
    """Why hook ``h`` cannot run vectorised, or None."""
    cls = type(h)
    if cls.after_step is not LocalHook.after_step:
        return f"hook {cls.__name__} defines after_step"
    if cls.finalize is not LocalHook.finalize:
        return f"hook {cls.__name__} defines finalize"
    if cls.loss is not LocalHook.loss and cls.functional_loss is LocalHook.functional_loss:
        return f"hook {cls.__name__} defines loss but no functional_loss"
    return None


class VectorizedTrainer:
    """Trains groups of at most ``group_size`` clients (0: all at once) with the network, data, optimizer
    settings, batch size and epochs of an existing :class:`ClientTrainer`.

    The stacked parameters and optimizer state of a group are kept for the next group (the next round) while
    they take at most ``keep_mib`` MiB (``federation.vectorize_keep_mib``; 0: never): freshly allocated, every
    round's tens of MB of them cost a page fault per 4 KiB page (measured by tools/bench_vec_bound.py: the
    kernel's page-fault time was ~15 % of a vectorised round of issue 15's setting), reused they cost one
    overwrite. For the same reason ``keep_mib`` > 0 also lets the C allocator keep that much freed memory for the
    per-step gradients (:func:`retain_freed_memory`)."""

    def __init__(self, trainer: ClientTrainer, group_size: int = 0, keep_mib: int = KEEP_MIB):
        self.trainer = trainer
        self.group_size = group_size
        self.keep_mib = keep_mib
        self._kept: list[list[torch.Tensor]] | None = None  # [parameter buffers, moment buffers...], (G_max, ...)
        retain_freed_memory(keep_mib)
        net = trainer.net
        name_of = {id(p): n for n, p in net.named_parameters()}
        self.names = [name_of[id(p)] for p in trainer.params]  # HookContext.params order
        pos = {n: i for i, n in enumerate(trainer.layout.names)}
        lay = trainer.layout
        self.slots = [(int(lay.offsets[pos[n]]), int(lay.offsets[pos[n] + 1]), lay.shapes[pos[n]]) for n in self.names]
        self.parts = {k: [i for i, p in enumerate(trainer.params) if id(p) in {id(q) for q in v}]
                      for k, v in trainer._part_params.items()}
        self.orders = [tuple(range(p.dim() + 1)) for p in trainer.params]  # memory order of the stacked tensors
        self.model_reason = self._model_reason()

    # ---- what can run vectorised ---------------------------------------------------------------------
    def _model_reason(self) -> str | None:
        tr = self.trainer
        if tr.y.dim() == 2:
            return "multi-label data: the vectorised step computes cross-entropy only (BCE runs in the loop)"
        for name, m in tr.net.named_modules():
            if isinstance(m, nn.modules.batchnorm._NormBase):
                return (f"the model has {type(m).__name__} ({name}), whose batch statistics would mix padded "
                        "samples and whose running buffers are updated in place")
        if getattr(tr.fabric.strategy.precision, "scaler", None) is not None:
            return "mixed 16-bit precision uses a gradient scaler"
        try:  # a data-dependent forward (or an op without a batching rule) fails here, once
            stacked = [p.detach().unsqueeze(0).repeat(2, *[1] * p.dim()).requires_grad_() for p in tr.params]
            with torch.random.fork_rng(devices=[]), tr.fabric.autocast():  # leave the global generator alone
                out = self._forward()(stacked, tr.x[:2].unsqueeze(0).expand(2, *tr.x[:2].shape))
            grads = torch.autograd.grad(out.float().sum(), stacked)
        except Exception as e:  # noqa: BLE001 -- any failure means "use the loop"
            return f"vmap cannot run the model ({type(e).__name__}: {str(e).strip().splitlines()[0][:120]})"
        # the memory order (outermost first) of each gradient, batch dimension first
        self.orders = [tuple(sorted(range(d.dim()), key=lambda i: -d.stride(i))) for d in grads]
        self.orders = [o if o[0] == 0 else tuple(range(len(o))) for o in self.orders]
        return None

    def reason(self, plan: ClientPlan) -> str | None:
        """Why this client must be trained by the per-client loop, or None."""
        if self.model_reason is not None:
            return self.model_reason
        if plan.trainable not in self.parts:
            return f"ClientPlan.trainable={plan.trainable!r} is unknown"
        if plan.epochs == 0:
            return "ClientPlan.epochs=0 (no training)"
        if plan.phases:
            return "ClientPlan.phases (several local phases)"
        if plan.batch_steps != 1:
            return "ClientPlan.batch_steps > 1 (several steps per batch)"
        if plan.optimizer is not None:
            return "ClientPlan.optimizer (a plan's own optimizer)"
        return next((r for r in map(hook_reason, plan.hooks) if r is not None), None)

    def _forward(self):
        net, names = self.trainer.net, self.names
        return vmap(lambda ps, x: functional_call(net, dict(zip(names, ps)), (x,)), randomness="different")

    # ---- training ------------------------------------------------------------------------------------
    def _epochs(self, plan: ClientPlan) -> int:
        return plan.epochs if plan.epochs is not None else self.trainer.local_epochs

    def train(self, jobs: Sequence[Job]) -> list[ClientResult]:
        """Train every job (all must have ``reason(plan) is None``); results in the order of ``jobs``.

        Jobs are grouped by (trainable, lr), sorted by their number of steps (similar clients share a group, so
        few finish early) and cut into groups of ``group_size``."""
        bs = self.trainer.batch_size
        steps = [self._epochs(p) * len(batch_bounds(len(idx), bs)) for _, p, idx, _ in jobs]
        lr = [p.lr if p.lr is not None else self.trainer.opt_cfg.lr for _, p, _, _ in jobs]
        order = sorted(range(len(jobs)), key=lambda i: (jobs[i][1].trainable, lr[i], -steps[i], i))
        out: list[ClientResult | None] = [None] * len(jobs)
        size = self.group_size or len(jobs)
        start = 0
        while start < len(order):
            key = (jobs[order[start]][1].trainable, lr[order[start]])
            group = [order[start]]
            while (start + len(group) < len(order) and len(group) < size
                   and (jobs[order[start + len(group)]][1].trainable, lr[order[start + len(group)]]) == key):
                group.append(order[start + len(group)])
            for i, r in zip(group, self._train_group([jobs[i] for i in group], key[0], key[1])):
                out[i] = r
            start += len(group)
        return out

    def _schedule(self, jobs: Sequence[Job]):
        """Per-step pool indices (T, G, W), real-sample mask (T, G, W), steps per client and per-step widths (the
        widest batch among the clients still training at step t: a step's real samples are its first columns, so
        the columns beyond it are padding for every client and are not computed), as the loop batches."""
        bs, per = self.trainer.batch_size, []
        for _, plan, indices, seed in jobs:
            idx = torch.as_tensor(indices, dtype=torch.long)
            n, gen = len(idx), torch.Generator().manual_seed(seed)
            orders = [idx[torch.randperm(n, generator=gen)] for _ in range(self._epochs(plan))]
            per.append((orders, batch_bounds(n, bs)))
        width = max((b - a for _, bounds in per for a, b in bounds), default=1)
        steps = [len(o) * len(b) for o, b in per]
        T, G = max(steps, default=0), len(jobs)
        index = torch.zeros(T, G, width, dtype=torch.long)
        mask = torch.zeros(T, G, width)
        col = torch.arange(width)
        for g, (orders, bounds) in enumerate(per):
            if not bounds:
                continue
            starts = torch.tensor([a for a, _ in bounds])
            valid = col < torch.tensor([b - a for a, b in bounds])[:, None]  # (s, W)
            pos = torch.where(valid, starts[:, None] + col, starts[:, None])  # padding repeats a real sample
            n = len(orders[0])
            pos = (torch.arange(len(orders))[:, None, None] * n + pos).reshape(-1, width)  # (E·s, W)
            index[:steps[g], g] = torch.cat(orders)[pos]
            mask[:steps[g], g] = valid.repeat(len(orders), 1)
        sizes = [[b - a for a, b in bounds] * len(orders) for orders, bounds in per]
        widths = [max(w[t] for w in sizes if t < len(w)) for t in range(T)]
        return index, mask, steps, widths

    def _train_group(self, jobs: Sequence[Job], trainable: str, lr: float) -> list[ClientResult]:
        tr, c = self.trainer, self.trainer.opt_cfg
        fabric, dev = tr.fabric, tr.fabric.device
        G, bs = len(jobs), tr.batch_size
        n_steps = [self._epochs(p) * len(batch_bounds(len(idx), bs)) for _, p, idx, _ in jobs]
        perm = sorted(range(G), key=lambda g: -n_steps[g])  # the clients still training are then a prefix
        if perm != list(range(G)):
            res = self._train_group([jobs[g] for g in perm], trainable, lr)
            return [res[perm.index(g)] for g in range(G)]
        unperm = [tuple(sorted(range(len(o)), key=o.__getitem__)) for o in self.orders]
        train_ids = self.parts[trainable]
        bufs, state = self._workspace(G, FunctionalOptimizer.moments(c.name, c.momentum), train_ids)
        params = self._stack_start(jobs, unperm, bufs)
        for _, plan, _, _ in jobs:
            if plan.hooks:
                tr.layout.load(plan.weights)  # setup may read the start weights through the context
                for h in plan.hooks:
                    h.setup(tr.hook_ctx)
        index, mask, steps, widths = self._schedule(jobs)
        index, mask = index.to(dev), mask.to(dev)
        live = [sum(s > t for s in steps) for t in range(index.shape[0])]  # clients still training: a prefix
        hooked = [g for g, (_, plan, _, _) in enumerate(jobs) if plan.hooks]
        opt = FunctionalOptimizer(c.name, [params[i] for i in train_ids], lr, c.momentum, c.weight_decay, state=state)
        forward = self._forward()
        torch.manual_seed(jobs[0][3])  # dropout masks of this group (vmap randomness="different")
        tr.module.train()
        loss_sum = torch.zeros(G, device=dev)
        for t, g_t in enumerate(live):
            leaves = [p[:g_t].detach().requires_grad_(i in train_ids) for i, p in enumerate(params)]
            views = [p.permute(u) for p, u in zip(leaves, unperm)]  # (g_t, *parameter shape)
            sel, m = index[t, :g_t, :widths[t]].reshape(-1), mask[t, :g_t, :widths[t]]
            # index_select: the same rows as tr.x[sel], several times faster than advanced indexing on CPU
            xb = tr.x.index_select(0, sel).view(*m.shape, *tr.x.shape[1:])
            with fabric.autocast():
                logits = forward(views, xb)  # (g_t, W, C)
                ce = F.cross_entropy(logits.flatten(0, 1), tr.y.index_select(0, sel), reduction="none")
                loss = (ce.view_as(m) * m).sum(1) / m.sum(1)
                extra = [self._hook_loss(jobs[g][1].hooks, [p[g] for p in views]) for g in hooked if g < g_t]
                if extra:
                    loss = loss.index_add(0, torch.tensor(hooked[:len(extra)], device=dev),
                                          torch.stack(extra).to(loss.dtype))
            grads = torch.autograd.grad(loss.sum(), [leaves[i] for i in train_ids])
            opt.step(grads, g_t)
            loss_sum[:g_t] += loss.detach().float()
        final = torch.empty(G, tr.layout.size, device=dev)  # (G, P): one row per client, returned as views
        for (a, b, shape), p, u in zip(self.slots, params, unperm):
            final[:, a:b].view(G, *shape).copy_(p.permute(u))
        losses = loss_sum.tolist()
        return [ClientResult(client=k, weights=final[g], num_samples=len(idx), train_loss=losses[g] / max(steps[g], 1),
                             num_steps=steps[g]) for g, (k, _, idx, _) in enumerate(jobs)]

    def _workspace(self, G: int, moments: int, train_ids: list[int]):
        """Buffers for the stacked parameters (each ``(G, ...)`` in its stored order; contents undefined) and
        zeroed optimizer-state buffers (``moments`` lists, over ``train_ids``): prefixes of the kept ones when
        all of them fit ``keep_mib`` MiB, else fresh ones (not kept)."""
        tr, dev = self.trainer, self.trainer.fabric.device
        stored = [[(G, *shape)[i] for i in order][1:] for (_, _, shape), order in zip(self.slots, self.orders)]

        def fresh(n: int) -> list[torch.Tensor]:
            return [torch.empty([n, *s], dtype=p.dtype, device=dev) for s, p in zip(stored, tr.params)]

        per_client = sum(math.prod(s) * p.element_size() for s, p in zip(stored, tr.params))
        kept = self._kept
        if kept is None or kept[0][0].shape[0] < G or len(kept) < 1 + moments:
            cap = max(G, kept[0][0].shape[0] if kept else 0)
            if (1 + moments) * cap * per_client > self.keep_mib * 2 ** 20:
                params = fresh(G)
                return params, [[torch.zeros_like(params[i]) for i in train_ids] for _ in range(moments)]
            self._kept = kept = None  # let the smaller ones go first
            kept = self._kept = [fresh(cap) for _ in range(1 + moments)]
        return ([b[:G] for b in kept[0]],
                [[kept[1 + j][i][:G].zero_() for i in train_ids] for j in range(moments)])

    def _stack_start(self, jobs: Sequence[Job], unperm: list[tuple[int, ...]],
                     bufs: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
        """The group's start weights as one ``(G, ...)`` tensor per parameter, each stored contiguous with its
        dimensions permuted to the memory order of its gradient (batched matmuls give transposed weight gradients),
        so the fused optimizer kernels need no copies. Each value is copied once, straight from the plans' flat
        weights, into ``bufs`` (fresh buffers when None); start weights shared by the whole group (one tensor in
        every plan: FedAvg's global model) are broadcast rather than stacked first."""
        tr, dev, G = self.trainer, self.trainer.fabric.device, len(jobs)
        weights = [plan.weights for _, plan, _, _ in jobs]
        shared = all(w is weights[0] for w in weights)
        params = []
        for (a, b, shape), p, order, u in zip(self.slots, tr.params, self.orders, unperm):
            full = (G, *shape)
            buf = bufs[len(params)] if bufs is not None else torch.empty([full[i] for i in order], dtype=p.dtype,
                                                                          device=dev)
            view = buf.permute(u)  # (G, *shape)
            if shared:
                view.copy_(weights[0][a:b].to(dev, torch.float32).reshape(shape).expand(full))
            else:
                for g, w in enumerate(weights):
                    view[g].copy_(w[a:b].to(dev, torch.float32).reshape(shape))
            params.append(buf)
        return params

    @staticmethod
    def _hook_loss(hooks, params) -> torch.Tensor:
        terms = [t for t in (h.functional_loss(params) for h in hooks) if t is not None]
        return sum(terms[1:], terms[0]) if terms else params[0].new_zeros(())
