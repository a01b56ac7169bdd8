"""The one round loop, and the client executor seam it runs clients through.

Per round t: the strategy selects clients, plans each one's local work, the executor trains them (in this
process now; sharded over Fabric processes later, behind the same two methods), the strategy aggregates, and
every client is scored on its own test split with the model it would use. Cross-cutting concerns (MLflow,
progress display) are callbacks on the round events, so the loop itself never logs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from flplat.algorithms.base import ClientPlan, ClientResult, EvalResult, Strategy
from flplat.data.containers import FederatedData
from flplat.engine.batched_eval import (
    EvalColumns,
    SplitRows,
    StackedScorer,
    columns_from_rows,
    evaluate_shared,
    log_fallback,
    shared_model_groups,
)
from flplat.engine.client import ClientTrainer
from flplat.engine.failures import Diverged, reject_nonfinite
from flplat.engine.state import ServerState, derive_seed
from flplat.metrics.curves import curve_summary
from flplat.metrics.evaluation import summarize
from flplat.metrics.personalized import bucket_accuracy, run_summary


class LocalExecutor:
    """Runs every client in this process with one reusable :class:`ClientTrainer`.

    This is the seam where clients run: strategies only see ``train`` and ``evaluate`` (the latter is the
    :class:`~flplat.algorithms.base.FederationOps` they may call), so sharded execution can replace it.
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

    def train(self, plans: Sequence[tuple[int, ClientPlan]], round: int,
              groups: Sequence[int] | None = None) -> list[ClientResult]:
        """Train the planned clients. ``groups`` (from :meth:`Strategy.mean_groups`) lets a sharded executor
        reduce instead of gather; in one process every result keeps its own model either way."""
        jobs = [(client, plan, plan.indices if plan.indices is not None else self.data.indices(client, "train"),
                 derive_seed(self.seed, "train", round, client)) for client, plan in plans]
        if self.vectorized is None:
            return [self.trainer.train(*job) for job in jobs]
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
        return self._evaluate_local(requests, split)

    def _evaluate_local(self, requests: Sequence[tuple[int, torch.Tensor]], split: str) -> list[EvalResult]:
        """The per-client loop, in this process (never the sharded override)."""
        out, loaded = [], None
        for client, weights in requests:
            out.append(self.trainer.evaluate(client, None if weights is loaded else weights,
                                             self.data.indices(client, split)))
            loaded = weights
        return out

    def split_rows(self, split: str) -> SplitRows:
        """Every client's ``split`` rows as one index array (built once per split)."""
        sr = self._split_rows.get(split)
        if sr is None:
            sr = self._split_rows[split] = SplitRows(self.data, split)
        return sr

    def evaluate_groups(self, groups: Sequence[tuple[torch.Tensor, Sequence[int]]], split: str = "test"
                        ) -> EvalColumns:
        """Score each group's clients with the group's model in one pass (see :mod:`flplat.engine.batched_eval`);
        one row per client, in the order of the groups' clients."""
        return self._score_groups(groups, split)

    def _score_groups(self, groups, split: str) -> EvalColumns:
        """All groups' rows gathered at once, one chunked pass per group's model into one per-row buffer, then
        the per-client sums of every group together (in this process)."""
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
        return self._evaluate_columns_local(requests, split)

    def _evaluate_columns_local(self, requests, split: str) -> EvalColumns:
        tr = self.trainer
        if self._scorer is None:
            self._scorer = StackedScorer(tr, self.eval_group_size)
        scorer = self._scorer
        reason = scorer.reason()
        if reason is not None:
            if not self._eval_fallback_logged:
                log_fallback(reason)
                self._eval_fallback_logged = True
            return EvalColumns.from_results(self._evaluate_local(requests, split))
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
                parts.append((rest, EvalColumns.from_results(self._evaluate_local(subset(requests, rest), split))))
                break
            j = i + int(np.searchsorted(sizes[order[i:i + most]], budget, side="right"))
            window = order[i:j]  # at most `most` models held at once
            pairs = [requests[int(p)] for p in window]
            same: dict[int, list[int]] = {}
            for k, (_, w) in enumerate(pairs):
                same.setdefault(id(w), []).append(k)
            shared = [ks for ks in same.values() if len(ks) > 1]  # one tensor for several clients: one pass
            if shared:
                cols = self._score_groups([(pairs[ks[0]][1], clients[window[ks]]) for ks in shared], split)
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
        valid = torch.from_numpy((col < sizes[:, None]).reshape(-1)).to(dev)
        loss, hit = scorer.score(stacked, idx)
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
    """Client-side: class probabilities of the loaded model on the client's split, and its labels (for scoring)."""
    with view.autocast():
        logits = torch.cat([view.net(view.x[a:a + 1024]) for a in range(0, len(view.x), 1024)]) if len(view.x) \
            else torch.zeros(0, 1)
    return torch.softmax(logits.float(), dim=1), view.y


def clustering_scores(true: np.ndarray, assignment: np.ndarray) -> dict[str, float]:
    """Adjusted Rand index of the assigned training clients' clusters against their true distribution ids."""
    from sklearn.metrics import adjusted_rand_score

    sel = assignment >= 0
    if sel.sum() < 2:
        return {}
    return {"ari": float(adjusted_rand_score(true[sel], assignment[sel])), "assigned_clients": float(sel.sum())}


class Callback:
    """Round events; override what you need."""

    def on_start(self, orch: Orchestrator) -> None: ...

    def on_round_end(self, orch: Orchestrator, round: int, metrics: dict[str, float]) -> None: ...

    def on_end(self, orch: Orchestrator, status: str) -> None: ...


@dataclass
class RunSummary:
    metrics: dict[str, float]  # last round's metrics
    history: list[dict[str, float]]
    client_table: dict[str, np.ndarray]  # per-client arrays of the last evaluation
    state: ServerState = field(repr=False)
    final: dict[str, float] = field(default_factory=dict)  # run-level summaries (best / windowed / last-rounds)


class Orchestrator:
    def __init__(self, strategy: Strategy, executor: LocalExecutor, data: FederatedData, rounds: int,
                 eval_every: int, seed: int, callbacks: Sequence[Callback] = (), accuracy_window: int = 30,
                 metrics_cfg=None, batched_eval: bool = True):
        from flplat.config import MetricsConfig

        self.metrics_cfg = metrics_cfg if metrics_cfg is not None else MetricsConfig()
        self.strategy = strategy
        self.executor = executor
        self.data = data
        self.rounds = rounds
        self.eval_every = eval_every
        self.seed = seed
        self.callbacks = list(callbacks)
        self.history: list[dict[str, float]] = []
        self.client_table: dict[str, np.ndarray] = {}
        self.state: ServerState | None = None
        self.accuracy_window = accuracy_window
        self.batched_eval = batched_eval  # clients sharing a model scored in one pass (flplat/engine/batched_eval.py)
        self.final_metrics: dict[str, float] = {}
        self.final_series: dict[str, list[tuple[int, float]]] = {}
        self.rng: np.random.Generator | None = None  # the server RNG (client sampling, strategy randomness)
        self.meta: dict[str, object] = {}  # run identity callbacks share and checkpoints keep (e.g. the MLflow run id)
        self.start_round = 1  # > 1 when resumed from a checkpoint (flplat.engine.checkpoint)
        self.completed_round = 0  # last round whose server state is complete (0: none; None: inside a round)
        self.failures = None  # a flplat.engine.failures.FailureModel (federation.failures), or None
        self._counts: dict[str, np.ndarray] = {}  # per-client train counts, computed once (_train_counts)

    def _bytes(self, t: torch.Tensor | None) -> int:
        return 0 if t is None else t.numel() * t.element_size()

    def run(self, init_weights: torch.Tensor, resume=None) -> RunSummary:
        """Run rounds 1..T, or, with ``resume`` (a callable restoring a checkpoint into this orchestrator and
        returning its round: :func:`flplat.engine.checkpoint.resumer`), continue after that round from its server
        state, strategy state, RNGs and history."""
        strategy, ex = self.strategy, self.executor
        rng = self.rng = np.random.default_rng(derive_seed(self.seed, "server"))
        if resume is not None:
            self.start_round = resume(self) + 1
        else:
            self.state = strategy.init_state(init_weights, rng, ex)
        self.completed_round = self.start_round - 1
        for cb in self.callbacks:
            cb.on_start(self)
        status = "FAILED"
        try:
            for t in range(self.start_round, self.rounds + 1):
                self.completed_round = None
                self.state.round = t
                self.history.append(self._round(t, rng))
                self.completed_round = t
                for cb in self.callbacks:
                    cb.on_round_end(self, t, self.history[-1])
            self._summarize_curve()
            mc = self.metrics_cfg
            self.final_metrics.update(run_summary(self.history, mc.accuracy_key, int(mc.last_rounds),
                                                  [float(x) for x in mc.target_accuracy]))
            status = "FINISHED"
        except KeyboardInterrupt:
            status = "KILLED"
            raise
        except Exception as e:
            self.meta["error"] = (str(e).strip().splitlines() or [type(e).__name__])[0][:500]
            raise
        finally:
            for cb in self.callbacks:
                cb.on_end(self, status)
        return RunSummary(self.history[-1], self.history, self.client_table, self.state, dict(self.final_metrics))

    def _summarize_curve(self) -> None:
        """Best and windowed-average accuracy over the run (CAFA Tables IV-V): of the pooled global test accuracy
        when the method has one global model, else of the test-size-weighted global accuracy."""
        key = "global_test_accuracy" if any("global_test_accuracy" in h for h in self.history) else "global_accuracy"
        s = curve_summary(self.history, key, self.accuracy_window)
        if s:
            self.final_metrics = {f"best_{key}": s["best"], f"best_round_{key}": float(s["best_round"]),
                                  f"window_mean_{key}": s["last_window_mean"]}
            self.final_series = {f"window_mean_{key}_by_round": s["windows"]}

    def _round(self, t: int, rng: np.random.Generator) -> dict[str, float]:
        strategy, ex = self.strategy, self.executor
        t0 = time.perf_counter()
        selected = strategy.select(self.state, rng, ex)
        plans = strategy.plan_round(self.state, selected)
        fm = self.failures
        run_plans, fails, corrupt = fm.plan(plans, t) if fm is not None and fm.active else (plans, {}, set())
        results = ex.train(run_plans, t, strategy.mean_groups(self.state, run_plans)) if run_plans else []
        if corrupt:
            results = fm.corrupt_results(results, corrupt)
        trained = len({r.client for r in results})
        results, rejected = reject_nonfinite(results)
        if trained and rejected == trained and not corrupt:
            raise Diverged(f"diverged at round {t}: every client's update is NaN/Inf (e.g. lower "
                           f"federation.optimizer.lr)")
        if results:  # a round without any result keeps the server state
            self.state = strategy.aggregate(self.state, results, ex)
        n = np.array([r.num_samples for r in results], dtype=float)
        m: dict[str, float] = {
            "train_loss": float(np.dot(n, [r.train_loss for r in results]) / n.sum()) if n.sum() else float("nan"),
            "num_participants": float(len({r.client for r in results})),
            "failed_clients": fails.get("dropped_clients", 0.0) + rejected,
            "straggler_clients": fails.get("straggler_clients", 0.0),
            "rejected_clients": float(rejected),
        }
        if strategy.communicates:
            m["bytes_down"] = float(sum(self._bytes(p.weights) + p.extra_bytes_down for _, p in plans))
            m["bytes_up"] = float(sum(self._bytes(r.weights) + r.extra_bytes_up for r in results))
        else:
            m["bytes_down"] = m["bytes_up"] = 0.0
        m.update(strategy.round_metrics(self.state))
        true = self.data.meta.get("distribution")
        if true is not None:  # planted distributions (shift partitions): their number M, the clustering's ARI
            m["num_distributions"] = float(len(np.unique(true)))
            if self.state.assignment is not None:
                m.update(clustering_scores(np.asarray(true), np.asarray(self.state.assignment)))
        if t % self.eval_every == 0 or t == self.rounds:
            m.update(self.evaluate())
        if t == self.rounds and self.data.unseen:
            m.update(self.test_phase())
        if t == self.rounds and self.data.num_samples("val").sum() > 0:
            val = self.evaluate("val")  # the tuning objective: validation accuracy of the final models
            m.update({"val_accuracy": val["global_accuracy"], "val_loss": val["test_loss"]})
        m["round_time_s"] = time.perf_counter() - t0
        return m

    def test_phase(self) -> dict[str, float]:
        """Flux's evaluation protocol (App. F.1): ``known_association_accuracy`` = the unweighted mean over training
        clients of their test accuracy with the model they use, and ``test_phase_accuracy`` = the unweighted mean
        over the unseen clients of their test accuracy with the model inferred without their labels
        (:meth:`Strategy.test_time_weights`), or, for methods without a test-time mechanism, with the
        cluster-size-weighted ensemble of their models. Under a shift whose ``meta["test_phase"]`` says it is not
        applicable (P(Y|X)), no test-phase number is reported."""
        out: dict[str, float] = {}
        acc = self.client_table.get("accuracy")
        if acc is not None and np.isfinite(acc).any():
            out["known_association_accuracy"] = float(np.nanmean(acc))
        if "test_phase" in self.data.meta:
            return out
        ids = self.data.unseen_ids
        weights = self.strategy.test_time_weights(self.state, self.executor, ids)
        if weights is not None:
            accs = [r.accuracy for r in self.executor.evaluate(list(zip(ids, weights)), "test")]
        else:
            accs = self._ensemble_accuracy(ids)
        if accs:
            out["test_phase_accuracy"] = float(np.nanmean(accs))
        return out

    def _ensemble_accuracy(self, ids: list[int]) -> list[float]:
        """Per unseen client: accuracy of the prediction-level ensemble Σ_c (n_c / Σ n) softmax(f(x; θ_c)), n_c the
        number of training clients in cluster c (single-model methods: the global model; methods with neither:
        every training client's model, equally weighted)."""
        st = self.state
        if st.clusters is not None and st.assignment is not None:
            a = np.asarray(st.assignment)
            sizes = np.bincount(a[a >= 0], minlength=st.clusters.shape[0]).astype(float)
            models = [(st.clusters[c], sizes[c]) for c in range(st.clusters.shape[0]) if sizes[c] > 0]
            if (a < 0).any() and st.weights is not None:  # unassigned clients use the global model
                models.append((st.weights, float((a < 0).sum())))
        elif st.weights is not None:
            models = [(st.weights, 1.0)]
        else:
            models = [(self.strategy.eval_weights(st, k), 1.0) for k in range(self.data.num_clients)]
        total = sum(w for _, w in models)
        probs: dict[int, torch.Tensor] = {}
        labels: dict[int, torch.Tensor] = {}
        for weights, coef in models:
            res = self.executor.compute([(q, weights) for q in ids], _softmax_and_labels, "test")
            for q, (p, y) in zip(ids, res):
                probs[q] = probs.get(q, 0) + p * (coef / total)
                labels[q] = y
        return [float((probs[q].argmax(1) == labels[q]).double().mean()) if len(labels[q]) else float("nan")
                for q in ids]

    def _train_counts(self, what: str) -> np.ndarray:
        """``data.label_counts("train")`` / ``data.num_samples("train")``, computed once (the partition is fixed)."""
        if what not in self._counts:
            self._counts[what] = getattr(self.data, what)("train")
        return self._counts[what]

    def evaluate(self, split: str = "test") -> dict[str, float]:
        """Score every client on its ``split`` with the model it would use; on ``test`` also the pooled global
        test set (single-model methods) and the per-client table."""
        groups = shared_model_groups(self.strategy, self.state, self.data.num_clients) if self.batched_eval else None
        if groups is not None:
            res = evaluate_shared(self.executor, groups, split, self.data.num_clients)
        else:
            requests = LazyRequests(range(self.data.num_clients), lambda k: self.strategy.eval_weights(self.state, k))
            if self.batched_eval:  # personal models: vmap groups where the model allows
                res = self.executor.evaluate_columns(requests, split)
            else:
                res = EvalColumns.from_results(self.executor.evaluate(requests, split))
        correct, n, loss = (a.astype(float) for a in (res.correct, res.num_samples, res.loss_sum))
        out = summarize(correct, n)
        out["test_loss"] = float(loss.sum() / max(n.sum(), 1.0))
        c = self.data.num_classes
        if len(res) and res.class_total.shape[1] == c:  # Few/Medium/Many accuracy (DA-PFL Table IV)
            buckets = bucket_accuracy(res.class_correct, res.class_total, self._train_counts("label_counts"),
                                      list(self.metrics_cfg.class_bucket_edges))
            out.update({k: v for k, v in buckets.items() if np.isfinite(v)})  # an empty bucket: no metric
        if split != "test":
            return {k: float(v) for k, v in out.items()}
        gw = self.strategy.global_weights(self.state)
        if gw is not None:
            g = self.executor.evaluate_global(gw)
            if g is not None:
                out["global_test_accuracy"] = g.accuracy
        self.client_table = {
            "client": np.arange(self.data.num_clients),
            "num_train": self._train_counts("num_samples").copy(),
            "num_test": n.astype(np.int64),
            "correct": correct.astype(np.int64),
            "accuracy": np.divide(correct, n, out=np.full_like(n, np.nan), where=n > 0),
            "test_loss": np.divide(loss, n, out=np.full_like(n, np.nan), where=n > 0),
        }
        if self.state.assignment is not None:
            assign = np.asarray(self.state.assignment)
            self.client_table["cluster"] = assign
            for c in np.unique(assign[assign >= 0]):  # per-cluster accuracy (test-size weighted)
                sel = (assign == c) & (n > 0)
                if sel.any():
                    out[f"cluster_accuracy_{int(c)}"] = correct[sel].sum() / n[sel].sum()
        return {k: float(v) for k, v in out.items()}

