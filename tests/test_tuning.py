"""`flplat tune` (Optuna grid, resumable, nested MLflow runs) and seed sweeps."""

from __future__ import annotations

import pytest
from conftest import tiny_overrides

from flplat.errors import ConfigError
from flplat.studies.tuning import grid_size, load_space, sweep_seeds, tune


def _space(tmp_path, text):
    p = tmp_path / "space.yaml"
    p.write_text(text)
    return str(p)


def _over(tmp_path, **kw):
    return tiny_overrides(**{"tracking.enabled": "true", "tracking.store_dir": str(tmp_path / "mlruns"),
                             "partition.train_fraction": 0.6, "partition.val_fraction": 0.2, "federation.rounds": 1,
                             "algorithm.name": "fedprox", **kw})


def test_space_merges_common_and_algorithm(tmp_path):
    path = _space(tmp_path, "common:\n  federation.batch_size: [16, 32]\nfedprox:\n  algorithm.mu: [0.0, 0.1, 1.0]\n")
    s = load_space(path, "fedprox")
    assert s == {"federation.batch_size": [16, 32], "algorithm.mu": [0.0, 0.1, 1.0]} and grid_size(s) == 6
    with pytest.raises(ConfigError):
        load_space(_space(tmp_path, "fedprox:\n  algorithm.mu: []\n"), "fedprox")


def test_table2_space_file_is_valid():
    from conftest import REPO

    s = load_space(REPO / "configs/search_spaces/table2.yaml", "fedprox")
    assert s["algorithm.mu"] == [0.001, 0.01, 0.1] and grid_size(s) == 3 * 3 * 3 * 2


def test_grid_study_runs_every_point_once_and_resumes(tmp_path):
    from mlflow.tracking import MlflowClient

    space = _space(tmp_path, "fedprox:\n  algorithm.mu: [0.0, 0.5]\n")
    storage = f"sqlite:///{tmp_path}/optuna.db"
    out = tune(None, _over(tmp_path), space, storage, "s", None)
    assert out["trials"] == 2 and out["objective"] == "val_accuracy"
    assert out["best_params"]["algorithm.mu"] in (0.0, 0.5)
    again = tune(None, _over(tmp_path), space, storage, "s", None)  # resume: nothing left to run
    assert again["trials"] == 2
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == 2 and len(parents) == 2  # one parent per invocation
    assert {c.data.tags["mlflow.parentRunId"] for c in children} <= {p.info.run_id for p in parents}
    assert all(r.info.status == "FINISHED" for r in runs)


def test_journal_storage_and_bad_key(tmp_path):
    space = _space(tmp_path, "fedprox:\n  algorithm.nope: [1, 2]\n")
    with pytest.raises(ConfigError, match="algorithm.nope"):
        tune(None, _over(tmp_path), space, f"journal:{tmp_path}/j.log", None, None)
    ok = _space(tmp_path, "fedprox:\n  algorithm.mu: [0.1]\n")
    out = tune(None, _over(tmp_path, **{"tracking.enabled": "false"}), ok, f"journal:{tmp_path}/j.log", None, None)
    assert out["trials"] == 1


def test_seed_sweep(tmp_path):
    rows = sweep_seeds(None, _over(tmp_path), [0, 1])
    assert [r["seed"] for r in rows] == [0, 1] and rows[0]["global_accuracy"] != rows[1]["global_accuracy"]


def test_interrupted_grid_point_is_retried(tmp_path, monkeypatch):
    """Ctrl-C (or SIGTERM) inside a trial: the re-run trains that grid point again instead of skipping it, and
    no point is trained twice."""
    import types

    import flplat.experiment as experiment

    trained = []

    def fake_run(cfg, progress=False, **kw):
        mu = float(cfg.algorithm.mu)
        if len(trained) == 1 and not getattr(fake_run, "interrupted", False):
            fake_run.interrupted = True
            raise KeyboardInterrupt
        trained.append(mu)
        return types.SimpleNamespace(metrics={"val_accuracy": mu}), None

    monkeypatch.setattr(experiment, "run", fake_run)
    space = _space(tmp_path, "fedprox:\n  algorithm.mu: [0.0, 0.5, 1.0]\n")
    storage = f"sqlite:///{tmp_path}/optuna.db"
    over = _over(tmp_path, **{"tracking.enabled": "false"})
    with pytest.raises(KeyboardInterrupt):
        tune(None, over, space, storage, "s", None)
    assert len(trained) == 1
    out = tune(None, over, space, storage, "s", None)
    assert sorted(trained) == [0.0, 0.5, 1.0]  # the interrupted point retried, none twice
    assert out["best_params"] == {"algorithm.mu": 1.0}


def test_diverged_grid_point_is_pruned_and_the_grid_goes_on(tmp_path, monkeypatch):
    """A point whose run diverges (NaN in every update) is a result of the grid, not a crash: it is pruned (never
    the best), named in the result, and the other points still run."""
    import types

    import flplat.experiment as experiment
    from flplat.engine.failures import Diverged

    trained = []

    def fake_run(cfg, progress=False, **kw):
        mu = float(cfg.algorithm.mu)
        if mu == 1.0:
            raise Diverged("diverged at round 1: every client's update is NaN/Inf")
        trained.append(mu)
        return types.SimpleNamespace(metrics={"val_accuracy": mu}), None

    monkeypatch.setattr(experiment, "run", fake_run)
    space = _space(tmp_path, "fedprox:\n  algorithm.mu: [0.0, 1.0, 0.5]\n")
    out = tune(None, _over(tmp_path, **{"tracking.enabled": "false"}), space, f"sqlite:///{tmp_path}/o.db", "s", None)
    assert sorted(trained) == [0.0, 0.5] and out["trials"] == 3
    assert out["best_params"] == {"algorithm.mu": 0.5} and out["diverged"] == [{"algorithm.mu": 1.0}]
