"""Paper-style tables and figures from MLflow runs and from partitions.

* :func:`runs_table` — Clust-PSI-PFL Table III (mean ± std of the final ``global_accuracy`` over seeds) and
  Table IV (AD ± SDAD) style tables: one row per algorithm, one column per partition setting
  (``dirichlet α=…`` / ``similarity S=…``), from the FINISHED runs of an MLflow experiment.
* :func:`noniid_curves` — Fig. 3: WPSI against α and S with Hellinger / JSD / EMD, computed from the partitions
  themselves (no training), averaged over seeds.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np


def _setting(params: dict[str, str]) -> str:
    name = params.get("partition.name", "?")
    if name == "dirichlet":
        return f"dirichlet α={float(params['partition.alpha']):g}"
    if name == "similarity":
        return f"similarity S={float(params['partition.similarity']):g}"
    if name == "cafa" and "partition.iid_fraction" in params:
        return f"cafa iid={float(params['partition.iid_fraction']):g}"
    return name


def _setting_order(s: str) -> tuple:
    kind, _, val = s.partition(" ")
    v = float(val.split("=")[1]) if "=" in val else 0.0
    return (kind, -v)  # decreasing α / S: from IID towards pathological skew, as in the paper's tables


def collect_runs(experiment: str, uri: str) -> list[dict[str, Any]]:
    """Final metrics and params of every FINISHED, non-parent run of an experiment (the partition metrics of a run
    logged before FedArtML's definitions under their ``*_to_global`` names:
    :func:`~flplat.metrics.noniid.current_metrics`)."""
    from mlflow.tracking import MlflowClient

    from flplat.metrics.noniid import current_metrics

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    rows, token = [], None
    while True:
        page = client.search_runs([exp.experiment_id], "attributes.status = 'FINISHED'", max_results=1000,
                                  page_token=token)
        for r in page:
            if "algorithm.name" in r.data.params and "global_accuracy" in r.data.metrics:
                rows.append({"params": r.data.params, "metrics": current_metrics(r.data.metrics),
                             "run_id": r.info.run_id})
        token = page.token
        if not token:
            return rows


def row_label(params: dict[str, str], group_by: Sequence[str] = (), row_keys: Sequence[str] = ("algorithm.name",)
              ) -> str:
    """A table row's label: the ``row_keys`` values (default the algorithm), then ``key=value`` per ``group_by``."""
    return " ".join([*(str(params.get(k)) for k in row_keys),
                     *(f"{k.split('.')[-1]}={params.get(k)}" for k in group_by)])


def runs_table(rows: Sequence[dict[str, Any]], kind: str = "accuracy", group_by: Sequence[str] = (),
               metric: str = "global_accuracy", row_keys: Sequence[str] = ("algorithm.name",), digits: int = 2) -> str:
    """A markdown table. ``kind``: ``accuracy`` (``metric`` mean ± std over runs; default the final
    global_accuracy, e.g. ``mean_local_accuracy_last10`` or ``rounds_to_acc70`` for DA-PFL's Tables I and VI),
    ``fairness`` (mean AD ± mean SDAD), ``best`` / ``window`` (CAFA Tables V / IV: the best and the last-window
    mean of the global test accuracy -- of ``global_accuracy`` for methods without one global model -- mean ± std
    over runs). ``group_by``: extra params that split rows (e.g. ``partition.num_clients``); ``row_keys``: the params
    naming a row (default the algorithm); ``digits``: decimals of the accuracy cells."""
    cells: dict[tuple[str, str], list[dict[str, float]]] = defaultdict(list)
    for r in rows:
        p = r["params"]
        cells[(row_label(p, group_by, row_keys), _setting(p))].append(r["metrics"])
    rows_ = sorted({k[0] for k in cells})
    cols = sorted({k[1] for k in cells}, key=_setting_order)

    def fmt(ms: list[dict[str, float]]) -> str:
        if not ms:
            return "—"
        if kind == "fairness":
            return f"{statistics.fmean(m['ad'] for m in ms):.2f} ± {statistics.fmean(m['sdad'] for m in ms):.2f}"
        if kind in ("best", "window"):
            pre = "best_" if kind == "best" else "window_mean_"
            vals = [m.get(pre + "global_test_accuracy", m.get(pre + "global_accuracy")) for m in ms]
            vals = [v for v in vals if v is not None]
            if not vals:
                return "—"
            return f"{statistics.fmean(vals):.4f} ± {statistics.pstdev(vals):.4f} (n={len(vals)})"
        vals = [m[metric] for m in ms if metric in m]
        if not vals:
            return "—"
        return f"{statistics.fmean(vals):.{digits}f} ± {statistics.pstdev(vals):.{digits}f} (n={len(vals)})"

    head = f"| {' / '.join(k.split('.')[0] for k in row_keys)} | " + " | ".join(cols) + " |"
    sep = "|---|" + "---|" * len(cols)
    body = [f"| {r} | " + " | ".join(fmt(cells.get((r, c), [])) for c in cols) + " |" for r in rows_]
    return "\n".join([head, sep, *body])


def noniid_curves(dataset, num_clients: int, alphas: Sequence[float], s_values: Sequence[float],
                  seeds: Sequence[int], min_samples: int = 10, skipped: list[str] | None = None
                  ) -> dict[str, list[dict[str, float]]]:
    """WPSI, HD, JSD and EMD (FedArtML's multi-client definitions, the paper's [14]) and the client-to-global
    distances (means over seeds) for each α (Dirichlet) and S (Similarity): the keys of
    :func:`~flplat.metrics.noniid.noniid_summary`. A (point, seed)
    that no partition can meet (:class:`~flplat.data.partitions.InfeasiblePartitionError`, e.g. 500 clients at
    α = 0.01) is left out of the means; ``skipped`` (a list) receives one ``"alpha=0.01 seed=0"`` per such pair."""
    from flplat.data.partitions import InfeasiblePartitionError, build_federation
    from flplat.metrics.noniid import noniid_summary

    out: dict[str, list[dict[str, float]]] = {"dirichlet": [], "similarity": []}
    for name, values, key in (("dirichlet", alphas, "alpha"), ("similarity", s_values, "similarity")):
        for v in values:
            runs = []
            for seed in seeds:
                cfg = {"name": name, "num_clients": num_clients, key: v,
                       **({"min_samples": min_samples} if name == "dirichlet" else {})}
                try:
                    fed = build_federation(dataset, cfg, seed)
                except InfeasiblePartitionError:
                    if skipped is not None:
                        skipped.append(f"{key}={v:g} seed={seed}")
                    continue
                runs.append(noniid_summary(fed.label_counts("all")))
            if runs:
                out[name].append({key: v, **{m: float(np.mean([r[m] for r in runs])) for m in runs[0]},
                                  "seeds": len(runs)})
    return out


def plot_noniid_curves(curves: dict[str, list[dict[str, float]]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, (name, key, label) in zip(axes, (("dirichlet", "alpha", "Dirichlet α"),
                                             ("similarity", "similarity", "Similarity S"))):
        pts = curves.get(name) or []
        if not pts:
            ax.set_visible(False)
            continue
        x = [p[key] for p in pts]
        ax.plot(x, [p["wpsi"] for p in pts], "o-", color="purple", label="WPSI")
        ax.set(xlabel=label, ylabel="WPSI")
        if name == "dirichlet":
            ax.set_xscale("log")
        ax2 = ax.twinx()
        for m, style in (("hellinger", "s--"), ("jsd", "^--"), ("emd", "d--")):
            ax2.plot(x, [p[m] for p in pts], style, alpha=0.7, label=m.upper() if m != "hellinger" else "HD")
        ax2.set_ylabel("HD / JSD / EMD")
        lines = ax.get_legend_handles_labels()
        lines2 = ax2.get_legend_handles_labels()
        ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=8, loc="upper right")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def silhouette_curves(experiment: str, uri: str) -> dict[str, list[tuple[int, float]]]:
    """Fig. 5: the ``silhouette_by_k`` curve of every finished Clust-PSI-PFL run, labelled by its setting."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    out: dict[str, list[tuple[int, float]]] = {}
    for r in collect_runs(experiment, uri):
        if "silhouette_by_k" not in r["metrics"]:
            continue
        p = r["params"]
        label = f"{_setting(p)} K={p.get('partition.num_clients')} seed={p.get('seed')}"
        hist = client.get_metric_history(r["run_id"], "silhouette_by_k")
        out[label] = sorted((m.step, m.value) for m in hist)
    return out


def plot_silhouette_curves(curves: dict[str, list[tuple[int, float]]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, pts in sorted(curves.items(), key=lambda kv: _setting_order(kv[0].split(" K=")[0])):
        ax.plot([k for k, _ in pts], [v for _, v in pts], "o-", ms=3, label=label)
    ax.set(xlabel="number of clusters τ", ylabel="mean silhouette", title="Silhouette vs τ (K-means++ on PSI)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
