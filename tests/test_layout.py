"""The package's layout: no import circles, imports only downwards through the layers, and a top level that is
the design card's. Imports are read from the source (``ast``), those inside functions included, so a lazy import
cannot hide a circle."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest
from conftest import REPO

PKG = REPO / "flplat"

# Bottom to top. A module may import modules of its own layer or of a lower one, never of a higher one.
LAYERS = [
    ("flplat.errors", "flplat.deprecation"),  # the input error and one-line checks; the one deprecation helper:
    #                                           both import nothing of flplat
    ("flplat.config", "flplat.config_io", "flplat.config_load", "flplat.config_sections"),  # the run frame
    #                                           (registries are handed in); config text and hash; parsing text
    #                                           into a config; one section checked against its entry's Config
    ("flplat.protocol",),                     # the strategy protocol (flat state, ServerState, Strategy, ClientPlan,
    #                                           LocalHook, ...), derive_seed, registries' bookkeeping
    ("flplat.maths", "flplat.metrics"),       # pure maths of the methods; evaluation and non-IID metrics
    ("flplat.data", "flplat.models"),         # datasets, partitions; model registry
    ("flplat.blocks",),                       # what several methods are made of (aggregation, hooks, several
    #                                           models, mixtures, selection): exported by the api
    ("flplat.api",),                          # the public API plugins import (and the built-in algorithms too)
    ("flplat.algorithms",),                   # one strategy per file
    ("flplat.configure", "flplat.plugins"),   # load_config: the registries meet the config (no engine, no Fabric);
    #                                           plugins: the user's modules and entry points, imported before it
    ("flplat.engine",),                       # the training loop, the round loop, executors
    ("flplat.tracking",),                     # MLflow runs, reports read back from them
    ("flplat.experiment",),                   # load + validate a config, assemble, run (the one entry point)
    ("flplat.studies",),                      # many experiments: Optuna studies, sweeps
    ("flplat.cli", "flplat.__main__"),        # the `flplat` command (and `python -m flplat`)
]


def _module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PKG.rglob("*.py")}


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the package's modules it imports (``from a import b`` counts ``a.b`` when that is a module)."""
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = name.split(".")
                    if path.name != "__init__.py":
                        parts = parts[:-1]
                    parts = parts[: len(parts) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != name and t != "flplat":
                    graph[name].add(t)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def layer_of(module: str) -> int:
    """The highest-ranked (most specific) layer whose prefix matches; ``flplat.engine.state`` before ``engine``."""
    best, best_len = None, -1
    for rank, prefixes in enumerate(LAYERS):
        for pre in prefixes:
            if (module == pre or module.startswith(pre + ".")) and len(pre) > best_len:
                best, best_len = rank, len(pre)
    if best is None:
        raise AssertionError(f"{module} belongs to no layer: add its package to LAYERS in tests/test_layout.py")
    return best


def test_cycle_finder_sees_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert find_cycles(graph) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles():
    cycles = find_cycles(import_graph(_modules()))
    assert not cycles, "import circles in flplat/: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_imports_go_only_downwards():
    graph = import_graph(_modules())
    upward = sorted(f"{m} (layer {layer_of(m)}) imports {t} (layer {layer_of(t)})"
                    for m, ts in graph.items() if m != "flplat" for t in ts if layer_of(t) > layer_of(m))
    assert not upward, "imports against the layers:\n" + "\n".join(upward)


def test_errors_module_imports_nothing_of_flplat():
    graph = import_graph(_modules())
    assert graph["flplat.errors"] == set()
    assert graph["flplat.deprecation"] == set()
    assert graph["flplat.config"] <= {"flplat.errors", "flplat.config_sections"}
    assert graph["flplat.config_load"] <= {"flplat.errors", "flplat.config", "flplat.config_sections"}
    assert graph["flplat.config_sections"] <= {"flplat.errors"}


def test_engine_and_algorithms_meet_only_in_the_protocol():
    """The engine drives strategies and the algorithms implement them through :mod:`flplat.protocol` alone: no
    module of the engine imports one of the algorithms (or the API, which the algorithms use), and below the
    engine nothing imports the engine (the seeding helper and the flat state live in the protocol)."""
    graph = import_graph(_modules())
    engine = [m for m in graph if m.startswith("flplat.engine")]
    assert engine
    crossing = sorted(f"{m} imports {t}" for m in engine for t in graph[m]
                      if t.startswith(("flplat.algorithms", "flplat.api")))
    assert not crossing, "\n".join(crossing)
    below = [m for m in graph if m != "flplat" and layer_of(m) < layer_of("flplat.algorithms")]
    reach = sorted(f"{m} imports {t}" for m in below for t in graph[m] if t.startswith("flplat.engine"))
    assert not reach, "\n".join(reach)


def test_top_level_is_the_design_cards():
    try:
        tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    top = {line.split("/", 1)[0] for line in tracked.splitlines() if line}
    allowed = {"pyproject.toml", "README.md", "CHANGELOG.md", "flplat", "configs", "tests", "mlruns", "tools", "docs",
               ".ci", ".gitignore"}
    assert top <= allowed, f"unexpected top-level entries: {sorted(top - allowed)}"


# ---- the algorithms' door ---------------------------------------------------------------------------------------
# A built-in algorithm is a plugin that ships with flplat: a module of flplat/algorithms imports flplat.api and at most
# its own maths module, never another algorithm file (what methods share lives in flplat.blocks, exported by the api).
# "Own": a method file NAME.py owns flplat.maths.NAME and flplat.maths.NAME_* (fedopt -> maths.fedopt, flux ->
# maths.flux_descriptors, dapfl -> maths.dapfl_affinity). Outside flplat, anything (stdlib, numpy, torch, sklearn...).
# Not method files: the package (it imports every method to register it) and the old import path algorithms.base,
# kept with a deprecation warning.
NOT_METHODS = {"flplat.algorithms", "flplat.algorithms.base"}


def owns(method: str, module: str) -> bool:
    """Whether ``module`` is the own maths module of the method file ``method`` (the naming rule above)."""
    stem = method.rpartition(".")[2]
    return module == f"flplat.maths.{stem}" or module.startswith(f"flplat.maths.{stem}_")


def flplat_imports(source: str, module: str, mods) -> set[str]:
    """The modules of flplat that ``source`` (module ``module``) imports: ``from a import b`` names ``a.b`` when that
    is a module, else ``a`` (a package's ``__init__`` is imported for its names, not for a submodule)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")[:-node.level]
                base = ".".join(parts + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
        else:
            continue
        for t in targets:
            if t == "flplat" or t.startswith("flplat."):
                while t not in mods and "." in t:
                    t = t.rpartition(".")[0]
                out.add(t)
    return out


def door_violations(module: str, source: str, mods) -> list[str]:
    return sorted(f"{module} imports {t}" for t in flplat_imports(source, module, mods)
                  if t != "flplat.api" and not owns(module, t))


def test_door_rule_catches_a_method_that_goes_around_the_api():
    mods = set(_modules())
    ok = ("from flplat.api import Strategy, fedavg\nfrom flplat.maths.flux_descriptors import moments\n"
          "import numpy as np\nfrom flplat.maths import flux_fidelity\n")
    assert door_violations("flplat.algorithms.flux", ok, mods | {"flplat.maths.flux_fidelity"}) == []
    bad = ("from flplat.algorithms.fedavg import FedAvg\nfrom flplat.maths.aggregation import fedavg\n"
           "from flplat.errors import ConfigError\nfrom flplat.maths import dapfl_affinity\n"
           "import flplat.engine.state\nfrom . import ifca\n")
    assert door_violations("flplat.algorithms.fedamp", bad, mods) == [
        "flplat.algorithms.fedamp imports flplat.algorithms.fedavg",
        "flplat.algorithms.fedamp imports flplat.algorithms.ifca",
        "flplat.algorithms.fedamp imports flplat.engine.state",
        "flplat.algorithms.fedamp imports flplat.errors",
        "flplat.algorithms.fedamp imports flplat.maths.aggregation",
        "flplat.algorithms.fedamp imports flplat.maths.dapfl_affinity",
    ]
    assert owns("flplat.algorithms.dapfl", "flplat.maths.dapfl_affinity")
    assert not owns("flplat.algorithms.fed", "flplat.maths.fedopt")  # NAME or NAME_*, not a prefix of a word


def test_algorithms_import_only_the_api_and_their_own_maths():
    mods = _modules()
    methods = {m: p for m, p in mods.items() if m.startswith("flplat.algorithms.") and m not in NOT_METHODS}
    assert len(methods) > 20
    bad = [v for m, p in sorted(methods.items()) for v in door_violations(m, p.read_text(), set(mods))]
    assert not bad, "a built-in goes around flplat.api:\n" + "\n".join(bad)


# A method's state between rounds is its own dataclass in ServerState.method; ServerState.extra (string keys) is
# deprecated. In the built-ins and the blocks, ``.extra`` is read only on a client result (``r.extra``: what a hook
# sends back), and no ServerState is built with ``extra=``.
RESULT_NAMES = {"r"}


def extra_uses(source: str) -> list[str]:
    """Each ``X.extra`` with X not a client result's name, and each call passing ``extra=``, by line."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "extra":
            if not (isinstance(node.value, ast.Name) and node.value.id in RESULT_NAMES):
                out.append((node.lineno, f"line {node.lineno}: {ast.unparse(node)}"))
        elif isinstance(node, ast.Call) and any(k.arg == "extra" for k in node.keywords) and \
                ast.unparse(node.func).rpartition(".")[2] != "ClientResult":  # a client's extra results are fine
            out.append((node.lineno, f"line {node.lineno}: {ast.unparse(node.func)}(extra=...)"))
    return [text for _, text in sorted(out)]


def test_extra_finder_sees_server_state_extra():
    src = ("state.extra['pi'] = 1\nx = st.extra.get('a')\nServerState(weights=w, extra={})\n"
           "v = r.extra['v']\nself.state.extra = {}\nClientResult(client=1, extra={})\n")
    assert extra_uses(src) == ["line 1: state.extra", "line 2: st.extra", "line 3: ServerState(extra=...)",
                               "line 5: self.state.extra"]


def test_no_builtin_uses_server_state_extra():
    """Neither the built-ins nor anything else of flplat, its tools or the example plugin (only the deprecated
    property itself, in flplat/protocol/state.py)."""
    files = [p for d in ("flplat", "tools", "docs/examples") for p in sorted((REPO / d).rglob("*.py"))
             if p != PKG / "protocol" / "state.py"]
    bad = [f"{p.relative_to(REPO)} {u}" for p in files for u in extra_uses(p.read_text())]
    assert not bad, "ServerState.extra in a built-in (use the method's dataclass in state.method):\n" + "\n".join(bad)


def test_the_example_plugin_imports_only_the_api():
    """The example plugin is what an outside user copies: it reaches flplat through flplat.api alone."""
    mods = set(_modules())
    files = sorted((REPO / "docs" / "examples" / "flplat_example_plugin").rglob("*.py"))
    assert len(files) >= 4
    bad = [f"{p.relative_to(REPO)} imports {t}" for p in files
           for t in flplat_imports(p.read_text(), "flplat_example_plugin.x", mods) if t != "flplat.api"]
    assert not bad, "\n".join(bad)


def _calls_on(tree: ast.AST, name: str) -> set[str]:
    """Attributes read on the variable ``name`` anywhere in ``tree`` (``orch.state`` -> ``state``)."""
    return {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == name}


def test_no_callback_reads_the_orchestrator():
    """Callbacks receive frozen records (flplat/engine/events.py), never the round loop: no module that defines a
    callback imports the orchestrator, and no callback method's parameter is the orchestrator."""
    graph = import_graph(_modules())
    offenders = []
    for name, path in _modules().items():
        tree = ast.parse(path.read_text())
        callbacks = [c for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
                     and any(getattr(b, "id", getattr(b, "attr", "")) == "Callback" for b in c.bases)]
        if not callbacks:
            continue
        if "flplat.engine.orchestrator" in graph[name]:
            offenders.append(f"{name} defines a callback and imports flplat.engine.orchestrator")
        for cls in callbacks:
            for fn in (f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name.startswith("on_")):
                args = [a.arg for a in fn.args.args[1:]]
                if len(args) != 1 or "orch" in args[0] or _calls_on(fn, "orch"):
                    offenders.append(f"{name}: {cls.name}.{fn.name}({', '.join(args)}) is not a record callback")
    assert not offenders, "\n".join(offenders)


def test_callbacks_get_frozen_records_not_the_loop(tiny_cfg):
    import dataclasses

    from flplat.engine.events import Callback, RoundEnd, RunEnd, RunStart
    from flplat.experiment import run

    seen = []

    class Spy(Callback):
        def on_start(self, start):
            seen.append(start)

        def on_round_end(self, end):
            seen.append(end)

        def on_end(self, end):
            seen.append(end)

    summary, _ = run(tiny_cfg(**{"federation.rounds": 2}), callbacks=[Spy()], progress=False)
    assert [type(r) for r in seen] == [RunStart, RoundEnd, RoundEnd, RunEnd]
    for r in seen:
        with pytest.raises(dataclasses.FrozenInstanceError):
            r.meta = {}  # noqa: B010  (frozen: one callback cannot change what the next one sees)
    end = seen[-1]
    assert end.status == "FINISHED" and end.completed_round == 2 and list(end.history) == summary.history
    assert end.report.algorithm == "FedAvg" and end.report.global_weights is summary.state.weights
    assert dict(end.final) == summary.final and "config_yaml" in end.meta
    assert seen[1].checkpoint()["round"] == 1 and seen[0].tags["flplat.eval.unseen_model"] == "global: the global model"


def test_the_round_loop_is_small_and_no_method_identity_decides_behaviour():
    """The orchestrator keeps the round loop (evaluation lives in flplat/engine/evaluation.py), and behaviour is
    declared (eval_models, reduces_across_shards, vectorizes), never decided by comparing methods with ``is``."""
    lines = len((PKG / "engine" / "orchestrator.py").read_text().splitlines())
    assert lines <= 220, f"flplat/engine/orchestrator.py has {lines} lines"
    import re

    identity = re.compile(r"\bis(?: not)? [A-Z]\w*\.[a-z_]\w*")
    found = [f"{p.relative_to(REPO)}:{i}: {line.strip()}" for p in PKG.rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1) if identity.search(line)]
    assert not found, "\n".join(found)


MAX_FUNCTION_LINES = 60


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``path:line name (n lines)`` of every function or method under ``root`` longer than ``limit`` lines."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    out.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_long_function_finder_counts_lines(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    lines = [f"    x{i} = {i}" for i in range(60)]
    ok = "def ok():\n" + "\n".join(lines[:59])  # 60 lines: the limit
    long = "def long():\n" + "\n".join(lines)  # 61 lines
    (pkg / "m.py").write_text(f"{ok}\n\n\n{long}\n")
    assert long_functions(pkg) == ["pkg/m.py:63 long (61 lines)"]  # ok() ends at line 60; long() is line 63


def test_no_function_in_the_package_is_over_60_lines():
    assert long_functions(PKG) == []
