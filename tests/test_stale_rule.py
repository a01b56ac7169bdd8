"""One stale-heartbeat rule (flplat/tracking/heartbeat.py) for every place that judges a run by its heartbeat:
``flplat runs --stale``, ``flplat run --resume``, the studies' resume of their unfinished runs, Optuna's trial
heartbeat. The run here is tracked with a threshold away from the defaults (10 s beats, 2 missed beats, 20 s margin:
stale after 40 s); each path must call it alive at a 32 s old heartbeat and stale at a 48 s old one. (The rules
there were before: 2 beats + 10 s = 30 s for --resume, 3 beats + 60 s = 90 s for the rest, 90 s for Optuna.)"""

from __future__ import annotations

import time

import pytest

RULE = {"tracking.heartbeat_s": 10, "tracking.stale_beats": 2, "tracking.stale_margin_s": 20}  # 2 x 10 + 20 = 40 s


def test_the_rule_by_hand():
    from flplat.experiment import load_config
    from flplat.tracking.heartbeat import config_stale_after_s, optuna_heartbeat, stale_after_s

    assert stale_after_s() == 3 * 30 + 60 == 150  # the defaults: 3 missed 30 s beats + 60 s
    assert stale_after_s(10, 2, 5) == 25
    assert config_stale_after_s(load_config(None, []).tracking) == 150
    assert config_stale_after_s(load_config(None, [f"{k}={v}" for k, v in RULE.items()]).tracking) == 40
    assert optuna_heartbeat() == (30, 150)
    assert optuna_heartbeat(load_config(None, ["tracking.heartbeat_s=0.4"]).tracking) == (1, 63)  # whole seconds


@pytest.mark.parametrize("key,value", [("tracking.stale_beats", 1), ("tracking.stale_margin_s", -1),
                                       ("tracking.stale_margin_s", "inf")])
def test_bad_rule_keys_are_one_line_errors(key, value):
    from flplat.errors import ConfigError
    from flplat.experiment import load_config

    with pytest.raises(ConfigError, match=key):
        load_config(None, [f"{key}={value}"])


def test_every_path_uses_the_same_threshold(tiny_cfg, tmp_path, monkeypatch, capsys):
    from mlflow.tracking import MlflowClient

    import flplat.cli.run as cli_run
    from flplat.cli import main
    from flplat.experiment import run
    from flplat.studies.tuning import make_storage
    from flplat.tracking.heartbeat import HEARTBEAT_TAG, STALE_AFTER_TAG, stale_runs
    from flplat.tracking.resume import alive_note, interrupted
    from flplat.tracking.store import store_uris

    store = tmp_path / "store"
    cfg = tiny_cfg(**{"tracking.enabled": "true", "tracking.store_dir": str(store), "tracking.plots": "false",
                      "tracking.keep_checkpoint": "true", "tracking.log_models": "false",
                      "tracking.system_metrics": "false", **RULE})
    _, run_id = run(cfg, progress=False)
    client = MlflowClient(tracking_uri=store_uris(None, str(store))[0])
    assert float(client.get_run(run_id).data.tags[STALE_AFTER_TAG]) == 40  # the run's own threshold, written once
    exp = client.get_run(run_id).info.experiment_id
    client.update_run(run_id, status="RUNNING")  # as after a SIGKILL: RUNNING, the heartbeat ageing
    monkeypatch.setattr(cli_run, "_run_and_report", lambda cfg, args, resume=None: 7)  # reached: resume allowed

    for age, stale in ((32, False), (48, True)):
        client.set_tag(run_id, HEARTBEAT_TAG, str(int(time.time()) - age))
        r = client.get_run(run_id)
        # flplat runs --stale
        assert [x.info.run_id for x in stale_runs(client, [exp])] == ([run_id] if stale else [])
        assert main(["runs", "--stale", "--store-dir", str(store)]) == 0
        assert f"{int(stale)} stale run(s)" in capsys.readouterr().err
        # the studies' resume (claim_unfinished / reopen_parent)
        assert interrupted(r) is stale
        if not stale:
            assert "stale after 40 s" in alive_note(r, "run")
        # flplat run --resume: refused (exit 2, one line) while alive, allowed once stale
        rc = main(["run", "--resume", run_id, f"tracking.store_dir={store}"])
        err = capsys.readouterr().err
        assert rc == (7 if stale else 2), err
        if not stale:
            assert "still alive" in err and "stale after 40 s" in err and len(err.strip().splitlines()) == 1
    # Optuna's trial heartbeat: the same beat and the same threshold as its grace period
    storage = make_storage(f"sqlite:///{tmp_path / 'optuna.db'}", cfg.tracking)
    assert (storage.heartbeat_interval, storage.grace_period) == (10, 40)
