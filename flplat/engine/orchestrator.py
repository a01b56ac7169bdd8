"""The one round loop: :class:`Orchestrator` and its :class:`RunSummary`.

Per round t: the strategy selects clients, plans each one's local work, the executor trains them (in this
process, :class:`~flplat.engine.executor.LocalExecutor`, or sharded over Fabric processes,
:class:`~flplat.engine.sharding.ShardedExecutor`, behind the same methods), the strategy aggregates, and the
:class:`~flplat.engine.evaluation.Evaluator` scores every client with the model the strategy declares. Cross-cutting
concerns (MLflow, progress display, checkpoints) are callbacks; they receive frozen records of the run's start, each
round's end and the run's end (:mod:`flplat.engine.events`), never the loop, so the loop itself never logs. What the
loop is given -- the failure model, the run's metadata -- are constructor arguments.

This module is the server side (what a round does), :mod:`flplat.engine.executor` the client side. Names that lived
here (the executor's, ``clustering_scores``: the evaluation's) warn from this old path until flplat 0.3.0.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from flplat.data.containers import FederatedData
from flplat.deprecation import moved
from flplat.engine import checkpoint
from flplat.engine.evaluation import Evaluator
from flplat.engine.events import Callback, RoundEnd, RunEnd, RunStart, StrategyReport
from flplat.engine.failures import Diverged, reject_nonfinite
from flplat.errors import raise_if_stopped
from flplat.protocol.seeding import derive_seed
from flplat.protocol.state import ServerState
from flplat.protocol.strategy import Strategy

if TYPE_CHECKING:  # an annotation only: orchestrator.LocalExecutor is an old path, and warns
    from flplat.engine.executor import LocalExecutor

__all__ = ["Callback", "Orchestrator", "RunSummary"]

__getattr__ = moved(__name__, {
    **{n: "flplat.engine.executor" for n in ("request_clients", "subset", "LazyRequests", "LocalExecutor",
                                            "_softmax_and_labels")},
    "clustering_scores": "flplat.engine.evaluation"})


@dataclass
class RunSummary:
    metrics: dict[str, float]  # last round's metrics
    history: list[dict[str, float]]
    client_table: dict[str, np.ndarray]  # per-client arrays of the last evaluation
    state: ServerState = field(repr=False)
    final: dict[str, float] = field(default_factory=dict)  # run-level summaries (best / windowed / last-rounds)


class Orchestrator:
    """Runs ``rounds`` rounds of ``strategy`` on ``data`` through ``executor``. ``failures``: a
    :class:`~flplat.engine.failures.FailureModel` (``federation.failures``) or None; ``meta``: the run's metadata,
    handed to the callbacks and kept in checkpoints (the resolved config, the client-state directory)."""

    def __init__(self, strategy: Strategy, executor: LocalExecutor, data: FederatedData, rounds: int,
                 eval_every: int, seed: int, callbacks: Sequence[Callback] = (), accuracy_window: int = 30,
                 metrics_cfg=None, batched_eval: bool = True, failures=None, meta: Mapping[str, Any] | None = None):
        self.strategy = strategy
        self.executor = executor
        self.data = data
        self.rounds = rounds
        self.seed = seed
        self.callbacks = list(callbacks)
        self.failures = failures
        self.meta: dict[str, Any] = dict(meta or {})
        self.evaluator = Evaluator(strategy, executor, data, eval_every, metrics_cfg, batched_eval, accuracy_window)
        self.history: list[dict[str, float]] = []
        self.state: ServerState | None = None
        self.rng: np.random.Generator | None = None  # the server RNG (client sampling, strategy randomness)
        self.trained = np.zeros(data.num_clients, dtype=bool)  # clients that returned a result in some round
        self.start_round = 1  # > 1 when resumed from a checkpoint (flplat.engine.checkpoint)
        self.completed_round = 0  # last round whose server state is complete (0: none; None: inside a round)

    @property
    def client_table(self) -> dict[str, np.ndarray]:
        return self.evaluator.client_table

    @client_table.setter
    def client_table(self, table: dict[str, np.ndarray]) -> None:
        self.evaluator.client_table = table

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
        rng = self.rng = np.random.default_rng(derive_seed(self.seed, "server"))
        if resume is not None:
            self.start_round = resume(self) + 1
        else:
            self.state = self.strategy.init_state(init_weights, rng, self.executor)
        self.completed_round = self.start_round - 1
        status, error, final, series = "FAILED", None, {}, {}
        started: list[Callback] = []
        try:
            start = RunStart(self.rounds, self.start_round, tuple(self.history), self.state, dict(self.meta),
                             self.evaluator.tags())
            for cb in self.callbacks:  # inside the try: a Ctrl-C while the MLflow run is being created ends it KILLED
                started.append(cb)  # (before on_start: one interrupted half-way is ended too)
                cb.on_start(start)
            for t in range(self.start_round, self.rounds + 1):
                raise_if_stopped()  # a Ctrl-C whose KeyboardInterrupt was swallowed on its way ends the run here
                self.completed_round = None
                self.state.round = t
                self.history.append(self._round(t, rng))
                self.completed_round = t
                end = RoundEnd(t, self.rounds, dict(self.history[-1]), self.state, self._payload(t))
                for cb in self.callbacks:
                    cb.on_round_end(end)
            final, series = self.evaluator.summary(self.history)
            status = "FINISHED"
        except KeyboardInterrupt:
            status = "KILLED"
            raise
        except Exception as e:
            error = (str(e).strip().splitlines() or [type(e).__name__])[0][:500]
            raise
        finally:
            self._end(started, status, error, final, series)
        return RunSummary(self.history[-1], self.history, self.client_table, self.state, dict(final))

    def _payload(self, t: int):
        return lambda: checkpoint.payload(self, t)

    def _end(self, started: list[Callback], status: str, error: str | None, final: dict, series: dict) -> None:
        """Every callback whose start began ends (the MLflow run too), even when a Ctrl-C comes meanwhile."""
        if not started:
            return
        done = self.completed_round
        end = RunEnd(status, self.rounds, done, tuple(self.history), dict(final), dict(series),
                     dict(self.client_table), self._report(), dict(self.meta), error, self.state,
                     self._payload(done) if done is not None and self.state is not None else None)
        stopped = None
        for cb in started:
            try:
                cb.on_end(end)
            except KeyboardInterrupt as e:
                stopped = stopped or e
        if stopped is not None:
            raise stopped

    def _report(self) -> StrategyReport | None:
        """The strategy's end-of-run report on the final state (asked once); None when it has none to give."""
        s, st = self.strategy, self.state
        if st is None:
            return None
        try:
            return StrategyReport(type(s).__name__, s.artifacts(st), s.series(st), s.scatter(st),
                                  s.global_weights(st), st.clusters, st.assignment, self.data.num_clients,
                                  lambda k: s.eval_weights(st, k))
        except Exception:  # noqa: BLE001  (a state broken by the failure being reported: end without the report)
            return None

    def _enter_round(self, t: int) -> None:
        """A partition's drift (:class:`~flplat.data.containers.Drift`, Flux App. D.3): from a change round on, the
        training clients hold their next stage's data. The data switch in place; what was computed from the old
        stage is dropped: the train counts, the executor's row caches, and the strategy's federation info (the sizes,
        label counts and train rows clients report, which FedEM trains on)."""
        if not self.data.enter_round(t):
            return
        self.evaluator.data_changed()
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
            self.trained[[r.client for r in results if 0 <= r.client < len(self.trained)]] = True
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
        m.update(self.evaluator.round_metrics(self.state, t, self.rounds, self.trained))
        m["round_time_s"] = time.perf_counter() - t0
        return m
