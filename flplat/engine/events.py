"""The round loop's events: what a :class:`Callback` receives, as frozen records, never the loop itself.

A callback (MLflow tracking, progress display, checkpoints, the client-state cleanup, a study's pruning) sees three
events: :class:`RunStart` before round 1 (or before the first round a resumed run still has to do), one
:class:`RoundEnd` after each round, and :class:`RunEnd` when the run stops, FINISHED, FAILED or KILLED (every
callback whose ``on_start`` began gets it, even after a Ctrl-C). Each record holds what a callback may need, handed
over explicitly: the round's metrics, the run's metadata (the constructor's ``meta``: the resolved config, the
client-state directory), what the run records about its evaluation (which model scored the unseen clients), the
run-level summaries, the last per-client table and the strategy's end-of-run report (:class:`StrategyReport`, asked
for once). A checkpoint is a call away: ``record.checkpoint()`` builds the payload of the last completed round
(:func:`flplat.engine.checkpoint.payload`), so only a callback that saves one pays for it.

``state`` is the server state at that moment, for callbacks that read it (tests, investigations); a callback must
not change it. Records are frozen, so a callback cannot change what the next one sees.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from flplat.protocol.state import ServerState

__all__ = ["Callback", "RoundEnd", "RunEnd", "RunStart", "StrategyReport"]


@dataclass(frozen=True)
class RunStart:
    """Before the first round this process trains."""

    rounds: int  # federation.rounds (T)
    start_round: int  # 1, or the first round after the checkpoint a resumed run continues from
    history: tuple[Mapping[str, float], ...]  # the rounds a resumed run has already done (empty otherwise)
    state: ServerState = field(repr=False)
    meta: Mapping[str, Any] = field(default_factory=dict)  # the run's metadata (Orchestrator(meta=...))
    tags: Mapping[str, str] = field(default_factory=dict)  # what the run records about its evaluation


@dataclass(frozen=True)
class RoundEnd:
    """After round ``round``: its metrics (step = round)."""

    round: int
    rounds: int
    metrics: Mapping[str, float]
    state: ServerState = field(repr=False)
    checkpoint: Callable[[], dict[str, Any]] = field(repr=False, default=dict)  # payload after this round


@dataclass(frozen=True)
class StrategyReport:
    """What the strategy says about its final state, asked for once at the end of the run: text artifacts by path,
    curves over other axes, 2-D point sets to plot, and its final models (``global_weights``: None without a
    global model; ``clusters`` / ``assignment``: clustered methods; ``client_model(k)``: the model client k uses,
    read on request, e.g. to log every personal model)."""

    algorithm: str
    artifacts: Mapping[str, str]
    series: Mapping[str, list[tuple[int, float]]]
    scatter: Mapping[str, tuple[np.ndarray, np.ndarray]]
    global_weights: torch.Tensor | None
    clusters: torch.Tensor | None
    assignment: np.ndarray | None
    num_clients: int
    client_model: Callable[[int], torch.Tensor] = field(repr=False)


@dataclass(frozen=True)
class RunEnd:
    """When the run stops: ``status`` FINISHED, FAILED or KILLED."""

    status: str
    rounds: int
    completed_round: int | None  # the last round whose server state is complete (None: stopped inside a round)
    history: tuple[Mapping[str, float], ...]
    final: Mapping[str, float]  # run-level summaries (best / windowed accuracy, last-rounds means, rounds to target)
    series: Mapping[str, list[tuple[int, float]]]  # run-level curves over another axis (windowed accuracy)
    client_table: Mapping[str, np.ndarray]  # per-client columns of the last evaluation
    report: StrategyReport | None  # None: no server state, or the strategy could not report on it
    meta: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None  # FAILED: the first line of the error
    state: ServerState | None = field(repr=False, default=None)
    checkpoint: Callable[[], dict[str, Any]] | None = field(repr=False, default=None)  # of completed_round


class Callback:
    """Round events; override what you need."""

    def on_start(self, start: RunStart) -> None: ...

    def on_round_end(self, end: RoundEnd) -> None: ...

    def on_end(self, end: RunEnd) -> None: ...
