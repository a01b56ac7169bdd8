"""Every `flplat` command ends by itself once it has printed its result or its error.

Each command of the parser (enumerated from it: a new command fails :func:`test_every_command_has_a_case` until it
gets a case here) runs in a subprocess on tiny inputs (digits, 1 round, 4 clients, the store under tmp). A case
names the command's last output (a regex); once it is printed the process has :data:`GRACE_S` to be gone, or the
test fails naming the command. `flplat evaluate` used to print its result (or its error) and then wait forever: the
exit joined MLflow's artifact-download thread pool, whose idle workers end only in the interpreter's thread exit
hooks (:func:`flplat.cli.exit_now`).

`flplat ui` is a server: in the default suite it runs until its error (a port that is taken); the slow suite
starts the real server and sends SIGINT (Ctrl-C), after which it must end like the others."""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from conftest import REPO

GRACE_S = 20.0  # after its last output (its result or error; or SIGINT for a server) a command has this long to end
LIMIT_S = 400.0  # the whole command, on 2 shared cores
QS = str(REPO / "configs" / "quickstart.yaml")
TINY = ["federation.rounds=1", "federation.local_epochs=1", "partition.num_clients=4", "fabric.num_threads=1"]


@dataclass
class Case:
    argv: list[str]
    done: str  # regex (multiline) of the command's last output
    rc: int = 0
    sigint: bool = False  # a server: SIGINT once `done` is printed; then GRACE_S to end


def _commands() -> set[str]:
    from flplat.cli import _parser

    (sub,) = [a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return set(sub.choices)


def _cases(tmp, run_id: str, taken_port: int) -> dict[str, list[Case]]:
    """command -> its cases. ``run`` is run first (:func:`_ends`), the others read its store ``tmp/store``."""
    store = str(tmp / "store")
    space = tmp / "space.yaml"
    space.write_text("fedavg:\n  federation.optimizer.lr: [0.01]\n")
    return {
        "run": [Case(["run", QS, *TINY, f"tracking.store_dir={store}", "--no-progress"], r"^mlflow run: \w+")],
        "evaluate": [Case(["evaluate", run_id, "--store-dir", store], r"^\}$"),
                     # the error path after the saved model was downloaded
                     Case(["evaluate", run_id, "partition.alpha=-1", "--store-dir", store],
                          r"^flplat: error: partition\.alpha", rc=2)],
        "partition-stats": [Case(["partition-stats", "--clients", "4"], r"^  client +3 ")],
        "noniid-plot": [Case(["noniid-plot", "--clients", "4", "--alphas", "1", "--s-values", "0.5", "--seeds", "0",
                              "--out", str(tmp / "noniid.png")], r"^wrote ")],
        "list": [Case(["list"], r"^algorithms: ")],
        "runs": [Case(["runs", "--stale", "--store-dir", store], r"^0 stale run\(s\)")],
        "table": [Case(["table", "--experiment", "quickstart", "--store-dir", store], r"^\| fedavg \|")],
        "compare": [Case(["compare", "--experiment", "quickstart", "--store-dir", store, "--no-log", "--out",
                          str(tmp / "compare.png")], r"^wrote .*\(1 runs\)")],
        "check": [Case(["check", "fedavg", "--only", "registry,smoke"], r"^PASS  smoke")],
        "sweep": [Case(["sweep", QS, *TINY, f"tracking.store_dir={tmp / 'sweep'}", "--seeds", "0", "--jobs", "1"],
                       r"^seed=0 global_accuracy=")],
        "tune": [Case(["tune", QS, *TINY, "partition.train_fraction=0.7", "partition.val_fraction=0.1",
                       f"tracking.store_dir={tmp / 'tune'}", "--space", str(space), "--storage",
                       f"sqlite:///{tmp / 'optuna.db'}", "--n-trials", "1", "--jobs", "1"], r"^\}$")],
        "reproduce": [Case(["reproduce", "dapfl", "table3_digits", "--scale", "smoke", "--cells", "digits_k20_low",
                            "--methods", "FedAvg", "--seeds", "0", "--store-dir", str(tmp / "reproduce")],
                           r"^Claims: ")],
        "ui": [Case(["ui", "--store-dir", store, "--port", str(taken_port)], r"^flplat: error: --port=", rc=2)],
    }


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}  # each line as it is printed
    for key in ("MLFLOW_TRACKING_URI", "FLPLAT_FULL_EXIT", "FLPLAT_PLUGINS", "MLFLOW_ENABLE_ASYNC_LOGGING"):
        env.pop(key, None)
    return env


def _ends(case: Case, cwd) -> tuple[str | None, str]:
    """Run ``case``; (why it failed or None, its output). It fails when it is still alive GRACE_S after printing
    ``case.done`` (for a server: after the SIGINT sent then), prints no ``done`` within LIMIT_S, or exits with
    another status."""
    proc = subprocess.Popen([sys.executable, "-m", "flplat.cli", *case.argv], cwd=cwd, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []

    def read():
        for line in proc.stdout:
            lines.append(line)

    threading.Thread(target=read, daemon=True).start()  # (a server's children may hold the pipe after it ends)
    name = " ".join(["flplat", *case.argv])[:160]
    t0, since = time.monotonic(), None
    try:
        while proc.poll() is None:
            now = time.monotonic()
            if since is None and re.search(case.done, "".join(lines), re.M):
                since = now
                if case.sigint:
                    proc.send_signal(signal.SIGINT)
            if since is not None and now - since > GRACE_S:
                what = "the SIGINT" if case.sigint else "printing its result or error"
                return f"{name}: still running {GRACE_S:.0f} s after {what}", "".join(lines)
            if now - t0 > LIMIT_S:
                return f"{name}: no output matching {case.done!r} within {LIMIT_S:.0f} s", "".join(lines)
            time.sleep(0.1)
        time.sleep(0.2)  # the reader's last lines
        out = "".join(lines)
        if not re.search(case.done, out, re.M):
            return f"{name}: ended (status {proc.returncode}) without output matching {case.done!r}", out
        if proc.returncode != (130 if case.sigint else case.rc):
            return f"{name}: status {proc.returncode}, expected {130 if case.sigint else case.rc}", out
        return None, out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _taken_port() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def test_every_command_has_a_case(tmp_path):
    with _taken_port() as s:
        cases = _cases(tmp_path, "RUN_ID", s.getsockname()[1])
    assert set(cases) == _commands(), "give each new flplat command a case in _cases (its tiny invocation)"


def test_every_command_ends_after_its_output(tmp_path):
    """Two at a time (2 cores); ``run`` first, as the commands that read a run's store need it."""
    with _taken_port() as s:
        cases = _cases(tmp_path, "RUN_ID", s.getsockname()[1])
        (first,) = cases.pop("run")
        failed, out = _ends(first, tmp_path)
        assert failed is None, failed + "\n" + out[-3000:]
        run_id = re.search(r"^mlflow run: (\w+)", out, re.M).group(1)
        cases = _cases(tmp_path, run_id, s.getsockname()[1])
        todo = [c for name, cs in cases.items() if name != "run" for c in cs]
        with ThreadPoolExecutor(max_workers=2) as pool:
            results = list(pool.map(lambda c: _ends(c, tmp_path), todo))
    failures = [f"{why}\n{out[-1500:]}" for why, out in results if why]
    assert not failures, "\n\n".join(failures)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_ui_ends_on_ctrl_c_and_reproduce_jobs_2_ends(tmp_path):
    """The real MLflow server of `flplat ui`, stopped with SIGINT once it serves; and a grid run by worker
    processes (`reproduce --jobs 2`)."""
    cases = [Case(["ui", "--store-dir", str(tmp_path / "store"), "--port", str(_free_port())],
                  r"Uvicorn running on", sigint=True),
             Case(["reproduce", "dapfl", "table3_digits", "--scale", "smoke", "--cells", "digits_k20_low",
                   "--methods", "FedAvg", "--seeds", "0,1", "--jobs", "2", "--store-dir", str(tmp_path / "rep")],
                  r"^Claims: ")]
    failures = [f"{why}\n{out[-1500:]}" for why, out in map(lambda c: _ends(c, tmp_path), cases) if why]
    assert not failures, "\n\n".join(failures)
