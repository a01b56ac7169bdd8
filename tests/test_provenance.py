"""What code made a run (:mod:`flplat.tracking.provenance`): the code identity every run records, and studies that
never reuse a run of other code silently -- ``flplat reproduce`` counts such runs (stderr and the table's header),
marks their cells and trains them again with ``--rerun-stale``; ``sweep`` and ``tune`` the same for their finished
seeds and trials; a run continued from a checkpoint by other code records ``mixed``.

The plugin case goes through the ``flplat`` command in subprocesses (plugins are loaded in subprocesses only, see
tests/test_plugins.py): a plugin's ``aggregate`` changed between two ``reproduce`` commands, as a user would."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import types

import pytest
from conftest import REPO, tiny_overrides

from flplat.cli import main
from flplat.tracking import provenance
from flplat.tracking.provenance import CODE_TAG, CodeIdentity, code_identity

GRID = ["reproduce", "dapfl", "table3_digits", "--scale", "smoke", "--cells", "digits_k20_low", "--methods", "FedAvg"]


def _client(store):
    from mlflow.tracking import MlflowClient

    from flplat.tracking.store import store_uris

    return MlflowClient(tracking_uri=store_uris(None, str(store))[0])


def _kids(store, experiment="reproduce-dapfl"):
    c = _client(store)
    exp = c.get_experiment_by_name(experiment)
    return [r for r in c.search_runs([exp.experiment_id]) if r.data.tags.get("mlflow.parentRunId")] if exp else []


# ------------------------------------------------------------------------------------------- the identity itself


def test_source_hash_is_the_sha256_of_flplats_python_files_by_hand():
    pkg = REPO / "flplat"
    h = hashlib.sha256()
    files = sorted((p for p in pkg.rglob("*.py") if "__pycache__" not in p.parts),
                   key=lambda p: p.relative_to(pkg).as_posix())
    for f in files:
        h.update(f.relative_to(pkg).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    assert provenance.source_hash() == h.hexdigest()[:16]
    ident = code_identity()
    assert ident.source == provenance.source_hash() and ident.plugins == ()


def test_a_plugin_packages_hash_follows_its_python_files_only(tmp_path, monkeypatch):
    """The code of a plugin module is its top-level package's ``*.py`` files: a changed function changes it, a
    changed README does not."""
    pkg = tmp_path / "hashme_pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "algo.py").write_text("def aggregate(x):\n    return sum(x)\n")
    (pkg / "README.md").write_text("docs\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    provenance.clear_cache()
    first = provenance.module_code("hashme_pkg.sub.algo")
    expected = hashlib.sha256()
    for rel in ("hashme_pkg/__init__.py", "hashme_pkg/sub/algo.py"):
        expected.update(rel.encode() + b"\0" + (tmp_path / rel).read_bytes() + b"\0")
    assert first == f"sha256:{expected.hexdigest()[:16]}"
    (pkg / "README.md").write_text("other docs\n")
    provenance.clear_cache()
    assert provenance.module_code("hashme_pkg.sub.algo") == first
    (pkg / "sub" / "algo.py").write_text("def aggregate(x):\n    return max(x)\n")
    provenance.clear_cache()
    assert provenance.module_code("hashme_pkg.sub.algo") != first
    provenance.clear_cache()


def test_identity_round_trips_and_its_key_is_the_code_only():
    a = CodeIdentity("0.1.0", "abc-dirty", "s1", (("my.algo", "sha256:aa (distribution my 1.0)"),))
    assert CodeIdentity.from_tags(a.to_tags()) == a and CodeIdentity.from_dict(json.loads(json.dumps(a.to_dict()))) == a
    # version, commit and the distribution's version are for people; the source and the plugins' hashes decide
    assert CodeIdentity("0.2.0", "def", "s1", (("my.algo", "sha256:aa (distribution my 2.0)"),)).key == a.key
    assert CodeIdentity("0.1.0", "abc", "s2", a.plugins).key != a.key
    assert CodeIdentity("0.1.0", "abc", "s1", (("my.algo", "sha256:bb"),)).key != a.key
    assert CodeIdentity.from_tags({"flplat.version": "0.1.0"}) is None  # a run from before the tags
    assert provenance.other_code(None, a).startswith("unknown code")
    assert provenance.other_code(a, a) is None and provenance.other_code(a, CodeIdentity("0", None, "s2")) \
        .startswith("other code (flplat 0.1.0 (commit abc-dirty, source s1) + my.algo sha256:aa")


def test_every_run_records_the_code_that_made_it(tmp_path):
    from flplat.experiment import load_config, run

    cfg = load_config(None, tiny_overrides(**{"tracking.enabled": "true", "tracking.store_dir": str(tmp_path),
                                              "tracking.experiment": "e", "federation.rounds": 1}))
    run(cfg, progress=False)
    (r,) = _client(tmp_path).search_runs([_client(tmp_path).get_experiment_by_name("e").experiment_id])
    assert CodeIdentity.from_tags(r.data.tags) == code_identity(cfg)
    assert r.data.tags["flplat.code.source"] == provenance.source_hash()
    assert r.data.tags["flplat.code.plugins"] == "none"


# --------------------------------------------------------------------------------- reproduce: runs of other code


def test_reproduce_counts_marks_and_reruns_runs_of_other_or_unknown_code(tmp_path, capsys):
    store, out = tmp_path / "store", tmp_path / "out"
    args = [*GRID, "--seeds", "0,1", "--store-dir", str(store)]
    assert main(args) == 0
    capsys.readouterr()
    client = _client(store)
    by_seed = {r.data.tags["flplat.reproduce.seed"]: r for r in _kids(store)}
    client.set_tag(by_seed["0"].info.run_id, CODE_TAG, "made-by-other-code")  # another flplat made seed 0
    client.delete_tag(by_seed["1"].info.run_id, CODE_TAG)  # seed 1 predates the tags
    assert main([*args, "--out", str(out)]) == 0
    got = capsys.readouterr()
    assert ("table3_digits: 2 of 2 runs come from other code than this command's (1 made by another flplat source "
            "or plugin code, 1 made before runs recorded their code): shown, marked in their cells; --rerun-stale "
            "trains them again") in got.err
    assert "Code: 2 of 2 runs come from other code than this command's" in got.out
    assert "| digits_k20_low | FedAvg | 66.83 | " in got.out and " (2, 2 from other code) |" in got.out
    assert len(_kids(store)) == 2  # used, not trained again
    recs = [json.loads(x) for x in (out / "dapfl_table3_digits_smoke_runs.jsonl").read_text().splitlines()]
    assert sorted((r["seed"], r["stale"]) for r in recs) == [(0, "other code"), (1, "unknown code")]
    codes = {r["seed"]: r["code"] for r in recs}  # the identity each run recorded, as the records carry it
    assert codes[0]["key"] == "made-by-other-code" and codes[0]["source"] == provenance.source_hash()
    assert codes[1] is None
    # --print-jobs --rerun-stale: one command per stale run, each with --rerun-stale
    assert main([*args, "--print-jobs", "--rerun-stale"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and all("--rerun-stale" in shlex.split(line) for line in lines)
    # --rerun-stale trains both again; the old runs are superseded and the table is clean
    assert main([*args, "--rerun-stale"]) == 0
    got = capsys.readouterr()
    assert "table3_digits: 2 run(s) from other code trained again (--rerun-stale)" in got.err
    assert "from other code" not in got.out and "Code:" not in got.out
    kids = _kids(store)
    assert len(kids) == 4
    new = {r.info.run_id for r in kids if "flplat.superseded_by" not in r.data.tags}
    assert {by_seed[s].info.run_id for s in "01"}.isdisjoint(new) and len(new) == 2
    assert {client.get_run(by_seed[s].info.run_id).data.tags["flplat.superseded_by"] for s in "01"} == new
    assert main(args) == 0  # now current: nothing trained, nothing marked
    got = capsys.readouterr()
    assert "2 of 2 runs already finished" in got.err and "other code" not in got.err + got.out
    assert main([*args, "--rerun-stale", "--render-only"]) == 2


def _flplat(args, *paths, timeout=600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "FLPLAT_PLUGINS"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *map(str, paths)])
    return subprocess.run([sys.executable, "-m", "flplat.cli", *map(str, args)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


PLUGIN = '''import torch

from flplat.api import Strategy, register_algorithm


@register_algorithm
class PlainMean(Strategy):
    name = "plainmean"

    def aggregate(self, state, results, ops):
        state.weights = {rule}
        return state
'''


def test_a_plugin_whose_aggregate_changed_is_not_reused_silently(tmp_path):
    """The new user's day: a plugin method in a reproduced table, its ``aggregate`` edited, the same command again:
    its run is counted and marked as from other code (the paper's FedAvg is not), and ``--rerun-stale`` trains it
    with the new code."""
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    src = plugin / "provmean.py"
    src.write_text(PLUGIN.format(rule="torch.stack([r.weights for r in results]).mean(dim=0)"))
    store = tmp_path / "store"
    cmd = [*GRID, "--seeds", "0", "--store-dir", store, "--plugin", "provmean", "--add-method",
           "Plain mean + x=algorithm.name=plainmean"]
    first = _flplat(cmd, plugin)
    assert first.returncode == 0, first.stderr[-3000:]
    (mine,) = [r for r in _kids(store) if r.data.params["algorithm.name"] == "plainmean"]
    assert mine.data.tags["flplat.code.plugins"].startswith("provmean=sha256:")
    src.write_text(PLUGIN.format(rule="torch.stack([r.weights for r in results]).median(dim=0).values"))
    again = _flplat(cmd, plugin)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "table3_digits: 1 of 2 runs come from other code than this command's (1 made by another flplat " \
           "source or plugin code)" in again.stderr
    row = next(line for line in again.stdout.splitlines() if "| Plain mean + x |" in line)
    assert "(1, 1 from other code) |" in row
    fedavg = next(line for line in again.stdout.splitlines() if "| FedAvg |" in line)
    assert "from other code" not in fedavg and len(_kids(store)) == 2
    rerun = _flplat([*cmd, "--rerun-stale"], plugin)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "1 run(s) from other code trained again (--rerun-stale)" in rerun.stderr
    assert "from other code" not in rerun.stdout
    new = [r for r in _kids(store) if r.data.params["algorithm.name"] == "plainmean"
           and "flplat.superseded_by" not in r.data.tags]
    assert len(new) == 1 and new[0].data.tags["flplat.code.plugins"] != mine.data.tags["flplat.code.plugins"]


# ------------------------------------------------------------------------------------------ resume, sweep, tune


def test_a_run_continued_by_other_code_records_mixed(tmp_path, monkeypatch, capsys):
    from flplat.engine.orchestrator import Orchestrator
    from flplat.experiment import load_config, run, run_or_resume

    over = tiny_overrides(**{"tracking.enabled": "true", "tracking.store_dir": str(tmp_path),
                             "tracking.experiment": "m", "federation.rounds": 2})
    real = Orchestrator._round

    def stop_in_round_2(orch, t, rng):
        if t == 2:
            raise KeyboardInterrupt
        return real(orch, t, rng)

    monkeypatch.setattr(Orchestrator, "_round", stop_in_round_2)
    with pytest.raises(KeyboardInterrupt):
        run(load_config(None, over), progress=False)
    monkeypatch.setattr(Orchestrator, "_round", real)
    client = _client(tmp_path)
    (r,) = client.search_runs([client.get_experiment_by_name("m").experiment_id])
    client.set_tag(r.info.run_id, CODE_TAG, "started-by-other-code")
    capsys.readouterr()
    _, run_id = run_or_resume(load_config(None, over), progress=False)
    assert run_id == r.info.run_id
    tags = client.get_run(run_id).data.tags
    assert tags[CODE_TAG] == provenance.MIXED and tags["flplat.code.resumed_by"] == code_identity(
        load_config(None, over)).key
    assert f"flplat: run {run_id} was started by other code" in capsys.readouterr().err


def test_sweep_flags_and_reruns_a_finished_seed_of_other_code(tmp_path, capsys):
    from flplat.studies.tuning import sweep_seeds

    over = tiny_overrides(**{"tracking.enabled": "true", "tracking.store_dir": str(tmp_path),
                             "tracking.experiment": "sw", "federation.rounds": 1})
    first = sweep_seeds(None, over, [0, 1])
    client = _client(tmp_path)
    runs = client.search_runs([client.get_experiment_by_name("sw").experiment_id])
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    seed0 = next(r for r in runs if r.data.params.get("seed") == "0")
    client.set_terminated(parent.info.run_id, "KILLED")  # an interrupted sweep: the same command re-opens it
    client.set_tag(seed0.info.run_id, CODE_TAG, "other")
    capsys.readouterr()
    rows = sweep_seeds(None, over, [0, 1])
    err = capsys.readouterr().err
    assert f"seed 0 already finished (run {seed0.info.run_id}), not trained again; it came from other code" in err
    assert "1 of 2 seeds' runs come from other code than this command's (seeds 0)" in err
    assert rows[0]["stale"].startswith("other code") and "stale" not in rows[1]
    assert rows[0]["global_accuracy"] == first[0]["global_accuracy"]
    assert client.get_run(parent.info.run_id).data.tags["flplat.stale_runs"] == "1"
    client.set_terminated(parent.info.run_id, "KILLED")
    rows = sweep_seeds(None, over, [0, 1], rerun_stale=True)
    err = capsys.readouterr().err
    assert "seed 0: its finished run" in err and "trained again (--rerun-stale)" in err
    assert "stale" not in rows[0] and rows[0]["global_accuracy"] == first[0]["global_accuracy"]  # same code result
    new = client.get_run(seed0.info.run_id).data.tags["flplat.superseded_by"]
    assert client.get_run(new).data.tags[CODE_TAG] == code_identity(load_cfg(over)).key


def load_cfg(over):
    from flplat.experiment import load_config

    return load_config(None, over)


def test_tune_counts_trials_of_other_code_and_reruns_their_points(tmp_path, monkeypatch, capsys):
    """Trials record their code; after a code change the completed points count (said, and in the result), and
    ``--rerun-stale`` runs every one of them again (a grid's stop after its last point does not leave them
    queued); the new values replace the old ones in the best trial."""
    import flplat.experiment as experiment
    import flplat.studies.tuning as tuning
    from flplat.studies.tuning import tune

    trained, gain = [], {"v": 0.0}

    def fake_run(cfg, progress=False, **kw):
        trained.append(float(cfg.algorithm.mu))
        return types.SimpleNamespace(metrics={"val_accuracy": float(cfg.algorithm.mu) + gain["v"]}), None

    monkeypatch.setattr(experiment, "run", fake_run)
    space = tmp_path / "space.yaml"
    space.write_text("fedprox:\n  algorithm.mu: [0.0, 0.5, 1.0]\n")
    storage = f"sqlite:///{tmp_path}/optuna.db"
    over = tiny_overrides(**{"tracking.enabled": "false", "algorithm.name": "fedprox",
                             "partition.train_fraction": 0.6, "partition.val_fraction": 0.2})
    out = tune(None, over, str(space), storage, "s", None)
    assert sorted(trained) == [0.0, 0.5, 1.0] and out["stale_trials"] == 0 and not out["best_from_other_code"]
    real = tuning.code_identity
    monkeypatch.setattr(tuning, "code_identity", lambda cfg=None: CodeIdentity("9", None, "changed"))
    capsys.readouterr()
    out = tune(None, over, str(space), storage, "s", None)
    assert "flplat tune: 3 of 3 completed trials come from other code than this command's" in capsys.readouterr().err
    assert out["stale_trials"] == 3 and out["best_from_other_code"] and len(trained) == 3
    gain["v"] = -0.25  # the new code scores lower: the old best must not stand for it
    out = tune(None, over, str(space), storage, "s", None, rerun_stale=True)
    assert "3 completed trial(s) of other code queued again (--rerun-stale)" in capsys.readouterr().err
    assert sorted(trained[3:]) == [0.0, 0.5, 1.0]
    assert out["stale_trials"] == 0 and not out["best_from_other_code"]
    assert out["best_params"] == {"algorithm.mu": 1.0} and out["best_value"] == pytest.approx(0.75)
    monkeypatch.setattr(tuning, "code_identity", real)


def test_a_plugins_module_is_found_behind_its_registry_entry(tmp_path):
    """The plugin modules of a run are those behind its algorithm / dataset / model / partition: one defined in a
    package (helpers included) and registered by a plugin module, in a subprocess."""
    pkg = tmp_path / "entrypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "algo.py").write_text(PLUGIN.format(rule="torch.stack([r.weights for r in results]).mean(dim=0)"))
    (pkg / "plug.py").write_text("import entrypkg.algo  # noqa: F401\n")
    code = ("from flplat.plugins import load_plugins; load_plugins(['entrypkg.plug']); "
            "from flplat.protocol.registry import entry_modules; from flplat.tracking.provenance import code_identity;"
            " print(entry_modules('algorithm', 'plainmean')); "
            "print(code_identity({'algorithm.name': 'plainmean', 'data.name': 'digits'}).plugins)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path)])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    mods, plugins = out.stdout.strip().splitlines()
    assert mods == "('entrypkg.algo', 'entrypkg.plug')"
    h = hashlib.sha256()
    for rel in ("entrypkg/__init__.py", "entrypkg/algo.py", "entrypkg/plug.py"):
        h.update(rel.encode() + b"\0" + (tmp_path / rel).read_bytes() + b"\0")
    want = f"sha256:{h.hexdigest()[:16]}"
    assert plugins == str((("entrypkg.algo", want), ("entrypkg.plug", want)))
