"""Plugins and the public API (issue 21, items 1, 2 and 6): the example plugin package of docs/extending.md
(docs/examples/flplat_example_plugin) found through the ``plugins`` config key, the ``--plugin`` flag and entry
points, in every process flplat starts (``fabric.devices=2`` ranks, ``reproduce --jobs 2`` workers); clashes and
failing imports as one line and exit 2 without an MLflow run; ``flplat list`` naming where each entry comes from.

Plugins are loaded in subprocesses only: registering in this process would add entries to the registries that the
registry-wide tests iterate over. Entry points are real: a ``*.dist-info`` folder with the example's
``entry_points.txt`` (read from its pyproject.toml) on ``PYTHONPATH``, which ``importlib.metadata`` discovers."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest
import tomllib
import torch
from conftest import REPO

EXAMPLE = REPO / "docs" / "examples" / "flplat_example_plugin"
MODULES = ["flplat_example_plugin.algorithm", "flplat_example_plugin.model", "flplat_example_plugin.data",
           "flplat_example_plugin.partition"]
FAST = ["federation.rounds=2", "federation.local_epochs=1", "fabric.num_threads=1"]


def _env(*paths) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "FLPLAT_PLUGINS"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *map(str, paths)])
    return env


def _flplat(args, *paths, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flplat.cli", *map(str, args)], cwd=REPO, env=_env(*paths),
                          capture_output=True, text=True, timeout=timeout)


def _installed(tmp_path):
    """The example as ``pip install -e`` leaves it for importlib.metadata: a dist-info with its entry points."""
    meta = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    info = tmp_path / "site" / f"flplat_example_plugin-{meta['version']}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {meta['name']}\nVersion: {meta['version']}\n")
    groups = meta["entry-points"]
    (info / "entry_points.txt").write_text("".join(
        f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n" for g, eps in groups.items()))
    return tmp_path / "site"


def _runs(store):
    from mlflow.tracking import MlflowClient

    from flplat.tracking.store import store_uris

    uri, _ = store_uris(None, str(store))
    client = MlflowClient(tracking_uri=uri)
    return [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]


# --------------------------------------------------------------------------------------------- the public API


def test_api_exports_the_protocol_types_and_old_paths_warn():
    import flplat.algorithms as algorithms
    import flplat.algorithms.base as base
    import flplat.api as api
    import flplat.engine.state as state
    from flplat.data.partitions import register_partition
    from flplat.deprecation import FlplatDeprecationWarning
    from flplat.protocol import seeding, strategy

    for name in api.__all__:
        assert hasattr(api, name), name
    for name in ("Strategy", "LocalHook", "ClientPlan", "ClientResult", "EvalResult", "HookContext", "FederationInfo"):
        with pytest.warns(FlplatDeprecationWarning, match=rf"flplat\.algorithms\.base\.{name} is deprecated .*; "
                                                          rf"use flplat\.api\.{name}$"):
            old = getattr(base, name)
        assert getattr(api, name) is getattr(strategy, name) is old
    with pytest.warns(FlplatDeprecationWarning, match=r"flplat\.engine\.state\.ServerState is deprecated"):
        assert api.ServerState is state.ServerState
    with pytest.warns(FlplatDeprecationWarning, match=r"flplat\.engine\.state\.derive_seed is deprecated"):
        assert api.derive_seed is state.derive_seed is seeding.derive_seed
    assert api.register_algorithm is algorithms.register and api.register_partition is register_partition


def test_builtin_algorithms_use_only_the_public_api():
    """No private shortcut: the built-in algorithms reach the protocol through flplat.api, like a plugin."""
    offending = []
    for path in sorted((REPO / "flplat" / "algorithms").glob("*.py")):
        if path.name in ("__init__.py", "base.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("flplat.engine",
                                                                                   "flplat.protocol")):
                offending.append(f"{path.name}: from {node.module} import ...")
        assert "@register_algorithm" in path.read_text() or "class " not in path.read_text(), path.name
    assert not offending, offending


def test_example_trimmed_mean_by_hand():
    sys.path.insert(0, str(EXAMPLE))
    try:
        from flplat_example_plugin.algorithm import trimmed_mean
    finally:
        sys.path.remove(str(EXAMPLE))
    stack = torch.tensor([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [100.0, -5.0]])
    # beta 0.25 of 4 clients: drop 1 value at each end per coordinate -> mean of [2, 3] and of [10, 20]
    assert trimmed_mean(stack, 0.25).tolist() == [2.5, 15.0]
    assert trimmed_mean(stack, 0.0).tolist() == [26.5, 13.75]


def test_plugins_key_does_not_change_the_config_hash():
    """A built-in method's finished runs still count when a plugin is loaded (reproduce --add-method, --plugin)."""
    from flplat.config_io import config_key
    from flplat.experiment import load_config

    assert config_key(load_config(None, ["plugins=[json]"])) == config_key(load_config(None, []))


# ------------------------------------------------------------------------------- loading, in every process


def test_plugin_flag_runs_the_example_and_records_its_modules(tmp_path):
    """--plugin (repeatable) on the quickstart config: the example's algorithm, model, dataset and partition."""
    store = tmp_path / "store"
    args = ["run", "configs/quickstart.yaml", "data.name=blobs_csv", "model.name=tiny_mlp", "algorithm.name=trimprox",
            "algorithm.trim=0.25", "partition.name=label_shards", "partition.num_clients=4", *FAST,
            f"tracking.store_dir={store}", "--no-progress"]
    for m in MODULES:
        args += ["--plugin", m]
    out = _flplat(args, EXAMPLE)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "global_accuracy=" in out.stdout
    (run,) = _runs(store)
    assert run.info.status == "FINISHED"
    assert run.data.params["algorithm.name"] == "trimprox" and run.data.params["data.name"] == "blobs_csv"
    assert all(m in run.data.params["plugins"] for m in MODULES)  # the logged config records them (resume)


def test_entry_points_are_found_and_listed_with_their_origin(tmp_path):
    site = _installed(tmp_path)
    out = _flplat(["list"], site, EXAMPLE)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in out.stdout.splitlines())
    assert "fedavg" in lines["algorithms"].split(" (built-in)")[0]
    assert ("trimprox (plugin flplat_example_plugin.algorithm (distribution flplat-example-plugin 0.1.0, entry "
            "point flplat.algorithms:trimprox))") in lines["algorithms"]
    assert "blobs_csv (plugin flplat_example_plugin.data (" in lines["datasets"]
    assert "tiny_mlp (plugin flplat_example_plugin.model (" in lines["models"]
    assert "label_shards (plugin flplat_example_plugin.partition (" in lines["partitions"]
    # without the distribution nothing of the example is there
    bare = _flplat(["list"])
    assert bare.returncode == 0 and "trimprox" not in bare.stdout and "(built-in)" in bare.stdout
    # an installed plugin is used by a run without naming it anywhere
    store = tmp_path / "store"
    out = _flplat(["run", "configs/quickstart.yaml", "data.name=blobs_csv", "algorithm.name=trimprox",
                   "partition.num_clients=4", *FAST, f"tracking.store_dir={store}", "--no-progress"], site, EXAMPLE)
    assert out.returncode == 0, out.stderr[-3000:]
    assert [r.info.status for r in _runs(store)] == ["FINISHED"]


def test_an_installed_plugin_is_known_to_the_commands_that_name_it_before_any_config(tmp_path):
    """docs/extending.md §4 as a new user runs it: the package installed (entry points only: no ``--plugin``, no
    ``plugins`` key), then ``flplat check NAME``. ``check`` and ``reproduce --add-method NAME`` look the name up
    before any config is read, so the entry points must be loaded by then: by the CLI before every command, and by
    the library functions themselves."""
    site = _installed(tmp_path)
    out = _flplat(["check", "trimprox", "--only", "registry"], site, EXAMPLE)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert out.stdout.startswith("PASS  registry") and "flplat_example_plugin.algorithm.TrimProx" in out.stdout
    # the CLI: the registries hold the installed plugins before a command's handler runs
    probe = ("import flplat.cli as c\nfrom flplat.algorithms import ALGORITHMS\n"
             "c.COMMANDS['check'] = (c.COMMANDS['check'][0], lambda args: print('trimprox' in ALGORITHMS) or 0)\n"
             "raise SystemExit(c.main(['check', 'trimprox']))")
    # the library without the CLI: check() and --add-method's parser (NAME alone names the algorithm)
    library = ("from flplat.studies.conformance import check\n"
               "from flplat.studies.reproduction.grid import parse_added_method\n"
               "print(check('trimprox', only=['registry'])[0].ok, parse_added_method('trimprox').overrides)")
    for code, expected in ((probe, "True"), (library, "True ['algorithm.name=trimprox']")):
        p = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=_env(site, EXAMPLE), capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0 and p.stdout.strip() == expected, (p.stdout, p.stderr[-3000:])


def test_two_processes_find_the_plugins_of_the_config(tmp_path):
    """fabric.devices=2: rank 1 (started before the heavy imports) reads the same config and imports its plugins."""
    store = tmp_path / "store"
    out = _flplat(["run", EXAMPLE / "example.yaml", "fabric.devices=2", *FAST, f"tracking.store_dir={store}",
                   "--no-progress"], EXAMPLE)
    assert out.returncode == 0, out.stderr[-3000:]
    (run,) = _runs(store)
    assert run.info.status == "FINISHED" and run.data.params["algorithm.name"] == "trimprox"
    assert run.data.params["fabric.devices"] == "2"


def test_reproduce_jobs_2_workers_find_the_plugin_flag(tmp_path):
    """reproduce --jobs 2: the worker processes (spawned) inherit --plugin through $FLPLAT_PLUGINS."""
    store = tmp_path / "store"
    out = _flplat(["reproduce", "dapfl", "table3_digits", "--scale", "smoke", "--cells", "digits_k20_low",
                   "--methods", "FedAvg", "--seeds", "0,1", "--jobs", "2", "--store-dir", store,
                   "--set", "data.name=blobs_csv", "--plugin", "flplat_example_plugin.data"], EXAMPLE, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    kids = [r for r in _runs(store) if r.data.tags.get("mlflow.parentRunId")]
    assert len(kids) == 2
    assert {r.data.params["data.name"] for r in kids} == {"blobs_csv"}
    assert {r.info.status for r in kids} == {"FINISHED"}


def test_the_example_passes_flplat_check_and_joins_a_reproduced_table(tmp_path):
    """Items 3 and 4 on a plugin: ``flplat check`` holds the example's algorithm to the built-ins' properties (the
    in-process ones; the 2-process and kill + resume ones are in the slow suite), and ``--add-method`` puts it in a
    paper's table beside the paper's methods, with no paper value and a verdict against the reference."""
    out = _flplat(["check", "trimprox", "--plugin", "flplat_example_plugin.algorithm",
                   "--only", "registry,smoke,determinism,checkpoint,failures,invalid_config"], EXAMPLE, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 6 and all(line.startswith("PASS") for line in lines), out.stdout
    store = tmp_path / "store"
    out = _flplat(["reproduce", "dapfl", "table3_digits", "--scale", "smoke", "--cells", "digits_k20_low",
                   "--methods", "FedAvg", "--seeds", "0", "--store-dir", store, "--plugin",
                   "flplat_example_plugin.algorithm", "--add-method",
                   "TrimProx=algorithm.name=trimprox,algorithm.trim=0.25"], EXAMPLE, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    row = next(line for line in out.stdout.splitlines() if "| TrimProx |" in line)
    assert "not in the paper (added method)" in row and "no paper value (added method)" in row, row
    kids = [r for r in _runs(store) if r.data.tags.get("mlflow.parentRunId")]
    assert {r.data.params["algorithm.name"] for r in kids} == {"fedavg", "trimprox"}


# --------------------------------------------------------------------------- clashes and failing imports


def _write(tmp_path, name: str, text: str):
    (tmp_path / f"{name}.py").write_text(text)


def _one_line_exit_2(out, store) -> str:
    assert out.returncode == 2, (out.returncode, out.stderr[-3000:])
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert not store.exists() or not _runs(store)
    return lines[0]


def test_a_plugin_clashing_with_a_builtin_exits_2_in_one_line_without_a_run(tmp_path):
    _write(tmp_path, "clash_builtin", "from flplat.api import Strategy, register_algorithm\n\n"
           "@register_algorithm\nclass Mine(Strategy):\n    name = 'fedavg'\n\n"
           "    def aggregate(self, state, results, ops):\n        return state\n")
    store = tmp_path / "store"
    line = _one_line_exit_2(_flplat(["run", "configs/quickstart.yaml", f"tracking.store_dir={store}",
                                     "--plugin", "clash_builtin"], tmp_path), store)
    assert line.startswith("flplat: error: plugin 'clash_builtin':")
    assert "algorithm 'fedavg' is already registered (built-in)" in line


def test_two_plugins_clashing_name_the_other_plugin(tmp_path):
    for name in ("data_a", "data_b"):
        _write(tmp_path, name, "from flplat.api import register_dataset\n\n"
               "@register_dataset('same')\ndef load(cfg, seed):\n    raise NotImplementedError\n")
    store = tmp_path / "store"
    line = _one_line_exit_2(_flplat(["run", "configs/quickstart.yaml", "plugins=[data_a,data_b]",
                                     f"tracking.store_dir={store}"], tmp_path), store)
    assert "plugin 'data_b': dataset 'same' is already registered (plugin data_a)" in line


def test_a_plugin_that_fails_to_import_exits_2_naming_module_and_cause(tmp_path):
    _write(tmp_path, "broken_plugin", "import flplat.api\n\nRATIO = 1 / 0\n")
    store = tmp_path / "store"
    line = _one_line_exit_2(_flplat(["run", "configs/quickstart.yaml", "plugins=[broken_plugin]",
                                     f"tracking.store_dir={store}"], tmp_path), store)
    assert line == "flplat: error: plugin 'broken_plugin' failed to import: ZeroDivisionError: division by zero"
    line = _one_line_exit_2(_flplat(["list", "--plugin", "no_such_plugin_mod"], tmp_path), store)
    assert "plugin 'no_such_plugin_mod' failed to import: ModuleNotFoundError" in line


STRICT = ("from flplat.api import ConfigError, Strategy, register_algorithm\n\n"
          "@register_algorithm\nclass Strict(Strategy):\n    name = 'strict'\n\n"
          "    def {method}(self, *args):\n"
          "        raise ConfigError(\"algorithm.name='strict' needs every client to hold 2 classes; allowed: "
          "partition.name=iid\")\n\n"
          "    def aggregate(self, state, results, ops):\n        return state\n")
TINY = ["data.name=synthetic", "data.samples=200", "model.hidden=[8]", "federation.rounds=1", *FAST]


def test_a_config_error_in_init_state_is_one_line_exit_2_and_no_store(tmp_path):
    """docs/extending.md: a ConfigError raised in ``init_state`` is the one-line error (exit 2) of bad input, before
    the MLflow run exists: not even the store is created (so MLflow's own lines on a new store do not appear)."""
    _write(tmp_path, "strict_init", STRICT.format(method="init_state"))
    store = tmp_path / "store"
    out = _flplat(["run", "configs/quickstart.yaml", "algorithm.name=strict", *TINY, f"tracking.store_dir={store}",
                   "--plugin", "strict_init"], tmp_path)
    assert not (store / "mlflow.db").exists()
    line = _one_line_exit_2(out, store)
    assert line == ("flplat: error: algorithm.name='strict' needs every client to hold 2 classes; allowed: "
                    "partition.name=iid")


def test_a_config_error_during_the_rounds_ends_the_run_failed_with_one_line(tmp_path):
    """Raised in ``plan`` (the run exists by then): the same one line and exit 2, and the run ends FAILED with the
    line as its ``flplat.error`` tag, never left RUNNING."""
    _write(tmp_path, "strict_plan", STRICT.format(method="plan"))
    store = tmp_path / "store"
    out = _flplat(["run", "configs/quickstart.yaml", "algorithm.name=strict", *TINY, f"tracking.store_dir={store}",
                   "--plugin", "strict_plan"], tmp_path)
    assert out.returncode == 2, out.stderr[-3000:]
    assert out.stderr.strip().splitlines()[-1].startswith("flplat: error: algorithm.name='strict' needs")
    assert "Traceback" not in out.stderr
    (run,) = _runs(store)
    assert run.info.status == "FAILED" and run.data.tags["flplat.error"].startswith("algorithm.name='strict' needs")


@pytest.mark.parametrize("value", ["plugins=[not a module]", "plugins=5", "plugins=[my-pkg]"])
def test_a_bad_plugins_value_is_one_line(value):
    from flplat.errors import ConfigError
    from flplat.experiment import load_config

    with pytest.raises(ConfigError, match="allowed: a list of module names"):
        load_config(None, [value])


@pytest.mark.slow
def test_a_killed_run_resumes_without_naming_its_plugin_again(tmp_path):
    """--plugin goes into the logged config (``plugins``), so ``--resume`` finds the plugin's algorithm alone."""
    import signal

    store = tmp_path / "store"
    env = {**_env(EXAMPLE), "PYTHONUNBUFFERED": "1"}
    args = ["run", "configs/quickstart.yaml", "algorithm.name=trimprox", "federation.rounds=6",
            "tracking.checkpoint_every=1", "fabric.num_threads=1", f"tracking.store_dir={store}",
            "--plugin", "flplat_example_plugin.algorithm"]
    p = subprocess.Popen([sys.executable, "-m", "flplat.cli", *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        if line.startswith("[round 2/"):
            p.send_signal(signal.SIGKILL)
            break
    p.communicate(timeout=600)
    (run,) = _runs(store)
    assert run.info.status == "RUNNING" and run.data.params["plugins"] == "['flplat_example_plugin.algorithm']"
    out = _flplat(["run", "--resume", run.info.run_id, "--force", "--no-progress", f"tracking.store_dir={store}"],
                  EXAMPLE)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "resuming run" in out.stderr and [r.info.status for r in _runs(store)] == ["FINISHED"]
