"""Studies resume their interrupted runs: `flplat sweep`, `flplat tune` and `flplat reproduce` run again after an
interruption continue the interrupted child run from its last checkpoint in the same MLflow run (not from round
0), keep their finished runs, and end with every metric at every step identical to an uninterrupted study (CPU).

The interruption is a Ctrl-C (KeyboardInterrupt) raised at the start of round k + 1 of one child run, in process
(the run ends KILLED with the checkpoint of round k, like SIGTERM); the SIGKILL case (the run and its sweep parent
left RUNNING, found by their stale heartbeat) goes through the `flplat` command in a subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO, tiny_overrides

from flplat.engine.orchestrator import Orchestrator

TIMING = {"round_time_s", "cpu_time_s", "peak_rss_mb"}  # measured, not computed (+ MLflow's system/*)


def _client(store):
    from mlflow.tracking import MlflowClient

    from flplat.tracking.store import store_uris

    return MlflowClient(tracking_uri=store_uris(None, str(store))[0])


def _runs(store, experiment):
    c = _client(store)
    exp = c.get_experiment_by_name(experiment)
    return c.search_runs([exp.experiment_id]) if exp else []


def _histories(store, run_id):
    c = _client(store)
    return {k: sorted((m.step, m.value) for m in c.get_metric_history(run_id, k))
            for k in c.get_run(run_id).data.metrics if k not in TIMING and not k.startswith("system/")}


class Rounds:
    """Records every round trained (which run, which round) and raises Ctrl-C at the start of round ``at`` of the
    first run that ``when(orch)`` selects (once)."""

    def __init__(self, monkeypatch, at: int | None = None, when=lambda orch: True):
        self.trained: list[tuple[int, int]] = []
        self.at, self.when, self.fired = at, when, False
        real = Orchestrator._round

        def patched(orch, t, rng):
            if self.at is not None and not self.fired and t == self.at and self.when(orch):
                self.fired = True
                raise KeyboardInterrupt
            self.trained.append((orch.seed, t))
            return real(orch, t, rng)

        monkeypatch.setattr(Orchestrator, "_round", patched)


def _sweep_over(store, experiment, rounds=3):
    return tiny_overrides(**{"tracking.enabled": "true", "tracking.store_dir": str(store),
                             "tracking.experiment": experiment, "tracking.plots": "false",
                             "federation.rounds": rounds})


def _children(store, experiment):
    return {int(r.data.params["seed"]): r for r in _runs(store, experiment) if "mlflow.parentRunId" in r.data.tags}


def test_sweep_resumes_its_interrupted_seed_from_its_checkpoint(tmp_path, monkeypatch):
    """Ctrl-C in round 3 of seed 1 (of 0, 1): the parent and the seed-1 run end KILLED; the same sweep again
    re-opens the parent, does not train seed 0 again, continues seed 1 in its run from round 3, and every run's
    metrics and the parent's mean / std equal an uninterrupted sweep's."""
    from flplat.studies.tuning import sweep_seeds

    store = tmp_path / "store"
    ref = sweep_seeds(None, _sweep_over(store, "ref"), [0, 1])
    rounds = Rounds(monkeypatch, at=3, when=lambda orch: orch.seed == 1)
    over = _sweep_over(store, "cut")
    with pytest.raises(KeyboardInterrupt):
        sweep_seeds(None, over, [0, 1])
    (parent,) = [r for r in _runs(store, "cut") if "mlflow.parentRunId" not in r.data.tags]
    assert parent.info.status == "KILLED"
    cut = _children(store, "cut")
    assert cut[1].info.status == "KILLED" and (store / "checkpoints" / f"{cut[1].info.run_id}.pt").is_file()
    rounds.trained.clear()
    again = sweep_seeds(None, over, [0, 1])
    assert rounds.trained == [(1, 3)]  # seed 0 not trained again, seed 1 only its last round
    kids = _children(store, "cut")
    assert {s: r.info.run_id for s, r in kids.items()} == {s: r.info.run_id for s, r in cut.items()}  # same runs
    assert kids[1].data.tags["flplat.resumed_1_at_round"] == "2" and kids[1].info.status == "FINISHED"
    parents = [r for r in _runs(store, "cut") if "mlflow.parentRunId" not in r.data.tags]
    assert [p.info.run_id for p in parents] == [parent.info.run_id] and parents[0].info.status == "FINISHED"
    refs = _children(store, "ref")
    for s in (0, 1):
        assert _histories(store, kids[s].info.run_id) == _histories(store, refs[s].info.run_id)
    for a, b in zip(again, ref):
        assert a["global_accuracy"] == b["global_accuracy"] and a["seed"] == b["seed"]
    (ref_parent,) = [r for r in _runs(store, "ref") if "mlflow.parentRunId" not in r.data.tags]
    assert parents[0].data.metrics["global_accuracy_mean"] == ref_parent.data.metrics["global_accuracy_mean"]


def test_run_without_checkpoint_restarts_and_is_marked(tmp_path, monkeypatch, capsys):
    """An interrupted run without a checkpoint (tracking.checkpoint_every=0) is trained again from round 0 in a
    new run; the old one is tagged as replaced (and the new one names it), and a line says so."""
    from flplat.studies.tuning import sweep_seeds
    from flplat.tracking.resume import REPLACES_TAG, SUPERSEDED_TAG

    store = tmp_path / "store"
    over = [*_sweep_over(store, "e"), "tracking.checkpoint_every=0"]
    rounds = Rounds(monkeypatch, at=2)
    with pytest.raises(KeyboardInterrupt):
        sweep_seeds(None, over, [0])
    (old,) = _children(store, "e").values()
    rounds.trained.clear()
    sweep_seeds(None, over, [0])
    assert rounds.trained == [(0, 1), (0, 2), (0, 3)]
    assert "without a checkpoint to resume: a new run starts from round 0" in capsys.readouterr().err
    runs = {r.info.run_id: r for r in _runs(store, "e") if "mlflow.parentRunId" in r.data.tags}
    assert len(runs) == 2
    new = next(r for i, r in runs.items() if i != old.info.run_id)
    assert SUPERSEDED_TAG in runs[old.info.run_id].data.tags and runs[old.info.run_id].info.status == "KILLED"
    assert new.data.tags[REPLACES_TAG] == old.info.run_id and new.info.status == "FINISHED"


def test_sweep_parent_follows_a_failed_child_and_a_diverged_run_restarts(tmp_path, monkeypatch, capsys):
    """A run that fails (here: diverges in round 2) fails its sweep's parent too; the same sweep again re-opens the
    parent and, since resuming a diverged run would diverge again, trains that seed from round 0 in a new run (the
    failed one tagged as replaced, a line says so)."""
    from flplat.errors import RunFailed
    from flplat.studies.tuning import sweep_seeds
    from flplat.tracking.resume import REPLACES_TAG, SUPERSEDED_TAG

    real = Orchestrator._round

    def diverge(orch, t, rng):
        if t == 2:
            raise RunFailed("diverged at round 2: every client's update is NaN/Inf")
        return real(orch, t, rng)

    monkeypatch.setattr(Orchestrator, "_round", diverge)
    store = tmp_path / "store"
    over = _sweep_over(store, "e")
    with pytest.raises(RunFailed):
        sweep_seeds(None, over, [0])
    (parent,) = [r for r in _runs(store, "e") if "mlflow.parentRunId" not in r.data.tags]
    (failed,) = _children(store, "e").values()
    assert parent.info.status == "FAILED" and failed.info.status == "FAILED"
    assert (store / "checkpoints" / f"{failed.info.run_id}.pt").is_file()  # kept, but not resumed
    monkeypatch.setattr(Orchestrator, "_round", real)
    sweep_seeds(None, over, [0])
    assert "diverged: a new run starts from round 0" in capsys.readouterr().err
    runs = {r.info.run_id: r for r in _runs(store, "e")}
    assert runs[parent.info.run_id].info.status == "FINISHED" and len(runs) == 3
    (new,) = [r for r in runs.values() if r.data.tags.get("mlflow.parentRunId") and r.info.run_id != failed.info.run_id]
    assert new.info.status == "FINISHED" and new.data.tags[REPLACES_TAG] == failed.info.run_id
    assert SUPERSEDED_TAG in runs[failed.info.run_id].data.tags


def test_tune_resumes_the_interrupted_trial_run(tmp_path, monkeypatch):
    """Ctrl-C in round 3 of the first trial of a 2-point grid: the re-run retries that point (Optuna) and its MLflow
    run continues from round 3 (same run id, under the re-opened parent), with the metrics of an uninterrupted
    study's run of that point."""
    from flplat.studies.tuning import tune

    space = tmp_path / "space.yaml"
    space.write_text("fedprox:\n  algorithm.mu: [0.0, 0.5]\n")
    store = tmp_path / "store"

    def over(exp):
        return tiny_overrides(**{"tracking.enabled": "true", "tracking.store_dir": str(store),
                                 "tracking.experiment": exp, "tracking.plots": "false", "federation.rounds": 3,
                                 "partition.train_fraction": 0.6, "partition.val_fraction": 0.2,
                                 "algorithm.name": "fedprox"})

    ref = tune(None, over("ref"), str(space), f"sqlite:///{tmp_path}/ref.db", "s", None)
    rounds = Rounds(monkeypatch, at=3)
    storage = f"sqlite:///{tmp_path}/optuna.db"
    with pytest.raises(KeyboardInterrupt):
        tune(None, over("cut"), str(space), storage, "s", None)
    (killed,) = [r for r in _runs(store, "cut") if "mlflow.parentRunId" in r.data.tags]
    assert killed.info.status == "KILLED"
    rounds.trained.clear()
    out = tune(None, over("cut"), str(space), storage, "s", None)
    assert rounds.trained == [(0, 3), (0, 1), (0, 2), (0, 3)]  # the interrupted point's last round, then the other
    kids = {r.data.params["algorithm.mu"]: r for r in _runs(store, "cut") if "mlflow.parentRunId" in r.data.tags}
    refs = {r.data.params["algorithm.mu"]: r for r in _runs(store, "ref") if "mlflow.parentRunId" in r.data.tags}
    assert len(kids) == 2 and kids[killed.data.params["algorithm.mu"]].info.run_id == killed.info.run_id
    assert kids[killed.data.params["algorithm.mu"]].data.tags["flplat.resumed_1_at_round"] == "2"
    for mu in kids:
        assert _histories(store, kids[mu].info.run_id) == _histories(store, refs[mu].info.run_id)
    parents = [r for r in _runs(store, "cut") if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"  # re-opened, not a second one
    assert {r.data.tags["mlflow.parentRunId"] for r in kids.values()} == {parents[0].info.run_id}
    assert out["best_value"] == ref["best_value"] and out["best_params"] == ref["best_params"]


def test_reproduce_resumes_its_interrupted_run(tmp_path, monkeypatch, capsys):
    """`flplat reproduce` (smoke scale, 3 rounds): Ctrl-C in round 3 of the second method's run; the same command
    again skips the finished run, continues the interrupted one in its MLflow run from round 3, and the runs' metrics
    and the table equal an uninterrupted reproduction's."""
    from flplat.cli import main

    def args(store):
        return ["reproduce", "dapfl", "table3_digits", "--scale", "smoke", "--cells", "digits_k20_low", "--methods",
                "FedAvg,DA-PFL", "--store-dir", str(store), "--set", "federation.rounds=3"]

    assert main(args(tmp_path / "ref")) == 0
    ref_table = capsys.readouterr().out
    rounds = Rounds(monkeypatch, at=3, when=lambda orch: type(orch.strategy).__name__ != "FedAvg")
    store = tmp_path / "cut"
    assert main(args(store)) == 130  # interrupted
    capsys.readouterr()
    (killed,) = [r for r in _runs(store, "reproduce-dapfl") if r.info.status == "KILLED"
                 and "mlflow.parentRunId" in r.data.tags]
    rounds.trained.clear()
    assert main(args(store)) == 0
    out = capsys.readouterr()
    assert rounds.trained == [(0, 3)] and f"resuming run {killed.info.run_id}" in out.err
    assert out.out == ref_table
    kids = {r.data.tags["flplat.reproduce.method"]: r for r in _runs(store, "reproduce-dapfl")
            if "mlflow.parentRunId" in r.data.tags}
    refs = {r.data.tags["flplat.reproduce.method"]: r for r in _runs(tmp_path / "ref", "reproduce-dapfl")
            if "mlflow.parentRunId" in r.data.tags}
    assert len(kids) == 2 and kids["DA-PFL"].info.run_id == killed.info.run_id
    assert kids["DA-PFL"].info.status == "FINISHED"
    for m in kids:
        got = _histories(store, kids[m].info.run_id)
        assert got == _histories(tmp_path / "ref", refs[m].info.run_id), m


def _cli(args, store):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.Popen([sys.executable, "-m", "flplat.cli", *args, f"tracking.store_dir={store}"], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_sweep_after_sigkill_resumes_stale_runs(tmp_path):
    """kill -9 of `flplat sweep` after round 2 of seed 1: the parent and the seed-1 run stay RUNNING. Once their
    heartbeat is stale (aged here instead of waiting), the same command re-opens the parent, continues seed 1 in
    its run after its checkpoint and ends with the metrics of an uninterrupted sweep."""
    from flplat.studies.tuning import sweep_seeds
    from flplat.tracking.heartbeat import HEARTBEAT_TAG

    store = tmp_path / "store"
    base = ["configs/quickstart.yaml", "data.name=digits", "partition.num_clients=6", "partition.alpha=0.5",
            "federation.client_fraction=0.5", "federation.local_epochs=1", "fabric.num_threads=1",
            "tracking.plots=false", "federation.rounds=4"]
    p = _cli(["sweep", *base, "tracking.experiment=cut", "--seeds", "0,1", "--progress"], store)
    rounds_seen = 0
    for line in p.stderr:
        rounds_seen += line.startswith("[round ")
        if rounds_seen == 4 + 2:  # seed 0's 4 rounds, then round 2 of seed 1
            p.send_signal(signal.SIGKILL)
            break
    p.communicate(timeout=600)
    assert p.returncode == -signal.SIGKILL
    c = _client(store)
    runs = _runs(store, "cut")
    assert {r.info.status for r in runs} == {"RUNNING", "FINISHED"}
    for r in runs:  # as if the kill were 10 minutes ago
        if r.info.status == "RUNNING":
            c.set_tag(r.info.run_id, HEARTBEAT_TAG, str(int(time.time()) - 600))
    killed = next(r for r in runs if r.info.status == "RUNNING" and "mlflow.parentRunId" in r.data.tags)
    again = _cli(["sweep", *base, "tracking.experiment=cut", "--seeds", "0,1"], store)
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    assert f"resuming run {killed.info.run_id}" in err and "seed 0 already finished" in err
    assert "re-opening the seed-sweep parent run" in err
    runs = _runs(store, "cut")
    assert len(runs) == 3 and {r.info.status for r in runs} == {"FINISHED"}
    sweep_seeds(str(REPO / base[0]), [*base[1:], f"tracking.store_dir={store}", "tracking.experiment=ref"],
                [0, 1])
    cut, ref = _children(store, "cut"), _children(store, "ref")
    assert int(cut[1].data.tags["flplat.resumed_1_at_round"]) >= 1
    for s in (0, 1):
        assert _histories(store, cut[s].info.run_id) == _histories(store, ref[s].info.run_id)


@pytest.mark.slow
def test_sweep_right_after_sigkill_resumes_at_once(tmp_path):
    """Issue 22 item 3: kill -9 of `flplat sweep` in round 2 of its only seed, then the same command at once (the
    heartbeats are seconds old): the sweep's and the run's process is gone on this machine, so the parent is
    re-opened and the run continued from its checkpoint, not left alone and restarted."""
    store = tmp_path / "store"
    base = ["configs/quickstart.yaml", "data.name=digits", "partition.num_clients=6", "partition.alpha=0.5",
            "federation.client_fraction=0.5", "federation.local_epochs=1", "fabric.num_threads=1",
            "tracking.plots=false", "federation.rounds=4", "tracking.experiment=cut"]
    p = _cli(["sweep", *base, "--seeds", "0", "--progress"], store)
    for line in p.stderr:
        if line.startswith("[round 2/"):
            p.send_signal(signal.SIGKILL)
            break
    p.communicate(timeout=600)
    assert p.returncode == -signal.SIGKILL
    runs = _runs(store, "cut")
    assert {r.info.status for r in runs} == {"RUNNING"}
    killed = next(r for r in runs if "mlflow.parentRunId" in r.data.tags)
    again = _cli(["sweep", *base, "--seeds", "0"], store)
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    assert f"resuming run {killed.info.run_id}" in err and "re-opening the seed-sweep parent run" in err
    runs = _runs(store, "cut")
    assert len(runs) == 2 and {r.info.status for r in runs} == {"FINISHED"}
