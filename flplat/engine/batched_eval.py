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

import numpy as np
import torch

from flplat.algorithms.base import ClusteredStrategy, EvalResult, Strategy
from flplat.engine.state import ServerState


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
                    num_clients: int) -> list[EvalResult]:
    """Every client's result, in client order, from the executor's batched ``evaluate_groups``."""
    flat = executor.evaluate_groups(groups, split)
    out: list[EvalResult | None] = [None] * num_clients
    for r in flat:
        out[r.client] = r
    return out
