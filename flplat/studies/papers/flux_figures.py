"""The figures of Flux's sweeps (:mod:`flplat.studies.papers.flux_sweeps`), drawn from the runs' logged data: Fig. 5
(accuracy and time against the number of clients), Figs. 8 and 10 (accuracy against the clustering start round and
the threshold T of Eq. 14, mean ± standard error over the runs, as the authors' plotting script), Fig. 9 (FedAvg's
accuracy per round and its derivative, mean and 95 % confidence interval over the runs: the t interval of the
authors' ``plots_across_folds.py``) and Fig. 11 (each run's logged client descriptors, ``clustering/descriptors.csv``,
projected to 2-D by PCA and coloured by Flux's clusters). The maths of Fig. 9 is in :func:`mean_ci` and
:func:`derivative`, tested by hand."""

from __future__ import annotations

import csv
import re
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from flplat.studies.reproduction.figures import method_colour
from flplat.studies.reproduction.grid import FigureContext


def derivative(curves: np.ndarray) -> np.ndarray:
    """dA/dr of Eq. 14 per run: ``curves[i, r - 1]`` is run i's accuracy after round r; the result's column
    ``r - 2`` is A(r) − A(r − 1) for r = 2..R (one round apart, as :func:`flplat.maths.clustering.dynamic_start`)."""
    return np.diff(np.asarray(curves, dtype=np.float64), axis=1)


def mean_ci(curves: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Per step, the mean over the runs (rows) and the half-width of its ``level`` confidence interval: the
    standard error times the two-sided Student t quantile with n − 1 degrees of freedom (0 with a single run)."""
    from scipy import stats

    c = np.asarray(curves, dtype=np.float64)
    mean = c.mean(axis=0)
    n = c.shape[0]
    if n < 2:
        return mean, np.zeros_like(mean)
    return mean, stats.sem(c, axis=0) * stats.t.ppf((1 + level) / 2.0, n - 1)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, plt, path: str, title: str) -> None:
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _run_values(ctx: FigureContext, ids: list[str], metric: str) -> list[float]:
    """The final ``metric`` of each run (runs without it left out)."""
    out = []
    for rid in ids:
        v = ctx.client.get_run(rid).data.metrics.get(metric)
        if v is not None and np.isfinite(v):
            out.append(float(v))
    return out


def fig5(ctx: FigureContext, ks: dict[str, int]) -> None:
    """Fig. 5: known association, test phase (our means over seeds of the table's pooled cells, ``<k>_known`` /
    ``<k>_test``) and the time of a run (the sum of its ``round_time_s``; mean over the K's runs, log2 axis as the
    paper's Table 51) against the number of clients K; ``ks``: cell prefix -> K."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    methods = list(dict.fromkeys(m for _, m in ctx.ours))
    colour = {m: method_colour(i, len(methods)) for i, m in enumerate(methods)}  # one colour per method in all panels
    for ax, kind, label in ((axes[0], "known", "known association"), (axes[1], "test", "test phase")):
        for m in methods:
            pts = [(k, statistics.fmean(ctx.ours[(f"{p}_{kind}", m)])) for p, k in ks.items()
                   if ctx.ours.get((f"{p}_{kind}", m))]
            if pts:
                ax.plot(*zip(*pts), marker="o", ms=3, label=m, color=colour[m])
        ax.set(title=label, xlabel="number of clients K", ylabel="accuracy", xscale="log")
    for m in methods:
        pts = []
        for p, k in ks.items():
            secs = [sum(v for _, v in ctx.history(r, "round_time_s")) for r in ctx.runs.get((f"{p}_known", m), [])]
            if secs:
                pts.append((k, statistics.fmean(secs)))
        if pts:
            axes[2].plot(*zip(*pts), marker="o", ms=3, label=m, color=colour[m])
    axes[2].set(title="time of a run (all its rounds)", xlabel="number of clients K", ylabel="seconds (log2 axis)",
                xscale="log")
    axes[2].set_yscale("log", base=2)
    for ax in axes:
        ax.set_xticks(list(ks.values()), [str(k) for k in ks.values()])
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=6)
    _save(fig, plt, ctx.path, f"Flux Fig. 5: MNIST, K clients (scale {ctx.scale})")


def sweep(ctx: FigureContext, parse: Callable[[str], tuple[str, float] | None], metric: str, xlabel: str,
          title: str, xlog: bool = False) -> None:
    """Figs. 8 and 10: one panel per dataset, the swept value on x (``parse``: cell id -> (panel, x) or None), the
    mean ± standard error over the runs of each point (every member and seed of a pooled cell) of their final
    ``metric``, one line per row."""
    plt = _pyplot()
    points: dict[str, dict[str, list[tuple[float, float, float]]]] = {}
    for (cell, m), ids in ctx.runs.items():
        where = parse(cell)
        vals = _run_values(ctx, ids, metric)
        if where is None or not vals:
            continue
        se = statistics.stdev(vals) / np.sqrt(len(vals)) if len(vals) > 1 else 0.0
        points.setdefault(where[0], {}).setdefault(m, []).append((where[1], statistics.fmean(vals), se))
    if not points:
        return
    methods = list(dict.fromkeys(m for rows in points.values() for m in rows))
    colour = {m: method_colour(i, len(methods)) for i, m in enumerate(methods)}
    fig, axes = plt.subplots(1, len(points), figsize=(max(7.0, 4.6 * len(points)), 3.6), squeeze=False)
    for ax, (panel, rows) in zip(axes.flat, points.items()):
        for m, pts in rows.items():
            x, y, e = zip(*sorted(pts))
            ax.errorbar(x, y, yerr=e, marker="o", ms=3, capsize=3, label=m, color=colour[m])
        ax.set(title=panel, xlabel=xlabel, ylabel=metric.replace("_", " "), xscale="log" if xlog else "linear")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    _save(fig, plt, ctx.path, f"{title} (scale {ctx.scale})")


def fig9(ctx: FigureContext, panel: Callable[[str], str | None], metric: str = "global_accuracy") -> None:
    """Fig. 9: per dataset (``panel``: cell id -> its dataset), FedAvg's ``metric`` per round and its derivative
    dA/dr, mean and 95 % confidence interval over the dataset's runs (every shift and seed)."""
    plt = _pyplot()
    runs: dict[str, list[str]] = {}
    for (cell, _), ids in ctx.runs.items():
        d = panel(cell)
        if d is not None:
            runs.setdefault(d, [])
            runs[d] += [r for r in ids if r not in runs[d]]
    curves = {}
    for d, ids in runs.items():
        hists = [dict(ctx.history(r, metric)) for r in ids]
        steps = sorted(set.intersection(*(set(h) for h in hists))) if hists else []
        if len(steps) > 1:
            curves[d] = (np.array(steps), np.array([[h[s] for s in steps] for h in hists]))
    if not curves:
        return
    fig, axes = plt.subplots(2, len(curves), figsize=(max(7.0, 4.6 * len(curves)), 6.4), squeeze=False)
    for j, (d, (steps, c)) in enumerate(curves.items()):
        for ax, x, (mean, half), colour, label in (
                (axes[0, j], steps, mean_ci(c), "tab:blue", "accuracy"),
                (axes[1, j], steps[1:], mean_ci(derivative(c)), "tab:red", "dA/dr")):
            ax.plot(x, mean, marker="o", ms=3, color=colour, label=f"mean ({len(c)} runs)")
            ax.fill_between(x, mean - half, mean + half, color=colour, alpha=0.2, label="95 % CI")
            ax.set(title=f"{d}: {label}", xlabel="round", ylabel=label, xticks=list(x))
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6)
    _save(fig, plt, ctx.path, f"Flux Fig. 9: FedAvg's accuracy and its derivative (scale {ctx.scale})")


def descriptors_2d(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A run's ``clustering/descriptors.csv`` (client, cluster, d0, d1, ...) projected to 2-D by PCA (as the run's own
    ``plots/flux_descriptors_2d.png``), with each client's cluster."""
    from sklearn.decomposition import PCA

    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    d = np.array([[float(r[k]) for k in r if re.fullmatch(r"d\d+", k)] for r in rows])
    cluster = np.array([int(r["cluster"]) for r in rows])
    k = min(2, d.shape[1], len(d))
    pts = PCA(n_components=k, random_state=0).fit_transform(d)
    if k < 2:
        pts = np.concatenate([pts, np.zeros((len(pts), 2 - k))], axis=1)
    return pts, cluster


def fig11(ctx: FigureContext) -> None:
    """Fig. 11: per cell, the descriptors its first Flux run logged, in 2-D, coloured by its clusters (every row of
    the table reads the same Flux run)."""
    plt = _pyplot()
    first: dict[str, str] = {}
    for (c, _), ids in ctx.runs.items():
        if ids:
            first.setdefault(c, ids[0])
    cells = list(first.items())
    if not cells:
        return
    cols = min(3, len(cells))
    rows = (len(cells) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 3.8 * rows), squeeze=False)
    drawn = False
    with tempfile.TemporaryDirectory() as tmp:
        for ax, (cell, rid) in zip(axes.flat, cells):
            try:
                pts, cluster = descriptors_2d(Path(ctx.client.download_artifacts(rid, "clustering/descriptors.csv",
                                                                                 tmp)))
            except Exception:  # noqa: BLE001 - a run that formed no clusters logs no descriptors
                ax.set(title=f"{cell}: no descriptors logged")
                continue
            for c in np.unique(cluster):
                ax.scatter(*pts[cluster == c].T, s=22, label=f"cluster {c}")
            ax.set(title=cell, xlabel="PC 1", ylabel="PC 2")
            ax.legend(fontsize=6)
            drawn = True
    for ax in list(axes.flat)[len(cells):]:
        ax.set_visible(False)
    if drawn:
        _save(fig, plt, ctx.path, f"Flux Fig. 11: client descriptors in 2-D (PCA), coloured by Flux's clusters "
                                  f"(scale {ctx.scale})")
    else:
        plt.close(fig)
