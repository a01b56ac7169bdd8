"""The one round loop: :class:`Orchestrator`, its :class:`Callback` events and its :class:`RunSummary`.

Per round t: the strategy selects clients, plans each one's local work, the executor trains them (in this
process, :class:`~flplat.engine.executor.LocalExecutor`, or sharded over Fabric processes,
:class:`~flplat.engine.sharding.ShardedExecutor`, behind the same methods), the strategy aggregates, and every
client is scored on its own test split with the model it would use. Cross-cutting concerns (MLflow, progress
display) are callbacks on the round events, so the loop itself never logs.

The seam with :mod:`flplat.engine.executor`: this module is the server side (what a round does, the run's
metrics: :func:`clustering_scores`, the curve summaries, the test phase), the executor the client side (how each
client's training, scoring and ``compute`` run). The executor's names (``LocalExecutor``, ``LazyRequests``,
``request_clients``, ``subset``, ``_softmax_and_labels``) are re-exported here, so the import paths that name them
in this module keep working; a monkeypatch must target :mod:`flplat.engine.executor` to reach the code.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from flplat.data.containers import FederatedData
from flplat.engine.batched_eval import EvalColumns, evaluate_shared, shared_model_groups
from flplat.engine.executor import LazyRequests, LocalExecutor, _softmax_and_labels, request_clients, subset
from flplat.engine.failures import Diverged, reject_nonfinite
from flplat.errors import raise_if_stopped
from flplat.metrics.curves import curve_summary
from flplat.metrics.evaluation import summarize
from flplat.metrics.multilabel import macro_auroc, summarize_auroc
from flplat.metrics.personalized import bucket_accuracy, run_summary
from flplat.protocol.seeding import derive_seed
from flplat.protocol.state import ServerState
from flplat.protocol.strategy import Strategy

__all__ = [
    "Callback",
    "LazyRequests",
    "LocalExecutor",
    "Orchestrator",
    "RunSummary",
    "clustering_scores",
    "request_clients",
    "subset",
]


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
        self._multilabel_logged = False

    def _bytes(self, t: torch.Tensor | None, sent: torch.Tensor | None = None) -> int:
        """Bytes of the model vector ``t`` that travel: the entries of the strategy's ``sent`` mask
        (:meth:`Strategy.sent_mask`; None: all of them)."""
        if t is None:
            return 0
        n = int(sent.sum()) if sent is not None and sent.numel() == t.numel() else t.numel()
        return n * t.element_size()

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
        status = "FAILED"
        started: list[Callback] = []
        try:
            for cb in self.callbacks:  # inside the try: a Ctrl-C while the MLflow run is being created ends it KILLED
                started.append(cb)  # (before on_start: one interrupted half-way is ended too)
                cb.on_start(self)
            for t in range(self.start_round, self.rounds + 1):
                raise_if_stopped()  # a Ctrl-C whose KeyboardInterrupt was swallowed on its way ends the run here
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
            stopped = None
            for cb in started:  # every callback ends (the MLflow run too) even when a Ctrl-C comes meanwhile
                try:
                    cb.on_end(self, status)
                except KeyboardInterrupt as e:
                    stopped = stopped or e
            if stopped is not None:
                raise stopped
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

    def _enter_round(self, t: int) -> None:
        """A partition's drift (:class:`~flplat.data.containers.Drift`, Flux App. D.3): from a change round on, the
        training clients hold their next stage's data. The data switch in place; what was computed from the old
        stage is dropped: the train counts, the executor's row caches, and the strategy's federation info (the sizes,
        label counts and train rows clients report, which FedEM trains on)."""
        if not self.data.enter_round(t):
            return
        self._counts.clear()
        self.executor.data_changed()
        info, d = getattr(self.strategy, "info", None), self.data
        if info is not None:
            info.num_samples, info.label_counts = d.num_samples("train"), d.label_counts("train")
            info.all_train_indices = np.concatenate([c.train for c in d.clients])
            info.split_samples = {split: d.num_samples(split) for split in info.split_samples}

    def _round(self, t: int, rng: np.random.Generator) -> dict[str, float]:
        strategy, ex = self.strategy, self.executor
        t0 = time.perf_counter()
        self._enter_round(t)
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
        if strategy.communicates:  # what travels: the sent part of each model (a local head is not) and the extras
            down, up = strategy.sent_mask("down"), strategy.sent_mask("up")
            m["bytes_down"] = float(sum(self._bytes(p.weights, down) + p.extra_bytes_down for _, p in plans))
            m["bytes_up"] = float(sum(self._bytes(r.weights, up) + r.extra_bytes_up for r in results))
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
            if "global_auroc" in val:
                m["val_auroc"] = val["global_auroc"]
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
        for key in ("accuracy", "auroc"):  # auroc: multi-label data (Flux App. F.4)
            v = self.client_table.get(key)
            if v is not None and np.isfinite(v).any():
                out[f"known_association_{key}"] = float(np.nanmean(v))
        if "test_phase" in self.data.meta:
            return out
        ids = self.data.unseen_ids
        weights = self.strategy.test_time_weights(self.state, self.executor, ids)
        aurocs: list[float] = []
        if weights is not None:
            res = self.executor.evaluate(list(zip(ids, weights)), "test")
            accs, aurocs = [r.accuracy for r in res], [r.auroc for r in res]
        else:
            accs = self._ensemble_accuracy(ids, aurocs)
        if accs:
            out["test_phase_accuracy"] = float(np.nanmean(accs))
        if self.data.multilabel and aurocs and np.isfinite(aurocs).any():
            out["test_phase_auroc"] = float(np.nanmean(aurocs))
        return out

    def _ensemble_accuracy(self, ids: list[int], aurocs: list[float] | None = None) -> list[float]:
        """Per unseen client: accuracy of the prediction-level ensemble Σ_c (n_c / Σ n) softmax(f(x; θ_c)), n_c the
        number of training clients in cluster c (single-model methods: the global model; methods with neither:
        every training client's model, equally weighted); multi-label data: of Σ_c (n_c / Σ n) sigmoid(f(x; θ_c))
        (exact-match accuracy at 0.5), and each one's macro ROC AUC of that ensemble appended to ``aurocs``."""
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
        if not ids or labels[ids[0]].dim() == 1:
            return [float((probs[q].argmax(1) == labels[q]).double().mean()) if len(labels[q]) else float("nan")
                    for q in ids]
        if aurocs is not None:  # multi-label: probs are the ensemble's sigmoid outputs (_softmax_and_labels)
            aurocs.extend(macro_auroc(probs[q], labels[q]) for q in ids)
        return [float(((probs[q] > 0.5) == (labels[q] > 0.5)).all(1).double().mean()) if len(labels[q])
                else float("nan") for q in ids]

    def _train_counts(self, what: str) -> np.ndarray:
        """``data.label_counts("train")`` / ``data.num_samples("train")``, computed once (the partition is fixed)."""
        if what not in self._counts:
            self._counts[what] = getattr(self.data, what)("train")
        return self._counts[what]

    def evaluate(self, split: str = "test") -> dict[str, float]:
        """Score every client on its ``split`` with the model it would use; on ``test`` also the pooled global
        test set (single-model methods) and the per-client table."""
        multilabel = self.data.multilabel
        if multilabel and self.batched_eval and not self._multilabel_logged:
            import logging

            logging.getLogger("flplat").info("federation.batched_eval: multi-label data are scored client by client "
                                             "(macro ROC AUC needs each client's predictions, not summed counts)")
            self._multilabel_logged = True
        batched = self.batched_eval and not multilabel
        groups = shared_model_groups(self.strategy, self.state, self.data.num_clients) if batched else None
        if multilabel:
            results = self.executor.evaluate(
                LazyRequests(range(self.data.num_clients), lambda k: self.strategy.eval_weights(self.state, k)), split)
            res = EvalColumns.from_results(results)
        elif groups is not None:
            res = evaluate_shared(self.executor, groups, split, self.data.num_clients)
        else:
            requests = LazyRequests(range(self.data.num_clients), lambda k: self.strategy.eval_weights(self.state, k))
            if batched:  # personal models: vmap groups where the model allows
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
        if multilabel:  # macro ROC AUC where accuracy is reported (flplat/metrics/multilabel.py)
            auroc = np.array([r.auroc for r in results], dtype=float)
            out.update(summarize_auroc(auroc, [r.scores for r in results if r.scores is not None],
                                       [r.targets for r in results if r.targets is not None]))
        if split != "test":
            return {k: float(v) for k, v in out.items()}
        gw = self.strategy.global_weights(self.state)
        if gw is not None:
            g = self.executor.evaluate_global(gw)
            if g is not None:
                out["global_test_accuracy"] = g.accuracy
                if g.scores is not None:  # (a sharded run sums counts only: no pooled AUROC there)
                    out["global_test_auroc"] = g.auroc
        self.client_table = {
            "client": np.arange(self.data.num_clients),
            "num_train": self._train_counts("num_samples").copy(),
            "num_test": n.astype(np.int64),
            "correct": correct.astype(np.int64),
            "accuracy": np.divide(correct, n, out=np.full_like(n, np.nan), where=n > 0),
            "test_loss": np.divide(loss, n, out=np.full_like(n, np.nan), where=n > 0),
        }
        if multilabel:
            self.client_table["auroc"] = auroc
        if self.state.assignment is not None:
            assign = np.asarray(self.state.assignment)
            self.client_table["cluster"] = assign
            for c in np.unique(assign[assign >= 0]):  # per-cluster accuracy (test-size weighted)
                sel = (assign == c) & (n > 0)
                if sel.any():
                    out[f"cluster_accuracy_{int(c)}"] = correct[sel].sum() / n[sel].sum()
        return {k: float(v) for k, v in out.items()}

