"""Federation-level accuracy and fairness metrics from per-client correct counts (Clust-PSI-PFL §IV-A-e).

Given per-client ``correct`` (CC_k) and test-split sizes ``n`` (n_k):

* local accuracy ``A_k = CC_k / n_k``; a client with ``n_k = 0`` has no accuracy (NaN) and is left out of every
  summary below (it has weight 0 in the global accuracy anyway);
* global accuracy ``A_global = sum_k n_k A_k / sum_k n_k = sum_k CC_k / sum_k n_k`` (the pooled accuracy);
* fairness: ``AD = (1/K) sum_i |A_i - 1|`` and ``SDAD = sqrt((1/K) sum_i (|A_i - 1| - AD)^2)`` -- the population
  (``ddof = 0``) standard deviation, exactly as in the paper, with ``K`` the number of clients that have an
  accuracy;
* the local-accuracy distribution: quantiles (numpy's default linear interpolation) and the ECDF.
"""

from __future__ import annotations

import numpy as np

DEFAULT_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


def _valid(acc: np.ndarray) -> np.ndarray:
    a = np.asarray(acc, dtype=np.float64).reshape(-1)
    return a[~np.isnan(a)]


def global_accuracy(correct: np.ndarray, n: np.ndarray) -> float:
    """``sum(correct) / sum(n)`` (NaN when there are no test samples at all)."""
    total = float(np.sum(np.asarray(n, dtype=np.float64)))
    return float(np.sum(np.asarray(correct, dtype=np.float64)) / total) if total > 0 else float("nan")


def local_accuracies(correct: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Per-client ``correct / n``; NaN where ``n = 0``."""
    c = np.asarray(correct, dtype=np.float64)
    m = np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(m > 0, c / np.where(m > 0, m, 1.0), np.nan)


def ad_sdad(acc: np.ndarray) -> tuple[float, float]:
    """``(AD, SDAD)``: mean and population std of ``|A_i - 1|`` over clients with an accuracy (NaN ignored)."""
    a = _valid(acc)
    if a.size == 0:
        return float("nan"), float("nan")
    d = np.abs(a - 1.0)
    return float(d.mean()), float(d.std(ddof=0))


def _qkey(q: float) -> str:
    return f"acc_q{q * 100:g}"


def accuracy_quantiles(acc: np.ndarray, qs: tuple[float, ...] = DEFAULT_QUANTILES) -> dict[str, float]:
    """Quantiles of the local accuracies, keyed ``acc_q10``, ``acc_q25``, ... (``acc_q2.5`` for 0.025)."""
    a = _valid(acc)
    if a.size == 0:
        return {_qkey(q): float("nan") for q in qs}
    vals = np.quantile(a, np.asarray(qs, dtype=np.float64))
    return {_qkey(q): float(v) for q, v in zip(qs, vals)}


def ecdf(acc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Empirical CDF of the local accuracies: ``(x_sorted, F)`` with ``F[j] = (j + 1) / K`` (NaN dropped)."""
    x = np.sort(_valid(acc))
    return x, np.arange(1, x.size + 1, dtype=np.float64) / max(x.size, 1)


def summarize(correct: np.ndarray, n: np.ndarray, qs: tuple[float, ...] = DEFAULT_QUANTILES) -> dict[str, float]:
    """``global_accuracy``, ``ad``, ``sdad``, ``mean_local_accuracy`` and the ``acc_q*`` quantiles."""
    acc = local_accuracies(correct, n)
    ad, sdad = ad_sdad(acc)
    valid = _valid(acc)
    out = {
        "global_accuracy": global_accuracy(correct, n),
        "ad": ad,
        "sdad": sdad,
        "mean_local_accuracy": float(valid.mean()) if valid.size else float("nan"),
    }
    out.update(accuracy_quantiles(acc, qs))
    return out
