"""Evaluation, out of the round loop: which model scores each client, the per-client table, Flux's test phase, the
clustering's ARI and the run's curve summaries.

Which model scores a client is the strategy's declaration (:class:`~flplat.protocol.strategy.EvalModels`,
``strategy.eval_models``), never guessed from which methods its class overrides:

* a training ("seen") client, ``seen``: ``global`` -- every client the strategy's ``global_weights`` (scored as one
  shared group); ``cluster`` -- its cluster's model, a client not assigned yet the strategy's
  ``unassigned_weights`` (one shared group per cluster); ``personal`` -- its own ``eval_weights`` (stacked groups,
  :mod:`flplat.engine.batched_eval`);
* an unseen (test-only, unlabeled) client, ``unseen`` (Flux App. F.1's test phase): ``test_time`` -- the strategy's
  ``test_time_weights``; ``global`` -- ``global_weights``; ``cluster_ensemble`` -- the prediction ensemble
  Σ_c (n_c / Σ n) softmax(f(x; θ_c)), n_c the training clients of cluster c that have trained (those not assigned:
  their model, weighted by their number); ``client_ensemble`` -- the equally weighted prediction ensemble of the
  trained training clients' own models (each a cluster of one). A client "has trained" when it returned a result in
  some round (``trained``, kept by the loop); before any has, every training client counts. Multi-label data: the
  ensemble averages per-label sigmoids (exact-match accuracy at 0.5, macro ROC AUC). ``not_applicable``: no
  test-phase number, and the run records why.

What the run records about this (:meth:`Evaluator.tags`): ``flplat.eval.seen_model`` and
``flplat.eval.unseen_model`` (the declaration and its note), and ``test_phase`` where the partition has no test
phase (P(Y|X) shift). ``flplat check``'s ``evaluation`` property checks that each declared model was trained by a
client (:mod:`flplat.studies.declarations`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import torch

from flplat.data.containers import FederatedData
from flplat.engine.batched_eval import EvalColumns, evaluate_shared, shared_model_groups
from flplat.engine.executor import LazyRequests, _softmax_and_labels
from flplat.metrics.curves import curve_summary
from flplat.metrics.evaluation import summarize
from flplat.metrics.multilabel import macro_auroc, summarize_auroc
from flplat.metrics.personalized import bucket_accuracy, run_summary
from flplat.protocol.state import ServerState
from flplat.protocol.strategy import Strategy

__all__ = ["Evaluator", "clustering_scores", "ensemble_accuracy", "known_association"]

Ensemble = list[tuple[torch.Tensor, float]]


def clustering_scores(true: np.ndarray, assignment: np.ndarray) -> dict[str, float]:
    """Adjusted Rand index of the assigned training clients' clusters against their true distribution ids."""
    from sklearn.metrics import adjusted_rand_score

    sel = assignment >= 0
    if sel.sum() < 2:
        return {}
    return {"ari": float(adjusted_rand_score(true[sel], assignment[sel])), "assigned_clients": float(sel.sum())}


def known_association(client_table: dict[str, np.ndarray]) -> dict[str, float]:
    """Flux App. F.1's known association: the unweighted mean over the training clients of their test accuracy (and
    ROC AUC on multi-label data) with the model they use; clients without one (NaN) left out."""
    out: dict[str, float] = {}
    for key in ("accuracy", "auroc"):
        v = client_table.get(key)
        if v is not None and np.isfinite(v).any():
            out[f"known_association_{key}"] = float(np.nanmean(v))
    return out


def ensemble_accuracy(ops, models: Ensemble, ids: Sequence[int], aurocs: list[float] | None = None) -> list[float]:
    """Per client of ``ids``: the test accuracy of the prediction ensemble Σ_m (c_m / Σ c) softmax(f(x; θ_m)) of
    ``models`` = ``[(θ_m, c_m), ...]`` (``ops.compute`` runs each model on the clients' test splits); multi-label
    data: of Σ_m (c_m / Σ c) sigmoid(f(x; θ_m)) (exact-match accuracy at 0.5), each one's macro ROC AUC of that
    ensemble appended to ``aurocs``."""
    total = sum(w for _, w in models)
    probs: dict[int, torch.Tensor] = {}
    labels: dict[int, torch.Tensor] = {}
    for weights, coef in models:
        res = ops.compute([(q, weights) for q in ids], _softmax_and_labels, "test")
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


class Evaluator:
    """Scores a strategy's clients with the models it declares (see the module docstring); keeps the last test
    evaluation's per-client table (``client_table``)."""

    def __init__(self, strategy: Strategy, executor, data: FederatedData, eval_every: int = 1, metrics_cfg=None,
                 batched: bool = True, accuracy_window: int = 30):
        from flplat.config import MetricsConfig

        self.strategy, self.executor, self.data = strategy, executor, data
        self.eval_every = eval_every
        self.metrics_cfg = metrics_cfg if metrics_cfg is not None else MetricsConfig()
        self.batched = batched  # clients sharing a model scored in one pass (flplat/engine/batched_eval.py)
        self.accuracy_window = accuracy_window
        self.client_table: dict[str, np.ndarray] = {}
        self._counts: dict[str, np.ndarray] = {}  # per-client train counts, computed once (_train_counts)
        self._multilabel_logged = False

    # ---- which model -----------------------------------------------------------------------------------------
    def seen_model(self, state: ServerState, client: int) -> torch.Tensor:
        """The model training client ``client`` is scored with (``eval_models.seen``)."""
        s, seen = self.strategy, self.strategy.eval_models.seen
        if seen == "global":
            return s.global_weights(state)
        if seen == "cluster":
            c = -1 if state.assignment is None else int(state.assignment[client])
            return s.unassigned_weights(state) if c < 0 else state.clusters[c]
        return s.eval_weights(state, client)

    def ensemble(self, state: ServerState, trained: np.ndarray | None = None) -> Ensemble:
        """The ``(model, weight)`` pairs whose prediction ensemble scores an unseen client (``eval_models.unseen``
        = global | cluster_ensemble | client_ensemble)."""
        s, unseen, k = self.strategy, self.strategy.eval_models.unseen, self.data.num_clients
        done = np.ones(k, dtype=bool) if trained is None or not np.any(trained) else np.asarray(trained, bool)[:k]
        if unseen == "global":
            return [(s.global_weights(state), 1.0)]
        if unseen == "client_ensemble":
            return [(self.seen_model(state, c), 1.0) for c in np.flatnonzero(done).tolist()]
        if unseen != "cluster_ensemble":
            raise ValueError(f"eval_models.unseen={unseen!r} is not an ensemble")
        rest = s.unassigned_weights(state)
        if state.clusters is None or state.assignment is None:
            return [(rest, 1.0)]
        a = np.asarray(state.assignment)[:k]
        sizes = np.bincount(a[(a >= 0) & done], minlength=state.clusters.shape[0]).astype(float)
        models = [(state.clusters[c], sizes[c]) for c in range(state.clusters.shape[0]) if sizes[c] > 0]
        if ((a < 0) & done).any() and rest is not None:  # trained clients not assigned: the model they use
            models.append((rest, float(((a < 0) & done).sum())))
        return models

    def tags(self) -> dict[str, str]:
        """What the run records about its evaluation (MLflow tags)."""
        d = self.strategy.eval_models
        out = {"flplat.eval.seen_model": d.seen, "flplat.eval.unseen_model": f"{d.unseen}: {d.note}" if d.note
               else d.unseen}
        if "test_phase" in self.data.meta:  # e.g. P(Y|X) shift: no test-phase accuracy is reported, and why
            out["test_phase"] = str(self.data.meta["test_phase"])
        return out

    # ---- per round --------------------------------------------------------------------------------------------
    def round_metrics(self, state: ServerState, t: int, rounds: int, trained: np.ndarray | None = None
                      ) -> dict[str, float]:
        """The evaluation metrics of round ``t`` of ``rounds``: the clustering's ARI on planted distributions, the
        clients' test metrics every ``eval_every`` rounds and at the last, the test phase and the validation
        accuracy (the tuning objective) at the last."""
        m: dict[str, float] = {}
        true = self.data.meta.get("distribution")
        if true is not None:  # planted distributions (shift partitions): their number M, the clustering's ARI
            m["num_distributions"] = float(len(np.unique(true)))
            if state.assignment is not None:
                m.update(clustering_scores(np.asarray(true), np.asarray(state.assignment)))
        if t % self.eval_every == 0 or t == rounds:
            m.update(self.evaluate(state))
        if t == rounds and self.data.unseen:
            m.update(self.test_phase(state, trained))
        if t == rounds and self.data.num_samples("val").sum() > 0:
            val = self.evaluate(state, "val")  # the tuning objective: validation accuracy of the final models
            m.update({"val_accuracy": val["global_accuracy"], "val_loss": val["test_loss"]})
            if "global_auroc" in val:
                m["val_auroc"] = val["global_auroc"]
        return m

    def test_phase(self, state: ServerState, trained: np.ndarray | None = None) -> dict[str, float]:
        """Flux's evaluation protocol (App. F.1): ``known_association_accuracy`` (:func:`known_association`) and
        ``test_phase_accuracy``, the unweighted mean over the unseen clients of their test accuracy with the
        declared model (module docstring). Under a shift whose ``meta["test_phase"]`` says it is not applicable
        (P(Y|X)), or a strategy that declares none, no test-phase number is reported."""
        out = known_association(self.client_table)
        unseen = self.strategy.eval_models.unseen
        if "test_phase" in self.data.meta or unseen == "not_applicable":
            return out
        ids = self.data.unseen_ids
        aurocs: list[float] = []
        if unseen == "test_time":
            weights = self.strategy.test_time_weights(state, self.executor, ids)
            if weights is None or len(weights) != len(ids):
                raise RuntimeError(f"{type(self.strategy).__name__} declares eval_models.unseen='test_time' but "
                                   f"test_time_weights gave {'None' if weights is None else len(weights)} models "
                                   f"for {len(ids)} unseen clients")
            res = self.executor.evaluate(list(zip(ids, weights)), "test")
            accs, aurocs = [r.accuracy for r in res], [r.auroc for r in res]
        else:
            accs = ensemble_accuracy(self.executor, self.ensemble(state, trained), ids, aurocs)
        if accs:
            out["test_phase_accuracy"] = float(np.nanmean(accs))
        if self.data.multilabel and aurocs and np.isfinite(aurocs).any():
            out["test_phase_auroc"] = float(np.nanmean(aurocs))
        return out

    def data_changed(self) -> None:
        """The training clients' data switched (a drift stage, :meth:`FederatedData.enter_round`): recount."""
        self._counts.clear()

    def _train_counts(self, what: str) -> np.ndarray:
        """``data.label_counts("train")`` / ``data.num_samples("train")``, computed once per drift stage."""
        if what not in self._counts:
            self._counts[what] = getattr(self.data, what)("train")
        return self._counts[what]

    def _scores(self, state: ServerState, split: str):
        """Every training client's results on ``split`` as columns, and (multi-label data) the per-client results."""
        k = self.data.num_clients
        if self.data.multilabel:
            if self.batched and not self._multilabel_logged:
                logging.getLogger("flplat").info("federation.batched_eval: multi-label data are scored client by "
                                                 "client (macro ROC AUC needs each client's predictions, not "
                                                 "summed counts)")
                self._multilabel_logged = True
            results = self.executor.evaluate(LazyRequests(range(k), lambda c: self.seen_model(state, c)), split)
            return EvalColumns.from_results(results), results
        groups = shared_model_groups(self.strategy, state, k) if self.batched else None
        if groups is not None:
            return evaluate_shared(self.executor, groups, split, k), None
        requests = LazyRequests(range(k), lambda c: self.seen_model(state, c))
        if self.batched:  # personal models: vmap groups where the model allows
            return self.executor.evaluate_columns(requests, split), None
        return EvalColumns.from_results(self.executor.evaluate(requests, split)), None

    def evaluate(self, state: ServerState, split: str = "test") -> dict[str, float]:
        """Score every training client on its ``split`` with its declared model; on ``test`` also the pooled global
        test set (single-model methods) and the per-client table."""
        res, results = self._scores(state, split)
        correct, n, loss = (a.astype(float) for a in (res.correct, res.num_samples, res.loss_sum))
        out = summarize(correct, n)
        out["test_loss"] = float(loss.sum() / max(n.sum(), 1.0))
        if len(res) and res.class_total.shape[1] == self.data.num_classes:  # Few/Medium/Many (DA-PFL Table IV)
            buckets = bucket_accuracy(res.class_correct, res.class_total, self._train_counts("label_counts"),
                                      list(self.metrics_cfg.class_bucket_edges))
            out.update({k: v for k, v in buckets.items() if np.isfinite(v)})  # an empty bucket: no metric
        if results is not None:  # macro ROC AUC where accuracy is reported (flplat/metrics/multilabel.py)
            auroc = np.array([r.auroc for r in results], dtype=float)
            out.update(summarize_auroc(auroc, [r.scores for r in results if r.scores is not None],
                                       [r.targets for r in results if r.targets is not None]))
        if split != "test":
            return {k: float(v) for k, v in out.items()}
        gw = self.strategy.global_weights(state)
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
        if results is not None:
            self.client_table["auroc"] = auroc
        if state.assignment is not None:
            assign = np.asarray(state.assignment)
            self.client_table["cluster"] = assign
            for c in np.unique(assign[assign >= 0]):  # per-cluster accuracy (test-size weighted)
                sel = (assign == c) & (n > 0)
                if sel.any():
                    out[f"cluster_accuracy_{int(c)}"] = correct[sel].sum() / n[sel].sum()
        return {k: float(v) for k, v in out.items()}

    # ---- per run ----------------------------------------------------------------------------------------------
    def summary(self, history: Sequence[dict[str, float]]
                ) -> tuple[dict[str, float], dict[str, list[tuple[int, float]]]]:
        """Run-level summaries and curves: best and windowed-average accuracy over the run (CAFA Tables IV-V) of the
        pooled global test accuracy when the method has one global model, else of the test-size-weighted global
        accuracy; the last-rounds means and the rounds to each target accuracy (``metrics.*``)."""
        final: dict[str, float] = {}
        series: dict[str, list[tuple[int, float]]] = {}
        key = "global_test_accuracy" if any("global_test_accuracy" in h for h in history) else "global_accuracy"
        s = curve_summary(list(history), key, self.accuracy_window)
        if s:
            final = {f"best_{key}": s["best"], f"best_round_{key}": float(s["best_round"]),
                     f"window_mean_{key}": s["last_window_mean"]}
            series = {f"window_mean_{key}_by_round": s["windows"]}
        mc = self.metrics_cfg
        final.update(run_summary(list(history), mc.accuracy_key, int(mc.last_rounds),
                                 [float(x) for x in mc.target_accuracy]))
        return final, series
