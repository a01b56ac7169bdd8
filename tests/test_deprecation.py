"""flplat's one deprecation helper (flplat/deprecation.py): a FlplatDeprecationWarning naming the replacement, once
per call site, shown outside ``__main__`` too; ServerState.extra goes through it; old checkpoints' state loads."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
import warnings

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
