"""Flux's distribution fidelity (R1; App. C.1.2, Table 4), as pure functions: how far the distance between two
clients' descriptors is from the 2-Wasserstein distance between their data,
ξ = | ‖d⁽ᵏ¹⁾ − d⁽ᵏ²⁾‖₂ − W₂(P(x⁽ᵏ¹⁾, y⁽ᵏ¹⁾), P(x⁽ᵏ²⁾, y⁽ᵏ²⁾)) |.

What the paper leaves open, decided here (our reading; Table 4 gives no space or cost):

* The space. Both distances are taken in the descriptor's own space: the clients' latents projected by the shared
  PCA (z, :func:`flplat.maths.flux_descriptors.moments`' input), before the server's min-max scaling. It is the
  space of Proposition C.1, where ‖d₁ − d₂‖ and W₂ of Gaussians with the same moments coincide (for the diagonal
  spreads the descriptor holds, ‖μ₁ − μ₂‖² + ‖σ₁ − σ₂‖² is exactly W₂² of the two diagonal Gaussians); ξ then
  measures what the first two moments miss (non-Gaussian shape, correlations between components).
* The joint distribution. The descriptor stacks a marginal block and one block per class (Eq. 7), so its squared
  distance is a sum over blocks; the true distance is summed the same way,
  W₂² = W₂²(P(z)) + Σ_u W₂²(P(z | y = u)), "the class-conditional version [...] applying it to each class
  component" (App. C.1.2). A class enters both sums only when both clients have at least ``min_class_samples``
  samples of it (the descriptor has no statistics otherwise).
* W₂ between two clients' samples is exact optimal transport between their empirical distributions (uniform
  weights, squared Euclidean cost): POT's ``ot.emd2`` (Flamary et al., JMLR 2021), not a Gaussian closed form
  (that would equal the descriptor distance by construction).

The paper pools "44,850 client–round pairs"; a Flux run with ``algorithm.fidelity_check`` measures every pair of
the clients that take part in the clustering round, with the descriptor model (:mod:`flplat.algorithms.flux`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from flplat.maths.flux_descriptors import flatten, moments


def empirical_w2(a: np.ndarray, b: np.ndarray, num_iter_max: int = 10_000_000) -> float:
    """W₂ between the empirical distributions of the rows of ``a`` (n, l) and ``b`` (m, l), uniform weights: the
    square root of exact optimal transport's cost (POT ``ot.emd2``) under the squared Euclidean cost."""
    import ot

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if len(a) == 0 or len(b) == 0:
        raise ValueError(f"W2 needs samples on both sides, got {len(a)} and {len(b)}")
    cost = ot.dist(a, b, metric="sqeuclidean")
    return math.sqrt(max(float(ot.emd2(ot.unif(len(a)), ot.unif(len(b)), cost, numItermax=num_iter_max)), 0.0))


def _in_class(y: np.ndarray, u: int) -> np.ndarray:
    """Rows of class ``u``: ``y == u``, or for multi-label ``y`` (n, U) the rows positive for label u."""
    y = np.asarray(y)
    return y[:, u] > 0.5 if y.ndim == 2 else y == u


def shared_classes(y1: np.ndarray, y2: np.ndarray, num_classes: int, min_class_samples: int = 2) -> list[int]:
    """The classes both clients hold at least ``min_class_samples`` samples of (those with descriptor statistics)."""
    return [u for u in range(num_classes)
            if _in_class(y1, u).sum() >= min_class_samples and _in_class(y2, u).sum() >= min_class_samples]


def joint_w2(z1: np.ndarray, y1: np.ndarray, z2: np.ndarray, y2: np.ndarray, classes: Sequence[int]) -> float:
    """√(W₂²(P(z₁), P(z₂)) + Σ_{u ∈ classes} W₂²(P(z₁ | y₁ = u), P(z₂ | y₂ = u))) (see the module docstring)."""
    sq = empirical_w2(z1, z2) ** 2
    for u in classes:
        sq += empirical_w2(z1[_in_class(y1, u)], z2[_in_class(y2, u)]) ** 2
    return math.sqrt(sq)


def descriptor(z: np.ndarray, y: np.ndarray, num_classes: int, min_class_samples: int = 2) -> np.ndarray:
    """A client's raw descriptor ``[μ_x, σ_x, μ_1, σ_1, ...]`` (Eq. 7, :mod:`flplat.maths.flux_descriptors`)."""
    marg, cond, _ = moments(torch.as_tensor(np.asarray(z, dtype=np.float64)), torch.as_tensor(np.asarray(y)),
                            num_classes, min_class_samples)
    return flatten(marg, cond)


def descriptor_distance(d1: np.ndarray, d2: np.ndarray, l: int, classes: Sequence[int]) -> float:  # noqa: E741
    """‖d₁ − d₂‖₂ over the marginal block and the blocks of ``classes`` (raw descriptors of length 2(U+1)l)."""
    keep = [np.arange(2 * l), *(np.arange(2 * l * (u + 1), 2 * l * (u + 2)) for u in classes)]
    idx = np.concatenate(keep)
    return float(np.linalg.norm(np.asarray(d1)[idx] - np.asarray(d2)[idx]))


def fidelity_errors(samples: Sequence[tuple[np.ndarray, np.ndarray]], num_classes: int, min_class_samples: int = 2
                    ) -> np.ndarray:
    """ξ of every pair k₁ < k₂ of clients, from each client's projected latents and labels ``(z (n, l), y)``: the
    descriptor distance (:func:`descriptor_distance`) against the true one (:func:`joint_w2`) over the same blocks;
    in the order (0, 1), (0, 2), ..., (1, 2), ..."""
    descs = [descriptor(z, y, num_classes, min_class_samples) for z, y in samples]
    out = []
    for i in range(len(samples)):
        for j in range(i + 1, len(samples)):
            (z1, y1), (z2, y2) = samples[i], samples[j]
            classes = shared_classes(y1, y2, num_classes, min_class_samples)
            l = np.asarray(z1).shape[1]  # noqa: E741
            out.append(abs(descriptor_distance(descs[i], descs[j], l, classes) - joint_w2(z1, y1, z2, y2, classes)))
    return np.asarray(out, dtype=np.float64)


def summary(xi: np.ndarray) -> dict[str, float]:
    """Table 4's columns over the pairs: max, min, mean and (population) std of ξ; NaN without pairs."""
    xi = np.asarray(xi, dtype=np.float64)
    if len(xi) == 0:
        return {k: float("nan") for k in ("max", "min", "mean", "std")}
    return {"max": float(xi.max()), "min": float(xi.min()), "mean": float(xi.mean()), "std": float(xi.std())}
