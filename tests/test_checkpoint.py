"""Checkpoint and resume: a run killed with SIGKILL after round k and resumed with ``flplat run --resume`` ends
in the same MLflow run with every metric at every step identical to an uninterrupted run (CPU): the
``kill_resume`` property of ``flplat check`` (flplat/studies/conformance.py), for FedAvg by default and for every
registered algorithm under ``-m slow``; SIGTERM ends a
run KILLED with exit 143 and a checkpoint; stale RUNNING runs are found by their heartbeat."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

BASE = ["data.name=digits", "partition.num_clients=6", "partition.alpha=0.5", "federation.client_fraction=0.5",
        "federation.local_epochs=1", "fabric.num_threads=1", "tracking.plots=false", "model.name=mlp"]


def _cli(args, store, **kw):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.Popen([sys.executable, "-m", "flplat.cli", *args, f"tracking.store_dir={store}"], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _kill_after(args, store, k: int, sig=signal.SIGKILL) -> tuple[int, str]:
    """Start a run, send ``sig`` once round k has been reported; the exit status and the stderr seen."""
    p = _cli(["run", *args], store)  # not a terminal: one "[round t/T]" line per round on stderr
    seen = []
    for line in p.stderr:
        seen.append(line)
        if line.startswith(f"[round {k}/"):
            p.send_signal(sig)
            break
    out, err = p.communicate(timeout=900)
    return p.returncode, "".join(seen) + err


def _run_id(out: str) -> str:
    return next(line.split()[2] for line in out.splitlines() if line.startswith("mlflow run:"))


def _status(store, run_id: str) -> str:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{Path(store).resolve() / 'mlflow.db'}").get_run(run_id).info.status


def _killed_run_id(store, experiment: str) -> str:
    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=f"sqlite:///{Path(store).resolve() / 'mlflow.db'}")
    (run,) = c.search_runs([c.get_experiment_by_name(experiment).experiment_id])
    return run.info.run_id


def test_kill9_resume_identical_fedavg():
    """The kill_resume property of `flplat check` (a representative in the default suite)."""
    from flplat.studies.conformance import Target, check_kill_resume

    r = check_kill_resume(Target("fedavg"))
    assert r.ok, r.line()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(__import__("flplat.algorithms", fromlist=["ALGORITHMS"]).ALGORITHMS))
def test_kill9_resume_identical_every_algorithm(name):
    """Registry-wide: killed with SIGKILL after round 1 and resumed, every metric at every step as uninterrupted."""
    from flplat.studies.conformance import Target, check_kill_resume

    r = check_kill_resume(Target(name))
    assert r.ok, r.line()


def test_sigterm_ends_killed_with_checkpoint(tmp_path):
    store = tmp_path / "store"
    rc, err = _kill_after(["configs/quickstart.yaml", *BASE, "federation.rounds=30", "tracking.experiment=t"],
                          store, 2, signal.SIGTERM)
    assert rc == 143, err
    run_id = _killed_run_id(store, "t")
    assert _status(store, run_id) == "KILLED"
    assert (store / "checkpoints" / f"{run_id}.pt").is_file()
    assert "Traceback" not in err


def test_stale_runs_listed_and_marked(tmp_path):
    from mlflow.tracking import MlflowClient

    from flplat.cli import main
    from flplat.tracking.heartbeat import HEARTBEAT_INTERVAL_TAG, HEARTBEAT_TAG

    store = tmp_path / "store"
    store.mkdir()
    c = MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")
    exp = c.create_experiment("e")
    alive = c.create_run(exp, tags={HEARTBEAT_TAG: str(int(time.time())), HEARTBEAT_INTERVAL_TAG: "30"}).info.run_id
    dead = c.create_run(exp, tags={HEARTBEAT_TAG: str(int(time.time()) - 3600),
                                   HEARTBEAT_INTERVAL_TAG: "30"}).info.run_id
    assert main(["runs", "--stale", "--mark", "--store-dir", str(store)]) == 0
    assert c.get_run(dead).info.status == "KILLED"
    assert c.get_run(alive).info.status == "RUNNING"


def test_resume_refuses_other_overrides_and_missing_checkpoint(tmp_path, capsys):
    from flplat.cli import main

    assert main(["run", "--resume", "abc", "federation.rounds=3"]) == 2
    assert "only tracking.* keys" in capsys.readouterr().err
    assert main(["run", "--resume", "abc", f"tracking.store_dir={tmp_path}"]) == 2
    assert "no checkpoint" in capsys.readouterr().err

    # a checkpoint of an earlier version (the methods' state in ServerState.extra): one line, exit 2, not resumed
    import pickle

    from flplat.experiment import load_config
    from flplat.tracking.store import checkpoint_path

    path = checkpoint_path(load_config(None, [f"tracking.store_dir={tmp_path}"]).tracking, "old")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps({"version": 1, "round": 2}))
    assert main(["run", "--resume", "old", f"tracking.store_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "has version 1, expected 2" in err and "run the config again" in err and "Traceback" not in err


def _orchestrator(cfg, callbacks=(), strategy_cls=None):
    from flplat.engine.orchestrator import Orchestrator
    from flplat.engine.sharding import make_executor
    from flplat.experiment import prepare

    p = prepare(cfg)
    f = cfg.federation
    ex = make_executor(p.trainer, p.data, int(cfg.seed))
    strategy = p.strategy if strategy_cls is None else strategy_cls(p.strategy.cfg, p.strategy.info)
    return p, Orchestrator(strategy, ex, p.data, int(f.rounds), int(f.eval_every), int(cfg.seed), callbacks,
                           int(f.accuracy_window), metrics_cfg=cfg.metrics)


# every registered strategy's checkpoint round trip: the `checkpoint` property of `flplat check`, run registry-wide by
# tests/test_algorithms.py::test_conformance


def test_strategy_state_outside_server_state_is_checkpointed(tiny_cfg):
    """The generic Strategy.state_dict carries attributes a strategy sets on itself (here in init_state and
    aggregate): a restored run that lost them would diverge."""
    import torch

    from flplat.api import FedAvgStrategy
    from flplat.engine import checkpoint

    class Counting(FedAvgStrategy):
        def init_state(self, init_weights, rng, ops):
            self.offset = 0.5
            return super().init_state(init_weights, rng, ops)

        def aggregate(self, state, results, ops):
            state = super().aggregate(state, results, ops)
            self.offset *= 0.5
            state.weights = state.weights + self.offset
            return state

    cfg = tiny_cfg(**{"federation.rounds": 3})
    p, orch = _orchestrator(cfg, strategy_cls=Counting)
    orch.run(p.init_weights)
    data = checkpoint.payload(orch, 3)
    p2, orch2 = _orchestrator(cfg, strategy_cls=Counting)
    checkpoint.restore(orch2, {**data, "state": data["state"]})
    assert orch2.strategy.offset == 0.5 ** 4
    assert torch.equal(orch2.state.weights, orch.state.weights)
    assert orch2.strategy.info is not None and "info" not in orch.strategy.state_dict()


def test_tracking_store_failure_ends_failed_in_one_line(tiny_cfg, tmp_path, monkeypatch, capsys):
    """A store that fails mid-run: the run stops with one line naming the round and is not left RUNNING
    (here the store still accepts the final status, so it ends FAILED with the reason as a tag)."""
    from mlflow.tracking import MlflowClient

    from flplat.errors import TrackingStoreError
    from flplat.experiment import run
    from flplat.tracking.store import store_uris

    real = MlflowClient.log_batch

    def flaky(self, run_id, metrics=(), params=(), tags=(), **kw):
        if any(m.step == 2 for m in metrics):
            raise RuntimeError("database is locked\nsecond line of a long traceback")
        return real(self, run_id, metrics=metrics, params=params, tags=tags, **kw)

    monkeypatch.setattr(MlflowClient, "log_batch", flaky)
    cfg = tiny_cfg(**{"tracking.enabled": "true", "tracking.store_dir": str(tmp_path), "federation.rounds": 3,
                      "tracking.plots": "false"})
    with pytest.raises(TrackingStoreError, match="failed at round 2: database is locked$"):
        run(cfg, progress=False)
    c = MlflowClient(tracking_uri=store_uris(None, str(tmp_path))[0])
    (r,) = c.search_runs([c.get_experiment_by_name("flplat").experiment_id])
    assert r.info.status == "FAILED" and "database is locked" in r.data.tags["flplat.error"]
    assert (tmp_path / "checkpoints" / f"{r.info.run_id}.pt").is_file()  # kept: resumable once the store is back


def test_heartbeat_marks_run_and_parent(tmp_path):
    from mlflow.tracking import MlflowClient

    from flplat.tracking.heartbeat import HEARTBEAT_TAG, Heartbeat, stale_runs

    c = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = c.create_experiment("e")
    parent, child = (c.create_run(exp).info.run_id for _ in range(2))
    hb = Heartbeat(c, [child, parent], 0.05)
    hb.start()
    time.sleep(0.3)
    hb.stop()
    for r in (parent, child):
        assert abs(float(c.get_run(r).data.tags[HEARTBEAT_TAG]) - time.time()) < 5
    assert stale_runs(c, [exp]) == []
    assert {r.info.run_id for r in stale_runs(c, [exp], now=time.time() + 3600)} == {parent, child}


def test_kill9_resume_at_once_without_force(tmp_path):
    """Issue 22 item 3: the run records its host, pid and process start time; after a SIGKILL its process is gone
    on this machine, so `--resume` needs no --force and no waiting for the heartbeat to age (150 s)."""
    store = tmp_path / "store"
    args = ["configs/quickstart.yaml", *BASE, "federation.rounds=4", "tracking.experiment=killed"]
    rc, _ = _kill_after(args, store, 2)
    assert rc == -signal.SIGKILL
    killed = _killed_run_id(store, "killed")
    assert _status(store, killed) == "RUNNING"  # its heartbeat is seconds old
    res = _cli(["run", "--resume", killed, "--no-progress"], store)
    out, err = res.communicate(timeout=900)
    assert res.returncode == 0, err
    assert _run_id(out) == killed and "resuming run" in err
    assert _status(store, killed) == "FINISHED"


@dataclass
class Momentum:
    """A method's own state (module level: a checkpoint pickles it by reference, as a plugin's class)."""
    velocity: Any
    seen: Any
    rounds: int = 0
    history: list = field(default_factory=list)


def test_a_methods_typed_state_round_trips_through_checkpoint_and_resume(tiny_cfg, tmp_path):
    """A method keeps its state between rounds in ``state.method``, a dataclass of its own (tensor, array, plain
    values): a checkpoint after round 2 written to disk, loaded and resumed gives round 3 and the final state exactly
    as the uninterrupted run, the dataclass intact (its type, every field)."""
    import numpy as np
    import torch

    from flplat.api import FedAvgStrategy, ServerState
    from flplat.engine import checkpoint

    class Heavy(FedAvgStrategy):  # FedAvg with server momentum kept in the method's own state
        def init_state(self, init_weights, rng, ops):
            state = super().init_state(init_weights, rng, ops)
            return ServerState(round=state.round, weights=state.weights, method=Momentum(
                torch.zeros_like(init_weights), np.zeros(self.info.num_clients, dtype=np.int64)))

        def aggregate(self, state, results, ops):
            m, before = state.method, state.weights
            state = super().aggregate(state, results, ops)
            m.velocity = 0.5 * m.velocity + (state.weights - before)
            state.weights = before + m.velocity
            m.seen[[r.client for r in results]] += 1
            m.rounds += 1
            m.history.append(float(m.velocity.norm()))
            state.method = m
            return state

    cfg = tiny_cfg(**{"federation.rounds": 3})
    saved = tmp_path / "run.pt"

    class Save(checkpoint.Callback):
        def on_round_end(self, end):
            if end.round == 2:
                checkpoint.save(saved, end.checkpoint())

    p, full = _orchestrator(cfg, callbacks=[Save()], strategy_cls=Heavy)
    full.run(p.init_weights)
    data = checkpoint.load(saved)
    assert type(data["state"].method).__name__ == "Momentum" and data["state"].method.rounds == 2

    p2, resumed = _orchestrator(cfg, strategy_cls=Heavy)
    resumed.run(p2.init_weights, resume=checkpoint.resumer(data))
    a, b = resumed.state.method, full.state.method
    assert isinstance(a, Momentum) and a.rounds == b.rounds == 3
    assert torch.equal(a.velocity, b.velocity) and np.array_equal(a.seen, b.seen) and a.history == b.history
    assert torch.equal(resumed.state.weights, full.state.weights)
    assert [h["train_loss"] for h in resumed.history] == [h["train_loss"] for h in full.history]


@pytest.mark.parametrize("name", ["fedem", "haccs", "feddyn"])
def test_builtin_state_is_a_dataclass_that_survives_a_checkpoint(tiny_cfg, tmp_path, name):
    """A built-in's state between rounds is its own dataclass in ``state.method`` (no string keys in
    ``state.extra``), and a checkpoint written to disk and loaded gives it back field by field."""
    import dataclasses
    import warnings

    import numpy as np
    import torch

    from flplat.engine import checkpoint

    cfg = tiny_cfg(**{"federation.rounds": 2, "algorithm.name": name})
    p, orch = _orchestrator(cfg)
    orch.run(p.init_weights)
    m = orch.state.method
    assert dataclasses.is_dataclass(m) and type(m).__module__.startswith(("flplat.algorithms.", "flplat.blocks."))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert orch.state.extra == {}
    checkpoint.save(tmp_path / "c.pt", checkpoint.payload(orch, 2))
    back = checkpoint.load(tmp_path / "c.pt")["state"].method
    assert type(back) is type(m)
    for f in dataclasses.fields(m):
        a, b = getattr(back, f.name), getattr(m, f.name)
        if isinstance(b, torch.Tensor):
            assert torch.equal(a, b), f.name
        elif isinstance(b, np.ndarray):
            assert np.array_equal(a, b), f.name
        else:
            assert repr(a) == repr(b), f.name
