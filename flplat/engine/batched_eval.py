"""Batched client evaluation: clients that use the same model are scored in one pass over their test rows.

Scoring every client one by one costs a model load, a few small forward calls and Python work per client; at
1,200 or 10,000 clients with a few test rows each that dominates the round. Most methods give many clients the
same model: single-model methods (FedAvg and its family) give every client the global model, clustered methods
(:class:`~flplat.algorithms.base.ClusteredStrategy`) give the clients of one cluster its model. Those clients are
scored together (:meth:`flplat.engine.client.ClientTrainer.evaluate_many`): one model load, forward passes over
the union of their rows in chunks of ``federation.eval_batch_size``, and per-client sums of losses, hits and
per-class counts by ``index_add`` / ``bincount``.

Which clients share a model is read from the strategy's structure, never guessed from tensors: a strategy whose
``eval_weights`` is :meth:`Strategy.eval_weights` (every client: ``state.weights``) or
:meth:`ClusteredStrategy.eval_weights` (``state.clusters[assignment[k]]``, unassigned clients ``state.weights``).
Strategies that override ``eval_weights`` (personalised models, mixtures, test-time choices) keep the per-client
path, as does ``federation.batched_eval=false``.

The counts (correct predictions, samples, per-class counts) are the per-client evaluation's; the summed losses
agree to float rounding (float64 per-row sums here, float32 batch sums there). Logits of a row can differ in the
last bits with the composition of the batch it is computed in (CPU GEMM blocking), in either path, so a
prediction on an exact tie could in principle differ; tests/test_evaluation.py checks equality on real runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from flplat.algorithms.base import ClusteredStrategy, EvalResult, Strategy
from flplat.engine.state import ServerState


@dataclass
class EvalColumns:
    """Per-client evaluation results as columns (one row per client; the fields of
    :class:`~flplat.algorithms.base.EvalResult`): at 10,000 clients, building, gathering and reading one object per
    client would cost more than the forward passes. ``class_correct`` / ``class_total`` are ``(m, C)``, with C = 0
    when per-class counts were not computed."""

    client: np.ndarray
    loss_sum: np.ndarray
    correct: np.ndarray
    num_samples: np.ndarray
    class_correct: np.ndarray
    class_total: np.ndarray

    def __len__(self) -> int:
        return len(self.client)

    @classmethod
    def from_results(cls, results: Sequence[EvalResult]) -> EvalColumns:
        c = {len(r.class_total) for r in results}
        width = c.pop() if len(c) == 1 else 0  # per-class counts only when every client has them
        per_class = [np.array([r.class_correct for r in results], dtype=np.int64).reshape(len(results), width),
                     np.array([r.class_total for r in results], dtype=np.int64).reshape(len(results), width)] \
            if width else [np.zeros((len(results), 0), dtype=np.int64)] * 2
        return cls(np.array([r.client for r in results], dtype=np.int64),
                   np.array([r.loss_sum for r in results], dtype=np.float64),
                   np.array([r.correct for r in results], dtype=np.int64),
                   np.array([r.num_samples for r in results], dtype=np.int64), *per_class)

    @classmethod
    def concat(cls, parts: Sequence[EvalColumns], num_classes: int = 0) -> EvalColumns:
        parts = [p for p in parts if len(p)]
        if not parts:
            z = np.zeros(0, dtype=np.int64)
            return cls(z, z.astype(np.float64), z, z, np.zeros((0, num_classes), np.int64),
                       np.zeros((0, num_classes), np.int64))
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in
                     ("client", "loss_sum", "correct", "num_samples", "class_correct", "class_total")))

    def take(self, rows: np.ndarray) -> EvalColumns:
        return EvalColumns(self.client[rows], self.loss_sum[rows], self.correct[rows], self.num_samples[rows],
                           self.class_correct[rows], self.class_total[rows])

    def results(self) -> list[EvalResult]:
        """One :class:`EvalResult` per row (for callers that want objects)."""
        return [EvalResult(int(k), float(loss), int(cor), int(n), tuple(cc), tuple(ct)) for k, loss, cor, n, cc, ct
                in zip(self.client.tolist(), self.loss_sum.tolist(), self.correct.tolist(),
                       self.num_samples.tolist(), self.class_correct.tolist(), self.class_total.tolist())]


def shared_model_groups(strategy: Strategy, state: ServerState, num_clients: int
                        ) -> list[tuple[torch.Tensor, list[int]]] | None:
    """``[(weights, clients), ...]`` covering every client when the strategy's ``eval_weights`` is one of the two
    structural ones (see the module docstring), else None (score per client)."""
    ev = type(strategy).eval_weights
    if ev is Strategy.eval_weights:
        return None if state.weights is None else [(state.weights, list(range(num_clients)))]
    if ev is ClusteredStrategy.eval_weights:
        if state.assignment is None:
            return None if state.weights is None else [(state.weights, list(range(num_clients)))]
        a = np.asarray(state.assignment, dtype=np.int64)[:num_clients]
        if len(a) != num_clients:
            return None
        groups = [(state.clusters[int(c)], np.flatnonzero(a == c).tolist()) for c in np.unique(a[a >= 0])]
        if (a < 0).any():
            if state.weights is None:
                return None
            groups.append((state.weights, np.flatnonzero(a < 0).tolist()))
        return groups
    return None


def evaluate_shared(executor, groups: list[tuple[torch.Tensor, list[int]]], split: str,
                    num_clients: int) -> EvalColumns:
    """Every client's result, in client order, from the executor's batched ``evaluate_groups``."""
    cols = executor.evaluate_groups(groups, split)
    order = np.argsort(cols.client, kind="stable")
    if len(order) != num_clients or not np.array_equal(cols.client[order], np.arange(num_clients)):
        raise RuntimeError("batched evaluation did not return exactly one result per client")
    return cols.take(order)
