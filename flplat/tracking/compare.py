"""``flplat compare``: methods compared over seeds -- what the MLflow UI cannot do across runs.

From the FINISHED runs of one experiment (:func:`flplat.tracking.reports.collect_runs`, the rows of
``flplat table``):

* a table of the final ``metric`` mean ± std over seeds, one row per algorithm (or per the ``--by`` params),
  one column per partition setting -- :func:`flplat.tracking.reports.runs_table`, the same code as
  ``flplat table --kind accuracy``;
* the per-round curves of ``metric`` (step = round): per row and setting the mean over seeds with a band of
  ± one (population) standard deviation, one panel per setting;
* both logged to a parent run of the experiment (``flplat.kind = compare``): ``compare/table.md``,
  ``compare/curves.csv``, ``compare/<metric>_curves.png``.

Plain functions, so reports built elsewhere (``flplat reproduce``) can reuse them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from flplat.tracking.reports import _setting, _setting_order, row_label, runs_table

BY_ALIASES = {"algorithm": "algorithm.name", "dataset": "data.name", "partition": "partition.name",
              "model": "model.name"}


def by_keys(by: str | Sequence[str]) -> list[str]:
    """``"algorithm,model"`` -> ``["algorithm.name", "model.name"]`` (other names are dotted config keys)."""
    items = [b.strip() for b in by.split(",")] if isinstance(by, str) else list(by)
    return [BY_ALIASES.get(b, b) for b in items if b]


def comparison_table(rows: Sequence[dict[str, Any]], metric: str = "global_accuracy",
                     by: Sequence[str] = ("algorithm.name",)) -> str:
    """Markdown: final ``metric`` mean ± std (n = seeds) per row (``by``) and partition setting."""
    return runs_table(rows, "accuracy", (), metric, row_keys=by, digits=4)


def metric_curves(client, rows: Sequence[dict[str, Any]], metric: str = "global_accuracy",
                  by: Sequence[str] = ("algorithm.name",)) -> dict[str, dict[str, dict[str, list[float]]]]:
    """{setting: {row: {"step", "mean", "std", "n"}}}: the per-step mean and std over the runs (seeds) of each
    group, at the steps every run of the group logged."""
    hist: dict[tuple[str, str], list[dict[int, float]]] = defaultdict(list)
    for r in rows:
        points = {m.step: m.value for m in client.get_metric_history(r["run_id"], metric)}
        if points:
            hist[(_setting(r["params"]), row_label(r["params"], (), by))].append(points)
    out: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(dict)
    for (setting, row), runs in hist.items():
        steps = sorted(set.intersection(*(set(p) for p in runs)))
        vals = np.array([[p[s] for s in steps] for p in runs], dtype=float)
        out[setting][row] = {"step": [float(s) for s in steps], "mean": vals.mean(0).tolist(),
                             "std": vals.std(0).tolist(), "n": [float(len(runs))] * len(steps)}
    return {s: dict(sorted(out[s].items())) for s in sorted(out, key=_setting_order)}


def curves_csv(curves: dict[str, dict[str, dict[str, list[float]]]]) -> str:
    lines = ["setting,row,step,mean,std,n"]
    for setting, groups in curves.items():
        for row, c in groups.items():
            lines += [f"{setting},{row},{int(s)},{m!r},{sd!r},{int(n)}"
                      for s, m, sd, n in zip(c["step"], c["mean"], c["std"], c["n"])]
    return "\n".join(lines) + "\n"


def plot_curves(curves: dict[str, dict[str, dict[str, list[float]]]], metric: str, path: str | None = None):
    """One panel per setting, a line (mean) and a band (± std over seeds) per row; saved to ``path`` if given.
    Returns the figure (closed by the caller)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    n = max(len(curves), 1)
    fig, axes = plt.subplots(1, n, figsize=(5.2 * n, 3.8), squeeze=False)
    for ax, (setting, groups) in zip(axes[0], curves.items()):
        for row, c in groups.items():
            x, m, s = np.array(c["step"]), np.array(c["mean"]), np.array(c["std"])
            (line,) = ax.plot(x, m, marker="o", ms=2.5, label=f"{row} (n={int(c['n'][0])})")
            ax.fill_between(x, m - s, m + s, color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set(xlabel="round", ylabel=metric, title=setting)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{metric}: mean ± std over seeds", fontsize=10)
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=120)
    return fig


def log_comparison(client, experiment_id: str, experiment: str, metric: str, by: Sequence[str], table: str,
                   curves: dict, fig, runs: int) -> str:
    """A FINISHED parent run holding the comparison; returns its id."""
    from flplat.tracking.meta import provenance_tags

    desc = (f"flplat compare over {runs} finished runs of experiment {experiment!r}: final {metric} mean ± std "
            f"over seeds per {', '.join(by)} and partition setting (compare/table.md), and the per-round curves "
            f"with a ± std band (compare/{metric}_curves.png).\n\n{table}")
    tags = {"flplat.kind": "compare", "mlflow.note.content": desc, **provenance_tags()}
    run = client.create_run(experiment_id, run_name=f"compare {metric} by {','.join(by)}", tags=tags)
    rid = run.info.run_id
    try:
        client.log_text(rid, table + "\n", "compare/table.md")
        client.log_text(rid, curves_csv(curves), "compare/curves.csv")
        client.log_figure(rid, fig, f"compare/{metric}_curves.png")
        client.log_param(rid, "compare.metric", metric)
        client.log_param(rid, "compare.by", ",".join(by))
        client.log_metric(rid, "compared_runs", float(runs))
    except BaseException:
        client.set_terminated(rid, "FAILED")
        raise
    client.set_terminated(rid, "FINISHED")
    return rid


def compare(experiment: str, uri: str, metric: str = "global_accuracy", by: str | Sequence[str] = "algorithm",
            out: str | None = None, log: bool = True) -> dict[str, Any]:
    """The whole report: {"table", "curves", "png", "run_id", "runs"}. Raises ConfigError when the experiment
    has no finished runs or none logged ``metric``."""
    from mlflow.tracking import MlflowClient

    from flplat.errors import ConfigError
    from flplat.tracking.reports import collect_runs

    keys = by_keys(by)
    rows = collect_runs(experiment, uri)
    if not rows:
        raise ConfigError(f"--experiment={experiment!r} has no finished runs in {uri}")
    rows = [r for r in rows if metric in r["metrics"]]
    if not rows:
        raise ConfigError(f"--metric={metric!r}: no finished run of {experiment!r} logged it; e.g. global_accuracy, "
                          "mean_local_accuracy, ad, global_test_accuracy")
    client = MlflowClient(tracking_uri=uri)
    table = comparison_table(rows, metric, keys)
    curves = metric_curves(client, rows, metric, keys)
    fig = plot_curves(curves, metric, out)
    run_id = None
    if log:
        exp = client.get_experiment_by_name(experiment)
        run_id = log_comparison(client, exp.experiment_id, experiment, metric, keys, table, curves, fig, len(rows))
    import matplotlib.pyplot as plt

    plt.close(fig)
    return {"table": table, "curves": curves, "png": out, "run_id": run_id, "runs": len(rows)}
