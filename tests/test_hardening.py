"""Issue 22: what a long-running user meets. `flplat ui` leaves no server behind (item 1), every command that opens
the store fails fast on an unreachable tracking server (2), a run killed outright on this machine is resumed at
once (3), the last bad inputs (4, also in test_bad_inputs.py), progress of long work and a second Ctrl-C (5), and a
Ctrl-C that always ends a run (6)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from conftest import REPO

from flplat.cli import main

ENV = {**os.environ, "PYTHONPATH": str(REPO)}
ENV.pop("MLFLOW_TRACKING_URI", None)
QS = str(REPO / "configs" / "quickstart.yaml")


# ---------------------------------------------------------------- item 1: the UI server never outlives flplat

def _stat(pid: int):
    try:
        raw = open(f"/proc/{pid}/stat", "rb").read().decode(errors="replace")
    except OSError:
        return None
    rest = raw[raw.rfind(")") + 2:].split()
    return int(rest[1]), rest[0], int(rest[19])  # ppid, state, start time


def _tree(root: int) -> dict[int, int]:
    """Living descendants of ``root`` (pid -> start time), from /proc."""
    kids: dict[int, list[int]] = {}
    start: dict[int, int] = {}
    for p in os.listdir("/proc"):
        if p.isdigit() and (st := _stat(int(p))) is not None and st[1] != "Z":
            kids.setdefault(st[0], []).append(int(p))
            start[int(p)] = st[2]
    out, todo = {}, [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            out[c] = start[c]
            todo.append(c)
    return out


def _alive(procs: dict[int, int]) -> dict[int, int]:
    return {p: s for p, s in procs.items() if (st := _stat(p)) is not None and st[1] != "Z" and st[2] == s}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# a server like `mlflow ui`: it dies on SIGTERM without stopping its children; one child ignores SIGTERM, one
# leaves the process group (MLflow starts its jobs with start_new_session), one has a child of its own
FAKE_SERVER = r"""
import socket, subprocess, sys
sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
ignore = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"]
nest = [sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen(%r); time.sleep(600)" % (sleep,)]
kids = [subprocess.Popen(sleep), subprocess.Popen(ignore), subprocess.Popen(sleep, start_new_session=True),
        subprocess.Popen(nest)]
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
print("serving", flush=True)
while True:
    s.accept()[0].close()
"""

SERVE = "import sys; from flplat.cli.server import serve; sys.exit(serve(sys.argv[1:], grace_s=1.0))"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_ui_server_group_ends_with_flplat(tmp_path, sig):
    port = _free_port()
    (tmp_path / "server.py").write_text(FAKE_SERVER)
    proc = subprocess.Popen([sys.executable, "-c", SERVE, sys.executable, str(tmp_path / "server.py"), str(port)],
                            env=ENV, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "serving"
        deadline = time.time() + 30
        while len(tree := _tree(proc.pid)) < 5 and time.time() < deadline:  # (server,) 4 kids, a grandchild(, watchdog)
            time.sleep(0.05)
        assert len(tree) >= 5, tree
        assert not _port_is_free(port)
        if sig == signal.SIGKILL:
            time.sleep(1.5)  # the watchdog looks at the server's descendants every second
        proc.send_signal(sig)
        rc = proc.wait(timeout=30)
        deadline = time.time() + 15
        while _alive(tree) and time.time() < deadline:
            time.sleep(0.05)
        assert not _alive(tree), f"left running: {_alive(tree)}"
        assert _port_is_free(port)
        assert rc == (-9 if sig == signal.SIGKILL else 128 + sig)
    finally:
        for p in _alive(_tree(proc.pid)):
            os.kill(p, signal.SIGKILL)
        proc.kill()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_flplat_ui_leaves_no_mlflow_server(tmp_path, sig):
    """The real `flplat ui` (MLflow's server, job runner, huey consumers): nothing left, port free."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "flplat.cli", "ui", "--store-dir", str(tmp_path / "mlruns"),
                             "--port", str(port)], env=ENV, cwd=tmp_path, stderr=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                import urllib.request

                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).close()
                break
            except OSError:
                time.sleep(0.5)
        time.sleep(5)  # the job runner and its consumers start after the server
        tree = _tree(proc.pid)
        assert len(tree) >= 2, tree
        proc.send_signal(sig)
        proc.wait(timeout=60)
        deadline = time.time() + 30
        while (_alive(tree) or not _port_is_free(port)) and time.time() < deadline:
            time.sleep(0.2)
        assert not _alive(tree), f"left running: {_alive(tree)}"
        assert _port_is_free(port)
    finally:
        for p in _alive(_tree(proc.pid)):
            os.kill(p, signal.SIGKILL)
        proc.kill()


# ---------------------------------------------------------------- item 2: an unreachable server, any command

DOWN = "http://127.0.0.1:9"  # the discard port: nothing listens, the connection is refused at once
SPACE = "fedavg:\n  federation.batch_size: [16, 32]\n"


@pytest.mark.parametrize("argv,via_env", [
    (["table", "--experiment", "x"], True),
    (["compare", "--experiment", "x", "--no-log"], True),
    (["runs", "--stale"], True),
    (["evaluate", "0123456789abcdef"], True),
    (["ui", "--port", "0"], True),
    (["reproduce", "dapfl", "table3_digits", "--scale", "smoke", "--methods", "FedAvg",
      "--cells", "digits_k20_low"], True),
    (["sweep", QS, "--seeds", "0", f"tracking.uri={DOWN}"], False),
    (["tune", QS, "--space", "s.yaml", "--storage", "sqlite:///o.db", f"tracking.uri={DOWN}"], False),
])
def test_unreachable_tracking_server_is_one_line(tmp_path, capsys, monkeypatch, argv, via_env):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(SPACE)
    if via_env:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", DOWN)
    else:
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, (rc, err)
    key = "$MLFLOW_TRACKING_URI" if via_env else "tracking.uri"
    assert err[0].startswith(f"flplat: error: {key}='{DOWN}' is unreachable ("), err
    assert not (tmp_path / "mlruns" / "mlflow.db").exists()


def test_unreachable_database_server_is_probed(monkeypatch):
    from flplat.errors import ConfigError
    from flplat.tracking.store import check_reachable

    with pytest.raises(ConfigError, match=r"tracking.uri='postgresql\+psycopg2://u@127.0.0.1:9/db' is unreachable"):
        check_reachable("postgresql+psycopg2://u@127.0.0.1:9/db", "tracking.uri", timeout=2)
    with socket.socket() as s:  # a listening port counts as reachable
        s.bind(("127.0.0.1", 0))
        s.listen()
        check_reachable(f"mysql://u@127.0.0.1:{s.getsockname()[1]}/db", "tracking.uri", timeout=2)
    check_reachable("sqlite:////nowhere/x.db")  # a file: not probed


# ---------------------------------------------------------------- item 3: a run whose process is gone is dead

def _run(tags: dict, status: str = "RUNNING", beat_age: float = 1.0):
    from types import SimpleNamespace

    from flplat.tracking.heartbeat import HEARTBEAT_TAG

    return SimpleNamespace(info=SimpleNamespace(status=status, start_time=time.time() * 1000, run_id="r"),
                           data=SimpleNamespace(tags={HEARTBEAT_TAG: str(time.time() - beat_age), **tags}))


def test_process_gone_on_this_host_makes_a_run_dead_at_once():
    from flplat.tracking.heartbeat import PID_START_TAG, is_stale, process_gone, process_tags
    from flplat.tracking.resume import interrupted

    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    mine = process_tags(ended.pid)  # recorded while it lives
    ended.wait()
    assert process_gone(_run(mine)) and is_stale(_run(mine)) and interrupted(_run(mine))
    parent = process_tags(os.getppid())  # a living process: the heartbeat decides
    assert not process_gone(_run(parent)) and not is_stale(_run(parent))
    assert is_stale(_run(parent, beat_age=3600))
    reused = {**parent, PID_START_TAG: str(int(parent[PID_START_TAG]) + 1)}  # its pid now held by another process
    assert process_gone(_run(reused)) and is_stale(_run(reused))
    elsewhere = {**mine, "flplat.host_id": "another-host|boot|pid:[1]"}  # another machine: heartbeat rule only
    assert not process_gone(_run(elsewhere)) and not is_stale(_run(elsewhere))
    assert not is_stale(_run({}))  # runs from before these tags: heartbeat rule only
    assert not is_stale(_run(mine, status="FINISHED"))


# ---------------------------------------------------------------- items 5 and 6: Ctrl-C always ends a run

def _interrupted_run(tmp_path, tiny_cfg, callback, rounds=6):
    """Run the tiny federation tracked in a temporary store with flplat's handlers and ``callback``; returns the
    exception that ended it, the rounds done and the MLflow run's status."""
    from mlflow.tracking import MlflowClient

    from flplat.cli.signals import install
    from flplat.experiment import run

    cfg = tiny_cfg(**{"federation.rounds": rounds, "tracking.enabled": "true",
                      "tracking.store_dir": str(tmp_path / "mlruns"), "tracking.plots": "false"})
    restore = install()
    try:
        with pytest.raises(KeyboardInterrupt) as e:
            run(cfg, callbacks=[callback], progress=False)
    finally:
        restore()
    c = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    (r,) = c.search_runs([x.experiment_id for x in c.search_experiments()])
    return e.value, callback.rounds, r.info.status


class _Swallow:
    """A library that swallows the KeyboardInterrupt of a Ctrl-C that came while it ran (round 1)."""

    def __init__(self):
        self.rounds = 0

    def on_start(self, start):
        pass

    def on_round_end(self, end):
        self.rounds = t = end.round
        if t == 1:
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)  # the handler raises here
            except KeyboardInterrupt:
                pass

    def on_end(self, end):
        pass


def test_swallowed_ctrl_c_still_ends_the_run(tmp_path, tiny_cfg):
    _, rounds, status = _interrupted_run(tmp_path, tiny_cfg, _Swallow())
    assert rounds == 1 and status == "KILLED"  # it ended at the next round, not after round 6


class _CtrlCAtStart(_Swallow):
    def on_start(self, start):  # after the MLflow run was created (the tracker starts first)
        raise KeyboardInterrupt


def test_ctrl_c_while_the_run_starts_ends_it_killed(tmp_path, tiny_cfg):
    _, rounds, status = _interrupted_run(tmp_path, tiny_cfg, _CtrlCAtStart())
    assert rounds == 0 and status == "KILLED"  # not left RUNNING


PROBE = r"""
import hashlib, signal, sys, threading, time
from flplat.cli.signals import install
install()
mode = sys.argv[1]
if mode == "c-call":  # the main thread inside a long C call: the handler cannot run before it returns
    print("ready", flush=True)
    hashlib.pbkdf2_hmac("sha256", b"x", b"y", 10**9)
elif mode == "cleanup":  # the first Ctrl-C's cleanup blocks, and would swallow another KeyboardInterrupt
    try:
        print("ready", flush=True)
        time.sleep(60)
    finally:
        for _ in range(600):
            try:
                time.sleep(0.1)
            except KeyboardInterrupt:
                pass
elif mode == "thread":  # the signal goes to another thread while the main one waits on a lock
    lock = threading.Lock()
    lock.acquire()
    def other():
        print("ready", flush=True)
        time.sleep(0.3)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        time.sleep(60)
    threading.Thread(target=other, daemon=True).start()
    try:
        lock.acquire()
    except KeyboardInterrupt:
        sys.exit(130)
"""


@pytest.mark.parametrize("mode,signals,rcs", [("c-call", 2, (130,)), ("cleanup", 2, (-2, 130)),
                                              ("thread", 0, (130,))])
def test_ctrl_c_ends_a_stuck_process(mode, signals, rcs):
    p = subprocess.Popen([sys.executable, "-c", PROBE, mode], env=ENV, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        for _ in range(signals):
            time.sleep(0.3)
            p.send_signal(signal.SIGINT)
        assert p.wait(timeout=20) in rcs
    finally:
        p.kill()


@pytest.mark.slow
def test_sigint_at_many_points_of_a_run_always_ends_it():
    """tools/scripts/sigint_stress.py: SIGINT at start-up, mid-round, during the tracking writes; each run ends
    (exit 130) within 40 s and is KILLED in the store (or was not created yet)."""
    for args in (["--delays", "0.5,2,4,6,8"], ["--after-round", "1", "--delays", "0,0.03,0.06,0.1,0.15,0.2,0.3"]):
        p = subprocess.run([sys.executable, str(REPO / "tools/scripts/sigint_stress.py"), "--limit", "40", *args],
                           env=ENV, capture_output=True, text=True, timeout=1200)
        assert p.returncode == 0, p.stdout + p.stderr


def test_tau_search_reports_its_progress():
    import numpy as np

    from flplat.maths.clustering import silhouette_kmeans

    X = np.random.default_rng(0).normal(size=(30, 3))
    calls = []
    res = silhouette_kmeans(X, k_max=12, n_init=1, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(n, 11) for n in range(1, 12)]  # j = 2..12: one call per candidate, the last says done
    same = silhouette_kmeans(X, k_max=12, n_init=1)
    assert res.k == same.k and res.scores == same.scores  # the result does not depend on it


FORK_PROBE = r"""
import os, signal, sys, time
from flplat.cli.signals import install
install()
kids = []
for _ in range(3):  # like a grid's forked workers: the terminal's Ctrl-C reaches them too
    pid = os.fork()
    if pid == 0:
        try:
            time.sleep(30)
        except KeyboardInterrupt:
            pass
        os._exit(0)
    kids.append(pid)
print("ready", flush=True)
try:
    time.sleep(30)
except KeyboardInterrupt:
    time.sleep(1.5)  # the first Ctrl-C's cleanup: not cut short by the workers' signals
    for k in kids:
        os.waitpid(k, 0)
    print("cleaned up", flush=True)
    sys.exit(130)
"""


def test_workers_ctrl_c_is_not_a_second_one():
    p = subprocess.Popen([sys.executable, "-c", FORK_PROBE], env=ENV, stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        os.killpg(p.pid, signal.SIGINT)  # the terminal's Ctrl-C: to the whole process group
        out, _ = p.communicate(timeout=20)
        assert p.returncode == 130 and "cleaned up" in out
    finally:
        p.kill()
