"""The researcher's workflow around runs (issue 14): `flplat ui` from any shell, model-training experiments with
telling run names and tags, switching algorithms on any config, saved models (load / evaluate), `flplat compare`
over seeds, Optuna plots and dashboard, resource metrics."""

from __future__ import annotations

import glob
import json
import logging
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, tiny_overrides

from flplat.errors import ConfigError


def _client(store: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")


def _tracked(store: Path, **extra):
    from flplat.experiment import load_config, run

    over = tiny_overrides(**{"tracking.enabled": "true", "tracking.store_dir": str(store),
                             "tracking.experiment": "wf", "tracking.plots": "false", "federation.rounds": 3,
                             **extra})
    return run(load_config(None, over), progress=False)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Two algorithms x two seeds of the tiny federation, tracked."""
    root = tmp_path_factory.mktemp("wf") / "mlruns"
    out = {}
    for algo in ("fedavg", "fedprox"):
        for seed in (0, 1):
            summary, run_id = _tracked(root, **{"algorithm.name": algo, "seed": seed})
            out[(algo, seed)] = (summary, run_id)
    return root, out


# ---------------------------------------------------------------------------------------------- 1. flplat ui
def test_ui_starts_mlflow_with_this_interpreter():
    from flplat.cli import ui_command

    cmd = ui_command("mlruns", "127.0.0.1", 5000)
    assert cmd[:4] == [sys.executable, "-m", "mlflow", "ui"]
    # runnable without the virtualenv on PATH (what `.venv/bin/flplat ui` meets in a plain shell)
    res = subprocess.run([*cmd[:3], "--version"], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0 and "version" in res.stdout.lower(), res.stderr[-500:]


@pytest.mark.slow
def test_ui_serves_without_activated_venv(tmp_path):
    sys.path.insert(0, str(REPO / "tools" / "scripts"))
    import ui_screenshot

    port = ui_screenshot.free_port()
    proc = ui_screenshot.ui_process(str(tmp_path / "mlruns"), port)
    try:
        ui_screenshot.wait_ready(port, proc)  # /health answers 200
    finally:
        ui_screenshot.stop(proc)


@pytest.mark.slow
def test_browser_lands_on_runs_table(store, tmp_path):
    """Headless Chromium on `flplat ui`: the experiment page is the model-training runs table (the GenAI
    overview has no 'Run Name' column)."""
    sys.path.insert(0, str(REPO / "tools" / "scripts"))
    import ui_screenshot

    browser = ui_screenshot.find_browser()
    if browser is None:
        pytest.skip("no chromium installed")
    root, _ = store
    exp = _client(root).get_experiment_by_name("wf").experiment_id
    port = ui_screenshot.free_port()
    proc = ui_screenshot.ui_process(str(root), port)
    try:
        ui_screenshot.wait_ready(port, proc)
        url = ui_screenshot.experiment_url(f"http://127.0.0.1:{port}", exp)
        dom = subprocess.run([browser, "--headless=new", "--no-sandbox", "--disable-gpu",
                              f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=20000", "--dump-dom",
                              url], capture_output=True, text=True, timeout=240).stdout
    finally:
        ui_screenshot.stop(proc)
    assert "Run Name" in dom and "fedavg synthetic dirichlet" in dom


# ------------------------------------------------------------------------------- 2./3. experiments, names, tags
def test_experiment_kind_run_names_and_tags(store):
    from flplat import __version__
    from flplat.tracking.meta import EXPERIMENT_KIND_TAG

    root, runs = store
    client = _client(root)
    assert client.get_experiment_by_name("wf").tags[EXPERIMENT_KIND_TAG] == "custom_model_development"
    run = client.get_run(runs[("fedprox", 1)][1])
    assert run.info.run_name == "fedprox synthetic dirichlet α=0.5 seed=1"
    tags = run.data.tags
    assert (tags["algorithm"], tags["dataset"], tags["partition"], tags["partition_param"], tags["seed"]) == \
        ("fedprox", "synthetic", "dirichlet", "α=0.5", "1")
    assert tags["flplat.version"] == __version__
    if (REPO / ".git").exists():
        assert len(tags["flplat.git_commit"].split("-")[0]) == 40


def test_existing_experiment_gets_the_kind_tag_and_run_name_override(tmp_path):
    from flplat.tracking.meta import EXPERIMENT_KIND_TAG

    store = tmp_path / "mlruns"
    store.mkdir()
    client = _client(store)
    client.create_experiment("wf")  # made by an older flplat or by hand: no kind tag
    _, run_id = _tracked(store, **{"tracking.run_name": "my-name", "tracking.log_models": "false",
                                   "federation.rounds": 1})
    assert client.get_experiment_by_name("wf").tags[EXPERIMENT_KIND_TAG] == "custom_model_development"
    assert client.get_run(run_id).info.run_name == "my-name"


def test_run_name_partition_parameters():
    from flplat.tracking.meta import run_name

    base = {"algorithm.name": "ifca", "data.name": "mnist", "seed": 3}
    assert run_name({**base, "partition.name": "similarity", "partition.similarity": 0.0}) == \
        "ifca mnist similarity S=0 seed=3"
    assert run_name({**base, "partition.name": "shift", "partition.type": "label",
                     "partition.level": 2}) == "ifca mnist shift label level=2 seed=3"
    assert run_name({**base, "partition.name": "iid"}) == "ifca mnist iid seed=3"


def test_sweep_parent_has_name_description_and_tags(tmp_path):
    from flplat.studies.tuning import sweep_seeds

    store = tmp_path / "mlruns"
    over = tiny_overrides(**{"tracking.enabled": "true", "tracking.store_dir": str(store), "federation.rounds": 1,
                             "tracking.plots": "false", "tracking.log_models": "false"})
    sweep_seeds(None, over, [0, 1])
    client = _client(store)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    parent = next(r for r in runs if r.data.tags.get("flplat.kind") == "seed-sweep")
    assert parent.info.run_name == "fedavg synthetic dirichlet α=0.5 seeds=0,1"
    assert "Seed sweep" in parent.data.tags["mlflow.note.content"] and parent.data.tags["algorithm"] == "fedavg"


# ----------------------------------------------------------------------------------- 4. switching algorithms
def _shipped_configs() -> list[str]:
    return sorted(f for f in glob.glob(str(REPO / "configs/**/*.yaml"), recursive=True)
                  if "search_spaces" not in f and "/configs/papers/" not in f)


def test_every_shipped_config_takes_every_algorithm(caplog):
    """Every config x every registered algorithm resolves (what `--print-config` prints). Whether a switch
    resolves depends on the file's ``algorithm`` section only (the other sections are validated independently
    of it), so every file is loaded once and one file per distinct ``algorithm`` section takes every algorithm."""
    from omegaconf import OmegaConf

    from flplat.algorithms import ALGORITHMS
    from flplat.experiment import load_config

    caplog.set_level(logging.ERROR, "flplat")
    groups: dict[str, str] = {}
    for f in _shipped_configs():
        load_config(f)
        groups.setdefault(OmegaConf.to_yaml(OmegaConf.load(f).get("algorithm") or {}), f)
    assert len(groups) >= 5
    for f in groups.values():
        for algo in ALGORITHMS:
            cfg = load_config(f, [f"algorithm.name={algo}"])
            assert cfg.algorithm.name == algo


def test_switched_algorithm_keys_are_carried_and_reported(caplog):
    from flplat.config_io import flatten
    from flplat.experiment import load_config

    path = REPO / "configs/clust_psi_pfl_quickstart.yaml"
    with caplog.at_level(logging.WARNING, "flplat"):
        cfg = load_config(path, ["algorithm.name=fedsoft"])
    # clust_psi_pfl's tau (None) is not fedsoft's tau: fedsoft keeps its default
    assert cfg.algorithm.tau == 2 and cfg.algorithm_unused.tau is None and cfg.algorithm_unused.eps == 1e-6
    assert "algorithm.eps" in caplog.text and "carried, not used" in caplog.text
    assert flatten(cfg)["algorithm_unused.silhouette_sample"] == 1000
    # overrides of the chosen algorithm apply; one it does not define is an error naming who defines it
    assert load_config(path, ["algorithm.name=fedsoft", "algorithm.tau=3"]).algorithm.tau == 3
    with pytest.raises(ConfigError, match=r"unknown key algorithm.mu for algorithm 'fedavg' \(a key of .*fedprox"):
        load_config(None, ["algorithm.name=fedavg", "algorithm.mu=0.1"])
    # the file's own algorithm keeps its keys
    assert load_config(path).algorithm_unused == {}
    with pytest.raises(ConfigError, match="unknown key algorithm.bogus"):
        load_config(path, ["algorithm.name=fedavg", "algorithm.bogus=1"])


def test_switch_on_the_command_line():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cfg = str(REPO / "configs/clust_psi_pfl_quickstart.yaml")
    res = subprocess.run([sys.executable, "-m", "flplat.cli", "run", cfg, "algorithm.name=fedavg", "--print-config"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "algorithm_unused:" in res.stdout and "algorithm.eps" in res.stderr


def test_unused_keys_are_logged_with_the_run(tmp_path):
    from flplat.experiment import load_config, run

    store = tmp_path / "mlruns"
    path = tmp_path / "fedprox.yaml"
    path.write_text("algorithm:\n  name: fedprox\n  mu: 0.5\n")
    over = tiny_overrides(**{"tracking.enabled": "true", "tracking.store_dir": str(store), "federation.rounds": 1,
                             "tracking.plots": "false", "tracking.log_models": "false", "algorithm.name": "fedavg"})
    _, run_id = run(load_config(path, over), progress=False)
    run = _client(store).get_run(run_id)
    assert run.data.params["algorithm_unused.mu"] == "0.5" and "algorithm_unused.mu" in run.data.tags[
        "flplat.unused_keys"]


# ------------------------------------------------------------------------------------------- 5. saved models
def test_global_model_saved_loaded_and_evaluated(store, tmp_path, monkeypatch):
    import tempfile

    import torch

    import flplat
    from flplat.studies.evaluate import evaluate_run

    root, runs = store
    summary, run_id = runs[("fedavg", 0)]
    client = _client(root)
    names = {a.path for a in client.list_artifacts(run_id, "models")}
    assert names == {"models/model.yaml", "models/global.pt"}
    net = flplat.load_model(run_id, which="global", store_dir=str(root))
    assert isinstance(net, torch.nn.Module)
    assert torch.equal(torch.cat([p.detach().flatten() for p in net.parameters()]), summary.state.weights)
    # scoring the saved model on the run's own data reproduces the run's final accuracy
    res = evaluate_run(run_id, store_dir=str(root))
    assert res["global_accuracy"] == pytest.approx(summary.metrics["global_accuracy"], abs=1e-9)
    assert res["ad"] == pytest.approx(summary.metrics["ad"], abs=1e-9)
    other = evaluate_run(run_id, overrides=["partition.name=iid"], store_dir=str(root))
    assert other["partition"] == "iid" and 0.0 <= other["global_accuracy"] <= 1.0
    with pytest.raises(ConfigError, match="available: global"):
        evaluate_run(run_id, which="cluster", index=0, store_dir=str(root))
    with pytest.raises(ConfigError, match="inputs"):
        evaluate_run(run_id, overrides=["data.features=5"], store_dir=str(root))
    # the downloaded artifacts live in temporary directories that are removed again (each load once left two)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    flplat.load_model(run_id, which="global", store_dir=str(root))
    evaluate_run(run_id, store_dir=str(root))
    with pytest.raises(ConfigError, match="available: global"):
        flplat.load_model(run_id, which="cluster", index=0, store_dir=str(root))
    assert list(scratch.iterdir()) == []


def test_cluster_and_personal_models(tmp_path):
    import flplat
    from flplat.studies.evaluate import evaluate_run

    store = tmp_path / "mlruns"
    summary, run_id = _tracked(store, **{"algorithm.name": "ifca", "algorithm.num_clusters": 2,
                                         "tracking.log_personal_models": "true", "federation.rounds": 2})
    names = {a.path.split("/")[-1] for a in _client(store).list_artifacts(run_id, "models")}
    assert names == {"model.yaml", "clusters.pt", "personal.pt"}  # IFCA has no single global model
    st = summary.state
    net = flplat.load_model(run_id, which="cluster", index=1, store_dir=str(store))
    flat = np.concatenate([p.detach().numpy().ravel() for p in net.parameters()])
    np.testing.assert_array_equal(flat, st.clusters[1].numpy())
    k = 3
    net = flplat.load_model(run_id, which="personal", index=k, store_dir=str(store))
    flat = np.concatenate([p.detach().numpy().ravel() for p in net.parameters()])
    np.testing.assert_array_equal(flat, st.clusters[int(st.assignment[k])].numpy())
    with pytest.raises(ConfigError, match=r"index=7 is out of range"):
        flplat.load_model(run_id, which="cluster", index=7, store_dir=str(store))
    res = evaluate_run(run_id, which="cluster", index=0, store_dir=str(store))
    assert res["which"] == "cluster[0]"


def test_evaluate_cli_bad_run(tmp_path, capsys):
    from flplat.cli import main

    assert main(["evaluate", "nope", "--store-dir", str(tmp_path)]) == 2
    assert "flplat: error: RUN_ID='nope'" in capsys.readouterr().err


def test_import_flplat_stays_light():
    out = subprocess.run([sys.executable, "-c", "import sys, flplat; print('torch' in sys.modules)"],
                         capture_output=True, text=True, timeout=120).stdout
    assert out.strip() == "False"


# ------------------------------------------------------------------------------------------------ 6. compare
def test_compare_table_curves_and_parent_run(store, tmp_path):
    from flplat.tracking.compare import compare

    root, runs = store
    png = tmp_path / "c.png"
    res = compare("wf", f"sqlite:///{root / 'mlflow.db'}", "global_accuracy", "algorithm", str(png))
    assert png.stat().st_size > 0 and res["runs"] == 4
    for algo in ("fedavg", "fedprox"):
        vals = [runs[(algo, s)][0].metrics["global_accuracy"] for s in (0, 1)]
        cell = f"{statistics.fmean(vals):.4f} ± {statistics.pstdev(vals):.4f} (n=2)"
        assert f"| {algo} | {cell} |" in res["table"]
        curve = res["curves"]["dirichlet α=0.5"][algo]
        hist = np.array([[h["global_accuracy"] for h in runs[(algo, s)][0].history] for s in (0, 1)])
        assert curve["step"] == [1.0, 2.0, 3.0]
        np.testing.assert_allclose(curve["mean"], hist.mean(0))
        np.testing.assert_allclose(curve["std"], hist.std(0))
    client = _client(root)
    parent = client.get_run(res["run_id"])
    assert parent.data.tags["flplat.kind"] == "compare" and parent.info.status == "FINISHED"
    arts = {a.path for a in client.list_artifacts(res["run_id"], "compare")}
    assert arts == {"compare/table.md", "compare/curves.csv", "compare/global_accuracy_curves.png"}
    # the comparison's own run is not a row of the next comparison
    assert compare("wf", f"sqlite:///{root / 'mlflow.db'}", log=False)["runs"] == 4


def test_compare_bad_metric(store):
    from flplat.tracking.compare import compare

    root, _ = store
    with pytest.raises(ConfigError, match="--metric='nope'"):
        compare("wf", f"sqlite:///{root / 'mlflow.db'}", "nope", log=False)


# ------------------------------------------------------------------------------------------------- 7. Optuna
def _study(storage: str):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="st", storage=storage, direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(lambda t: -(t.suggest_float("x", -1, 1) ** 2) + 0.1 * t.suggest_int("y", 0, 3), n_trials=6)
    return study


def test_study_plots_logged_to_parent(tmp_path):
    from flplat.studies.study_plots import log_study_plots
    from flplat.studies.tuning import make_storage

    storage = f"sqlite:///{tmp_path}/optuna.db"
    study = _study(make_storage(storage))
    client = _client(tmp_path)
    run_id = client.create_run(client.create_experiment("s")).info.run_id
    status = log_study_plots(client, run_id, study)
    assert status == {"optuna_history": "ok", "optuna_importances": "ok"}
    arts = {a.path for a in client.list_artifacts(run_id, "plots")}
    assert arts == {"plots/optuna_history.png", "plots/optuna_importances.png"}
    one = _client(tmp_path)
    rid = one.create_run(one.get_experiment_by_name("s").experiment_id).info.run_id
    import optuna

    single = optuna.create_study()
    single.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    assert log_study_plots(one, rid, single)["optuna_importances"].startswith("skipped: 1 completed")
    assert "skipped" in one.get_run(rid).data.tags["flplat.optuna_plots"]


def test_optuna_dashboard_reads_flplat_storage(tmp_path):
    optuna_dashboard = pytest.importorskip("optuna_dashboard")
    from flplat.studies.tuning import make_storage

    storage = f"sqlite:///{tmp_path}/optuna.db"
    _study(make_storage(storage))
    app = optuna_dashboard.wsgi(storage)
    status = []
    body = b"".join(app({"REQUEST_METHOD": "GET", "PATH_INFO": "/api/studies", "QUERY_STRING": "",
                         "SERVER_NAME": "localhost", "SERVER_PORT": "80", "wsgi.url_scheme": "http",
                         "wsgi.input": __import__("io").BytesIO(b"")},
                        lambda s, h, *a: status.append(s)))
    assert status[0].startswith("200")
    studies = json.loads(body)["study_summaries"]
    assert [s["study_name"] for s in studies] == ["st"]


# --------------------------------------------------------------------------------------------- 8. resources
def test_cpu_time_and_peak_memory_per_round(store):
    root, runs = store
    client = _client(root)
    run_id = runs[("fedavg", 1)][1]
    cpu = client.get_metric_history(run_id, "cpu_time_s")
    rss = client.get_metric_history(run_id, "peak_rss_mb")
    assert [m.step for m in cpu] == [1, 2, 3] and all(m.value > 0 for m in cpu)
    assert [m.step for m in rss] == [1, 2, 3] and rss[0].value > 50  # MB: python + torch at the least
    assert [m.value for m in rss] == sorted(m.value for m in rss)  # a peak never decreases


def test_resource_meter_counts_this_rounds_cpu():
    import time

    from flplat.tracking.meta import ResourceMeter

    meter = ResourceMeter()
    t0 = time.process_time()
    while time.process_time() - t0 < 0.2:
        pass
    first = meter.round()["cpu_time_s"]
    assert first >= 0.2 and meter.round()["cpu_time_s"] < 0.1


def test_system_metrics(tmp_path):
    store = tmp_path / "mlruns"
    _, off = _tracked(store, **{"tracking.system_metrics": "false", "federation.rounds": 1,
                                "tracking.log_models": "false"})
    assert _client(store).get_run(off).data.tags["flplat.system_metrics"].startswith("off")
    pytest.importorskip("psutil")
    _, on = _tracked(store, **{"tracking.system_metrics_interval": 0.05, "federation.rounds": 3,
                               "tracking.log_models": "false"})
    run = _client(store).get_run(on)
    assert run.data.tags["flplat.system_metrics"].startswith("on")
    assert any(k.startswith("system/cpu_utilization") for k in run.data.metrics)
