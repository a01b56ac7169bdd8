"""Where a run's records live: the MLflow store (:func:`store_uris`, :func:`open_client`) and the checkpoints beside
it (:func:`checkpoint_dir`).

Store: ``tracking.uri`` if set, else ``$MLFLOW_TRACKING_URI``, else a SQLite database ``<store_dir>/mlflow.db``
with artifacts under ``<store_dir>/artifacts`` (MLflow >= 3.13 refuses the plain file store without an opt-in;
SQLite keeps everything inside ``mlruns/``). ``flplat ui`` opens that store. A new SQLite store is created under a
file lock (:func:`open_client`), so concurrent first runs do not break it. Light on purpose (no torch, MLflow only
when a client is opened): the CLI's store commands import it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

SQLITE_NAME = "mlflow.db"


def store_uris(uri: str | None, store_dir: str = "mlruns", artifact_root: str | None = None
               ) -> tuple[str, str | None]:
    """(tracking URI, artifact location for new experiments or None to let the server decide).

    Artifacts go to ``artifact_root`` (``tracking.artifact_root``) when given, else beside the store: a SQLite
    store's artifacts in ``artifacts/`` next to its database file (also for ``MLFLOW_TRACKING_URI`` =
    ``sqlite:////elsewhere/mlflow.db``, where MLflow alone would use ``./mlruns`` of the current directory); a
    server (http, databricks, ...) decides itself."""
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        if artifact_root:
            return uri, Path(artifact_root).resolve().as_uri()
        if uri.startswith("sqlite:///"):
            return uri, (Path(uri[len("sqlite:///"):]).resolve().parent / "artifacts").as_uri()
        return uri, None
    if artifact_root:
        root = Path(store_dir).resolve()
        root.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{root / SQLITE_NAME}", Path(artifact_root).resolve().as_uri()
    root = Path(store_dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{root / SQLITE_NAME}", (root / "artifacts").as_uri()


PROBE_TIMEOUT_S = 5.0  # a server that does not answer within this is unreachable (MLflow alone retries ~4 min)
DB_PORTS = {"postgresql": 5432, "postgres": 5432, "mysql": 3306, "mariadb": 3306, "mssql": 1433}


def uri_key(uri: str | None) -> str:
    """The name a one-line error gives the store: ``tracking.uri`` when set in the config, else
    ``$MLFLOW_TRACKING_URI`` when that is set, else ``tracking.store_dir`` (the SQLite store)."""
    return "tracking.uri" if uri else ("$MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI")
                                       else "tracking.store_dir")


def check_reachable(uri: str, key: str = "tracking.uri", timeout: float = PROBE_TIMEOUT_S) -> None:
    """Raise a one-line :class:`~flplat.errors.ConfigError` when the store at ``uri`` does not answer, after one
    short probe (MLflow alone retries an unreachable server for minutes, then prints a long traceback): an
    ``http(s)://`` server its ``/health`` page (any HTTP answer counts: a proxy, an older server), a database
    server (``postgresql://``, ``mysql://``, ``mssql://``, with or without ``+driver``) a TCP connection to its
    host and port. SQLite and other stores are not probed (a local file: its errors are the file's own)."""
    from flplat.errors import ConfigError

    allowed = "allowed: a running MLflow server, a sqlite:///PATH, or unset for ./mlruns"
    if uri.startswith(("http://", "https://")):
        import urllib.error
        import urllib.request

        try:
            urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout).close()
        except urllib.error.HTTPError:
            return  # it answers (a proxy or an older server without /health): let MLflow talk to it
        except (urllib.error.URLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", e)
            raise ConfigError(f"{key}={uri!r} is unreachable ({reason}); {allowed}") from None
        return
    from urllib.parse import urlsplit

    scheme = uri.split(":", 1)[0].split("+", 1)[0].lower()
    if scheme not in DB_PORTS:
        return
    try:
        parts = urlsplit(uri)
        host, port = parts.hostname, parts.port or DB_PORTS[scheme]
    except ValueError as e:
        raise ConfigError(f"{key}={uri!r} is not a valid database URL ({e}); {allowed}") from None
    if not host:  # a local socket (postgresql:///db): nothing to probe by TCP
        return
    import socket

    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as e:
        raise ConfigError(f"{key}={uri!r} is unreachable ({host}:{port}: {e.strerror or e}); allowed: a database "
                          "server that accepts connections, a sqlite:///PATH, or unset for ./mlruns") from None


def reachable_uri(uri: str | None = None, store_dir: str = "mlruns") -> str:
    """:func:`store_uris`' tracking URI after :func:`check_reachable`: what every command that opens the store
    (``table``, ``compare``, ``runs``, ``evaluate``, ``ui``, ``reproduce``, ``run --resume``) calls first."""
    resolved, _ = store_uris(uri, store_dir)
    check_reachable(resolved, uri_key(uri))
    return resolved


@contextlib.contextmanager
def _file_lock(path: Path):
    """An exclusive advisory lock on ``path`` (POSIX ``flock``; elsewhere no lock)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def open_client(uri: str):
    """An ``MlflowClient`` on ``uri`` whose store exists. A new SQLite store is created (tables, migrations) under
    a file lock beside the database, so several runs started together on a store that does not exist yet do not
    race in MLflow's table creation (which can leave the store broken: "table _alembic_tmp_tags already
    exists")."""
    from mlflow.tracking import MlflowClient

    if not uri.startswith("sqlite:///"):
        return MlflowClient(tracking_uri=uri)
    db = Path(uri[len("sqlite:///"):])
    with _file_lock(db.with_name(db.name + ".lock")):
        client = MlflowClient(tracking_uri=uri)
        client.search_experiments(max_results=1)  # creates / upgrades the tables, one process at a time
    return client


def checkpoint_dir(tracking_cfg) -> Path:
    """Where a run's checkpoints live: ``tracking.checkpoint_dir``, else beside the store: ``<dir of the SQLite
    file>/checkpoints`` for a ``sqlite:///`` URI (``tracking.uri`` or ``$MLFLOW_TRACKING_URI``), else
    ``<tracking.store_dir>/checkpoints`` (also for a remote server: checkpoints stay on this machine)."""
    if tracking_cfg.checkpoint_dir:
        return Path(tracking_cfg.checkpoint_dir)
    uri = tracking_cfg.uri or os.environ.get("MLFLOW_TRACKING_URI") or ""
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///"):]).parent / "checkpoints"
    return Path(tracking_cfg.store_dir) / "checkpoints"


def checkpoint_path(tracking_cfg, run_id: str) -> Path:
    return checkpoint_dir(tracking_cfg) / f"{run_id}.pt"

