"""A long-lived server started by a command (`flplat ui`'s MLflow server) that never outlives it.

`mlflow ui` starts a uvicorn server, a job runner and its huey consumers; a signal to `mlflow ui` alone (or to a
flplat that replaced itself by it) leaves those running, with the port taken. :func:`serve` therefore

* starts the server in a **session and process group of its own** (``start_new_session``): the terminal's Ctrl-C
  reaches flplat only, and flplat stops the whole group on SIGINT, SIGTERM and SIGHUP (SIGTERM, then SIGKILL after
  ``grace_s``; a second signal meanwhile: SIGKILL at once), and every descendant that left the group
  (:func:`descendants`, e.g. MLflow's jobs started with ``start_new_session``);
* gives the server a **parent-death signal** on Linux (``prctl(PR_SET_PDEATHSIG, SIGTERM)`` in its
  ``preexec_fn``): if flplat dies, even by SIGKILL, the kernel sends SIGTERM to the server;
* starts a **watchdog** (:func:`watch`, a small Python process in its own session) holding the read end of a pipe
  whose write end only flplat holds: when flplat ends in any way, the kernel closes it, the watchdog reads EOF
  and stops the group and the descendants it last saw (it looks every second while flplat lives), so the server's
  own children (which the parent-death signal does not reach) go too, within ``grace_s`` + about a second.

Only the standard library: the watchdog imports this module alone.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from flplat.tracking.heartbeat import proc_stat

SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


def descendants(root: int) -> dict[int, int]:
    """Every living descendant of ``root`` (pid -> start time), found by walking ``/proc`` (zombies excluded)."""
    children: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return {}
    for pid in pids:
        st = proc_stat(pid)
        if st is not None and st[3] != "Z":
            children.setdefault(st[0], []).append(pid)
            starts[pid] = st[2]
    out, todo = {}, [root]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out[c] = starts[c]
                todo.append(c)
    return out


def _alive(pid: int, start: int | None = None) -> bool:
    st = proc_stat(pid)
    return st is not None and st[3] != "Z" and (start is None or st[2] == start)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # the group exists; zombies awaiting their parent count as gone
    try:
        return any(st is not None and st[1] == pgid and st[3] != "Z"
                   for st in (proc_stat(int(p)) for p in os.listdir("/proc") if p.isdigit()))
    except OSError:
        return True


def _send(pgid: int, procs: dict[int, int], sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for pid, start in procs.items():
        if _alive(pid, start):  # (the start time: never a pid reused by another process)
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def stop(pgid: int, procs: dict[int, int], grace_s: float, reap=None, hurry=None) -> None:
    """SIGTERM to the process group ``pgid`` and to ``procs`` (pid -> start time: descendants that may have left
    it), then SIGKILL to what is left after ``grace_s`` (or as soon as ``hurry()`` says so: a second signal).
    ``reap()`` collects the server's exit status on the way (it is the caller's child)."""
    _send(pgid, procs, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and not (hurry and hurry()):
        if reap:
            reap()
        if not _group_alive(pgid) and not any(_alive(p, s) for p, s in procs.items()):
            return
        time.sleep(0.05)
    _send(pgid, procs, signal.SIGKILL)
    if reap:
        reap()


def _pdeathsig(parent: int):
    """A ``preexec_fn``: ask the kernel for SIGTERM when the parent dies (Linux ``PR_SET_PDEATHSIG``), and end at
    once when it already died between the fork and this call."""
    def set_it() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [getattr(signal, s) for s in SIGNALS])  # (see serve)
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):  # not Linux: the watchdog alone
            return
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)
    return set_it


def watch(pgid: int, root: int, grace_s: float) -> None:
    """The watchdog: until EOF on stdin (the process that started it ended), note the server's descendants every
    second; then stop the group and those (:func:`stop`)."""
    import select

    seen: dict[int, int] = {}
    fd = sys.stdin.fileno()
    while True:
        now = descendants(root)
        if _alive(root):
            now[root] = proc_stat(root)[2]
        seen = {**{p: s for p, s in seen.items() if _alive(p, s)}, **now}
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready and not os.read(fd, 4096):
            break
    if _group_alive(pgid) or any(_alive(p, s) for p, s in seen.items()):
        stop(pgid, seen, grace_s)


class _Stop(Exception):
    def __init__(self, signum: int):
        self.signum = signum


def serve(cmd: list[str], grace_s: float = 10.0, say=None) -> int:
    """Run ``cmd`` (a server) until it ends or flplat gets SIGINT / SIGTERM / SIGHUP, then stop its whole process
    group and descendants; returns the server's exit status, or 128 + the signal's number (130, 143, 129)."""
    import subprocess

    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    received: list[int] = []

    def on_signal(signum, frame):
        received.append(signum)
        if len(received) == 1:
            raise _Stop(signum)

    previous = {s: signal.signal(getattr(signal, s), on_signal) for s in SIGNALS if hasattr(signal, s)}
    proc = watchdog = None
    w = -1
    sigs = [getattr(signal, s) for s in SIGNALS]
    try:
        # the signals wait (blocked) until the server and its watchdog exist and are known here: a signal that came
        # between the fork and `proc = ...` would otherwise leave a server nobody stops
        signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
        try:
            proc = subprocess.Popen(cmd, start_new_session=True, preexec_fn=_pdeathsig(os.getpid()))
            r, w = os.pipe()  # (only the watchdog gets the read end; flplat alone holds the write end)
            root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            code = (f"import sys; sys.path.insert(0, {root!r}); from flplat.cli.server import watch; "
                    f"watch({proc.pid}, {proc.pid}, {float(grace_s)!r})")
            watchdog = subprocess.Popen([sys.executable, "-c", code], stdin=r, start_new_session=True,
                                        stdout=subprocess.DEVNULL,
                                        preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_UNBLOCK, sigs))
            os.close(r)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, sigs)  # a signal that came meanwhile is handled here
        rc = proc.wait()
    except _Stop as e:
        rc = 128 + e.signum
        say(f"flplat: {signal.Signals(e.signum).name}: stopping the server (process group {proc.pid if proc else '-'})")
    finally:
        if proc is not None:
            tree = descendants(proc.pid)
            stop(proc.pid, tree, grace_s, reap=proc.poll, hurry=lambda: len(received) > 1)
        if w >= 0:
            os.close(w)  # the watchdog reads EOF, finds nothing left and ends
        if watchdog is not None:
            try:
                watchdog.wait(timeout=grace_s + 5)
            except subprocess.TimeoutExpired:
                watchdog.kill()
        for s, h in previous.items():
            signal.signal(getattr(signal, s), h)
    return rc
