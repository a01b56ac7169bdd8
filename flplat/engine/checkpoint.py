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
* the metric history, the last per-client table, which clients have trained, and the run's ``meta`` (the resolved
  config, the client-state directory) with the MLflow run id the run was saved under.

``VERSION`` 2: the methods' state moved from ``ServerState.extra`` (string keys) to their own dataclasses in
``ServerState.method``, so a checkpoint of version 1 is refused with its version (an earlier flplat's run is not
resumed, it is rerun) rather than resumed into state the strategy cannot read.

Files are written atomically (a temporary file, then ``os.replace``), so a kill during the write leaves the
previous checkpoint intact. Where they live is the caller's choice (:func:`flplat.tracking.runs.checkpoint_path`:
beside the MLflow store). :func:`payload` and :func:`restore` are the round loop's side (it hands a callback the
payload as ``record.checkpoint()``); :class:`CheckpointCallback` saves one every ``every`` rounds and, when the run
is interrupted (Ctrl-C / SIGTERM) between rounds, one of the last completed round; a FINISHED run's checkpoint is
removed unless ``keep``.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flplat.engine.events import Callback, RoundEnd, RunEnd, RunStart

VERSION = 2


def payload(orch, round: int) -> dict[str, Any]:
    """The checkpoint of an :class:`~flplat.engine.orchestrator.Orchestrator` after ``round`` (between rounds)."""
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
        "trained": orch.trained.copy(),
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


def restore(orch, data: dict[str, Any]) -> int:
    """Put a checkpoint's state into a freshly built orchestrator (same config); returns its round. A checkpoint
    without the trained clients (an earlier flplat's) counts every client as trained."""
    orch.state = data["state"]
    orch.strategy.load_state_dict(data["strategy"])
    if orch.rng is None:
        orch.rng = np.random.default_rng()
    orch.rng.bit_generator.state = data["server_rng"]
    torch.set_rng_state(data["torch_rng"])
    np.random.set_state(data["numpy_rng"])
    orch.history = list(data["history"])
    orch.client_table = dict(data["client_table"])
    orch.trained = np.asarray(data.get("trained", np.ones_like(orch.trained)), dtype=bool).copy()
    orch.meta.update(data["meta"])
    return int(data["round"])


def resumer(data: dict[str, Any]):
    """What :meth:`Orchestrator.run` takes as ``resume``: restores ``data`` and returns its round."""
    return lambda orch: restore(orch, data)


class CheckpointCallback(Callback):
    """Saves ``<directory>/<run id>.pt`` every ``every`` rounds (and the last round); placed before the tracker
    so a round is checkpointed before it is logged. On KILLED it saves the last completed round when that is
    newer than the last checkpoint; on FINISHED it removes the file unless ``keep``; on FAILED it keeps it
    (resume after the cause is fixed). ``run_id``: the run's id, or a callable giving it once the run exists (the
    MLflow callback's, which creates the run on start); None: nothing to resume by (tracking off), no file."""

    def __init__(self, directory: str | Path, every: int, keep: bool = False, run_id=None):
        self.directory = Path(directory)
        self.every = int(every)
        self.keep = keep
        self.run_id = run_id
        self.saved_round = 0

    def _id(self) -> str | None:
        return self.run_id() if callable(self.run_id) else self.run_id

    def path(self) -> Path | None:
        """``<directory>/<run id>.pt``; None while the run has no id."""
        run_id = self._id()
        return None if not run_id else self.directory / f"{run_id}.pt"

    def on_start(self, start: RunStart) -> None:
        self.saved_round = start.start_round - 1

    def _save(self, make: Callable[[], dict[str, Any]], round: int) -> None:
        run_id = self._id()
        if run_id:
            data = make()
            save(self.directory / f"{run_id}.pt", {**data, "meta": {**data["meta"], "run_id": run_id}})
            self.saved_round = round

    def on_round_end(self, end: RoundEnd) -> None:
        if self.every > 0 and (end.round % self.every == 0 or end.round == end.rounds):
            self._save(end.checkpoint, end.round)

    def on_end(self, end: RunEnd) -> None:
        if end.status == "FINISHED":
            path = self.path()
            if path is not None and not self.keep:
                path.unlink(missing_ok=True)
        elif end.status == "KILLED" and self.every > 0:
            if end.completed_round is not None and end.completed_round > self.saved_round and end.checkpoint:
                self._save(end.checkpoint, end.completed_round)
