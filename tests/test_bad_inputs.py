"""The remaining bad inputs of issue 13 (item 6): each ends with one line naming the key and the allowed values,
exit status 2 and no MLflow run (the whole battery through the command: tools/scripts/bad_inputs.py)."""

from __future__ import annotations

import pytest
from conftest import REPO

from flplat.cli import main

QS = str(REPO / "configs" / "quickstart.yaml")


def _err(capsys, argv, tmp_path) -> str:
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("flplat: error: "), (rc, err)
    assert not (tmp_path / "mlruns" / "mlflow.db").exists()
    return err[0]


@pytest.mark.parametrize("text,words", [("- a\n- b\n", "is not a mapping of config keys (it holds a YAML list)"),
                                        ("", "is empty"),
                                        ("42\n", "is not a mapping of config keys (it holds a YAML int)"),
                                        ("just a string\n",
                                         "is not a mapping of config keys (it holds a YAML string)")])
def test_config_file_must_be_a_mapping(tmp_path, capsys, monkeypatch, text, words):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text(text)
    assert words in _err(capsys, ["run", "c.yaml"], tmp_path)


@pytest.mark.parametrize("where", ["override", "file"])
def test_a_mapping_where_a_list_is_expected_is_named(tmp_path, capsys, monkeypatch, where):
    """OmegaConf refuses to merge a mapping into a list with a bare TypeError; flplat names the key."""
    monkeypatch.chdir(tmp_path)
    if where == "file":
        (tmp_path / "c.yaml").write_text("plugins:\n  a: 1\n")
        argv = ["run", "c.yaml"]
    else:
        argv = ["run", QS, "plugins={a: 1}"]
    assert "plugins is a mapping where a list is expected; allowed: a list" in _err(capsys, argv, tmp_path)


@pytest.mark.parametrize("override", ["federation..rounds=1", ".rounds=1", "federation.=3"])
def test_override_with_an_empty_key_part_is_named(tmp_path, capsys, monkeypatch, override):
    monkeypatch.chdir(tmp_path)
    assert repr(override.split("=")[0]) in _err(capsys, ["run", QS, override], tmp_path)


def test_explicit_data_root_is_used_or_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "train-images-idx3-ubyte").write_text("")
    line = _err(capsys, ["run", QS, "data.name=mnist", "data.root=d"], tmp_path)
    assert "data.root='d' does not hold the mnist files" in line and "data.download=true" in line


@pytest.mark.parametrize("argv,words", [
    (["sweep", QS, "--seeds", ""], "--seeds=''"),
    (["tune", QS, "--space", "s.yaml", "--n-trials", "-1"], "--n-trials=-1"),
    (["tune", QS, "--space", "s.yaml", "--storage", "foo://bar"], "--storage='foo://bar'"),
    (["tune", QS, "--space", "bad.yaml", "algorithm.name=fedprox"], "algorithm.mu=-5.0"),
    (["tune", QS, "--space", "range.yaml", "algorithm.name=fedprox"], "low=1.0 > high=0.1"),
    (["noniid-plot", "--alphas", "0,1"], "--alphas"),
    (["noniid-plot", "--s-values", "1.5"], "--s-values"),
    (["noniid-plot", "--out", "missing/x.png"], "does not exist"),
    (["run", QS, "federation.optimizer.lr=inf"], "federation.optimizer.lr=inf"),
    (["run", QS, "federation.failures.dropout=1.5"], "federation.failures.dropout"),
    (["run", QS, "tracking.uri=http://127.0.0.1:9"], "is unreachable"),
    (["run", QS, "tracking.store_dir=/proc/flplat-store"], "cannot be created"),
    (["run", "--resume", "0123456789abcdef"], "no checkpoint"),
    (["run", QS, "--resume", "0123456789abcdef"], "takes no config file"),
    (["run", "--resume", "0123456789abcdef", "federation.rounds=3"], "only tracking.* keys"),
])
def test_cli_arguments_checked_before_any_work(tmp_path, capsys, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "s.yaml").write_text("fedavg:\n  federation.batch_size: [16, 32]\n")
    (tmp_path / "bad.yaml").write_text("fedprox:\n  algorithm.mu: [0.1, -5.0]\n")
    (tmp_path / "range.yaml").write_text("fedprox:\n  algorithm.mu: {low: 1.0, high: 0.1}\n")
    assert words in _err(capsys, argv, tmp_path)


def test_no_test_data_and_too_many_clusters(tiny_cfg):
    from flplat.errors import ConfigError
    from flplat.experiment import prepare

    with pytest.raises(ConfigError, match="leaves no client any test sample"):
        prepare(tiny_cfg(**{"partition.train_fraction": 0.999, "partition.test_fraction": 0.001}))
    with pytest.raises(ConfigError, match=r"algorithm.num_clusters=9 is out of range for 6 clients"):
        prepare(tiny_cfg(**{"algorithm.name": "ifca", "algorithm.num_clusters": 9}))


def test_noniid_plot_names_the_points_no_partition_can_meet(tmp_path, capsys):
    # digits (1,797 samples) cannot give 500 clients 10 samples each: every point skipped, exit 2, one line
    line = _err(capsys, ["noniid-plot", "--clients", "500", "--alphas", "0.01", "--s-values", "", "--seeds", "0",
                         "--out", str(tmp_path / "n.png")], tmp_path)
    assert "--clients=500" in line and "alpha=0.01 seed=0" in line
    assert not (tmp_path / "n.png").exists()
    # 100 clients: alpha=50 can, alpha=0.01 cannot -> the plot, and the skipped point named
    assert main(["noniid-plot", "--clients", "100", "--alphas", "0.01,50", "--s-values", "", "--seeds", "0",
                 "--out", str(tmp_path / "n.png")]) == 0
    err = capsys.readouterr().err
    assert "skipped 1 point(s)" in err and "alpha=0.01 seed=0" in err and (tmp_path / "n.png").is_file()
