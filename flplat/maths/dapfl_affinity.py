"""DA-PFL's client affinity and dynamic aggregation weights as pure functions (Yang et al., DA-PFL, §III-B/C).

Affinity (Eqs. 3–6), from the clients' class-count vectors ``S`` (K clients × C classes): for a pair (i, j) the
overlapping-class vectors E_ij / E_ji hold S_i,k / S_j,k over the classes k both clients hold (S_i,k > 0 and
S_j,k > 0); with s̄ the mean of all entries of E_ij and E_ji (Eq. 6), the extended adjusted cosine is

    cos_ij = Σ_e (E_ij,e − s̄)(E_ji,e − s̄) / (‖E_ij − s̄‖ ‖E_ji − s̄‖)

and the affinity c_ij = |E_ij| / C · (2 − cos_ij) (Eq. 5): complementary clients (one's large classes are the
other's small ones, cos → −1) get the largest affinity, identical clients (cos = 1) the smallest.

Choices where the paper is open (arguments, exposed as DA-PFL config keys):

* ``min_shared``: pairs sharing fewer classes count as "no overlapping class" (paper: 1; the authors' code: 2 —
  with a single shared class the centred vectors are ±(a − b)/2, so the cosine is −1 or undefined);
* a zero denominator (a centred vector is all zeros) gives cos = 0;
* such pairs get ``fill_factor`` × the minimum affinity over the pairs that do overlap (paper: the minimum,
  factor 1; the authors' code: 0.9); when no pair overlaps at all, every affinity is 1;
* the diagonal is 0 (Eqs. 7 and 9 exclude j = i) and rows are normalised to sum 1 (the authors' code), which
  puts c in [0, 1]. Eq. 7 renormalises c over each round's participants, so the row scaling does not matter.

Dynamic weights (Eqs. 7–8) for the m participants of a round, from their affinities and pairwise model distances:

    θ_ij = c_ij / Σ_j' c_ij' · (1 − exp(−(d_ij + ε) / σ)),   α_ij = θ_ij / Σ_j' θ_ij',   j, j' ≠ i,

with d_ij = ‖w_i − w_j‖^p (paper: p = 2; the authors' code uses the unsquared norm, p = 1). A factor of exactly 0
(identical models with ε = 0) is set to 1 (the authors' code). A row without any positive θ (one participant, or
only zero affinities) falls back to the affinity weights, then to uniform weights.
"""

from __future__ import annotations

import numpy as np
import torch


def adjusted_cosine(counts: np.ndarray, min_shared: int = 2, chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """``(cos, shared)``: the extended adjusted cosine (Eqs. 3, 4, 6) and the number of shared classes ``|E_ij|``
    for every pair of rows of ``counts`` (K, C); ``cos`` is NaN where fewer than ``min_shared`` classes are shared."""
    s = np.asarray(counts, dtype=np.float64)
    k = s.shape[0]
    cos = np.full((k, k), np.nan)
    shared = np.zeros((k, k), dtype=np.int64)
    held = s > 0
    for a in range(0, k, chunk):  # (chunk, K, C) blocks: memory stays bounded for many clients
        si, hi = s[a:a + chunk, None, :], held[a:a + chunk, None, :]
        m = hi & held[None, :, :]
        n = m.sum(axis=2)
        sj = np.broadcast_to(s[None, :, :], m.shape)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = (np.where(m, si, 0).sum(2) + np.where(m, sj, 0).sum(2)) / (2 * n)
            x = np.where(m, si - mean[..., None], 0.0)
            y = np.where(m, sj - mean[..., None], 0.0)
            den = np.sqrt((x * x).sum(2) * (y * y).sum(2))
            c = np.where(den > 0, (x * y).sum(2) / np.where(den > 0, den, 1.0), 0.0)
        cos[a:a + chunk] = np.where(n >= min_shared, c, np.nan)
        shared[a:a + chunk] = n
    return cos, shared


def raw_affinity(counts: np.ndarray, min_shared: int = 2) -> np.ndarray:
    """c_ij = |E_ij| / C · (2 − cos_ij) (Eq. 5) before filling and normalising; NaN where there is no overlap."""
    cos, shared = adjusted_cosine(counts, min_shared)
    return shared / np.asarray(counts).shape[1] * (2.0 - cos)


def affinity_matrix(counts: np.ndarray, min_shared: int = 2, fill_factor: float = 1.0) -> np.ndarray:
    """The (K, K) DA-PFL affinity: Eq. 5, minimum-affinity fill for pairs without overlap, zero diagonal,
    rows normalised to sum 1 (see the module docstring)."""
    c = raw_affinity(counts, min_shared)
    k = c.shape[0]
    off = ~np.eye(k, dtype=bool)
    valid = off & np.isfinite(c)
    fill = fill_factor * c[valid].min() if valid.any() else 1.0
    c = np.where(valid, c, fill)
    c[~off] = 0.0
    rows = c.sum(axis=1, keepdims=True)
    return np.divide(c, rows, out=np.zeros_like(c), where=rows > 0)


def pairwise_distances(w: torch.Tensor, power: float = 2.0) -> torch.Tensor:
    """‖w_i − w_j‖^power for the rows of ``w`` (m, P), in float64 (``torch.cdist`` without the Gram shortcut)."""
    w = w.to(torch.float64)
    d = torch.cdist(w[None], w[None], compute_mode="donot_use_mm_for_euclid_dist")[0]
    return d.pow(power)


def dynamic_weights(c: torch.Tensor, dist: torch.Tensor | None, sigma: float = 1.0, eps: float = 1e-8) -> torch.Tensor:
    """α (Eqs. 7–8) for m participants: ``c`` their (m, m) affinities, ``dist`` their (m, m) model distances
    d_ij (None: no dynamic term, α = c normalised per row — DA-PFL-V2). Rows sum to 1, the diagonal is 0
    (a lone participant's row is all zero)."""
    m = c.shape[0]
    off = ~torch.eye(m, dtype=torch.bool, device=c.device)
    c = torch.where(off, c.to(torch.float64), torch.zeros((), dtype=torch.float64, device=c.device))
    csum = c.sum(dim=1, keepdim=True)
    base = torch.where(csum > 0, c / torch.where(csum > 0, csum, torch.ones_like(csum)), off.to(c.dtype))
    theta = base
    if dist is not None:
        factor = 1.0 - torch.exp(-(dist.to(torch.float64) + eps) / sigma)
        factor = torch.where(factor == 0, torch.ones_like(factor), factor)
        theta = base * factor
    tsum = theta.sum(dim=1, keepdim=True)
    theta = torch.where(tsum > 0, theta, base)
    total = theta.sum(dim=1, keepdim=True)
    uniform = off.to(theta.dtype) / max(m - 1, 1)
    return torch.where(total > 0, theta / torch.where(total > 0, total, torch.ones_like(total)), uniform)
