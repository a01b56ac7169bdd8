"""Aggregation weights of CAFA (Zhang et al., "Optimizing Federated Learning on Non-IID Data with Clustering and
Model Sharing", §III), as pure functions.

* :func:`class_proportions` -- CBCC's client features v_i = (n_i1/N_i, ..., n_im/N_i) (Eqs. 1-2).
* :func:`cbcc_weights` -- given a clustering of the clients, the IID cluster is the largest one (Eq. 7; ties: the
  lowest cluster id) and every client gets its cluster's size fraction |C_j| / sum_j |C_j| (Eq. 8).
* :func:`abfa_weights` -- ABFA (Eqs. 9-10): ``correct[i, j]`` is how many validation samples of client j model i
  classifies correctly, ``sizes[j]`` client j's validation size S_j; A_i = sum_j a_ij S_j / sum_k S_k with
  a_ij = correct[i, j] / S_j, i.e. sum_j correct[i, j] / sum_k S_k, and w^A_i = A_i / sum_j A_j.
* :func:`combine` -- CAFA's Eq. 11 / Algorithm 1: the product of the enabled factors, normalised.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def class_proportions(label_counts: np.ndarray) -> np.ndarray:
    """Rows of ``label_counts`` divided by their sums (Eq. 1); a client without samples gets a row of 0."""
    c = np.asarray(label_counts, dtype=np.float64)
    tot = c.sum(axis=1, keepdims=True)
    return np.divide(c, tot, out=np.zeros_like(c), where=tot > 0)


def cbcc_weights(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """``(w, is_iid, iid_cluster)`` for cluster ids ``labels`` (K,): w_k = |C_{labels[k]}| / K (Eq. 8),
    ``is_iid[k]`` whether client k is in the largest cluster (Eq. 7, ties broken by the lowest id)."""
    lab = np.asarray(labels, dtype=np.int64)
    sizes = np.bincount(lab)
    iid_cluster = int(np.argmax(sizes))
    return sizes[lab] / sizes.sum(), lab == iid_cluster, iid_cluster


def abfa_weights(correct: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """w^A (Eqs. 9-10) from the ``(m, m)`` cross-evaluation counts and the ``(m,)`` validation sizes.

    Degenerate rounds (no validation samples at all, or every model at accuracy 0) give equal weights 1/m.
    """
    c = np.asarray(correct, dtype=np.float64)
    s = np.asarray(sizes, dtype=np.float64)
    m = c.shape[0]
    if s.sum() <= 0:
        return np.full(m, 1.0 / m)
    acc = c.sum(axis=1) / s.sum()  # A_i (Eq. 9)
    return acc / acc.sum() if acc.sum() > 0 else np.full(m, 1.0 / m)


def combine(factors: Sequence[np.ndarray]) -> np.ndarray:
    """Eq. 11: the element-wise product of the factors, normalised to sum 1 (equal weights if it sums to 0)."""
    out = np.prod(np.stack([np.asarray(f, dtype=np.float64) for f in factors]), axis=0)
    total = out.sum()
    return out / total if total > 0 else np.full(len(out), 1.0 / len(out))
