"""Round checkpoints: everything a run needs to continue after a kill and end with identical metrics.

A checkpoint taken after round t holds

* the :class:`~flplat.protocol.state.ServerState` (global / cluster models, assignment, server-optimizer state,
  the method's typed state ``method``; per-client vectors through the compact
  :class:`~flplat.protocol.state.ClientStore`, which pickles only its written rows in its own dtype),
* the strategy's own state (:meth:`~flplat.protocol.strategy.Strategy.state_dict`: generic for every registered
  algorithm),
* every RNG that drives later rounds: the server generator (client sampling, strategy randomness), torch's and
  numpy's global generators (client training and evaluation derive their seeds from the root seed, round and
  client, so they need nothing),
* the metric history and the run-level curve state, and the orchestrator's ``meta`` (the MLflow run id, the
  resolved config).

``VERSION`` 2: the methods' state moved from ``ServerState.extra`` (string keys) to their own dataclasses in
``ServerState.method``, so a checkpoint of version 1 is refused with its version (an earlier flplat's run is not
resumed, it is rerun) rather than resumed into state the strategy cannot read.

Files are written atomically (a temporary file, then ``os.replace``), so a kill during the write leaves the
previous checkpoint intact. Where they live is the caller's choice (:func:`flplat.tracking.runs.checkpoint_path`:
beside the MLflow store). :class:`CheckpointCallback` saves one every ``every`` rounds and, when the run is
interrupted (Ctrl-C / SIGTERM) between rounds, one of the last completed round; a FINISHED run's checkpoint is
removed unless ``keep``.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flplat.engine.orchestrator import Callback, Orchestrator

VERSION = 2


def payload(orch: Orchestrator, round: int) -> dict[str, Any]:
    """The checkpoint of ``orch`` after ``round`` (call between rounds only)."""
    return {
        "version": VERSION,
        "round": int(round),
        "state": orch.state,
        "strategy": orch.strategy.state_dict(),
        "server_rng": orch.rng.bit_generator.state,
        "torch_rng": torch.get_rng_state(),
        "numpy_rng": np.random.get_state(),
        "history": list(orch.history),
        "client_table": dict(orch.client_table),
        "meta": dict(orch.meta),
    }


def save(path: str | Path, data: dict[str, Any]) -> None:
    """Write atomically: the old checkpoint stays valid until the new one is complete."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "wb") as fh:  # plain pickle (tensors pickle their storages): faster than torch.save's zip
        pickle.dump(data, fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)


def load(path: str | Path) -> dict[str, Any]:
    with open(path, "rb") as fh:  # the run's own file, beside its store (trusted like the store itself)
        data = pickle.load(fh)
    if data.get("version") != VERSION:
        raise ValueError(f"checkpoint {path} has version {data.get('version')}, expected {VERSION} (written by another "
                         "flplat version; it cannot be resumed: run the config again)")
    return data


def restore(orch: Orchestrator, data: dict[str, Any]) -> int:
    """Put a checkpoint's state into a freshly built orchestrator (same config); returns its round."""
    orch.state = data["state"]
    orch.strategy.load_state_dict(data["strategy"])
    if orch.rng is None:
        orch.rng = np.random.default_rng()
    orch.rng.bit_generator.state = data["server_rng"]
    torch.set_rng_state(data["torch_rng"])
    np.random.set_state(data["numpy_rng"])
    orch.history = list(data["history"])
    orch.client_table = dict(data["client_table"])
    orch.meta.update(data["meta"])
    return int(data["round"])


def resumer(data: dict[str, Any]):
    """What :meth:`Orchestrator.run` takes as ``resume``: restores ``data`` and returns its round."""
    return lambda orch: restore(orch, data)


class CheckpointCallback(Callback):
    """Saves ``<directory>/<run id>.pt`` every ``every`` rounds (and the last round); placed before the tracker
    so a round is checkpointed before it is logged. On KILLED it saves the last completed round when that is
    newer than the last checkpoint; on FINISHED it removes the file unless ``keep``; on FAILED it keeps it
    (resume after the cause is fixed)."""

    def __init__(self, directory: str | Path, every: int, keep: bool = False):
        self.directory = Path(directory)
        self.every = int(every)
        self.keep = keep
        self.saved_round = 0

    def path(self, orch: Orchestrator) -> Path | None:
        """``<directory>/<run id>.pt``; None while the run has no id (tracking off: nothing to resume by)."""
        run_id = orch.meta.get("run_id")
        return None if not run_id else self.directory / f"{run_id}.pt"

    def on_start(self, orch: Orchestrator) -> None:
        self.saved_round = orch.start_round - 1

    def _save(self, orch: Orchestrator, round: int) -> None:
        path = self.path(orch)
        if path is not None:
            save(path, payload(orch, round))
            self.saved_round = round

    def on_round_end(self, orch: Orchestrator, round: int, metrics: dict[str, float]) -> None:
        if self.every > 0 and (round % self.every == 0 or round == orch.rounds):
            self._save(orch, round)

    def on_end(self, orch: Orchestrator, status: str) -> None:
        if status == "FINISHED":
            path = self.path(orch)
            if path is not None and not self.keep:
                path.unlink(missing_ok=True)
        elif status == "KILLED" and self.every > 0:
            done = orch.completed_round
            if done is not None and done > self.saved_round and orch.state is not None:
                self._save(orch, done)
