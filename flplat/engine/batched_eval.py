"""Batched client evaluation: every client scored in a few large passes instead of one call per client.

Scoring every client one by one costs a model load, a few small forward calls and Python work per client; at
1,200 or 10,000 clients with a few test rows each that dominates the round. Two batched paths replace it
(``federation.batched_eval=true``, the default; ``false`` restores the per-client loop):

**Shared models.** Most methods give many clients the same model: single-model methods (FedAvg and its family)
give every client the global model, clustered methods (:class:`~flplat.protocol.strategy.ClusteredStrategy`) give the
clients of one cluster its model. :meth:`LocalExecutor.evaluate_groups` scores them per round, not per client: the
rows of a split are kept once as one index array in client order (:class:`SplitRows`, built on first use); the
rows of all groups are selected with one vectorised gather, each group's model is loaded once and run over its
clients' rows in chunks of ``federation.eval_batch_size`` (``index_select`` gathers, several times faster than
advanced indexing), per-row losses and hits are written into one preallocated buffer, and the per-client sums
(losses, hits, per-class counts) are a few ``bincount`` calls over all groups at once (:func:`columns_from_rows`).
Which clients share a model is the strategy's declaration (``eval_models.seen``,
:class:`~flplat.protocol.strategy.EvalModels`), never guessed from tensors or from which methods a class overrides:
``global`` (every client: ``global_weights``) or ``cluster`` (``state.clusters[assignment[k]]``, unassigned clients
``unassigned_weights``).

**Personal models** (``eval_models.seen = personal``: Ditto, FedRep, APFL, pFedMe, DA-PFL, Local, ...):
:meth:`LocalExecutor.evaluate_columns` reads each client's model from the strategy as before and scores them in
groups with :class:`StackedScorer`: a group's models stacked ``(G, P)`` (into one reused buffer), its clients'
rows padded to the group's largest client ``(G, W)``, one stacked forward of the shared network
(:class:`~flplat.maths.stacked.StackedForward`: ``vmap`` over ``functional_call``, what :mod:`flplat.engine.vectorized`
trains with), padded rows masked out of the sums. Clients are
visited in order of their number of rows, so a group's clients have similar sizes, in windows of at most
``federation.eval_group_size`` models held at once (0: as many as fit :data:`STACK_BYTES` = 128 MiB of float32
weights, so 10,000 personal models are never held together; the window's models and the stacking buffer are
released after the evaluation); within a window a vmap group holds at most
``eval_batch_size`` rows (G·W), and a client with more rows than that is scored alone by the per-client loop (its
per-client cost is already amortised). Several clients of a window whose model is the very same tensor object
(the global model for clients without a personal one, CReFF's single model) are scored as a shared group instead
of being stacked. Reading the K models is memory traffic any evaluation of personal models pays (P floats per
client, also in the per-client loop); what the groups save is the per-client Python and call overhead.
Where the network cannot be run this way — ``vmap`` fails on it (data-dependent control flow, an op without a
batching rule) or its vmapped output disagrees with the module's own on a probe — every client is scored one by
one and an INFO log line ``flplat: federation.batched_eval: scoring personal models one by one (<why>)`` says so,
once per executor. Batch norm in eval mode uses the running statistics held in each client's flat vector, so it
is no reason to fall back. Under ``bf16-mixed`` on CPU, autocast does not reach the vmapped matmuls (checked on
torch 2.14): the personal models' logits are then computed in float32 where the per-client loop computes them in
bfloat16, so the two paths agree to bfloat16 rounding (``federation.batched_eval=false`` gives the loop's).

The counts (correct predictions, samples, per-class counts) are the per-client evaluation's; the summed losses
agree to float rounding (float64 per-row sums here, float32 batch sums there). Logits of a row can differ in the
last bits with the composition of the batch it is computed in (CPU GEMM blocking, batched matmuls), in either
path, so a prediction on an exact tie could in principle differ; tests/test_batched_eval.py checks equality on
real runs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from flplat.maths.losses import hits, task_loss
from flplat.maths.stacked import StackedForward, probe
from flplat.protocol.state import ServerState
from flplat.protocol.strategy import EvalResult, Strategy

STACK_BYTES = 128 << 20  # stacked weights of one personal-model evaluation group when federation.eval_group_size=0


@dataclass
class EvalColumns:
    """Per-client evaluation results as columns (one row per client; the fields of
    :class:`~flplat.protocol.strategy.EvalResult`): at 10,000 clients, building, gathering and reading one object per
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




class SplitRows:
    """The pool rows of every client's ``split`` as one index array in client order (CSR: ``rows``, ``offsets``),
    so selecting the rows of thousands of clients is a few vectorised numpy operations, not a call per client.
    Built once per split and kept until the clients' splits change (a drift stage:
    :meth:`LocalExecutor.data_changed`). Unseen (test-only) clients follow the training clients, with the ids
    :meth:`FederatedData.indices` gives them."""

    def __init__(self, data, split: str):
        parts = [data.indices(k, split) for k in range(data.num_clients + len(data.unseen))]
        self.sizes = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        self.rows = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)

    def gather(self, clients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, owner)``: the rows of ``clients`` concatenated in their order, and each row's position in
        ``clients``."""
        sizes = self.sizes[clients]
        owner = np.repeat(np.arange(len(clients), dtype=np.int64), sizes)
        pos = np.arange(len(owner), dtype=np.int64) + np.repeat(self.offsets[clients] - (np.cumsum(sizes) - sizes),
                                                                 sizes)
        return self.rows[pos], owner


def columns_from_rows(clients: np.ndarray, sizes: np.ndarray, owner: torch.Tensor, loss: torch.Tensor,
                      hit: torch.Tensor, labels: torch.Tensor, num_classes: int) -> EvalColumns:
    """Per-client sums of per-row results: ``owner[i]`` is row i's position in ``clients``; ``loss`` (float, summed
    in float64), ``hit`` (bool) and ``labels`` are per row; per-class counts when ``num_classes`` > 0."""
    g, c = len(clients), num_classes
    loss_sum = torch.bincount(owner, weights=loss.double(), minlength=g) if len(owner) else \
        torch.zeros(g, dtype=torch.float64)
    correct = torch.bincount(owner[hit], minlength=g)
    if c:  # per-class counts (Few/Medium/Many accuracy, DA-PFL Table IV)
        cell = owner * c + labels
        total = torch.bincount(cell, minlength=g * c).view(g, c).cpu().numpy()
        right = torch.bincount(cell[hit], minlength=g * c).view(g, c).cpu().numpy()
    else:
        total = right = np.zeros((g, 0), dtype=np.int64)
    return EvalColumns(np.asarray(clients, dtype=np.int64), loss_sum.cpu().numpy(), correct.cpu().numpy(),
                       np.asarray(sizes, dtype=np.int64), right, total)


def shared_model_groups(strategy: Strategy, state: ServerState, num_clients: int
                        ) -> list[tuple[torch.Tensor, np.ndarray]] | None:
    """``[(weights, clients), ...]`` covering every client when the strategy declares shared models
    (``eval_models.seen``: global | cluster, see the module docstring), else None (personal models)."""
    seen = strategy.eval_models.seen
    everyone = np.arange(num_clients, dtype=np.int64)
    if seen == "global":
        gw = strategy.global_weights(state)
        if gw is None:
            raise RuntimeError(f"{type(strategy).__name__} declares eval_models.seen='global' but global_weights() "
                               "is None")
        return [(gw, everyone)]
    if seen == "cluster":
        rest = strategy.unassigned_weights(state)
        if state.assignment is None:
            return None if rest is None else [(rest, everyone)]
        a = np.asarray(state.assignment, dtype=np.int64)[:num_clients]
        if len(a) != num_clients:
            return None
        order = np.argsort(a, kind="stable")  # clients grouped by cluster, in client order within a cluster
        cut = np.split(order, np.searchsorted(a[order], np.unique(a))[1:]) if num_clients else []
        groups = [(state.clusters[int(a[cl[0]])], cl) for cl in cut if a[cl[0]] >= 0]
        if (a < 0).any():
            if rest is None:
                return None
            groups.append((rest, np.flatnonzero(a < 0)))
        return groups
    return None


def evaluate_shared(executor, groups: list[tuple[torch.Tensor, np.ndarray]], split: str,
                    num_clients: int) -> EvalColumns:
    """Every client's result, in client order, from the executor's batched ``evaluate_groups``."""
    cols = executor.evaluate_groups(groups, split)
    order = np.argsort(cols.client, kind="stable")
    if len(order) != num_clients or not np.array_equal(cols.client[order], np.arange(num_clients)):
        raise RuntimeError("batched evaluation did not return exactly one result per client")
    return cols.take(order)


class StackedScorer:
    """Scores groups of personal models at once: the stacked forward (:class:`~flplat.maths.stacked.StackedForward`)
    over the ``(G, P)`` flat vectors of a :class:`~flplat.engine.client.ClientTrainer`'s network (see the module
    docstring). :meth:`reason` says why the network cannot be run this way (:func:`~flplat.maths.stacked.probe`,
    once), or None."""

    def __init__(self, trainer, group_size: int = 0):
        self.trainer = trainer
        lay = trainer.layout
        self.group_size = group_size
        self.numels, self.shapes = lay.numels, lay.shapes
        self.dtypes = [t.dtype for t in lay.tensors]
        self._forward = StackedForward(trainer.net, lay.names)
        self._reason: str | None = None
        self._probed = False

    def max_models(self) -> int:
        """Models per group: ``group_size``, or as many as fit :data:`STACK_BYTES` of stacked float32 weights."""
        return self.group_size or max(1, STACK_BYTES // (4 * self.trainer.layout.size))

    def reason(self) -> str | None:
        if not self._probed:
            tr = self.trainer
            if len(tr.y) == 0:
                self._reason = "the pool has no rows"
            else:
                tr.module.eval()
                self._reason = probe(self._forward, tr.net, tr.layout.tensors, tr.x[:3], tr.fabric.autocast)[0]
            self._probed = True
        return self._reason

    def _logits(self, stacked: torch.Tensor, idx: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        g, w = idx.shape
        views = [v.view(g, *s) if v.dtype == d else v.reshape(g, *s).to(d)
                 for v, s, d in zip(stacked.split(self.numels, dim=1), self.shapes, self.dtypes)]
        x = self.trainer.x.index_select(0, idx.reshape(-1)).view(g, w, *self.trainer.x.shape[1:])
        return self._forward(views, x, mask)

    @torch.no_grad()
    def score(self, stacked: torch.Tensor, idx: torch.Tensor, mask: torch.Tensor | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-row losses (:func:`~flplat.maths.losses.task_loss`) and hits ``(G, W)`` of model g on the pool rows
        ``idx[g]`` (``mask``: the real rows, for a layer that would compute statistics of its batch)."""
        tr = self.trainer
        tr.module.eval()
        with tr.fabric.autocast():
            logits = self._logits(stacked, idx, mask)
        y = tr.y.index_select(0, idx.reshape(-1))
        flat = logits.flatten(0, 1)
        return (task_loss(flat.float(), y, reduction="none").view(idx.shape),
                hits(flat, y).view(idx.shape))


def log_fallback(reason: str) -> None:
    logging.getLogger("flplat").info("federation.batched_eval: scoring personal models one by one (%s)", reason)
