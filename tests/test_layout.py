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
    ("flplat.errors",),                       # the input error and one-line checks: imports nothing of flplat
    ("flplat.config", "flplat.config_io", "flplat.config_load", "flplat.config_sections"),  # the run frame
    #                                           (registries are handed in); config text and hash; parsing text
    #                                           into a config; one section checked against its entry's Config
    ("flplat.protocol",),                     # the strategy protocol (flat state, ServerState, Strategy, ClientPlan,
    #                                           LocalHook, ...), derive_seed, registries' bookkeeping
    ("flplat.maths", "flplat.metrics"),       # pure maths of the methods; evaluation and non-IID metrics
    ("flplat.data", "flplat.models"),         # datasets, partitions; model registry
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
