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

