"""Stacked hooks: a local hook's whole effect for a group of vectorised clients at once.

A :class:`~flplat.protocol.strategy.LocalHook` whose effect is more than an extra loss term -- it keeps a second
model and steps it after every optimizer step (APFL's local model v and mixing weight α), or moves a proximal centre
every few steps (pFedMe's local model w), or pulls the parameters after every step (DA-PFL's ``pull=step``) --
cannot be split into per-client ``functional_loss`` calls. Such a hook can still train vectorised
(:mod:`flplat.engine.vectorized`) when its class names a :class:`StackedHook` subclass in ``Stacked``: the engine
then builds one ``Stacked(hooks, ctx)`` per hook position of a group of clients (``hooks``: the group's hooks at
that position, one per client, all of the same class) and calls, at every step,

* :meth:`StackedHook.loss` with the live clients' stacked parameters (the term added to each client's loss, as the
  hook's ``loss``);
* :meth:`StackedHook.after_step` after the optimizer step, with a :class:`StackedStep` (the live clients' updated
  parameters, which it may change in place, and a function giving each one's task loss on this step's batch at
  other parameters, as the hook's ``after_step`` reads ``ctx.batch``);

and once at the end :meth:`StackedHook.finalize` (one dict per client, as the hook's ``finalize``). The clients still
training at a step are always the first ``g`` of the group (its live prefix), so every stacked tensor is sliced
``[:g]``. ``flplat check``'s ``vectorize`` property compares a stacked hook's clients (weights, losses and every
``finalize`` value) with the per-client loop's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["StackedHook", "StackedHookContext", "StackedStep"]


@dataclass
class StackedHookContext:
    """What a stacked hook sees when a group starts: its ``size`` G, its ``device``, its clients' start parameters
    (``params``: one ``(G, *shape)`` tensor per parameter in :attr:`HookContext.params` order; the group trains them
    in place, so a hook copies what it keeps when it is built, and never writes them) and the maps between flat
    per-client vectors and stacked parameters."""

    size: int
    device: torch.device
    params: list[torch.Tensor]
    slots: list[tuple[int, int, tuple[int, ...]]]  # each parameter's [a, b) range and shape in a flat vector
    # optimizer(name, params, lr, momentum, weight_decay): the engine's optimizer of stacked tensors (sgd | adam |
    # adamw, fresh state; ``.step(grads, g)`` updates the first g clients), for a second model the hook trains
    optimizer: Callable[..., Any]

    def stack(self, vectors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The parameters of one flat vector per client (e.g. each client's stored local model) as new
        ``(G, *shape)`` float32 tensors on the device."""
        return [torch.stack([v[a:b].to(self.device, torch.float32).view(shape) for v in vectors])
                for a, b, shape in self.slots]

    def with_params(self, weights: torch.Tensor, params: Sequence[torch.Tensor]) -> torch.Tensor:
        """A copy of the ``(G, P)`` flat weights with their parameters replaced by the stacked ``params`` (the
        batch-norm statistics kept: what a hook's ``finalize`` builds from ``ctx.layout.flatten()``)."""
        out = weights.clone()
        for (a, b, shape), p in zip(self.slots, params):
            out[:, a:b].view(len(out), *shape).copy_(p)
        return out


@dataclass
class StackedStep:
    """One step of a group, after its optimizer update: ``step`` (0-based, the same for every live client),
    ``params`` (the ``g`` live clients' parameters after the update, ``(g, *shape)`` views of the trained tensors: a
    hook may change them in place, as a loop hook changes ``ctx.params``), ``lr`` (the phase's learning rate) and
    ``losses(params)``: each live client's mean task loss on this step's batch with the
    given ``(g, *shape)`` parameters -- the network in training mode, its batch-norm statistics as they are and left
    unchanged, no autocast (a hook's ``after_step`` calling the network on ``ctx.batch``)."""

    step: int
    params: list[torch.Tensor]
    lr: float
    losses: Callable[[list[torch.Tensor]], torch.Tensor]

    @property
    def live(self) -> int:
        return self.params[0].shape[0]


class StackedHook:
    """The stacked form of one hook class (see the module doc). Subclasses take ``(hooks, ctx)``: the group's hooks
    at one position (one per client, in group order) and a :class:`StackedHookContext`."""

    def __init__(self, hooks: Sequence[Any], ctx: StackedHookContext):
        self.hooks, self.ctx = list(hooks), ctx

    def loss(self, params: list[torch.Tensor]) -> torch.Tensor | None:
        """The term added to each live client's loss (``(g,)``, ``g = params[0].shape[0]``), or None."""
        return None

    def after_step(self, step: StackedStep) -> None:
        return None

    def finalize(self, weights: torch.Tensor) -> list[dict[str, Any]]:
        """What each client's hook reports after training (one dict per client, as its ``finalize``), given the
        group's final flat weights ``(G, P)``."""
        return [{} for _ in self.hooks]
