"""The charts the papers' tables draw from their runs: grouped bars of our means per cell (:func:`plot_cells`) and
per-round curves per cell (:func:`plot_curves`), written as PNG files (matplotlib, Agg)."""

from __future__ import annotations

import statistics

from flplat.studies.reproduction.grid import FigureContext


def method_colour(i: int, n: int) -> tuple[float, float, float]:
    """The colour of the ``i``-th of ``n`` methods: matplotlib's tab10 up to 10 methods; from 11 on tab20's 20
    colours, its dark shades first and then the light ones, so that no two of up to 20 methods share a colour (the
    Flux tables have 14 rows, Clust-PSI-PFL's 13). Past 20 the colours repeat; :func:`method_hatch` tells them apart."""
    from matplotlib import colormaps

    if n <= 10:
        return colormaps["tab10"].colors[i % 10]
    return colormaps["tab20"].colors[(2 * i) % 20 + (2 * i) // 20 % 2]


def method_hatch(i: int) -> str:
    """A hatch pattern for the bars of methods past the 20th (their colours repeat): none before."""
    return ("", "//", "..", "xx")[i // 20 % 4]


def plot_cells(ours: dict[tuple[str, str], list[float]], title: str, ylabel: str, path: str) -> None:
    """A grouped bar chart of our means (± std over seeds): one group per cell, one bar per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    cells = list(dict.fromkeys(c for c, _ in ours))
    methods = list(dict.fromkeys(m for _, m in ours))
    w = 0.8 / max(len(methods), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(cells) * max(len(methods), 1) * w * 2.5), 4))
    for i, m in enumerate(methods):
        vals = [ours.get((c, m), []) for c in cells]
        mean = [statistics.fmean(v) if v else np.nan for v in vals]
        sd = [statistics.pstdev(v) if len(v) > 1 else 0.0 for v in vals]
        ax.bar(np.arange(len(cells)) + i * w, mean, w, yerr=sd, label=m, color=method_colour(i, len(methods)),
               hatch=method_hatch(i))
    ax.set_xticks(np.arange(len(cells)) + 0.4 - w / 2)
    ax.set_xticklabels(cells, rotation=45, ha="right", fontsize=8)
    ax.set(ylabel=ylabel, title=title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_curves(ctx: FigureContext, metric: str, title: str, ylabel: str) -> None:
    """One panel per cell: the per-round ``metric`` of every method, mean over its seeds' runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    cells = list(dict.fromkeys(c for c, _ in ctx.runs))
    if not cells:
        return
    methods = list(dict.fromkeys(m for _, m in ctx.runs))
    colour = {m: method_colour(i, len(methods)) for i, m in enumerate(methods)}
    cols = min(len(cells), 2)
    rows = (len(cells) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 3.6 * rows), squeeze=False)
    for ax, c in zip(axes.flat, cells):
        for (cc, m), ids in ctx.runs.items():
            if cc != c:
                continue
            hists = [dict(ctx.history(r, metric)) for r in ids]
            steps = sorted(set().union(*hists)) if hists else []
            if steps:
                ax.plot(steps, [np.mean([h[s] for h in hists if s in h]) for s in steps], label=m, lw=1.2,
                        color=colour[m])
        ax.set(title=c, xlabel="round", ylabel=ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(cells):]:
        ax.set_visible(False)
    fig.suptitle(f"{title} (scale {ctx.scale})")
    fig.tight_layout()
    fig.savefig(ctx.path, dpi=110)
    plt.close(fig)


def plot_series(ctx: FigureContext, panels: dict[str, list[tuple[float, str]]], title: str, ylabel: str,
                xlabel: str, scale_factor: float = 1.0) -> None:
    """One panel per entry of ``panels`` (panel title -> [(x, cell id)]): per method, our mean ± std over the seeds
    at each x (× ``scale_factor``, the paper's unit) as a solid line, and the paper's numbers (``ctx.paper``) as a
    dashed line of the same colour. Only the methods with values of ours are drawn; nothing is written without any."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(dict.fromkeys(m for _, m in ctx.ours))
    if not methods:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
    for ax, (name, points) in zip(axes.flat, panels.items()):
        for i, m in enumerate(methods):
            colour = method_colour(i, len(methods))
            ours = [(x, [v * scale_factor for v in ctx.ours.get((c, m), [])]) for x, c in points]
            ours = [(x, v) for x, v in ours if v]
            if ours:
                ax.errorbar([x for x, _ in ours], [statistics.fmean(v) for _, v in ours],
                            yerr=[statistics.pstdev(v) if len(v) > 1 else 0.0 for _, v in ours], label=m,
                            color=colour, marker="o", ms=3, lw=1.2, capsize=2)
            paper = [(x, ctx.paper[(c, m)]) for x, c in points if (c, m) in ctx.paper]
            if paper:
                ax.plot([x for x, _ in paper], [v for _, v in paper], color=colour, ls="--",
                        lw=0.9, label=f"{m} (paper)")
        ax.set(title=name, xlabel=xlabel, ylabel=ylabel)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=6, ncol=2)
    fig.suptitle(f"{title} (scale {ctx.scale}; dashed: the paper)")
    fig.tight_layout()
    fig.savefig(ctx.path, dpi=110)
    plt.close(fig)
