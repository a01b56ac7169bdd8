"""The client optimizers, twice: ``torch.optim`` for the per-client loop, and the same updates on stacked parameters.

:func:`make_optimizer` builds the ``torch.optim`` optimizer the per-client loop
(:class:`~flplat.engine.client.ClientTrainer`) steps; :class:`FunctionalOptimizer` applies the very same updates to
G clients' parameters stacked as ``(G, ...)`` tensors (:mod:`flplat.engine.vectorized`). They live side by side so
that a name, a default or a formula cannot change in one and not in the other: both take their names from
``flplat.config.OPTIMIZERS`` and Adam's constants from this module, and tests/test_optim.py checks them against
each other step by step (SGD with momentum and weight decay, Adam, AdamW; fused kernels and spelled-out formulas).

:class:`StackedGradScaler` is ``torch.amp.GradScaler`` per client for ``16-mixed`` precision: each client scales its
own loss by its own scale, its gradients are unscaled by it, a client whose gradients hold an inf or NaN skips
that step (no update, no optimizer-state change, its Adam step count does not advance), and each client's scale
backs off or grows by the scaler's rule -- what Fabric's scaler does for one client in the loop.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from flplat.config import OPTIMIZERS  # federation.optimizer.name's choices

ADAM_BETAS = (0.9, 0.999)  # torch.optim's defaults, passed explicitly to both implementations
ADAM_EPS = 1e-8


def make_optimizer(name: str, params, lr: float, momentum: float, weight_decay: float,
                   fused: bool = False) -> torch.optim.Optimizer:
    """The per-client loop's optimizer (``momentum`` is SGD's; Adam and AdamW use :data:`ADAM_BETAS`).

    ``fused=True``: torch.optim's fused kernels (the loop asks for them on CUDA): one kernel per step instead of
    several per parameter, and with ``16-mixed`` ``GradScaler.step`` hands them its inf flag as a device tensor
    instead of reading it on the host (``found_inf.item()``, one device-to-host copy and stream sync per batch).
    They agree with the default single-tensor path to float rounding (~1e-7 relative)."""
    extra = {"fused": True} if fused else {}
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=ADAM_BETAS, eps=ADAM_EPS, weight_decay=weight_decay, **extra)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=ADAM_BETAS, eps=ADAM_EPS, weight_decay=weight_decay, **extra)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay, **extra)
    raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")


def _dense(t: torch.Tensor) -> bool:
    """Whether ``t`` covers its memory without gaps or overlaps (in some dimension order)."""
    expected = 1
    for d in sorted(range(t.dim()), key=t.stride):
        if t.size(d) != 1 and t.stride(d) != expected:
            return False
        expected *= t.size(d)
    return True


def _per_client(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``(g,)`` values shaped to broadcast over ``(g, ...)`` stacked tensors."""
    return v.view(-1, *[1] * (like.dim() - 1))


class FunctionalOptimizer:
    """:func:`make_optimizer`'s updates on stacked ``(G, ...)`` parameters, updating only the first ``g`` clients at
    each step (clients only ever drop out at the end, so the clients still training are a prefix).

    ``fused=True`` runs torch.optim's own fused kernels (``torch._fused_adam_`` & co., what ``fused=True`` runs;
    one pass over memory instead of ~7, which matters once G stacked copies no longer fit in cache); they agree
    with the per-client loop's single-tensor path to float rounding (~1e-7 relative). ``fused=False`` spells the
    single-tensor formulas out and is bit-identical to it. State is fresh at construction (zeros; ``state``:
    zeroed buffers shaped like ``params``, one list per moment, to use instead).

    Every client takes the same number of steps unless a step skips some of them (``16-mixed``: an inf in their
    gradients); Adam then keeps a step count per client, as each client's own ``torch.optim.Adam`` would. A step
    given ``skip`` (every step under a gradient scaler) runs the spelled-out formulas with per-client step counts and
    keeps the skipped clients' rows by a mask, all on the device: no step reads a value back to the host (which
    would cost a device-to-host copy and a stream sync per batch on a GPU). The fused kernels read their step count
    from one device tensor filled in place, so a step copies nothing from the host either."""

    def __init__(self, name: str, params: list[torch.Tensor], lr: float, momentum: float, weight_decay: float,
                 fused: bool = True, state: list[list[torch.Tensor]] | None = None):
        if name not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
        self.name, self.params, self.lr, self.momentum, self.wd = name, params, lr, momentum, weight_decay
        self.betas, self.eps, self.t = ADAM_BETAS, ADAM_EPS, 0
        self.skipped: torch.Tensor | None = None  # (G,) steps each client skipped; None until a step gets ``skip``
        self._step_t: torch.Tensor | None = None  # the fused kernels' step count (filled in place every step)
        self.fused = fused and hasattr(torch, "_fused_adam_") and all(
            p.device.type in ("cpu", "cuda") and _dense(p[:1]) for p in params)  # a prefix of clients: dense too
        self.state = state if state is not None else [[torch.zeros_like(p) for p in params]
                                                      for _ in range(self.moments(name, momentum))]

    @staticmethod
    def moments(name: str, momentum: float) -> int:
        """State tensors per parameter: Adam's two moments, SGD's momentum buffer (none without momentum)."""
        return 2 if name != "sgd" else int(momentum != 0)

    @torch.no_grad()
    def step(self, grads: Sequence[torch.Tensor], g: int, skip: torch.Tensor | None = None) -> None:
        """Update clients ``[:g]`` with their gradients ``grads`` (each ``(g, ...)``); ``skip`` (bool ``(g,)``):
        clients whose step is skipped (their parameters and state stay as they are)."""
        params = [p[:g] for p in self.params]
        state = [[s[:g] for s in st] for st in self.state]
        self.t += 1
        if skip is not None or self.skipped is not None:
            if skip is None:
                skip = torch.zeros(g, dtype=torch.bool, device=params[0].device)
            if self.skipped is None:
                self.skipped = torch.zeros(self.params[0].shape[0], dtype=torch.long, device=skip.device)
            self.skipped[:g] += skip
            keep = ~skip
            if self.name == "sgd":
                self._sgd(params, grads, state, self.t - self.skipped[:g], keep)
            else:
                self._adam(params, grads, state, self.t - self.skipped[:g], keep)
        elif self.fused:  # the kernels walk params, grads and state as flat memory
            self._fused(params, [d if d.stride() == p.stride() else torch.empty_like(p).copy_(d)
                                 for p, d in zip(params, grads)], state, self.t)
        elif self.name == "sgd":
            self._sgd(params, grads, state)
        else:
            self._adam(params, grads, state, self.t)

    def _fused(self, params, grads, state, t: int) -> None:
        if self.name == "sgd":
            # is_first_step copies the gradient into the (zero) momentum buffer: the same values as buf·m + d
            torch._fused_sgd_(params, grads, state[0] if state else [], weight_decay=self.wd, momentum=self.momentum,
                              lr=self.lr, dampening=0.0, nesterov=False, maximize=False, is_first_step=t == 1)
            return
        if self._step_t is None:
            self._step_t = torch.zeros((), dtype=torch.float32, device=params[0].device)
        self._step_t.fill_(float(t))  # a kernel argument: no tensor made on the host and copied over
        fn = torch._fused_adamw_ if self.name == "adamw" else torch._fused_adam_
        fn(params, grads, state[0], state[1], [], [self._step_t] * len(params), amsgrad=False, lr=self.lr,
           beta1=self.betas[0], beta2=self.betas[1], weight_decay=self.wd, eps=self.eps, maximize=False)

    def _sgd(self, params, grads, state, t: torch.Tensor | None = None, keep: torch.Tensor | None = None) -> None:
        """torch.optim.sgd._single_tensor_sgd, dampening 0, no nesterov; with ``keep`` (and the per-client step
        numbers ``t``) only those clients change."""
        for i, (p, d) in enumerate(zip(params, grads)):
            if self.wd != 0:
                d = d.add(p, alpha=self.wd)
            if self.momentum != 0:
                buf = state[0][i]
                if keep is None:
                    if self.t == 1:
                        buf.copy_(d)
                    else:
                        buf.mul_(self.momentum).add_(d)
                else:  # a client's first update (its momentum buffer still empty in torch.optim) copies d
                    new = torch.where(_per_client(t == 1, buf), d, buf.mul(self.momentum).add_(d))
                    buf.copy_(torch.where(_per_client(keep, buf), new, buf))
                d = buf
            if keep is None:
                p.add_(d, alpha=-self.lr)
            else:
                p.copy_(torch.where(_per_client(keep, p), p.add(d, alpha=-self.lr), p))

    def _adam(self, params, grads, state, t: int | torch.Tensor, keep: torch.Tensor | None = None) -> None:
        """torch.optim.adam._single_tensor_adam, no amsgrad; ``t`` per client (a tensor) under a gradient scaler,
        where only the clients ``keep`` change."""
        lr, wd, (b1, b2) = self.lr, self.wd, self.betas
        if isinstance(t, int):
            step_size, bc2_sqrt = lr / (1 - b1 ** t), (1 - b2 ** t) ** 0.5
        else:  # a client that has not stepped yet has t = 0: its (infinite) step size is masked out below
            tt = t.clamp(min=1).double()
            step_size, bc2_sqrt = (lr / (1 - b1 ** tt)).float(), ((1 - b2 ** tt) ** 0.5).float()
        for p, d, m, v in zip(params, grads, state[0], state[1]):
            if keep is not None:
                kp = _per_client(keep, p)
                if wd != 0 and self.name == "adamw":
                    p.copy_(torch.where(kp, p.mul(1 - lr * wd), p))
                elif wd != 0:
                    d = d.add(p, alpha=wd)
                m.copy_(torch.where(kp, m.lerp(d, 1 - b1), m))
                v.copy_(torch.where(kp, v.mul(b2).addcmul_(d, d, value=1 - b2), v))
                denom = (v.sqrt() / _per_client(bc2_sqrt, v)).add_(self.eps)
                p.copy_(torch.where(kp, p - m / denom * _per_client(step_size, p), p))
                continue
            if wd != 0:
                if self.name == "adamw":
                    p.mul_(1 - lr * wd)
                else:
                    d = d.add(p, alpha=wd)
            m.lerp_(d, 1 - b1)
            v.mul_(b2).addcmul_(d, d, value=1 - b2)
            p.addcdiv_(m, (v.sqrt() / bc2_sqrt).add_(self.eps), value=-step_size)


class StackedGradScaler:
    """``torch.amp.GradScaler`` for G clients at once, one scale and growth tracker per client (``16-mixed``).

    ``scaler`` gives the growth factor, backoff factor and growth interval (Fabric's scaler; its own scale is not
    touched); every client starts from ``init_scale``. Per step: :meth:`scale` multiplies each client's loss by its
    scale, :meth:`unscale` divides its gradients by it (``GradScaler.unscale_``'s float32 reciprocal) and says which
    clients found an inf or NaN, :meth:`update` applies ``GradScaler.update``'s rule per client."""

    def __init__(self, scaler, init_scale: float, num_clients: int, device):
        self.growth, self.backoff = float(scaler.get_growth_factor()), float(scaler.get_backoff_factor())
        self.interval = int(scaler.get_growth_interval())
        self.scales = torch.full((num_clients,), float(init_scale), dtype=torch.float32, device=device)
        self.tracker = torch.zeros(num_clients, dtype=torch.int32, device=device)

    def scale(self, losses: torch.Tensor) -> torch.Tensor:
        return losses.float() * self.scales[:len(losses)]

    def unscale(self, grads: Sequence[torch.Tensor], g: int) -> tuple[list[torch.Tensor], torch.Tensor]:
        inv = self.scales[:g].double().reciprocal().float()
        out = [d * _per_client(inv, d) for d in grads]
        found = torch.zeros(g, dtype=torch.bool, device=inv.device)
        for d in out:
            found |= ~torch.isfinite(d).all(dim=tuple(range(1, d.dim())))
        return out, found

    def update(self, found: torch.Tensor, g: int) -> None:
        scales, tracker = self.scales[:g], self.tracker[:g]
        grown = tracker + 1
        grow = ~found & (grown == self.interval)
        bigger = scales * self.growth
        scales.copy_(torch.where(found, scales * self.backoff,
                                 torch.where(grow & torch.isfinite(bigger), bigger, scales)))
        tracker.copy_(torch.where(found | grow, torch.zeros_like(grown), grown))
