"""Where clients run: :class:`LocalExecutor` executes the strategies' client work in this process.

Split from :mod:`flplat.engine.orchestrator` along the seam between the server's round loop and client-side
execution: the orchestrator decides what happens in a round, the executor runs it for each client (training,
scoring, ``compute``) and is the one object strategies may call back into (its methods are the
:class:`~flplat.protocol.strategy.FederationOps`). :class:`~flplat.engine.sharding.ShardedExecutor` wraps it
behind the same methods (each process runs its share through its own :class:`LocalExecutor`). The helpers beside
it serve both executors: :class:`LazyRequests` (``(client, weights)`` pairs whose weights are read only when
scored), :func:`request_clients` and :func:`subset`, and :func:`_softmax_and_labels`, the client-side function of
the orchestrator's test-phase ensemble.
Importing ``request_clients`` or ``subset`` from :mod:`flplat.engine.orchestrator` (their old path) warns until
flplat 0.3.0 (:mod:`flplat.deprecation`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from flplat.data.containers import FederatedData
from flplat.engine.batched_eval import EvalColumns, SplitRows, StackedScorer, columns_from_rows, log_fallback
from flplat.engine.client import ClientTrainer
from flplat.errors import raise_if_stopped
from flplat.protocol.seeding import derive_seed
from flplat.protocol.strategy import ClientPlan, ClientResult, EvalResult


class LocalExecutor:
    """Runs every client in this process with one reusable :class:`ClientTrainer`.

    This is the seam where clients run: strategies only see ``train`` and ``evaluate`` (the latter is the
    :class:`~flplat.protocol.strategy.FederationOps` they may call), so sharded execution can replace it.
    """

    def __init__(self, trainer: ClientTrainer, data: FederatedData, seed: int, vectorize: bool = False,
                 vectorize_group: int = 0, eval_group_size: int = 0, vectorize_keep_mib: int | None = None):
        from flplat.engine.vectorized import KEEP_MIB, VectorizedTrainer

        self.trainer = trainer
        self.data = data
        self.seed = seed
        keep = KEEP_MIB if vectorize_keep_mib is None else vectorize_keep_mib
        self.vectorized = VectorizedTrainer(trainer, vectorize_group, keep) if vectorize else None
        self._fallback_logged = False
        self.eval_group_size = eval_group_size  # federation.eval_group_size (personal models per vmap group)
        self._split_rows: dict[str, SplitRows] = {}
        self._scorer: StackedScorer | None = None
        self._stack_buf: torch.Tensor | None = None  # stacked personal models of one vmap group (one evaluation)
        self._eval_fallback_logged = False

    def _train_one(self, job) -> ClientResult:
        raise_if_stopped()  # a Ctrl-C whose KeyboardInterrupt was swallowed on its way ends the run here
        return self.trainer.train(*job)

    def train(self, plans: Sequence[tuple[int, ClientPlan]], round: int,
              groups: Sequence[int] | None = None) -> list[ClientResult]:
        """Train the planned clients. ``groups`` (from :meth:`Strategy.mean_groups`) lets a sharded executor
        reduce instead of gather; in one process every result keeps its own model either way."""
        jobs = [(client, plan, plan.indices if plan.indices is not None else self.data.indices(client, "train"),
                 derive_seed(self.seed, "train", round, client)) for client, plan in plans]
        out = self._train_jobs(jobs)
        self.next_loss_scale(out)
        return out

    def next_loss_scale(self, results: Sequence[ClientResult]) -> None:
        """16-mixed: the next clients start from the smallest gradient-scaler scale these ended with (a scale none
        of them overflowed at), whatever the order or the process that trained them (one scaler carried from client
        to client would make a client's result depend on the clients trained before it)."""
        scales = [r.loss_scale for r in results if r.loss_scale is not None]
        if scales:
            self.trainer.loss_scale = min(scales)

    def _train_jobs(self, jobs) -> list[ClientResult]:
        if self.vectorized is None:
            return [self._train_one(job) for job in jobs]
        reasons = [self.vectorized.reason(plan) for _, plan, _, _ in jobs]
        vec = [i for i, r in enumerate(reasons) if r is None]
        out: list[ClientResult | None] = [None] * len(jobs)
        for i, res in zip(vec, self.vectorized.train([jobs[i] for i in vec]) if vec else []):
            out[i] = res
        for i, r in enumerate(reasons):
            if r is not None:
                if not self._fallback_logged:
                    import logging

                    logging.getLogger("flplat").warning(
                        "federation.vectorize: training some clients with the per-client loop (%s)", r)
                    self._fallback_logged = True
                out[i] = self.trainer.train(*jobs[i])
        return out

    def evaluate(self, requests: Sequence[tuple[int, torch.Tensor]], split: str = "val") -> list[EvalResult]:
        """Score every ``(client, weights)`` request one by one (the per-client loop)."""
        out, loaded = [], None
        for client, weights in requests:
            out.append(self.trainer.evaluate(client, None if weights is loaded else weights,
                                             self.data.indices(client, split)))
            loaded = weights
        return out

    def data_changed(self) -> None:
        """The clients' splits changed (a drift stage began): drop what was built from the old ones."""
        self._split_rows.clear()

    def split_rows(self, split: str) -> SplitRows:
        """Every client's ``split`` rows as one index array (built once per split)."""
        sr = self._split_rows.get(split)
        if sr is None:
            sr = self._split_rows[split] = SplitRows(self.data, split)
        return sr

    def evaluate_groups(self, groups: Sequence[tuple[torch.Tensor, Sequence[int]]], split: str = "test"
                        ) -> EvalColumns:
        """Score each group's clients with the group's model in one pass (see :mod:`flplat.engine.batched_eval`);
        one row per client, in the order of the groups' clients: all groups' rows gathered at once, one chunked pass
        per group's model into one per-row buffer, then the per-client sums of every group together."""
        tr, sr = self.trainer, self.split_rows(split)
        clients = [np.asarray(c, dtype=np.int64).reshape(-1) for _, c in groups]
        every = np.concatenate(clients) if clients else np.zeros(0, dtype=np.int64)
        rows, owner = sr.gather(every)
        dev = tr.fabric.device
        rows_t = torch.from_numpy(rows).to(dev)
        loss = torch.empty(len(rows), device=dev)
        hit = torch.empty(len(rows), dtype=torch.bool, device=dev)
        a = 0
        for (weights, _), cl in zip(groups, clients):
            b = a + int(sr.sizes[cl].sum())
            if b > a:
                tr.score_rows(weights, rows_t[a:b], loss[a:b], hit[a:b])
            a = b
        return columns_from_rows(every, sr.sizes[every], torch.from_numpy(owner).to(dev), loss, hit,
                                 tr.y.index_select(0, rows_t), tr.num_outputs)

    def evaluate_columns(self, requests: Sequence[tuple[int, torch.Tensor]], split: str = "test") -> EvalColumns:
        """Score every ``(client, weights)`` request (personal models; one row per request, in request order) in
        ``vmap`` groups where the model allows, else one by one, logged once (see
        :mod:`flplat.engine.batched_eval`)."""
        tr = self.trainer
        if self._scorer is None:
            self._scorer = StackedScorer(tr, self.eval_group_size)
        scorer = self._scorer
        reason = scorer.reason()
        if reason is not None:
            if not self._eval_fallback_logged:
                log_fallback(reason)
                self._eval_fallback_logged = True
            return EvalColumns.from_results(self.evaluate(requests, split))
        clients = request_clients(requests)
        sr, c = self.split_rows(split), tr.num_outputs
        sizes = sr.sizes[clients]
        order = np.argsort(sizes, kind="stable")  # similar sizes share a group: little padding
        budget, most = tr.eval_batch_size, scorer.max_models()
        parts: list[tuple[np.ndarray, EvalColumns]] = []
        i = int(np.searchsorted(sizes[order], 1))  # clients without rows: nothing to score
        if i:
            z = np.zeros(i, dtype=np.int64)
            parts.append((order[:i], EvalColumns(clients[order[:i]], z.astype(np.float64), z, z,
                                                 np.zeros((i, c), np.int64), np.zeros((i, c), np.int64))))
        while i < len(order):
            if sizes[order[i]] > budget:  # the rest has more rows than a chunk: one chunked pass each
                rest = order[i:]
                parts.append((rest, EvalColumns.from_results(self.evaluate(subset(requests, rest), split))))
                break
            j = i + int(np.searchsorted(sizes[order[i:i + most]], budget, side="right"))
            window = order[i:j]  # at most `most` models held at once
            pairs = [requests[int(p)] for p in window]
            same: dict[int, list[int]] = {}
            for k, (_, w) in enumerate(pairs):
                same.setdefault(id(w), []).append(k)
            shared = [ks for ks in same.values() if len(ks) > 1]  # one tensor for several clients: one pass
            if shared:
                cols = self.evaluate_groups([(pairs[ks[0]][1], clients[window[ks]]) for ks in shared], split)
                parts.append((np.concatenate([window[ks] for ks in shared]), cols))
            alone = np.array(sorted(ks[0] for ks in same.values() if len(ks) == 1), dtype=np.int64)
            while len(alone):  # vmap groups of at most eval_batch_size rows (k·s_k grows with k: a prefix fits)
                s = sizes[window[alone]]
                m = max(1, int((np.arange(1, len(s) + 1) * s <= budget).sum()))
                pos = window[alone[:m]]
                parts.append((pos, self._score_stacked(scorer, [pairs[k][1] for k in alone[:m]], clients[pos], sr, c)))
                alone = alone[m:]
            i = j
        self._stack_buf = None  # reused across this evaluation's groups, not held between evaluations
        cols = EvalColumns.concat([p for _, p in parts], c)
        return cols.take(np.argsort(np.concatenate([q for q, _ in parts]), kind="stable")) if parts else cols

    def _score_stacked(self, scorer: StackedScorer, weights: list[torch.Tensor], clients: np.ndarray,
                       sr: SplitRows, num_classes: int) -> EvalColumns:
        """One vmap group: model g on client g's rows, padded to the group's largest client and masked."""
        dev = self.trainer.fabric.device
        buf = self._stack_buf
        if buf is None or buf.shape[0] < len(weights) or buf.device != dev:  # reused: no fresh pages per group
            buf = self._stack_buf = torch.empty(len(weights), self.trainer.layout.size, device=dev)
        stacked = torch.stack([w.to(dev, torch.float32) for w in weights], out=buf[:len(weights)])
        sizes = sr.sizes[clients]
        width = int(sizes.max())
        col = np.arange(width)
        pos = sr.offsets[clients][:, None] + np.minimum(col, sizes[:, None] - 1)  # padding repeats a real row
        idx = torch.from_numpy(sr.rows[pos]).to(dev)
        real = torch.from_numpy(col < sizes[:, None]).to(dev)
        valid = real.reshape(-1)
        loss, hit = scorer.score(stacked, idx, None if bool(real.all()) else real)
        owner = torch.arange(len(clients), device=dev).repeat_interleave(width)[valid]
        labels = self.trainer.y.index_select(0, idx.reshape(-1))[valid]
        return columns_from_rows(clients, sizes, owner, loss.reshape(-1)[valid], hit.reshape(-1)[valid], labels,
                                 num_classes)

    def compute(self, requests: Sequence[tuple[int, torch.Tensor | None]], fn, split: str = "train",
                seed: int = 0) -> list:
        return [self.trainer.compute(client, weights, self.data.indices(client, split), fn,
                                     derive_seed(seed, "compute", client)) for client, weights in requests]

    def evaluate_global(self, weights: torch.Tensor) -> EvalResult | None:
        if self.data.x_global_test is None:
            return None
        return self.trainer.evaluate_tensors(weights, self.data.x_global_test, self.data.y_global_test)


class LazyRequests(Sequence):
    """``(client, weights)`` pairs whose weights are produced only when an executor reaches them.

    Evaluating every client of a personalised method must not hold every client's model at once (10,000
    personal copies of a 1 M-parameter model are 40 GB in float32): each is read from the strategy's compact
    store as its turn comes. ``clients`` gives the ids without touching the weights.
    """

    def __init__(self, clients: Sequence[int], weights):
        self.clients = list(clients)
        self._weights = weights

    def __len__(self) -> int:
        return len(self.clients)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.clients[i], self._weights(self.clients[i])

    def subset(self, positions: Sequence[int]) -> LazyRequests:
        return LazyRequests([self.clients[int(i)] for i in positions], self._weights)


def request_clients(requests) -> np.ndarray:
    """The client ids of ``(client, weights)`` requests, without reading weights of :class:`LazyRequests`."""
    ids = requests.clients if isinstance(requests, LazyRequests) else [c for c, _ in requests]
    return np.asarray(ids, dtype=np.int64).reshape(-1)


def subset(requests, positions: Sequence[int]):
    """The requests at ``positions`` (lazily for :class:`LazyRequests`)."""
    if isinstance(requests, LazyRequests):
        return requests.subset(positions)
    return [requests[int(i)] for i in positions]


def _softmax_and_labels(view) -> tuple[torch.Tensor, torch.Tensor]:
    """Client-side: class probabilities of the loaded model on the client's split (multi-label data, y (n, C): each
    label's sigmoid), and its labels (for scoring)."""
    with view.autocast():
        logits = torch.cat([view.net(view.x[a:a + 1024]) for a in range(0, len(view.x), 1024)]) if len(view.x) \
            else torch.zeros(0, view.y.shape[1] if view.y.dim() == 2 else 1)
    if view.y.dim() == 2:
        return torch.sigmoid(logits.float()), view.y
    return torch.softmax(logits.float(), dim=1), view.y
