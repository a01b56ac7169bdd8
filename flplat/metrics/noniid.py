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

Two families of label distances, logged side by side under their own names (:func:`noniid_summary`):

* ``hellinger``, ``jsd``, ``emd`` -- the federation-level (multi-client) definitions of FedArtML [14]
  (``fedartml.function_base``, the authors' own library), which Clust-PSI-PFL benchmarks WPSI against (§III-C:
  "We benchmark it against HD, JSD, and EMD [14]"; Fig. 3, Fig. 4). They compare the K client pmfs with each other,
  unweighted, and no global pmf enters (:func:`federation_hellinger`, :func:`federation_jsd`,
  :func:`federation_emd`). This is the paper's reading, so these are the names ``flplat reproduce clust-psi-pfl
  fig3 fig4``, ``flplat noniid-plot`` and the run-level partition metrics use.
* ``hellinger_to_global``, ``jsd_to_global``, ``emd_to_global`` -- each client's distance to the global pmf,
  sample-weighted over clients like WPSI (:func:`client_metrics` per client). They are flplat's earlier reading of
  "HD/JSD/EMD" (what these runs logged as ``hellinger``, ``jsd``, ``emd`` before the FedArtML definitions; see
  :func:`current_metrics`), the form the paper's Section II describes ("comparing client and global label
  distributions"), and the direct counterpart of WPSI. Each is in ``[0, 1]``:

  * Hellinger ``H(p, q) = sqrt(1 - sum_c sqrt(p_c q_c))``;
  * Jensen-Shannon *distance* (square root of the JS divergence) with base-2 logarithms;
  * EMD (earth mover's distance) with ground cost ``"uniform"`` (0 on the diagonal, 1 elsewhere: labels are
    nominal, the default; equals the total-variation distance) or ``"index"`` (``|i - j| / (C - 1)``: labels on an
    ordered scale), computed in closed form (equal to POT's exact solver ``ot.emd2``; see :func:`emd`).

The two families differ in kind, not only in value: FedArtML's EMD is label-blind (it compares the *sorted* pmf
values of two clients, so two clients holding one different class each are at distance 0), which is why it can be
non-monotonic in the non-IID level (the paper's finding (iii)); ``emd_to_global`` is the transport cost between
labels and grows monotonically with label skew.

A client with no samples has no pmf: :func:`label_distribution` gives it a row of NaN, its per-client metrics are
NaN and it gets weight 0; the federation metrics leave it out (FedArtML would get a NaN row and a NaN result).
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
    """Per-client ``(K,)`` arrays against the global label pmf: ``psi`` (Eq. 1), ``hellinger_to_global``,
    ``jsd_to_global``, ``emd_to_global``."""
    c = _counts(counts)
    pg, pc = global_distribution(c), label_distribution(c)
    return {
        "psi": psi_per_class(pg, pc, eps).sum(axis=1),
        "hellinger_to_global": np.asarray(hellinger(pc, pg)).reshape(-1),
        "jsd_to_global": np.asarray(jensen_shannon(pc, pg)).reshape(-1),
        "emd_to_global": np.asarray(emd(pc, pg, ground)).reshape(-1),
    }


# ------------------------------------------------------------------ FedArtML's multi-client definitions ([14])
def _client_pmfs(counts: np.ndarray) -> np.ndarray:
    """The ``(K', C)`` pmfs of the clients that hold samples (rows of counts or of pmfs; empty rows dropped)."""
    c = _counts(counts)
    keep = c.sum(axis=1) > 0
    return label_distribution(c[keep])


def federation_hellinger(counts: np.ndarray) -> float:
    """FedArtML's multi-client Hellinger distance (``fedartml.function_base.hellinger_distance``)::

        HD = min(1, sqrt( sum_{i,j} || sqrt(p_i) - sqrt(p_j) ||^2 / (2 K (K - 1)) ))

    the sum over all ordered client pairs, i.e. the root of the mean over unordered pairs of the squared Hellinger
    distance ``H^2(p_i, p_j) = ½ ||√p_i − √p_j||²``. ``counts``: ``(K, C)`` label counts (or pmfs); empty clients
    are left out; fewer than 2 clients give 0 (FedArtML: 0/0 = NaN).
    """
    from scipy.spatial.distance import pdist

    p = _client_pmfs(counts)
    k = len(p)
    if k < 2:
        return 0.0
    total = 2.0 * pdist(np.sqrt(p), "sqeuclidean").sum()  # both orders of every pair
    return float(min(np.sqrt(total / (2 * k * (k - 1))), 1.0))


def _entropy2(p: np.ndarray) -> np.ndarray:
    """Shannon entropy in bits over the last axis (0 log 0 = 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(p > 0, p * np.log2(np.where(p > 0, p, 1.0)), 0.0).sum(axis=-1)


def federation_jsd(counts: np.ndarray) -> float:
    """FedArtML's multi-client Jensen-Shannon distance (``fedartml.function_base.jensen_shannon_distance``)::

        JS  = H(mean_i p_i) - mean_i H(p_i)        (generalised JS divergence, uniform weights, bits)
        JSD = min(1, sqrt(JS / log2 K))            (K > 2; for K = 2 the divisor log2 2 = 1)

    ``counts``: ``(K, C)`` label counts (or pmfs); empty clients are left out; one client gives 0. A divergence
    that float rounding makes slightly negative (identical clients) is taken as 0 (FedArtML: sqrt of it = NaN).
    """
    p = _client_pmfs(counts)
    k = len(p)
    if k < 2:
        return 0.0
    js = float(_entropy2(p.mean(axis=0)) - _entropy2(p).mean())
    if k > 2:
        js /= np.log2(k)
    return float(min(np.sqrt(js), 1.0)) if js > 0 else 0.0


def federation_emd(counts: np.ndarray) -> float:
    """FedArtML's multi-client earth mover's distance (``fedartml.function_base.earth_movers_distance``)::

        EMD = min(1, sqrt( mean_{i<j} scipy.stats.wasserstein_distance(p_i, p_j) ))

    where, as in FedArtML, each pmf's C *values* are taken as a sample: the 1-D Wasserstein distance between the
    empirical distributions of ``{p_i,c}_c`` and ``{p_j,c}_c``. For two equal-size samples it is the mean absolute
    difference of the sorted values, ``mean_k |sort(p_i)_k − sort(p_j)_k|``, which is how it is computed here. It
    is label-blind: which class holds which share does not matter (two one-class clients of different classes are
    at distance 0), hence its non-monotonic behaviour in the non-IID level (Clust-PSI-PFL §III-C, finding iii).
    ``counts``: ``(K, C)`` label counts (or pmfs); empty clients are left out; fewer than 2 clients give 0
    (FedArtML: the mean of no pairs = NaN).
    """
    from scipy.spatial.distance import pdist

    p = _client_pmfs(counts)
    k, c = p.shape
    if k < 2:
        return 0.0
    mean = float((pdist(np.sort(p, axis=1), "cityblock") / c).mean())
    return float(min(np.sqrt(mean), 1.0))


FEDERATION_METRICS = ("hellinger", "jsd", "emd")
TO_GLOBAL_METRICS = ("hellinger_to_global", "jsd_to_global", "emd_to_global")


def noniid_summary(counts: np.ndarray, eps: float = DEFAULT_EPS, ground: str = "uniform") -> dict[str, float]:
    """The partition's label non-IID metrics: ``wpsi`` (Eq. 3); ``hellinger``, ``jsd``, ``emd`` (FedArtML's
    multi-client definitions, the paper's [14]); ``hellinger_to_global``, ``jsd_to_global``, ``emd_to_global``
    (sample-weighted means of each client's distance to the global pmf; ``ground`` applies to this EMD only)."""
    c = _counts(counts)
    w = _weights(c)
    per = client_metrics(c, eps, ground)
    return {
        "wpsi": _weighted_mean(per["psi"], w),
        "hellinger": federation_hellinger(c),
        "jsd": federation_jsd(c),
        "emd": federation_emd(c),
        **{k: _weighted_mean(per[k], w) for k in TO_GLOBAL_METRICS},
    }


def current_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """A stored run's metrics under today's names. A run logged before the FedArtML definitions has ``hellinger``,
    ``jsd``, ``emd`` but no ``hellinger_to_global``: its three values are the client-to-global means, so they are
    returned as ``*_to_global`` and the FedArtML names are left absent (never an old value under the new name).
    Today's runs are returned unchanged."""
    if "hellinger" not in metrics or "hellinger_to_global" in metrics:
        return metrics
    out = {k: v for k, v in metrics.items() if k not in FEDERATION_METRICS}
    for old, new in zip(FEDERATION_METRICS, TO_GLOBAL_METRICS):
        if old in metrics:
            out[new] = metrics[old]
    return out
