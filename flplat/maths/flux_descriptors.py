"""Flux's distribution descriptors (Fenoglio et al., Sec. 4.2.1 Eqs. 6-7, App. C.1 steps S1-S4, App. C.2), as
pure functions.

* S1 :func:`latent_bounds` — a client's element-wise min/max of its latents; the server takes the coordinate-wise
  min/max over clients (:func:`merge_bounds`).
* S2 :func:`shared_pca` — every client draws the same ``n_points`` (200) uniform points in the global box
  ``[lo, hi]`` from a shared seed and fits the same PCA with ``l`` (10) components (scikit-learn). As the fit is
  a deterministic function of (bounds, seed), it is computed once and handed to every client's function; the
  result is the projector each client would derive itself.
* S3 :func:`moments` — projected latents z = (s − mean) Wᵀ; the marginal mean and spread of z and the
  class-conditional mean and spread for each of the U classes. The spread is the per-dimension standard
  deviation (the diagonal of Σ, as in the authors' code: the descriptor length 2(U+1)l of Eq. 7 holds only for a
  diagonal Σ). A class with fewer than ``min_class_samples`` (2) samples has no statistics (NaN, filled later).
  Layout: ``[μ_x, σ_x, μ_1, σ_1, ..., μ_U, σ_U]``; the label-free part d' is the first 2l entries.
* S4 :func:`laplace_scales` — optional Laplace DP: b_i = Δ_i / ε with Δ_i = Range(g_i) / n (n = samples behind
  the statistic: the client's size for the marginal statistics, the class count for class statistics). Range is
  the width of the projected global box along each component, Σ_v |W_jv| (hi_v − lo_v), known to every client
  without looking at its data (:func:`projected_ranges`).
* :func:`sampling_variance` — the server's estimate of each client's sampling noise in the scaled descriptor
  space (the reference of the adaptive DBSCAN's noise guard, :func:`flplat.maths.clustering.adaptive_dbscan`).
* :class:`DescriptorScaler` — the server's min-max scaling of each group of statistics (marginal means,
  marginal spreads, class means, class spreads) with one scalar min/max per group, fitted on the clustering
  round's descriptors and reused for late joiners and test clients; missing class statistics become ``fill``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


def latent_bounds(lat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Element-wise (min, max) over the rows of a client's latents ``(n, D)``."""
    return lat.amin(dim=0), lat.amax(dim=0)


def merge_bounds(bounds: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[np.ndarray, np.ndarray]:
    """Coordinate-wise min of the clients' minima and max of their maxima."""
    lo = torch.stack([b[0] for b in bounds]).amin(dim=0)
    hi = torch.stack([b[1] for b in bounds]).amax(dim=0)
    return lo.double().numpy(), hi.double().numpy()


def shared_pca(lo: np.ndarray, hi: np.ndarray, n_points: int, n_components: int, seed: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """(mean (D,), components (l, D)) of a PCA fitted on ``n_points`` uniform draws in ``[lo, hi]`` (seeded).

    ``l`` is capped at min(n_components, D, n_points)."""
    from sklearn.decomposition import PCA

    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    pts = np.random.default_rng(seed).uniform(lo, hi, size=(int(n_points), len(lo)))
    k = int(min(n_components, len(lo), n_points))
    pca = PCA(n_components=k, svd_solver="full").fit(pts)
    return pca.mean_, pca.components_


def projected_ranges(components: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Width of the box ``[lo, hi]`` projected on each component: Σ_v |W_jv| (hi_v − lo_v), shape (l,)."""
    return np.abs(components) @ (np.asarray(hi) - np.asarray(lo))


def moments(z: torch.Tensor, y: torch.Tensor | None, num_classes: int, min_class_samples: int = 2
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(marginal ``[μ, σ]`` (2l,), class-conditional ``[μ_u, σ_u]`` (U, 2l) with NaN rows for classes with fewer
    than ``min_class_samples`` samples, class counts (U,)). ``y=None``: the label-free part only (U rows NaN).
    Multi-label ``y`` (n, U) of 0/1: row u is over the samples positive for label u.
    σ is the population standard deviation (ddof 0)."""
    z = z.double()
    marg = torch.cat([z.mean(0), z.std(0, correction=0)])
    cond = torch.full((num_classes, marg.numel()), float("nan"), dtype=torch.float64)
    counts = torch.zeros(num_classes, dtype=torch.long)
    if y is not None and len(y):
        if y.dim() == 2:  # multi-label (CheXpert): a sample counts for every label it is positive for
            onehot = (y.cpu() > 0.5).double().T  # (U, n)
            counts = onehot.sum(1).long()
        else:
            counts = torch.bincount(y.cpu(), minlength=num_classes)[:num_classes]
            onehot = torch.nn.functional.one_hot(y.cpu(), num_classes).double().T  # (U, n)
        n = counts.double().clamp(min=1)[:, None]
        mu = onehot @ z.cpu() / n
        var = onehot @ (z.cpu() ** 2) / n - mu ** 2
        ok = counts >= min_class_samples
        cond[ok] = torch.cat([mu, var.clamp(min=0).sqrt()], dim=1)[ok]
    return marg, cond, counts


def laplace_scales(ranges: np.ndarray, n: np.ndarray | float, epsilon: float) -> np.ndarray:
    """Laplace scales b = Range / (n ε) for statistics over ``n`` samples (App. C.2); inf where n = 0."""
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.asarray(ranges, dtype=np.float64) / (n * float(epsilon))


def add_laplace(marg: torch.Tensor, cond: torch.Tensor, n: int, counts: torch.Tensor, ranges: np.ndarray,
                epsilon: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each statistic perturbed with independent Laplace(0, b_i) noise (S4): marginal statistics over the client's
    ``n`` samples, class statistics over ``counts``; ``seed`` is the client's seed. Missing (NaN) rows stay NaN."""
    rng = np.random.default_rng(seed)
    r2 = np.concatenate([ranges, ranges])  # means and spreads share the bound
    marg = marg + torch.from_numpy(rng.laplace(0.0, laplace_scales(r2, max(n, 1), epsilon)))
    b = laplace_scales(r2[None, :], counts.double().numpy()[:, None], epsilon)
    noise = rng.laplace(0.0, np.where(np.isfinite(b), b, 0.0))
    return marg, cond + torch.from_numpy(noise)


def flatten(marg: torch.Tensor, cond: torch.Tensor) -> np.ndarray:
    """The descriptor vector ``[μ_x, σ_x, μ_1, σ_1, ...]`` (Eq. 7), length 2(U+1)l."""
    return torch.cat([marg.reshape(-1), cond.reshape(-1)]).numpy()


@dataclass
class DescriptorScaler:
    """Min-max scaling per statistic group with one scalar (min, max) each; see the module docstring."""

    l: int  # noqa: E741  (the paper's name for the reduced dimension)
    mins: np.ndarray | None = None  # (4,)
    maxs: np.ndarray | None = None
    fill: float = -1.0

    def groups(self, length: int) -> np.ndarray:
        """Group id (0: marginal mean, 1: marginal spread, 2: class means, 3: class spreads) of each entry."""
        l = self.l  # noqa: E741
        g = np.empty(length, dtype=np.int64)
        g[:l], g[l:2 * l] = 0, 1
        rest = (np.arange(length - 2 * l) // l) % 2
        g[2 * l:] = 2 + rest
        return g

    def fit(self, d: np.ndarray) -> DescriptorScaler:
        g = self.groups(d.shape[1])
        self.mins = np.array([np.nanmin(d[:, g == i]) if np.isfinite(d[:, g == i]).any() else 0.0 for i in range(4)])
        self.maxs = np.array([np.nanmax(d[:, g == i]) if np.isfinite(d[:, g == i]).any() else 1.0 for i in range(4)])
        return self

    def transform(self, d: np.ndarray) -> np.ndarray:
        g = self.groups(d.shape[1])
        span = np.where(self.maxs - self.mins > 0, self.maxs - self.mins, 1.0)
        out = (d - self.mins[g]) / span[g]
        return np.where(np.isnan(out), self.fill, out)


#: the statistic groups (:meth:`DescriptorScaler.groups`: 0 μ_x, 1 σ_x, 2 class means μ_u, 3 class spreads σ_u) of
#: each descriptor part Flux can cluster on (``algorithm.descriptor_part``; App. F.6.4, Table 66's rows)
PARTS = {"full": (0, 1, 2, 3), "marginal": (0, 1), "means": (0, 2), "mu_x": (0,)}


def part_mask(length: int, l: int, part: str) -> np.ndarray:  # noqa: E741
    """(length,) True on the entries of a descriptor ``[μ_x, σ_x, μ_1, σ_1, ...]`` that ``part`` (:data:`PARTS`)
    keeps; the kept label-free entries (groups 0, 1) come first, as in the descriptor."""
    return np.isin(DescriptorScaler(l).groups(length), PARTS[part])


def sampling_variance(d: np.ndarray, scaler: DescriptorScaler, n: np.ndarray, num_classes: int,
                      epsilon: float = 0.0, ranges: np.ndarray | None = None) -> np.ndarray:
    """(K,) expected squared distance between each client's scaled descriptor ``d`` (K, 2(U+1)l) and the descriptor
    of the distribution it was sampled from: the sampling noise of its statistics, in the scaler's units.

    A mean over m samples has variance σ²/m and a standard deviation ≈ σ²/(2m) (normal approximation), with σ the
    statistic's own spread entry; the marginal statistics use the client's size ``n``. The server does not know the
    class counts (they would reveal the label histogram), so a class statistic assumes ``n / num_classes`` samples;
    a missing class (every entry of its block equal to the scaler's ``fill``) adds nothing. With Laplace DP
    (``epsilon`` > 0, App. C.2) each statistic adds the noise's variance 2b², b = ``ranges`` / (m ε). Two clients of
    one distribution are then about √(v_a + v_b) apart. ``n`` is the size the client reports; a train split made of
    repeated samples (``partition.train_copies`` > 1, Flux App. F.2) counts its copies, so v is then too small by
    that factor (the server cannot know about the copies)."""
    d = np.asarray(d, dtype=np.float64)
    k, u, l = len(d), int(num_classes), scaler.l  # noqa: E741
    if d.shape[1] != 2 * (u + 1) * l:
        raise ValueError(f"descriptors have {d.shape[1]} entries; 2(U+1)l = {2 * (u + 1) * l} expected")
    span = np.where(scaler.maxs - scaler.mins > 0, scaler.maxs - scaler.mins, 1.0)
    blocks = d.reshape(k, u + 1, 2, l)
    g_mean, g_spread = np.array([0] + [2] * u), np.array([1] + [3] * u)
    m = np.asarray(n, dtype=np.float64)[:, None] * np.r_[1.0, np.full(u, 1.0 / u)][None, :]
    m = np.maximum(m, 1.0)[..., None]  # (K, U+1, 1) samples behind each block's statistics
    sd = blocks[:, :, 1, :] * span[g_spread][None, :, None] + scaler.mins[g_spread][None, :, None]
    v = sd ** 2 / m / span[g_mean][None, :, None] ** 2 + sd ** 2 / (2 * m) / span[g_spread][None, :, None] ** 2
    if epsilon > 0:
        b = np.asarray(ranges, dtype=np.float64)[None, None, :] / (m * float(epsilon))
        v = v + 2 * b ** 2 * (1 / span[g_mean][None, :, None] ** 2 + 1 / span[g_spread][None, :, None] ** 2)
    v[np.all(blocks == scaler.fill, axis=(2, 3))] = 0.0
    return v.sum(axis=(1, 2))
