"""Ctrl-C and SIGTERM always end a command, promptly, whatever the main thread is doing.

Python runs a signal handler only in the main thread, between two bytecodes. A signal can therefore be lost or wait:

* **swallowed**: the :class:`KeyboardInterrupt` is raised inside a finaliser, a weakref callback or a library's
  ``except BaseException`` and never reaches the round loop. The handler records the signal
  (:data:`flplat.errors.STOP_SIGNALS`) and the round loop raises it again at its next round or client
  (:func:`flplat.errors.raise_if_stopped`);
* **stuck**: the main thread is blocked in a C call (a long tensor operation, a lock another thread holds, a
  database's busy wait), or the kernel delivered the signal to another thread, whose blocking call it interrupted
  instead of the main thread's. A watcher thread reads the signal's byte from Python's wakeup file descriptor (written
  by the C-level handler at once, whichever thread got it): if the handler has not run after
  :data:`POKE_AFTER_S`, it sends the signal again to the main thread itself (``pthread_kill``), which interrupts its
  blocking call;
* **a second Ctrl-C / SIGTERM ends the process at once**: the first one restores the default action of both (the
  kernel ends the process on the next), and the watcher ends it (``os._exit(128 + signal)``) when the main thread
  never got to run the first one's handler.

A run ended by a second signal stays RUNNING in the store: its process is gone on this machine, so it is resumed at
once (:func:`flplat.tracking.heartbeat.process_gone`).
"""

from __future__ import annotations

import os
import signal
import threading

from flplat.errors import STOP_SIGNALS, Terminated

POKE_AFTER_S = 1.0  # the main thread has not run the handler this long after the signal: signal it directly
STOP = (signal.SIGINT, signal.SIGTERM)
# the poke: a signal of our own with a handler that does nothing (interrupting the blocking call is its whole job;
# then Python runs the pending SIGINT / SIGTERM handler); never SIGINT again, which after the first handler ran
# would end the process
POKE = getattr(signal, "SIGRTMIN", None)
POKE = POKE + 3 if POKE is not None else getattr(signal, "SIGUSR2", None)


def _handler(signum, frame):
    STOP_SIGNALS.append(signum)
    for s in STOP:  # the next SIGINT or SIGTERM: the kernel's default action (the process ends at once)
        signal.signal(s, signal.SIG_DFL)
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _watch(fd: int, main_ident: int) -> None:
    import select

    seen: list[int] = []
    poked = False
    try:
        while True:
            ready, _, _ = select.select([fd], [], [], POKE_AFTER_S if seen and not poked else None)
            if ready:
                data = os.read(fd, 64)
                if not data:  # closed: the command ended
                    return
                seen += [b for b in data if b in STOP]
                if len(seen) >= 2:  # a second Ctrl-C / SIGTERM while the first's handler could not run
                    try:
                        os.write(2, f"flplat: {signal.Signals(seen[-1]).name} again: ending now\n".encode())
                    finally:
                        os._exit(128 + seen[-1])
            elif seen and not STOP_SIGNALS and not poked and POKE is not None:  # the handler has not run
                poked = True
                signal.pthread_kill(main_ident, POKE)
    except OSError:
        return
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


def _forked_child() -> None:
    """A forked process (a grid's worker, a data loader's) must not write its signals into the parent's wakeup pipe:
    the terminal's Ctrl-C reaches every process of the group, and the parent's watcher would count each worker's as
    a second Ctrl-C."""
    try:
        signal.set_wakeup_fd(-1)
    except (ValueError, OSError):
        pass


_AT_FORK = []


def install():
    """Install the handlers (main thread only); returns a function that puts back what was there."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    STOP_SIGNALS.clear()
    previous = {s: signal.signal(s, _handler) for s in STOP}
    if POKE is not None:
        previous[POKE] = signal.signal(POKE, lambda signum, frame: None)
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except ValueError:  # (not the main thread of the main interpreter)
        old_fd = None
        os.close(r)
        os.close(w)
    else:
        if not _AT_FORK and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_forked_child)
            _AT_FORK.append(True)
        threading.Thread(target=_watch, args=(r, threading.main_thread().ident), name="flplat-signals",
                         daemon=True).start()

    def restore() -> None:
        for s, h in previous.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
        if old_fd is not None:
            signal.set_wakeup_fd(old_fd)
            os.close(w)  # the watcher reads EOF and ends (it closes nothing itself: r stays with it until then)
        STOP_SIGNALS.clear()

    return restore
