"""Client selection: the pieces Power-of-Choice, HACCS and FedCLS are made of.

* :func:`num_selected` -- m = max(1, round(q·K)), as uniform sampling takes;
* :func:`sample_proportional` -- successive sampling without replacement with probability ∝ a weight;
* :func:`client_losses` -- F_k(w) on each client's training split (``ops.evaluate``);
* :func:`round_robin` -- the first member of each group in a given order, then the second, ... until m;
* :class:`LossAwareSelection` -- FedAvg whose selection reads per-client losses kept in its typed state
  (:class:`SelectionState`), refreshed every round (``losses: all``) or from the participants' reported training
  losses (``losses: last``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from flplat.blocks.strategies import FedAvgStrategy

__all__ = ["LOSS_MODES", "LossAwareSelection", "SelectionState", "client_losses", "num_selected", "round_robin",
           "sample_proportional"]

LOSS_MODES = ("all", "last")


def num_selected(num_clients: int, fraction: float) -> int:
    """m = max(1, round(q·K)), as in uniform sampling."""
    return max(1, int(round(fraction * num_clients)))


def sample_proportional(rng: np.random.Generator, weights, size: int) -> np.ndarray:
    """``size`` distinct indices drawn one after another with probability ∝ ``weights`` (successive sampling
    without replacement); once the positive-weight entries are used up, the rest come uniformly at random."""
    w = np.nan_to_num(np.asarray(weights, dtype=np.float64), nan=0.0)
    pos, rest = np.flatnonzero(w > 0), np.flatnonzero(w <= 0)
    k = min(size, len(pos))
    first = rng.choice(pos, size=k, replace=False, p=w[pos] / w[pos].sum()) if k else pos[:0]
    second = rng.choice(rest, size=size - k, replace=False) if size > k else rest[:0]
    return np.concatenate([first, second]).astype(np.int64)


def client_losses(ops, clients: Sequence[int], weights: torch.Tensor) -> np.ndarray:
    """F_k(w) on each client's training split (NaN for a client without training data)."""
    res = ops.evaluate([(int(k), weights) for k in clients], split="train")
    return np.array([r.loss for r in res], dtype=np.float64)


def round_robin(order: np.ndarray, ranked: list[np.ndarray], m: int) -> np.ndarray:
    """Take the first member of each group in ``order``, then the second, ... until m clients (sorted)."""
    out: list[int] = []
    for r in range(max(len(x) for x in ranked)):
        out += [int(ranked[g][r]) for g in order if r < len(ranked[g])]
        if len(out) >= m:
            break
    return np.sort(np.array(out[:m], dtype=np.int64))


@dataclass
class SelectionState:
    """A loss-aware selection's state: the clients' groups (set by the method) and their known losses (K,)."""

    loss: np.ndarray
    group: np.ndarray | None = None


class LossAwareSelection(FedAvgStrategy):
    """FedAvg whose selection reads per-client losses (``state.method.loss``), refreshed per ``cfg.losses``:
    ``all`` evaluates every client on the current global model when asked (:meth:`current_losses`), ``last``
    evaluates them once on the initial model and then takes each participant's reported training loss. The
    method's state is :attr:`State` (a :class:`SelectionState` or a subclass with more fields)."""

    State: ClassVar[type[SelectionState]] = SelectionState
    columns: ClassVar[tuple[str, ...]] = ("group", "loss")  # state fields written to selection/groups.csv

    def init_state(self, init_weights, rng, ops):
        state = super().init_state(init_weights, rng, ops)
        k = self.info.num_clients
        last = self.cfg.losses == "last"
        state.method = self.State(loss=client_losses(ops, range(k), state.weights) if last else np.full(k, np.nan))
        return state

    def current_losses(self, state, ops) -> np.ndarray:
        if self.cfg.losses == "all":
            state.method.loss = client_losses(ops, range(self.info.num_clients), state.weights)
        return state.method.loss

    def aggregate(self, state, results, ops):
        if self.cfg.losses == "last":
            loss = state.method.loss.copy()
            loss[[r.client for r in results]] = [r.train_loss for r in results]
            state.method.loss = loss
        return super().aggregate(state, results, ops)

    def artifacts(self, state):
        st = state.method
        cols = [c for c in self.columns if getattr(st, c, None) is not None]
        rows = "\n".join(",".join([str(k)] + [f"{getattr(st, c)[k]:.6g}" for c in cols])
                         for k in range(self.info.num_clients))
        return {"selection/groups.csv": ",".join(["client", *cols]) + "\n" + rows + "\n"}
