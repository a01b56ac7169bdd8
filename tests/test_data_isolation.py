"""The test suite reads no data file outside the clone: ``$FLPLAT_DATA_SEARCH=explicit`` (flplat/data/files.py) keeps
the locator to ``data.root`` and ``$FLPLAT_DATA``, tests/conftest.py sets it (and unsets ``$FLPLAT_DATA``) for the
whole session and the processes it starts, and ``@pytest.mark.real_data`` gives a test the user's settings back or
skips it with the reason. A test that silently needs the real MNIST therefore fails in CI too, not only on a clone
with nothing beside it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, write_idx_dataset

from flplat.cli import main
from flplat.config import DataConfig
from flplat.data import files as dfiles
from flplat.data.datasets import load_dataset
from flplat.errors import ConfigError

# the implicit locations in conftest's ``isolated`` layout (besides Debian's): (what it stands for, where)
PLANTED = [("cwd-relative ../shared/data", "shared/data/MNIST/raw"),
           ("repository-relative ../shared/data", "repo_shared/data/MNIST/raw"),
           ("~/.cache/flplat", "cache/MNIST/raw")]


def _plant_everywhere(isolated: Path) -> None:
    """A small MNIST in every implicit location of the isolated layout (conftest's ``isolated``)."""
    for _, sub in PLANTED:
        write_idx_dataset(isolated / sub, 20, 10, seed=0)
    write_idx_dataset(isolated / "debian", 20, 10, seed=0)


# ------------------------------------------------------------------------------------------------ the session


def test_the_session_searches_only_what_a_test_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In this process and in a child: the switch is on, ``$FLPLAT_DATA`` unset, and a copy of MNIST at
    ``../shared/data`` beside the working directory is not found (without conftest's switch it would be)."""
    assert os.environ.get("FLPLAT_DATA_SEARCH") == "explicit" and "FLPLAT_DATA" not in os.environ
    assert dfiles._candidate_dirs(DataConfig(name="mnist"), "MNIST/raw", [dfiles.DEBIAN_FMNIST_DIR]) == []
    assert dfiles.CACHE_DIR.parent == tmp_path.parent  # ~/.cache/flplat: a directory of the session's own
    write_idx_dataset(tmp_path / "shared" / "data" / "MNIST" / "raw", 20, 10, seed=0)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    with pytest.raises(dfiles.DataUnavailableError, match=r"looked in: no directory \(\$FLPLAT_DATA_SEARCH=explicit"):
        dfiles.locate(DataConfig(name="mnist"), "mnist")
    probe = ("import sys; from flplat.config import DataConfig; from flplat.data import files as f\n"
             "try:\n    print(f.locate(DataConfig(name='mnist'), 'mnist'))\n"
             "except f.DataUnavailableError as e:\n    print('absent:', e)")
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.startswith("absent: mnist data not found") and "FLPLAT_DATA_SEARCH=explicit" in res.stdout


# ----------------------------------------------------------------------------------------------- the switch


def test_explicit_search_skips_every_implicit_location(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _plant_everywhere(isolated)
    for _, sub in PLANTED:  # the documented order: the first location holding the files wins
        assert dfiles.locate(DataConfig(name="mnist"), "mnist") == isolated / sub
        shutil.rmtree(isolated / sub)
    _plant_everywhere(isolated)
    looked_all = dfiles._candidate_dirs(DataConfig(name="fmnist"), "FashionMNIST/raw", [dfiles.DEBIAN_FMNIST_DIR])
    assert isolated / "debian" in looked_all and isolated / "cache" / "FashionMNIST" / "raw" in looked_all
    monkeypatch.setenv("FLPLAT_DATA_SEARCH", "explicit")
    with pytest.raises(dfiles.DataUnavailableError) as e:
        load_dataset(DataConfig(name="mnist"), 0)
    msg = str(e.value)
    assert "looked in: no directory ($FLPLAT_DATA_SEARCH=explicit: only data.root and $FLPLAT_DATA are searched)" \
        in msg and "\n" not in msg
    for _, sub in PLANTED:
        assert str(isolated / sub) not in msg
    with pytest.raises(dfiles.DataUnavailableError):
        load_dataset(DataConfig(name="fmnist"), 0)  # nor Debian's directory
    # what the user names is still searched: $FLPLAT_DATA (both layouts), data.root
    write_idx_dataset(isolated / "env" / "MNIST" / "raw", 20, 10, seed=1)
    monkeypatch.setenv("FLPLAT_DATA", str(isolated / "env"))
    assert dfiles._candidate_dirs(DataConfig(name="mnist"), "MNIST/raw") == [isolated / "env",
                                                                              isolated / "env" / "MNIST" / "raw"]
    assert load_dataset(DataConfig(name="mnist"), 0).x_train.shape == (20, 1, 28, 28)
    root = isolated / "shared" / "data" / "MNIST" / "raw"
    assert dfiles.locate(DataConfig(name="mnist", root=str(root)), "mnist") == root


@pytest.mark.parametrize("value, found", [("", True), ("all", True), (" explicit ", False)])
def test_search_values(isolated: Path, monkeypatch: pytest.MonkeyPatch, value: str, found: bool) -> None:
    _plant_everywhere(isolated)
    monkeypatch.setenv("FLPLAT_DATA_SEARCH", value)
    assert bool(dfiles._candidate_dirs(DataConfig(name="mnist"), "MNIST/raw")) == found


def test_a_bad_search_value_is_one_line_and_exit_2(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLPLAT_DATA_SEARCH", "none")
    with pytest.raises(ConfigError, match=r"^\$FLPLAT_DATA_SEARCH='none' is not valid; choose one of: all, explicit$"):
        dfiles.locate(DataConfig(name="mnist", root=str(tmp_path)), "mnist")
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(REPO / "configs" / "quickstart.yaml"), "data.name=mnist"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "$FLPLAT_DATA_SEARCH='none' is not valid; choose one of: all, explicit" in err[0]
    assert not (tmp_path / "mlruns" / "mlflow.db").exists()


def test_locate_names_the_datasets_it_knows() -> None:
    with pytest.raises(ConfigError, match="data.name='digits' has no files to locate here; allowed: mnist, fmnist"):
        dfiles.locate(DataConfig(name="digits"), "digits")


# ------------------------------------------------------------------------------------------ real_data marker


INNER_TESTS = '''
import os
import pytest
from flplat.data.datasets import load_dataset
from flplat.config import DataConfig


def test_default_sees_no_user_data():
    assert "FLPLAT_DATA" not in os.environ and os.environ["FLPLAT_DATA_SEARCH"] == "explicit"


@pytest.mark.real_data("mnist")
def test_real():
    assert os.environ["FLPLAT_DATA"] == os.environ["EXPECTED_ROOT"]
    assert load_dataset(DataConfig(name="mnist"), 0).x_train.shape == (20, 1, 28, 28)
'''


def test_real_data_marker_gives_the_users_data_back_or_skips(tmp_path: Path) -> None:
    """An inner pytest session with this suite's conftest: the user's ``$FLPLAT_DATA`` is hidden from an unmarked
    test and given to a ``real_data`` one (in an xdist worker, which inherits the session's changed variables); with the
    user's ``$FLPLAT_DATA_SEARCH=explicit`` and no ``$FLPLAT_DATA`` the real_data test skips, saying why."""
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(REPO / "tests" / "conftest.py", suite / "conftest.py")
    (suite / "test_inner.py").write_text(INNER_TESTS)
    (suite / "pytest.ini").write_text("[pytest]\nmarkers =\n    real_data(*names): needs the real files\n")
    user = tmp_path / "user_data"
    write_idx_dataset(user / "MNIST" / "raw", 20, 10, seed=0)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLPLAT_", "PYTEST_"))}
    env.update(PYTHONPATH=str(REPO), HOME=str(tmp_path / "home"), EXPECTED_ROOT=str(user))
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--strict-markers", "-n", "1", "."]

    def run(**extra: str) -> str:
        res = subprocess.run(cmd, cwd=suite, env={**env, **extra}, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
        return res.stdout

    assert "2 passed" in run(FLPLAT_DATA=str(user))
    out = run(FLPLAT_DATA_SEARCH="explicit")
    assert "1 passed, 1 skipped" in out
    assert "needs the real mnist files: mnist data not found" in out and "FLPLAT_DATA_SEARCH=explicit" in out
