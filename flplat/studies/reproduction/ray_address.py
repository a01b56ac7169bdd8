"""``--address`` of a Ray cluster, checked before anything runs: one short TCP probe of the address Ray will dial.

``ray.init(address=...)`` on a cluster that does not answer retries for minutes (measured with Ray 2.60 and nothing
listening on 127.0.0.1:6399: still retrying after 120 s) and then ends in a 20-line ``ConnectionError``; the
tracking store has the same problem and gets a one-line error after one probe
(:func:`flplat.tracking.store.check_reachable`). :func:`check_cluster` does the same for the cluster, before any
MLflow run exists: a TCP connection to the GCS (``HOST:PORT``) or Ray Client server (``ray://HOST:PORT``, default
port 10001) within :data:`~flplat.tracking.store.PROBE_TIMEOUT_S`, else a :class:`~flplat.errors.ConfigError`
naming the address and what to try (``ray status`` on the head, ``--address auto`` there, the ``HEAD_IP:PORT``
that ``ray start --head`` printed).

The address probed is the one Ray dials, not the one written: Ray replaces a loopback host (``127.0.0.1``,
``localhost``) by this machine's IP (``ray._private.services.canonicalize_bootstrap_address``), so a head started
with ``--node-ip-address=127.0.0.1`` listens where ``--address 127.0.0.1:PORT`` never arrives (``--address auto``
finds it through the address file ``ray start`` wrote). ``auto`` is resolved the same way ($RAY_ADDRESS, the
address file of the last ``ray start``, a running GCS process); Ray's own resolution is used where it can be
imported, else the address as written.
"""

from __future__ import annotations

import socket

from flplat.errors import ConfigError
from flplat.tracking.store import PROBE_TIMEOUT_S

CLIENT_PORT = 10001  # Ray Client's default port (ray://HOST)
TRY = ("try `ray status` on the head, `--address auto` on the head's machine, or the address `ray start --head` "
       "printed (HEAD_IP:6379, the head's own IP)")


def dialled(address: str) -> tuple[str, int]:
    """``(host, port)`` that ``ray.init(address=address)`` connects to (see the module docstring)."""
    if address.startswith("ray://"):
        host, _, port = address[len("ray://"):].partition("/")[0].rpartition(":")
        return (host, int(port)) if host else (port, CLIENT_PORT)
    canonical = None if address == "auto" else address  # without Ray's resolution: the address as written
    try:
        from ray._private.services import canonicalize_bootstrap_address

        canonical = canonicalize_bootstrap_address(address)
    except ConnectionError:  # "auto" and no cluster to be found from this machine
        canonical = None
    except ValueError:
        raise
    except Exception:  # another Ray layout (ImportError, a changed signature): keep the address as written
        pass
    if canonical is None:
        raise ConfigError(f"--address={address}: no running Ray cluster found from this machine ($RAY_ADDRESS "
                          "unset, no `ray start --head` here); try `ray status`, start a head with `ray start "
                          "--head`, or give the address it printed (--address HEAD_IP:6379)")
    host, _, port = canonical.rpartition(":")
    return host.strip("[]"), int(port)


def _answers(host: str, port: int, timeout: float) -> str | None:
    """None when ``host:port`` accepts a TCP connection within ``timeout`` s, else why not."""
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as e:
        return e.strerror or str(e) or type(e).__name__
    return None


def check_cluster(address: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """A one-line :class:`ConfigError` (exit 2) when the Ray cluster at ``address`` (``--address``) does not accept
    a connection within ``timeout`` s where Ray will dial it."""
    try:
        host, port = dialled(address)
    except ValueError:
        raise ConfigError(f"--address={address}: not a Ray address; allowed: HOST:PORT (the GCS, e.g. "
                          "HEAD_IP:6379), ray://HOST:10001 or auto") from None
    why = _answers(host, port, timeout)
    if why is None:
        return
    written = address.partition("://")[2] if "://" in address else address
    literal = written.rpartition(":")[0].strip("[]") if ":" in written else None
    note = ""
    if literal is not None and literal != host:  # Ray rewrote a loopback host
        note = f" (Ray dials {host}:{port}: it replaces a loopback host by this machine's IP)"
        if _answers(literal, port, timeout) is None:
            note += (f"; something listens on {written} itself: a head started with --node-ip-address=127.0.0.1 "
                     "is reached with --address auto")
    raise ConfigError(f"--address={address}: no Ray cluster answers at {host}:{port} ({why}){note}; {TRY}")
