"""Liveness of runs: a heartbeat tag refreshed by a thread, and the one rule that says when a RUNNING run is dead.

A run killed outright (SIGKILL, power cut, lost node) stays RUNNING in the store; only its heartbeat tag
(``flplat.heartbeat``, unix time) stops. It counts as **stale** once that heartbeat is older than

    tracking.stale_beats × tracking.heartbeat_s + tracking.stale_margin_s      (default 3 × 30 s + 60 s = 150 s)

(:func:`stale_after_s`): a few missed beats, plus a margin for a slow or locked store and clocks that differ between
machines -- or at once, when the process that owns the run is gone on this machine (:func:`process_gone`: the run
records its host, pid and the process's start time, tags ``flplat.host``, ``flplat.host_id``, ``flplat.pid``,
``flplat.pid_start``; a process found on another machine keeps the heartbeat rule). The run writes its own
threshold in the tag ``flplat.stale_after_s`` when its heartbeat starts, and every check reads it from there
(:func:`stale_after`; runs older than that tag: the rule on their ``flplat.heartbeat_s`` tag with the default beats
and margin). All the places that judge a run by its heartbeat use this rule:
``flplat runs --stale``, ``flplat run --resume`` (refused while the run is not stale, unless ``--force``), the
studies' resume of their interrupted runs (:mod:`flplat.tracking.resume`) and the grace period of Optuna's trial
heartbeat (:func:`optuna_heartbeat`, :func:`flplat.studies.tuning.make_storage`).

Light on purpose (no torch, no MLflow import): the CLI imports it.
"""

from __future__ import annotations

import math
import os
import time

from flplat.config import TrackingConfig

HEARTBEAT_TAG = "flplat.heartbeat"  # unix time (s) of the last sign of life of a RUNNING run
HEARTBEAT_INTERVAL_TAG = "flplat.heartbeat_s"
STALE_AFTER_TAG = "flplat.stale_after_s"  # the run's own threshold (stale_after_s of its config)

HOST_TAG = "flplat.host"  # the host name of the process that owns the run (for people)
HOST_ID_TAG = "flplat.host_id"  # host name, boot id and pid namespace: the same machine (and pid space) or not
PID_TAG = "flplat.pid"
PID_START_TAG = "flplat.pid_start"  # the process's start time, clock ticks since boot (/proc/<pid>/stat field 22)

_DEFAULTS = TrackingConfig()
DEFAULT_HEARTBEAT_S = float(_DEFAULTS.heartbeat_s)
DEFAULT_STALE_BEATS = int(_DEFAULTS.stale_beats)
DEFAULT_STALE_MARGIN_S = float(_DEFAULTS.stale_margin_s)


def stale_after_s(heartbeat_s: float = DEFAULT_HEARTBEAT_S, beats: int = DEFAULT_STALE_BEATS,
                  margin_s: float = DEFAULT_STALE_MARGIN_S) -> float:
    """THE rule: the heartbeat age (s) beyond which a RUNNING run counts as dead."""
    return beats * float(heartbeat_s) + float(margin_s)


def config_stale_after_s(tracking_cfg) -> float:
    """:func:`stale_after_s` of a ``tracking`` config section."""
    return stale_after_s(tracking_cfg.heartbeat_s, tracking_cfg.stale_beats, tracking_cfg.stale_margin_s)


def optuna_heartbeat(tracking_cfg=None) -> tuple[int, int]:
    """(heartbeat_interval, grace_period) of Optuna's RDB storage: the runs' heartbeat and :func:`stale_after_s`,
    rounded up to whole seconds (Optuna takes integers); ``None``: the defaults."""
    cfg = tracking_cfg if tracking_cfg is not None else _DEFAULTS
    interval = max(1, math.ceil(float(cfg.heartbeat_s)))
    return interval, math.ceil(stale_after_s(interval, cfg.stale_beats, cfg.stale_margin_s))


def proc_stat(pid: int) -> tuple[int, int, int, str] | None:
    """(parent pid, process group, start time in clock ticks since boot, state) from ``/proc/<pid>/stat``
    (fields 4, 5, 22 and 3), or None when the process does not exist (or on a system without /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode(errors="replace")
    except OSError:
        return None
    rest = raw[raw.rfind(")") + 2:].split()  # the name (field 2) may hold spaces and parentheses
    return int(rest[1]), int(rest[2]), int(rest[19]), rest[0]


def process_start(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot, field 22 of ``/proc/<pid>/stat``): with the pid,
    it names one process (a pid is reused, never with the same start time). None when there is no such living
    process (a zombie counts as ended) or no ``/proc``."""
    st = proc_stat(pid)
    return None if st is None or st[3] in ("Z", "X") else st[2]


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return ""


def host_id() -> str:
    """This machine and pid space: host name, boot id (a reboot is another machine: every pid is new) and pid
    namespace (two containers with one host name do not see each other's pids)."""
    import socket

    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        ns = ""
    return f"{socket.gethostname()}|{_read('/proc/sys/kernel/random/boot_id')}|{ns}"


def process_tags(pid: int | None = None) -> dict[str, str]:
    """The tags that say which process owns a run: this one (or ``pid``) on this machine."""
    import socket

    pid = os.getpid() if pid is None else pid
    start = process_start(pid)
    return {HOST_TAG: socket.gethostname(), HOST_ID_TAG: host_id(), PID_TAG: str(pid),
            PID_START_TAG: "" if start is None else str(start)}


def process_gone(run) -> bool:
    """The process that owns this run (:func:`process_tags`) ran on this machine and is gone: its pid is absent, or
    held by another process (another start time). False when the run has no such tags (older runs), or ran on
    another machine (or before a reboot, or in another pid namespace): there only the heartbeat tells."""
    tags = run.data.tags
    if PID_TAG not in tags or tags.get(HOST_ID_TAG) != host_id():
        return False
    try:
        pid = int(tags[PID_TAG])
    except ValueError:
        return False
    if pid == os.getpid():
        return False
    start = process_start(pid)
    if start is None:
        if os.path.isdir("/proc"):
            return True
        try:  # no /proc: whether the pid exists at all
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False
    recorded = tags.get(PID_START_TAG, "")
    return bool(recorded) and recorded != str(start)


class Heartbeat:
    """A daemon thread refreshing the heartbeat tag of a run (and of its parent: a sweep or study parent then
    looks alive exactly while one of its children does) every ``interval`` seconds, whatever a round's length.
    A SIGKILL or a power cut stops it, so a RUNNING run whose heartbeat is older than ``stale_after`` (default:
    :func:`stale_after_s` of ``interval``; written once as the tag ``flplat.stale_after_s``) is stale
    (:func:`stale_runs`)."""

    def __init__(self, client, run_ids: list[str], interval: float, stale_after: float | None = None):
        import threading

        self.client, self.run_ids, self.interval = client, [r for r in run_ids if r], float(interval)
        self.stale_after = float(stale_after) if stale_after is not None else stale_after_s(self.interval)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="flplat-heartbeat", daemon=True)

    def beat(self) -> None:
        now = str(int(time.time()))
        for r in self.run_ids:
            self.client.set_tag(r, HEARTBEAT_TAG, now)
            self.client.set_tag(r, HEARTBEAT_INTERVAL_TAG, str(self.interval))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.beat()
            except Exception:  # a failing store is reported by the round's logging, not by this thread
                pass

    def start(self) -> None:
        for r in self.run_ids:
            self.client.set_tag(r, STALE_AFTER_TAG, f"{self.stale_after:g}")
        if self.run_ids:  # the run itself belongs to this process (its parent may be another's: a grid's workers)
            for k, v in process_tags().items():
                self.client.set_tag(self.run_ids[0], k, v)
        self.beat()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()


def heartbeat_age(run, now: float | None = None) -> float:
    """Seconds since the run's last heartbeat (since its start when it has none)."""
    now = time.time() if now is None else now
    beat = run.data.tags.get(HEARTBEAT_TAG)
    return now - (float(beat) if beat is not None else run.info.start_time / 1000.0)


def stale_after(run) -> float:
    """The heartbeat age beyond which this RUNNING run counts as dead: its ``flplat.stale_after_s`` tag, else
    :func:`stale_after_s` of its ``flplat.heartbeat_s`` tag (default 30 s)."""
    tags = run.data.tags
    if STALE_AFTER_TAG in tags:
        return float(tags[STALE_AFTER_TAG])
    return stale_after_s(float(tags.get(HEARTBEAT_INTERVAL_TAG, DEFAULT_HEARTBEAT_S)))


def is_stale(run, now: float | None = None) -> bool:
    """A RUNNING run that shows no sign of life: its process is gone on this machine (:func:`process_gone`), or
    its heartbeat is older than :func:`stale_after`, or it has no heartbeat at all for that long since its start
    (runs started before heartbeats existed, or parents whose children all died)."""
    return run.info.status == "RUNNING" and (process_gone(run) or heartbeat_age(run, now) > stale_after(run))


def stale_runs(client, experiment_ids: list[str], now: float | None = None) -> list:
    """The RUNNING runs of these experiments that are stale (:func:`is_stale`)."""
    runs = client.search_runs(experiment_ids, "attributes.status = 'RUNNING'", max_results=10000)
    return [r for r in runs if is_stale(r, now)]
