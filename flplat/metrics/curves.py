"""Summaries of an accuracy curve over rounds (CAFA Tables IV-V) and its smoothing for plots (CAFA Fig. 6).

:func:`curve_summary` takes the per-round history of a run and one metric (the global test accuracy): the best
value over all evaluated rounds (Table V), the mean over consecutive windows of ``window`` rounds (Table IV:
rounds 1-30, 31-60, ...; only rounds where the metric was evaluated count, a window without any is left out)
and the mean over the last ``window`` rounds of the run.

:func:`twema` is the "Time Weighted Exponential Moving Average" CAFA applies to the curves of its Fig. 6 (§IV-C:
"In order to make the curves clearer and more understandable, the Time Weighted Exponential Moving Average
algorithm is applied to the accuracy curves shown in Fig. 6"). The paper gives neither a definition nor a
parameter. TWEMA is the name of Weights & Biases' default line-plot smoothing, whose documentation
(docs.wandb.ai, "Smooth line plots") defines it: the smoothing parameter p in [0, 1] gives the weight
w = min(sqrt(p), 0.999); each point decays the running sum and its de-bias weight by w ** Δx, where Δx is the step
from the previous point in thousandths of the plotted x range (``TWEMA_VIEWPORT_SCALE`` = 1000), so the smoothing
depends on the density of points, not their count:

    S_i = S_{i-1} · w^{Δx_i} + y_i,   D_i = D_{i-1} · w^{Δx_i} + 1,   smoothed_i = S_i / D_i   (S_0 = D_0 = 0).

p = 0 leaves the curve as it is. The parameter is ``tracking.curve_smoothing`` (see flplat/config.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def window_means(rounds: Sequence[int], values: Sequence[float], window: int) -> list[tuple[int, float]]:
    """``[(last round of window w, mean of the values in rounds (w*window, (w+1)*window]) ...]`` (rounds from 1)."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    r = np.asarray(rounds, dtype=np.int64)
    v = np.asarray(values, dtype=np.float64)
    out = []
    for w in np.unique((r - 1) // window):
        sel = (r - 1) // window == w
        out.append((int((w + 1) * window), float(v[sel].mean())))
    return out


def curve_summary(history: Sequence[dict[str, float]], key: str, window: int) -> dict[str, object]:
    """``best``, ``best_round``, ``last_window_mean`` and ``windows`` (see :func:`window_means`) of ``key``;
    ``{}`` when no round has it. ``history[i]`` holds the metrics of round ``i + 1``."""
    pts = [(i + 1, float(h[key])) for i, h in enumerate(history) if key in h and np.isfinite(h[key])]
    if not pts:
        return {}
    rounds, values = zip(*pts)
    best = int(np.argmax(values))  # the first round reaching the maximum
    last = [v for r, v in pts if r > len(history) - window]
    return {"best": values[best], "best_round": rounds[best],
            "last_window_mean": float(np.mean(last)) if last else float("nan"),
            "windows": window_means(rounds, values, window)}


TWEMA_VIEWPORT_SCALE = 1000.0  # Δx in thousandths of the x range (Weights & Biases' VIEWPORT_SCALE)


def twema(x: Sequence[float], y: Sequence[float], smoothing: float) -> list[float]:
    """The time-weighted exponential moving average of the points (x, y), x ascending (see the module docstring):
    weight min(sqrt(smoothing), 0.999) per thousandth of the x range, de-biased so that the first values are not
    pulled towards 0. ``smoothing`` = 0 returns ``y``."""
    if not 0.0 <= smoothing <= 1.0:
        raise ValueError(f"smoothing must be in [0, 1], got {smoothing}")
    xs = np.asarray(x, dtype=np.float64)
    ys = np.asarray(y, dtype=np.float64)
    if len(xs) != len(ys):
        raise ValueError(f"x and y differ in length: {len(xs)} and {len(ys)}")
    if not len(xs):
        return []
    w = min(float(np.sqrt(smoothing)), 0.999)
    span = float(xs[-1] - xs[0]) or 1.0
    total = debias = 0.0
    out = []
    for i in range(len(xs)):
        decay = w ** ((xs[i] - xs[max(i - 1, 0)]) / span * TWEMA_VIEWPORT_SCALE)
        total = total * decay + ys[i]
        debias = debias * decay + 1.0
        out.append(total / debias)
    return out
