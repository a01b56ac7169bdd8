"""``flplat evaluate``: score a run's saved model on other data.

The run's logged ``config.yaml`` is the starting point; ``--dataset`` / ``--partition`` and ``key=value``
overrides change the data (e.g. ``data.name=fmnist``, ``partition.alpha=0.1``, ``seed=3`` for another draw of
the partition). The data is loaded and partitioned exactly as ``flplat run`` would with that config, and the
saved model (:mod:`flplat.tracking.models`: ``global``, or cluster / client ``index``) is scored on every
client's test split -- ``global_accuracy`` (test-size weighted), ``ad``, ``sdad``, ``mean_local_accuracy``, the
quantiles -- and on the pooled official test set when the dataset has one (``global_test_accuracy``); on
multi-label data also the macro ROC AUC keys of a run (``global_auroc``, ``mean_local_auroc``, ``ad_auroc``,
``sdad_auroc``, ``global_test_auroc``; flplat/metrics/multilabel.py). No training, no MLflow run is created.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from flplat.errors import ConfigError
from flplat.experiment import load_config


def _accuracy(net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 1024,
              scores: list | None = None) -> tuple[int, int]:
    """(correct, n) of ``net`` on ``(x, y)`` (:func:`flplat.maths.losses.hits`: exact match for multi-label y);
    multi-label: the sigmoid scores are appended to ``scores``."""
    from flplat.maths.losses import hits

    correct, out = 0, []
    with torch.no_grad():
        for a in range(0, len(y), batch):
            logits = net(x[a:a + batch])
            correct += int(hits(logits, y[a:a + batch]).sum())
            out.append(torch.sigmoid(logits.float()))
    if scores is not None and y.dim() == 2:
        scores.append(torch.cat(out) if out else torch.zeros(0, y.shape[1]))
    return correct, len(y)


def evaluate_run(run_id: str, which: str = "global", index: int | None = None, overrides: list[str] = (),
                 tracking_uri: str | None = None, store_dir: str = "mlruns") -> dict[str, Any]:
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from flplat.data.datasets import load_dataset
    from flplat.data.partitions import build_federation
    from flplat.metrics.evaluation import summarize
    from flplat.metrics.multilabel import macro_auroc, summarize_auroc
    from flplat.protocol.seeding import derive_seed
    from flplat.tracking.models import build_saved, downloaded, load_weights
    from flplat.tracking.store import store_uris

    uri, _ = store_uris(tracking_uri, store_dir)
    client = MlflowClient(tracking_uri=uri)
    try:
        client.get_run(run_id)
    except MlflowException:
        raise ConfigError(f"RUN_ID={run_id!r} is not a run in {uri} (see `flplat ui`)") from None
    with downloaded(client, run_id, "config.yaml") as cfg_path:
        if cfg_path is None:
            raise ConfigError(f"RUN_ID={run_id!r} is not a run with a config.yaml in {uri} (see `flplat ui`)")
        cfg = load_config(cfg_path, list(overrides))
    weights, arch = load_weights(client, run_id, which, index)
    net = build_saved(weights, arch)
    seed = int(cfg.seed)
    data = build_federation(load_dataset(cfg.data, derive_seed(seed, "data")), cfg.partition,
                            derive_seed(seed, "partition"))
    if tuple(data.input_shape) != tuple(arch["input_shape"]) or data.num_classes != int(arch["num_classes"]):
        raise ConfigError(f"data.name={cfg.data.name!r} has inputs {tuple(data.input_shape)} and "
                          f"{data.num_classes} classes; the saved model takes {tuple(arch['input_shape'])} and "
                          f"{arch['num_classes']}: choose a dataset of the same shape")
    correct, n, scores, targets = [], [], [], []
    for c in data.clients:
        idx = torch.as_tensor(c.test, dtype=torch.long)
        k, m = _accuracy(net, data.x[idx], data.y[idx], scores=scores)
        correct.append(k)
        n.append(m)
        targets.append(data.y[idx].float())
    out: dict[str, Any] = {"run_id": run_id, "which": which if index is None else f"{which}[{index}]",
                           "data": cfg.data.name, "partition": cfg.partition.name, "seed": seed,
                           "num_clients": data.num_clients}
    out.update({k: float(v) for k, v in summarize(np.array(correct, float), np.array(n, float)).items()})
    if data.multilabel:  # macro ROC AUC beside the (exact-match) accuracies, as a run reports them
        local = np.array([macro_auroc(s, t) for s, t in zip(scores, targets)], dtype=float)
        out.update(summarize_auroc(local, scores, targets))
    if data.x_global_test is not None:
        pooled: list = []
        k, m = _accuracy(net, data.x_global_test, data.y_global_test, scores=pooled)
        out["global_test_accuracy"] = k / max(m, 1)
        if pooled:
            out["global_test_auroc"] = macro_auroc(pooled[0], data.y_global_test.float())
    return out
