"""Trained models as MLflow artifacts, and loading them back.

At the end of a finished run (``tracking.log_models=true``, the default) the callback logs under ``models/``:

* ``model.yaml`` -- the architecture: the ``model`` config section, the input shape and the number of classes
  (enough to rebuild the network with :func:`flplat.models.build_model`);
* ``global.pt`` -- the final global model, for methods that have one (``Strategy.global_weights``);
* ``clusters.pt`` -- the final cluster models ``(tau, P)`` and the client-to-cluster assignment (clustered methods);
* ``personal.pt`` -- on request (``tracking.log_personal_models=true``): the model every client uses at the
  end (``Strategy.eval_weights``), ``(K, P)`` in ``federation.client_state_dtype`` -- read row by row from the
  compact client store, so it is as large as that store.

Weights are flat vectors in the platform's layout (:class:`flplat.protocol.state.ParamLayout`: the floating-point
``state_dict`` entries in order); :func:`build_saved` rebuilds the network and copies one vector in
(:func:`flplat.tracking.runs.load_model`, public as ``flplat.load_model``, does both for a run id).
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from flplat.errors import ConfigError

MODEL_DIR = "models"
WHICH = ("global", "cluster", "personal")
PROGRESS_VAR = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"


def _save(client, run_id: str, obj: Any, name: str) -> None:
    buf = io.BytesIO()
    torch.save(obj, buf)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / name
        path.write_bytes(buf.getvalue())
        client.log_artifact(run_id, str(path), MODEL_DIR)


def log_models(client, run_id: str, report, model_cfg: dict[str, Any], arch: dict[str, Any], personal: bool = False,
               personal_dtype: torch.dtype = torch.float32) -> list[str]:
    """Log the final models of a run's end-of-run report (:class:`~flplat.engine.events.StrategyReport`); ``arch``:
    the data's ``input_shape`` and ``num_classes``. Returns the artifact paths written."""
    arch = {"model": dict(model_cfg), "input_shape": [int(s) for s in arch.get("input_shape", ())],
            "num_classes": int(arch.get("num_classes", 0)), "algorithm": report.algorithm}
    client.log_text(run_id, OmegaConf.to_yaml(OmegaConf.create(arch)), f"{MODEL_DIR}/model.yaml")
    written = [f"{MODEL_DIR}/model.yaml"]
    gw = report.global_weights
    if gw is not None:
        _save(client, run_id, {"weights": gw.detach().float().cpu()}, "global.pt")
        written.append(f"{MODEL_DIR}/global.pt")
    if report.clusters is not None:
        assign = None if report.assignment is None else torch.as_tensor(report.assignment).cpu()
        _save(client, run_id, {"weights": report.clusters.detach().float().cpu(), "assignment": assign},
              "clusters.pt")
        written.append(f"{MODEL_DIR}/clusters.pt")
    if personal:
        rows = [report.client_model(k).detach().cpu().to(personal_dtype) for k in range(report.num_clients)]
        _save(client, run_id, {"weights": torch.stack(rows)}, "personal.pt")
        written.append(f"{MODEL_DIR}/personal.pt")
    return written


@contextlib.contextmanager
def downloaded(client, run_id: str, path: str) -> Iterator[Path | None]:
    """One artifact of a run in a temporary directory that is removed on leaving the block (no progress bar);
    None when it is missing."""
    from mlflow.exceptions import MlflowException

    saved = os.environ.get(PROGRESS_VAR)
    os.environ[PROGRESS_VAR] = "false"
    try:
        with tempfile.TemporaryDirectory(prefix="flplat-model-") as tmp:
            try:
                local = Path(client.download_artifacts(run_id, path, tmp))
            except (MlflowException, OSError):
                local = None
            yield local
    finally:
        if saved is None:
            os.environ.pop(PROGRESS_VAR, None)
        else:
            os.environ[PROGRESS_VAR] = saved


def saved_models(client, run_id: str) -> list[str]:
    """The ``which`` values available for a run (e.g. ``["global"]``, ``["cluster"]``)."""
    names = {Path(a.path).name for a in client.list_artifacts(run_id, MODEL_DIR)}
    return [w for w, f in (("global", "global.pt"), ("cluster", "clusters.pt"), ("personal", "personal.pt"))
            if f in names]


def load_weights(client, run_id: str, which: str = "global", index: int | None = None
                 ) -> tuple[torch.Tensor, dict[str, Any]]:
    """(flat weight vector, architecture dict) of one saved model of run ``run_id``."""
    if which not in WHICH:
        raise ConfigError(f"which={which!r} is not valid; choose one of: {', '.join(WHICH)}")
    with downloaded(client, run_id, f"{MODEL_DIR}/model.yaml") as arch_file:
        if arch_file is None:
            raise ConfigError(f"run {run_id} has no saved model (no {MODEL_DIR}/model.yaml artifact; runs log their "
                              "models since tracking.log_models was added, and only when they finish)")
        arch = OmegaConf.to_container(OmegaConf.load(arch_file))
    available = saved_models(client, run_id)
    if which not in available:
        raise ConfigError(f"which={which!r}: run {run_id} saved no {which} model; available: "
                          f"{', '.join(available) or '(none)'}")
    fname = "clusters.pt" if which == "cluster" else f"{which}.pt"
    with downloaded(client, run_id, f"{MODEL_DIR}/{fname}") as blob_file:
        blob = torch.load(blob_file, map_location="cpu", weights_only=True)
    w = blob["weights"]
    if which == "global":
        if index is not None:
            raise ConfigError("index is only for which='cluster' or 'personal'")
        return w.float(), arch
    if index is None or not 0 <= int(index) < w.shape[0]:
        raise ConfigError(f"index={index!r} is out of range for which={which!r}; allowed: an integer in "
                          f"[0, {w.shape[0] - 1}]")
    return w[int(index)].float(), arch


def build_saved(weights: torch.Tensor, arch: dict[str, Any]) -> torch.nn.Module:
    """The network described by ``arch`` holding ``weights``, in eval mode on the CPU. A plugin's model is found
    through its entry point or ``$FLPLAT_PLUGINS`` (or import the plugin module first)."""
    from flplat.models import build_model
    from flplat.plugins import load_plugins
    from flplat.protocol.state import ParamLayout

    load_plugins()
    net = build_model(OmegaConf.create(arch["model"]), tuple(arch["input_shape"]), int(arch["num_classes"]))
    ParamLayout(net).load(weights)
    return net.eval()
