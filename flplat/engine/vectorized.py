"""Vectorised clients: a group of clients trained at once with ``torch.func`` on stacked parameters.

The per-client loop (:meth:`flplat.engine.client.ClientTrainer.train`) pays Python, dispatcher and optimizer overhead
per client and step; for the small models of these papers that overhead dominates. Here the G clients of a group
keep their parameters as ``(G, ...)`` tensors; each step runs one stacked forward of the shared network
(:class:`~flplat.maths.stacked.StackedForward`: ``vmap`` over ``functional_call``, so a linear layer becomes one
batched matmul), one backward of the summed per-client losses (clients are independent, so each client's slice of
the gradient is the gradient of its own loss), and one functional optimizer update on the stacked tensors.

The two trainers share one client-execution core, so they cannot drift apart:

* batches: :func:`~flplat.engine.client.client_batches` (each epoch's ``randperm`` from the client's seed, cut by
  :func:`~flplat.engine.client.batch_bounds`). A step's batches are padded to the widest batch among the clients
  still training at that step and the loss is the mean over the client's real samples (a per-sample mask), so
  padding changes nothing;
* a plan's defaults (``lr``, ``epochs``, ``optimizer``): :func:`~flplat.engine.client.resolve_plan`; clients are
  grouped by (``trainable``, lr, optimizer);
* the loss: :func:`~flplat.maths.losses.task_loss` per sample -- cross-entropy, or binary cross-entropy on
  multi-label data (CheXpert);
* the optimizer: :class:`~flplat.engine.optim.FunctionalOptimizer`, :func:`~flplat.engine.optim.make_optimizer`'s
  Adam / AdamW / SGD updates with fresh state per client. Clients are sorted by their number of steps, so at step t
  the clients still training are a prefix of the group; finished clients get neither an update nor an
  optimizer-state change (Adam's step does not advance);
* batch norm: every client keeps its own running statistics, stacked with its parameters and updated after each of
  its steps; a padded step normalises each client's batch with the statistics of its real samples only (see
  :mod:`flplat.maths.stacked`). The returned weights carry them, as the loop's flat vector does;
* ``plan.trainable`` (only that part is updated; the rest gets no update and no state);
* ``plan.phases`` (Ditto's personal then global model, FedRep's head then body): phase by phase, every client's
  k-th phase in one vectorised set of groups, each starting from the phase's weights or the previous phase's
  result, with the client-round seed, as the loop runs them one after the other (:meth:`VectorizedTrainer.train`);
* hooks that declare :attr:`~flplat.protocol.strategy.LocalHook.vectorizes` (FedProx's proximal term): their
  :meth:`~flplat.protocol.strategy.LocalHook.functional_loss` is evaluated per client on its slices of the stacked
  parameters and added to its loss;
* hooks with a stacked form (:attr:`~flplat.protocol.strategy.LocalHook.Stacked`, :mod:`flplat.protocol.stacked`:
  APFL's local model and α, pFedMe's moving centre, DA-PFL's post-step pull): one per hook position of a group, whose
  loss term is added to every client's loss, whose ``after_step`` runs after every optimizer step on the live clients,
  and whose ``finalize`` gives each client's ``extra``; clients are grouped by their stacked hooks' classes;
* ``plan.batch_steps`` (pFedMe's K inner steps on one minibatch): each batch serves that many consecutive steps;
* precision: the forward runs under ``fabric.autocast()``. With ``16-mixed`` the loop steps through Fabric's
  gradient scaler, and each client here has its own scale (:class:`~flplat.engine.optim.StackedGradScaler`): its
  loss is scaled by it, its gradients unscaled, a client whose gradients overflow skips that step, and its scale
  backs off or grows as the scaler's would. Both trainers start every client from the trainer's ``loss_scale``
  (see :class:`~flplat.engine.client.ClientTrainer`).

What differs: dropout draws its masks from the global generator with ``vmap(randomness="different")``, seeded once
per group with the group's first client seed, so with dropout > 0 the masks (and results) differ from the loop's.
On CPU, autocast does not reach the batched matmuls of ``vmap`` (torch 2.14): under ``bf16-mixed`` / ``16-mixed``
the stacked forward computes in float32 where the loop computes in 16 bits (agreement to 16-bit rounding).

Not vectorised (the executor trains these clients with the loop and logs why, once): models ``vmap`` cannot run
(:func:`~flplat.maths.stacked.probe`) or whose normalisation state the stack cannot keep per client
(:func:`~flplat.maths.stacked.stack_reason`), and plans that need the loop: phases with phases of their own, and
hooks that declare neither :attr:`~flplat.protocol.strategy.LocalHook.vectorizes` nor a stacked form (a plugin's;
no built-in hook).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

import numpy as np
import torch

from flplat.engine.client import ClientTrainer, LocalSettings, batch_bounds, client_batches, resolve_plan
from flplat.engine.memory import retain_freed_memory
from flplat.engine.optim import FunctionalOptimizer, StackedGradScaler
from flplat.maths.losses import task_loss
from flplat.maths.stacked import StackedForward, probe, stack_reason
from flplat.protocol.stacked import StackedHook, StackedHookContext, StackedStep
from flplat.protocol.strategy import ClientPlan, ClientResult, LocalHook

Job = tuple[int, ClientPlan, np.ndarray, int]  # (client, plan, train indices, seed): ClientTrainer.train's arguments
KEEP_MIB = 512  # federation.vectorize_keep_mib's default


def hook_reason(h: LocalHook) -> str | None:
    """Why hook ``h`` cannot run vectorised (it declares neither :attr:`~LocalHook.vectorizes` nor a
    :attr:`~LocalHook.Stacked` form), or None."""
    if h.vectorizes or h.Stacked is not None:
        return None
    return f"hook {type(h).__name__} declares neither vectorizes nor a Stacked form"


def _mean_task_loss(logits: torch.Tensor, y: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Each client's mean :func:`task_loss` over its real samples: ``logits`` ``(g, W, C)``, ``y`` ``(g·W,)``, the
    real-sample mask ``m`` ``(g, W)``."""
    per = task_loss(logits.flatten(0, 1), y, reduction="none").view_as(m)
    return (per * m).sum(1) / m.sum(1)


def stacked_types(plan: ClientPlan) -> tuple[str, ...]:
    """The classes of ``plan``'s hooks that run in their stacked form (those not declaring ``vectorizes``), named."""
    return tuple(f"{type(h).__module__}.{type(h).__qualname__}" for h in plan.hooks if not h.vectorizes)


class VectorizedTrainer:
    """Trains groups of at most ``group_size`` clients (0: all at once) with the network, data, optimizer
    settings, batch size and epochs of an existing :class:`ClientTrainer`.

    The stacked parameters and optimizer state of a group are kept for the next group (the next round) while
    they take at most ``keep_mib`` MiB (``federation.vectorize_keep_mib``; 0: never): freshly allocated, every
    round's tens of MB of them cost a page fault per 4 KiB page (measured by tools/benchmarks/bench_vec_bound.py: the
    kernel's page-fault time was ~15 % of a vectorised round of the FMNIST MLP, K = 50 setting), reused they cost one
    overwrite. For the same reason ``keep_mib`` > 0 also lets the C allocator keep that much freed memory for the
    per-step gradients (:func:`retain_freed_memory`)."""

    def __init__(self, trainer: ClientTrainer, group_size: int = 0, keep_mib: int = KEEP_MIB):
        self.trainer = trainer
        self.group_size = group_size
        self.keep_mib = keep_mib
        self._kept: list[list[torch.Tensor]] | None = None  # [parameter buffers, moment buffers...], (G_max, ...)
        retain_freed_memory(keep_mib)
        net, lay = trainer.net, trainer.layout
        name_of = {id(p): n for n, p in net.named_parameters()}
        self.names = [name_of[id(p)] for p in trainer.params]  # HookContext.params order
        self.buffer_names = [n for n, is_p in zip(lay.names, lay.is_param) if not is_p]  # batch-norm statistics
        pos = {n: i for i, n in enumerate(lay.names)}
        self.slots, self.buffer_slots = ([(int(lay.offsets[pos[n]]), int(lay.offsets[pos[n] + 1]), lay.shapes[pos[n]])
                                          for n in names] for names in (self.names, self.buffer_names))
        self.parts = {k: [i for i, p in enumerate(trainer.params) if id(p) in {id(q) for q in v}]
                      for k, v in trainer._part_params.items()}
        self.orders = [tuple(range(p.dim() + 1)) for p in trainer.params]  # memory order of the stacked tensors
        self.forward = StackedForward(net, self.names + self.buffer_names, randomness="different")
        self.scaler = trainer.scaler  # 16-mixed: Fabric's GradScaler (None: no loss scaling)
        self.model_reason = self._model_reason()

    # ---- what can run vectorised ---------------------------------------------------------------------
    def _model_reason(self) -> str | None:
        tr = self.trainer
        reason = stack_reason(tr.net)
        if reason is not None:
            return reason
        own = dict(zip(tr.layout.names, tr.layout.tensors))
        reason, grads = probe(self.forward, tr.net, [own[n] for n in self.forward.names], tr.x[:3],
                              tr.fabric.autocast, train=True)
        if reason is not None:
            return reason
        # the memory order (outermost first) of each gradient, batch dimension first
        self.orders = [tuple(sorted(range(d.dim()), key=lambda i: -d.stride(i))) for d in grads]
        self.orders = [o if o[0] == 0 else tuple(range(len(o))) for o in self.orders]
        return None

    def reason(self, plan: ClientPlan) -> str | None:
        """Why this client must be trained by the per-client loop, or None."""
        if self.model_reason is not None:
            return self.model_reason
        reason = self._phase_reason(plan)
        for phase in plan.phases:
            if reason is not None:
                break
            reason = "a phase with phases of its own" if phase.phases else self._phase_reason(phase)
        return reason

    def _phase_reason(self, plan: ClientPlan) -> str | None:
        """Why one phase of a plan cannot run vectorised (its own settings, not its further phases), or None."""
        if plan.trainable not in self.parts:
            return f"ClientPlan.trainable={plan.trainable!r} is unknown"
        if plan.epochs == 0:
            return "ClientPlan.epochs=0 (no training)"
        if plan.batch_steps < 1:
            return f"ClientPlan.batch_steps={plan.batch_steps!r} (no step per batch)"
        return next((r for r in map(hook_reason, plan.hooks) if r is not None), None)

    # ---- training ------------------------------------------------------------------------------------
    def _settings(self, plan: ClientPlan) -> LocalSettings:
        return resolve_plan(plan, self.trainer.defaults)

    def _num_steps(self, settings: LocalSettings, plan: ClientPlan, indices) -> int:
        return settings.epochs * len(batch_bounds(len(indices), self.trainer.batch_size)) * plan.batch_steps

    def train(self, jobs: Sequence[Job]) -> list[ClientResult]:
        """Train every job (all must have ``reason(plan) is None``); results in the order of ``jobs``.

        A plan with ``phases`` runs them phase by phase as the loop does: first every job's own phase, then the
        jobs' first further phases as a new set of jobs (each from its phase's ``weights``, or from the weights its
        previous phase ended with when None; on its phase's ``indices`` or the job's; the same client-round seed),
        and so on. A result's weights are its last phase's, ``extra["phase_weights"]`` the weights after each
        earlier phase, its loss the mean over all its steps, its gradient scale the last phase's."""
        results = self._train_phase([(k, dataclasses.replace(plan, phases=()), idx, seed)
                                     for k, plan, idx, seed in jobs])
        phased = [i for i, (_, plan, _, _) in enumerate(jobs) if plan.phases]
        extras = {i: dict(r.extra) for i, r in enumerate(results) if jobs[i][1].phases}
        loss_sums = {i: results[i].train_loss * results[i].num_steps for i in phased}
        steps = {i: results[i].num_steps for i in phased}
        for depth in range(max((len(jobs[i][1].phases) for i in phased), default=0)):
            ids = [i for i in phased if len(jobs[i][1].phases) > depth]
            phase_jobs = []
            for i in ids:
                k, plan, idx, seed = jobs[i]
                phase, before = plan.phases[depth], results[i].weights
                extras[i].setdefault("phase_weights", []).append(before)
                phase_jobs.append((k, dataclasses.replace(phase, weights=before if phase.weights is None
                                                          else phase.weights),
                                   phase.indices if phase.indices is not None else idx, seed))
            for i, r in zip(ids, self._train_phase(phase_jobs)):
                loss_sums[i] += r.train_loss * r.num_steps
                steps[i] += r.num_steps
                extras[i].update(r.extra)
                results[i] = r
        for i in phased:
            r = results[i]
            results[i] = ClientResult(client=r.client, weights=r.weights, num_samples=len(jobs[i][2]),
                                      train_loss=loss_sums[i] / max(steps[i], 1), num_steps=steps[i],
                                      extra=extras[i], loss_scale=r.loss_scale)
        return results

    def _train_phase(self, jobs: Sequence[Job]) -> list[ClientResult]:
        """Train one-phase jobs: grouped by (trainable, lr, optimizer, steps per batch, classes of the stacked
        hooks), sorted by their number of steps (similar clients share a group, so few finish early) and cut into
        groups of ``group_size``."""
        settings = [self._settings(p) for _, p, _, _ in jobs]
        key = [(s.trainable, s.lr, s.optimizer, p.batch_steps, stacked_types(p))
               for s, (_, p, _, _) in zip(settings, jobs)]
        steps = [self._num_steps(s, p, idx) for s, (_, p, idx, _) in zip(settings, jobs)]
        order = sorted(range(len(jobs)), key=lambda i: (key[i], -steps[i], i))
        out: list[ClientResult | None] = [None] * len(jobs)
        size = self.group_size or len(jobs)
        start = 0
        while start < len(order):
            group = [order[start]]
            while (start + len(group) < len(order) and len(group) < size
                   and key[order[start + len(group)]] == key[order[start]]):
                group.append(order[start + len(group)])
            for i, r in zip(group, self._train_group([jobs[i] for i in group], [settings[i] for i in group])):
                out[i] = r
            start += len(group)
        return out

    def _schedule(self, jobs: Sequence[Job], epochs: Sequence[int]):
        """Per-step pool indices (T, G, W), real-sample mask (T, G, W), steps per client, per-step widths (the
        widest batch among the clients still training at step t: a step's real samples are its first columns, so
        the columns beyond it are padding for every client and are not computed) and per-step "no padding" flags
        (every live client's batch is that wide), as the loop batches (:func:`client_batches`); a plan's
        ``batch_steps`` consecutive steps share each batch."""
        bs = self.trainer.batch_size
        per = [client_batches(indices, seed, e, bs) for (_, _, indices, seed), e in zip(jobs, epochs)]
        reps = [plan.batch_steps for _, plan, _, _ in jobs]
        width = max((b - a for _, bounds in per for a, b in bounds), default=1)
        steps = [len(o) * len(b) * r for (o, b), r in zip(per, reps)]
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
            index[:steps[g], g] = torch.cat(orders)[pos].repeat_interleave(reps[g], 0)
            mask[:steps[g], g] = valid.repeat(len(orders), 1).repeat_interleave(reps[g], 0)
        sizes = [[b - a for a, b in bounds for _ in range(r)] * len(orders) for (orders, bounds), r in zip(per, reps)]
        widths = [max(w[t] for w in sizes if t < len(w)) for t in range(T)]
        full = [all(w[t] == widths[t] for w in sizes if t < len(w)) for t in range(T)]
        return index, mask, steps, widths, full

    def _train_group(self, jobs: Sequence[Job], settings: Sequence[LocalSettings]) -> list[ClientResult]:
        """One group (its clients share trainable, lr and optimizer: ``settings[0]``'s)."""
        tr, s = self.trainer, settings[0]
        dev, G = tr.fabric.device, len(jobs)
        n_steps = [self._num_steps(si, plan, idx) for si, (_, plan, idx, _) in zip(settings, jobs)]
        perm = sorted(range(G), key=lambda g: -n_steps[g])  # the clients still training are then a prefix
        if perm != list(range(G)):
            res = self._train_group([jobs[g] for g in perm], [settings[g] for g in perm])
            return [res[perm.index(g)] for g in range(G)]
        unperm = [tuple(sorted(range(len(o)), key=o.__getitem__)) for o in self.orders]
        train_ids = self.parts[s.trainable]
        name, momentum, wd = s.optimizer
        bufs, state = self._workspace(G, FunctionalOptimizer.moments(name, momentum), train_ids)
        params = self._stack_start(jobs, unperm, bufs)
        stats = self._stack_buffers(jobs)
        functional = [[h for h in plan.hooks if h.vectorizes] for _, plan, _, _ in jobs]  # each client's, once
        for (_, plan, _, _), hooks in zip(jobs, functional):
            if hooks:
                tr.layout.load(plan.weights)  # setup may read the start weights through the context
                for h in hooks:
                    h.setup(tr.hook_ctx)
        stacked = self._stacked_hooks(jobs, [p.permute(u) for p, u in zip(params, unperm)])
        index, mask, steps, widths, full = self._schedule(jobs, [si.epochs for si in settings])
        index, mask = index.to(dev), mask.to(dev)
        live = [sum(n > t for n in steps) for t in range(index.shape[0])]  # clients still training: a prefix
        hooked = [g for g, hooks in enumerate(functional) if hooks]
        opt = FunctionalOptimizer(name, [params[i] for i in train_ids], s.lr, momentum, wd, state=state)
        scaler = None if self.scaler is None else StackedGradScaler(self.scaler, tr.loss_scale, G, dev)
        torch.manual_seed(jobs[0][3])  # dropout masks of this group (vmap randomness="different")
        tr.module.train()
        loss_sum = torch.zeros(G, device=dev)
        for t, g_t in enumerate(live):
            leaves = [p[:g_t].detach().requires_grad_(i in train_ids) for i, p in enumerate(params)]
            views = [p.permute(u) for p, u in zip(leaves, unperm)]  # (g_t, *parameter shape)
            sel, m = index[t, :g_t, :widths[t]].reshape(-1), mask[t, :g_t, :widths[t]]
            # index_select: the same rows as tr.x[sel], several times faster than advanced indexing on CPU
            xb, yb = tr.x.index_select(0, sel).view(*m.shape, *tr.x.shape[1:]), tr.y.index_select(0, sel)
            live_stats = [b[:g_t] for b in stats]
            loss = self._losses(functional, [g for g in hooked if g < g_t], views, live_stats, xb, yb, m, full[t],
                                stacked)
            total = loss.sum() if scaler is None else scaler.scale(loss).sum()
            grads = torch.autograd.grad(total, [leaves[i] for i in train_ids])
            skip = None
            if scaler is not None:
                grads, skip = scaler.unscale(grads, g_t)
                scaler.update(skip, g_t)
            opt.step(grads, g_t, skip)
            if stacked:
                step = StackedStep(t, [p[:g_t].permute(u) for p, u in zip(params, unperm)], s.lr,
                                   functools.partial(self._task_losses, stats=live_stats, xb=xb, yb=yb, m=m,
                                                     full=full[t]))
                for sh in stacked:
                    sh.after_step(step)
            loss_sum[:g_t] += loss.detach().float()
        return self._results(jobs, params, stats, unperm, loss_sum, steps, scaler, stacked)

    def _stacked_hooks(self, jobs: Sequence[Job], start: list[torch.Tensor]) -> list[StackedHook]:
        """The stacked forms of the group's hooks that do not declare ``vectorizes``, one per hook position (every
        plan of a group has hooks of the same classes there: :meth:`_train_phase` groups by them)."""
        per_plan = [[h for h in plan.hooks if not h.vectorizes] for _, plan, _, _ in jobs]
        if not per_plan[0]:
            return []
        ctx = StackedHookContext(len(jobs), self.trainer.fabric.device, start, self.slots, FunctionalOptimizer)
        return [type(at[0]).Stacked(list(at), ctx) for at in zip(*per_plan)]

    def _task_losses(self, params: list[torch.Tensor], stats: list[torch.Tensor], xb: torch.Tensor,
                     yb: torch.Tensor, m: torch.Tensor, full: bool) -> torch.Tensor:
        """``StackedStep.losses`` of one step (its batch ``xb``, ``yb``, real where ``m``): each live client's mean
        task loss at the stacked ``params``, in training mode, with copies of the batch-norm statistics (left
        unchanged), without autocast."""
        logits, _ = self.forward.with_stats(list(params) + [b.clone() for b in stats], xb, None if full else m)
        return _mean_task_loss(logits, yb, m)

    def _losses(self, functional: list[list[LocalHook]], hooked: list[int], views: list[torch.Tensor],
                stats: list[torch.Tensor], xb: torch.Tensor, yb: torch.Tensor, m: torch.Tensor, full: bool,
                stacked: Sequence[StackedHook] = ()) -> torch.Tensor:
        """One step's per-client losses ``(g,)`` on the batch ``xb`` ``(g, W, ...)``, ``yb`` (``(g·W,)``, real where
        ``m``): the mean :func:`task_loss` over each client's real samples plus the terms of the ``functional`` hooks
        of the clients ``hooked`` and of the ``stacked`` hooks. The batch-norm statistics in ``stats`` are updated
        in place to the step's."""
        tr, dev = self.trainer, self.trainer.fabric.device
        with tr.fabric.autocast():
            logits, new = self.forward.with_stats(views + stats, xb, None if full else m)  # (g, W, C)
            loss = _mean_task_loss(logits, yb, m)
            if hooked:
                extra = torch.stack([self._hook_loss(functional[k], [p[k] for p in views]) for k in hooked])
                loss = loss.index_add(0, torch.tensor(hooked, device=dev), extra.to(loss.dtype))
            for sh in stacked:
                term = sh.loss(views)
                if term is not None:
                    loss = loss + term.to(loss.dtype)
        if new:
            with torch.no_grad():
                for name, b in zip(self.buffer_names, stats):
                    if name in new:
                        b.copy_(new[name])
        return loss

    def _results(self, jobs, params, stats, unperm, loss_sum, steps, scaler, stacked=()) -> list[ClientResult]:
        """Each client's result: its flat weights (parameters and batch-norm statistics, rows of one ``(G, P)``
        tensor), mean training loss, steps, (16-mixed) final gradient scale and what its stacked hooks report."""
        G, tr = len(jobs), self.trainer
        final = torch.empty(G, tr.layout.size, device=tr.fabric.device)  # (G, P): one row per client, returned as views
        for (a, b, shape), p, u in zip(self.slots, params, unperm):
            final[:, a:b].view(G, *shape).copy_(p.permute(u))
        for (a, b, shape), p in zip(self.buffer_slots, stats):
            final[:, a:b].view(G, *shape).copy_(p)
        losses = loss_sum.tolist()
        scales = scaler.scales.tolist() if scaler is not None else [None] * G
        reports: list[dict] = [{} for _ in jobs]
        for sh in stacked:
            for g, d in enumerate(sh.finalize(final)):
                reports[g].update(d)
        return [ClientResult(client=k, weights=final[g], num_samples=len(idx), train_loss=losses[g] / max(steps[g], 1),
                             num_steps=steps[g], extra=reports[g], loss_scale=scales[g])
                for g, (k, _, idx, _) in enumerate(jobs)]

    def _stack_buffers(self, jobs: Sequence[Job]) -> list[torch.Tensor]:
        """The group's start batch-norm statistics (the float buffers of the plans' flat weights), ``(G, ...)``."""
        tr, dev = self.trainer, self.trainer.fabric.device
        own = dict(zip(tr.layout.names, tr.layout.tensors))
        return [torch.stack([plan.weights[a:b].to(dev, own[n].dtype).view(shape) for _, plan, _, _ in jobs])
                for n, (a, b, shape) in zip(self.buffer_names, self.buffer_slots)]

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
