"""flplat's one deprecation helper (flplat/deprecation.py): a FlplatDeprecationWarning naming the replacement, once
per call site, shown outside ``__main__`` too; ServerState.extra goes through it; old checkpoints' state loads."""

from __future__ import annotations

import ast
import importlib
import pickle
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

from flplat.api import ServerState
from flplat.deprecation import FlplatDeprecationWarning, deprecated, moved, warn


def _old_api():
    deprecated("flplat.old_thing", "flplat.api.new_thing", since="0.2.0", remove_in="0.3.0")


def test_deprecated_names_the_replacement_and_points_at_the_caller():
    with pytest.warns(FlplatDeprecationWarning) as rec:
        _old_api()
    (w,) = rec
    assert str(w.message) == ("flplat.old_thing is deprecated since flplat 0.2.0 and will be removed in 0.3.0; "
                              "use flplat.api.new_thing")
    assert issubclass(w.category, DeprecationWarning)  # pytest.warns(DeprecationWarning) and -W see it
    assert w.filename == __file__ and w.lineno == test_deprecated_names_the_replacement_and_points_at_the_caller.\
        __code__.co_firstlineno + 2  # the line that called the deprecated function


def test_once_per_call_site():
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("default")  # the action flplat installs for its warnings (the test suite: error)
        for _ in range(3):
            _old_api()  # one call site
        _old_api()  # another
    assert len(rec) == 2 and {w.lineno for w in rec} == {_lines()[0], _lines()[1]}


def _lines():
    src = test_once_per_call_site.__code__
    first = src.co_firstlineno
    return first + 4, first + 5


def test_warn_carries_a_message_of_its_own():
    with pytest.warns(FlplatDeprecationWarning, match="^data.x is deprecated: it is data.y$"):
        warn("data.x is deprecated: it is data.y")


def test_moved_names_warn_and_unknown_names_stay_attribute_errors():
    getattr_ = moved("flplat.old_module", {"ServerState": "flplat.api", "Old": "flplat.api:ClientStore"})
    with pytest.warns(FlplatDeprecationWarning, match=r"flplat\.old_module\.Old is deprecated .*; use "
                                                      r"flplat\.api\.ClientStore$"):
        from flplat.api import ClientStore

        assert getattr_("Old") is ClientStore
    with pytest.warns(FlplatDeprecationWarning, match=r"use flplat\.api\.ServerState$"):
        assert getattr_("ServerState") is ServerState
    with pytest.raises(AttributeError, match="module 'flplat.old_module' has no attribute 'Nope'"):
        getattr_("Nope")


def test_a_plugin_author_sees_the_warning_outside_main(tmp_path):
    """Python hides DeprecationWarning outside ``__main__``; flplat shows its own, once per call site, unless the
    interpreter was given -W options."""
    (tmp_path / "old_lib.py").write_text(textwrap.dedent("""
        from flplat.deprecation import deprecated

        def old():
            deprecated("old_lib.old", "new_lib.new")
    """))
    (tmp_path / "plugin_mod.py").write_text(textwrap.dedent("""
        from old_lib import old

        def use():
            for _ in range(3):
                old()
    """))
    code = "import plugin_mod; plugin_mod.use(); plugin_mod.use()"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stderr.count("FlplatDeprecationWarning: old_lib.old is deprecated") == 1
    assert "plugin_mod.py:6: FlplatDeprecationWarning" in out.stderr  # the plugin's line that needs the change
    quiet = subprocess.run([sys.executable, "-W", "ignore", "-c", code], cwd=tmp_path, capture_output=True,
                           text=True, check=True)
    assert quiet.stderr == ""


def test_server_state_extra_warns_and_method_does_not():
    state = ServerState(weights=torch.zeros(2), method={"mine": 1})
    assert state.method == {"mine": 1}
    with pytest.warns(FlplatDeprecationWarning, match=r"ServerState\.extra is deprecated .*; use ServerState\.method"):
        state.extra["a"] = 1
    with pytest.warns(FlplatDeprecationWarning):
        assert state.extra == {"a": 1}
    with pytest.warns(FlplatDeprecationWarning):
        state.extra = {"b": 2}
    with pytest.warns(FlplatDeprecationWarning) as rec:
        old = ServerState(extra={"c": 3})
    assert rec[0].filename == __file__
    with pytest.warns(FlplatDeprecationWarning):
        assert old.extra == {"c": 3}
    copy = pickle.loads(pickle.dumps(state))  # the method's state and the deprecated dict both travel
    assert copy.method == {"mine": 1} and copy._extra == {"b": 2}


def test_a_pickled_server_state_of_the_earlier_layout_loads():
    """A ServerState pickled before ``method`` existed (``extra`` a field): it loads, ``extra`` holds its dict."""
    state = ServerState(round=4)
    d = dict(vars(state))
    d["extra"] = d.pop("_extra")
    d.pop("method")
    d["extra"]["h"] = torch.ones(1)
    state.__dict__.clear()
    state.__dict__.update(d)  # as the earlier class left it
    loaded = pickle.loads(pickle.dumps(state))
    assert loaded.round == 4 and loaded.method is None
    with pytest.warns(FlplatDeprecationWarning):
        assert torch.equal(loaded.extra["h"], torch.ones(1))


def test_old_config_keys_warn_through_the_helper():
    from flplat.configure import load_config

    with pytest.warns(FlplatDeprecationWarning, match="data.synthetic_samples is deprecated"):
        load_config(None, ["data.name=synthetic", "data.synthetic_samples=120"])


# ---- no test or tool uses an old path -----------------------------------------------------------------------------
# Every old path is a module-level ``__getattr__`` made by flplat.deprecation.moved (its mapping readable as
# ``__getattr__.moved``). Running the suite turns their warnings into errors, but only on the lines it runs; this scan
# also covers tools/ and the example plugin, and lines a test does not reach. A module whose names all moved (the old
# module is nothing but the mapping) may not be imported at all.
ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("tests", "tools", "docs/examples")
EXEMPT = {"tests/test_module_split.py"}  # it reads each old path on purpose, and checks the warning
# (so does a test function that expects the warning: ``pytest.warns(FlplatDeprecationWarning`` in its body)


def old_paths() -> dict[str, set[str]]:
    """{module: its moved names} for every module of flplat with a ``moved`` ``__getattr__``."""
    out = {}
    for path in sorted((ROOT / "flplat").rglob("*.py")):
        if re.search(r"^__getattr__ = moved\(__name__", path.read_text(), re.M):
            mod = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[mod] = set(importlib.import_module(mod).__getattr__.moved)
    return out


def shim_only(module: str) -> bool:
    """A module with nothing left but the moved names (and its imports)."""
    tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text())
    return all(isinstance(n, (ast.Import, ast.ImportFrom)) or (isinstance(n, ast.Expr) and isinstance(
        n.value, ast.Constant)) or (isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "__getattr__")
        for n in tree.body)


def old_path_uses(source: str, old: dict[str, set[str]], shims: set[str]) -> list[str]:
    """``from OLD import NAME``, ``OLD_ALIAS.NAME`` and any import of a shim-only module, by line."""
    found, aliases = [], {}
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if node.module in shims or full in shims:
                    found.append(f"line {node.lineno}: imports {node.module if node.module in shims else full}")
                elif a.name in old.get(node.module, ()):
                    found.append(f"line {node.lineno}: {full} (moved)")
                elif full in old:
                    aliases[a.asname or a.name] = full
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in shims:
                    found.append(f"line {node.lineno}: imports {a.name}")
                elif a.name in old and a.asname:
                    aliases[a.asname] = a.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            base = ast.unparse(node.value)
            mod = aliases.get(base, base)
            if node.attr in old.get(mod, ()):
                found.append(f"line {node.lineno}: {mod}.{node.attr} (moved)")
    checked = [range(f.lineno, f.end_lineno + 1) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
               and "pytest.warns(FlplatDeprecationWarning" in ast.get_source_segment(source, f)]
    found = [u for u in found if not any(int(u.split()[1].rstrip(":")) in r for r in checked)]
    return sorted(set(found), key=lambda s: int(s.split()[1].rstrip(":")))


def test_old_path_finder_sees_each_form():
    old = {"flplat.tracking.runs": {"HEARTBEAT_TAG"}, "flplat.engine.state": {"ServerState"}}
    src = ("from flplat.tracking.runs import HEARTBEAT_TAG, open_client\n"
           "from flplat.tracking import runs\nx = runs.HEARTBEAT_TAG\ny = runs.open_client\n"
           "import flplat.tracking.runs as r2\nz = r2.HEARTBEAT_TAG\n"
           "from flplat.engine.state import ParamLayout\nimport flplat.engine.state\n"
           "from flplat.api import ServerState\n"
           "def test_old():\n    import flplat.engine.state as s\n"
           "    with pytest.warns(FlplatDeprecationWarning):\n        s.ServerState\n")
    assert old_path_uses(src, old, {"flplat.engine.state"}) == [
        "line 1: flplat.tracking.runs.HEARTBEAT_TAG (moved)", "line 3: flplat.tracking.runs.HEARTBEAT_TAG (moved)",
        "line 6: flplat.tracking.runs.HEARTBEAT_TAG (moved)", "line 7: imports flplat.engine.state",
        "line 8: imports flplat.engine.state"]


def test_no_test_tool_or_example_uses_an_old_path():
    old = old_paths()
    shims = {m for m in old if shim_only(m)}
    assert {"flplat.engine.state", "flplat.algorithms.base", "flplat.maths.aggregation"} <= shims
    assert "flplat.tracking.runs" in old and "flplat.tracking.runs" not in shims
    files = [p for d in SCANNED for p in sorted((ROOT / d).rglob("*.py"))]
    bad = [f"{rel} {u}" for p in files if (rel := p.relative_to(ROOT).as_posix()) not in EXEMPT
           for u in old_path_uses(p.read_text(), old, shims)]
    assert not bad, "old import paths (import from flplat.api or the module named in the warning):\n" + "\n".join(bad)


def test_the_suite_turns_flplats_own_deprecations_into_errors():
    """pyproject.toml's filterwarnings: flplat's DeprecationWarnings are errors in the tests (a test or tool on an
    old path fails), other packages' stay ignored."""
    with pytest.raises(FlplatDeprecationWarning, match="use flplat.api.new_thing"):
        _old_api()
    warnings.warn("a third-party deprecation", DeprecationWarning, stacklevel=1)  # ignored: no error
