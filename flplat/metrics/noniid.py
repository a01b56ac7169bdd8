"""Label non-IID quantifiers computed from per-client label counts (pure numpy / scipy).

Input is the ``(K, C)`` matrix of per-client label counts that clients report to the server
(:meth:`flplat.data.containers.FederatedData.label_counts`). The reference is the server-side global label pmf
``P(y=c) = sum_i counts[i, c] / sum counts``.

PSI (Clust-PSI-PFL, Eqs. 1-3)::

    PSI_i     = sum_c (P(y=c) - P_i(y=c)) * ln(P(y=c) / P_i(y=c))          (Eq. 1, the Jeffreys divergence)
    PSI_{i,c} =       (P(y=c) - P_i(y=c)) * ln(P(y=c) / P_i(y=c))          (Eq. 2)
    WPSI      = sum_i (n_i / N) * PSI_i                                     (Eq. 3)

A client missing a class makes Eq. 1 infinite. Following the authors' code we add ``eps`` (default ``1e-6``) to
BOTH pmfs inside the logarithm only, ``ln((P + eps) / (P_i + eps))``, without renormalising; the difference
factor is unchanged (the two eps cancel). The value therefore depends on ``eps`` whenever a pmf has zeros.

Distances to the global pmf, each in ``[0, 1]``:

* Hellinger ``H(p, q) = sqrt(1 - sum_c sqrt(p_c q_c))``;
* Jensen-Shannon *distance* (square root of the JS divergence) with base-2 logarithms;
* EMD (earth mover's distance) with ground cost ``"uniform"`` (0 on the diagonal, 1 elsewhere: labels are
  nominal, the default; equals the total-variation distance) or ``"index"`` (``|i - j| / (C - 1)``: labels on an
  ordered scale), computed in closed form (equal to POT's exact solver ``ot.emd2``; see :func:`emd`).

Summaries are sample-weighted means over clients (weights ``n_i / N``, like WPSI). A client with no samples has
no pmf: :func:`label_distribution` gives it a row of NaN, its per-client metrics are NaN and it gets weight 0.
"""

from __future__ import annotations

import numpy as np

DEFAULT_EPS = 1e-6
GROUNDS = ("uniform", "index")


def _counts(counts: np.ndarray) -> np.ndarray:
    c = np.asarray(counts, dtype=np.float64)
    if c.ndim != 2:
        raise ValueError(f"counts must be a (K, C) matrix, got shape {c.shape}")
    if (c < 0).any():
        raise ValueError("counts must be non-negative")
    return c


def label_distribution(counts: np.ndarray) -> np.ndarray:
    """Row-normalise counts (``(..., C)``) into pmfs; rows summing to 0 become NaN."""
    c = np.asarray(counts, dtype=np.float64)
    tot = c.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(tot > 0, c / np.where(tot > 0, tot, 1.0), np.nan)


def global_distribution(counts: np.ndarray) -> np.ndarray:
    """The server-side global pmf ``(C,)`` from the ``(K, C)`` client counts."""
    return label_distribution(_counts(counts).sum(axis=0))


def psi_per_class(p_global: np.ndarray, p_client: np.ndarray, eps: float = DEFAULT_EPS) -> np.ndarray:
    """Eq. 2: ``(P - P_i) * ln((P + eps) / (P_i + eps))`` elementwise (eps added to both pmfs, no renormalising).

    Broadcasts: ``p_global`` ``(C,)`` against ``p_client`` ``(C,)`` or ``(K, C)``. Every term is ``>= 0``.
    """
    pg = np.asarray(p_global, dtype=np.float64)
    pc = np.asarray(p_client, dtype=np.float64)
    return (pg - pc) * np.log((pg + eps) / (pc + eps))


def psi(p_global: np.ndarray, p_client: np.ndarray, eps: float = DEFAULT_EPS) -> np.ndarray | float:
    """Eq. 1: the client-level PSI, the sum of :func:`psi_per_class` over the last axis (eps in both pmfs)."""
    out = psi_per_class(p_global, p_client, eps).sum(axis=-1)
    return float(out) if np.ndim(out) == 0 else out


def client_psi(counts: np.ndarray, eps: float = DEFAULT_EPS) -> tuple[np.ndarray, np.ndarray]:
    """Eqs. 1-2 for every client against the global pmf of ``counts``: ``(psi (K,), psi_per_class (K, C))``."""
    c = _counts(counts)
    per_class = psi_per_class(global_distribution(c), label_distribution(c), eps)
    return per_class.sum(axis=1), per_class


def _weights(counts: np.ndarray) -> np.ndarray:
    n = counts.sum(axis=1)
    total = n.sum()
    return n / total if total > 0 else np.full(len(n), np.nan)


def _weighted_mean(values: np.ndarray, w: np.ndarray) -> float:
    keep = w > 0
    return float(np.sum(w[keep] * values[keep])) if keep.any() else float("nan")


def wpsi(counts: np.ndarray, eps: float = DEFAULT_EPS) -> float:
    """Eq. 3: ``sum_i (n_i / N) * PSI_i`` (clients with ``n_i = 0`` contribute nothing)."""
    c = _counts(counts)
    values, _ = client_psi(c, eps)
    return _weighted_mean(values, _weights(c))


def hellinger(p: np.ndarray, q: np.ndarray) -> np.ndarray | float:
    """Hellinger distance ``sqrt(1 - sum sqrt(p q))`` over the last axis (broadcasting), in ``[0, 1]``."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    bc = np.sqrt(p * q).sum(axis=-1)
    out = np.sqrt(np.clip(1.0 - bc, 0.0, None))
    return float(out) if np.ndim(out) == 0 else out


def jensen_shannon(p: np.ndarray, q: np.ndarray) -> np.ndarray | float:
    """Jensen-Shannon distance (base 2) over the last axis (broadcasting), in ``[0, 1]``.

    Equals ``scipy.spatial.distance.jensenshannon(p, q, base=2)`` for pmfs (scipy also renormalises; we do not).
    """
    from scipy.special import rel_entr

    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    m = 0.5 * (p + q)
    js = 0.5 * (rel_entr(p, m).sum(axis=-1) + rel_entr(q, m).sum(axis=-1)) / np.log(2.0)
    out = np.sqrt(np.clip(js, 0.0, None))
    return float(out) if np.ndim(out) == 0 else out


def ground_cost(num_classes: int, ground: str = "uniform") -> np.ndarray:
    """``(C, C)`` ground cost: ``"uniform"`` 0/1, ``"index"`` ``|i - j| / (C - 1)``; both have max 1."""
    if ground not in GROUNDS:
        raise ValueError(f"ground={ground!r} is not valid; choose one of: {', '.join(GROUNDS)}")
    i = np.arange(num_classes, dtype=np.float64)
    if ground == "uniform":
        return 1.0 - np.eye(num_classes)
    return np.abs(i[:, None] - i[None, :]) / max(num_classes - 1, 1)


def emd(p: np.ndarray, q: np.ndarray, ground: str = "uniform") -> np.ndarray | float:
    """Earth mover's distance between pmfs over the last axis (broadcasting), in closed form.

    Inputs are renormalised to sum to 1; a pair containing NaN (or an empty pmf) gives NaN. With the 0/1 ground
    cost (``"uniform"``) the optimal transport cost is the total-variation distance ``½ Σ_c |p_c − q_c|``; with
    ``"index"`` (``|i − j| / (C − 1)``, classes on a line) it is the 1-D Wasserstein distance
    ``Σ_{i<C−1} |F_p(i) − F_q(i)| / (C − 1)`` of the cumulative pmfs. Both equal POT's exact ``ot.emd2`` on
    :func:`ground_cost` (tests/test_noniid.py checks it) without importing POT (and scikit-learn) at start-up.
    """
    if ground not in GROUNDS:
        raise ValueError(f"ground={ground!r} is not valid; choose one of: {', '.join(GROUNDS)}")
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    pb, qb = np.broadcast_arrays(p, q)
    ps, qs = pb.sum(axis=-1, keepdims=True), qb.sum(axis=-1, keepdims=True)
    bad = (np.isnan(pb).any(axis=-1) | np.isnan(qb).any(axis=-1) | (ps[..., 0] <= 0) | (qs[..., 0] <= 0))
    with np.errstate(invalid="ignore", divide="ignore"):
        diff = pb / ps - qb / qs
    if ground == "uniform":
        out = 0.5 * np.abs(diff).sum(axis=-1)
    else:
        c = pb.shape[-1]
        out = np.abs(np.cumsum(diff, axis=-1)[..., :-1]).sum(axis=-1) / max(c - 1, 1)
    out = np.where(bad, np.nan, out)
    return float(out) if out.ndim == 0 else out


def client_metrics(counts: np.ndarray, eps: float = DEFAULT_EPS, ground: str = "uniform") -> dict[str, np.ndarray]:
    """Per-client ``(K,)`` arrays ``psi``, ``hellinger``, ``jsd``, ``emd`` against the global label pmf."""
    c = _counts(counts)
    pg, pc = global_distribution(c), label_distribution(c)
    return {
        "psi": psi_per_class(pg, pc, eps).sum(axis=1),
        "hellinger": np.asarray(hellinger(pc, pg)).reshape(-1),
        "jsd": np.asarray(jensen_shannon(pc, pg)).reshape(-1),
        "emd": np.asarray(emd(pc, pg, ground)).reshape(-1),
    }


def noniid_summary(counts: np.ndarray, eps: float = DEFAULT_EPS, ground: str = "uniform") -> dict[str, float]:
    """Sample-weighted means over clients: ``wpsi`` (Eq. 3), ``hellinger``, ``jsd``, ``emd``."""
    c = _counts(counts)
    w = _weights(c)
    per = client_metrics(c, eps, ground)
    return {
        "wpsi": _weighted_mean(per["psi"], w),
        "hellinger": _weighted_mean(per["hellinger"], w),
        "jsd": _weighted_mean(per["jsd"], w),
        "emd": _weighted_mean(per["emd"], w),
    }
