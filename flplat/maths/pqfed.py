"""The maths of PQFed (Yue et al., "PQFed: A Privacy-Preserving Quality-Controlled Federated Learning
Framework"), as pure functions.

* :func:`fit_public_pca` / :func:`project` -- the public feature extractor M_p: PCA fitted on a small public
  sample (§IV-C, §V-A step 1), applied by every client to its own data (Algorithm 1).
* :func:`laplace_ldp` -- Laplace local DP on the projected features (Eqs. 6-8): coordinate j gets noise
  ``Lap(0, s_j / ε)`` with the paper's ℓ1 sensitivity ``s_j = max_j − min_j`` (§V-D). The paper computes the
  range on the very data it perturbs, which makes the sensitivity itself data dependent; we default to a range
  fixed in advance from the *public* sample and clip every coordinate into it, so that ``s_j`` really bounds the
  change of one released coordinate (``range="public"``). ``range="local"`` is the paper's literal reading.
  ε = ∞ releases the features unchanged. The budget is ε **per coordinate**: each coordinate's noise is scaled
  to that coordinate's own range, so one released record (a d-dimensional feature row) is protected by sequential
  composition at d·ε (e.g. 500 with the paper's d = 50 PCA components and ε = 10; equivalently, the ℓ1
  sensitivity of the whole row is Σ_j s_j, not s_j), and a client releasing n rows of related data spends more.
* :func:`kmeans_histograms` -- server-side K-means M_k on the pooled noisy features and each client's histogram
  over the clusters (its "clustering distribution", §VI-D).
* :func:`emd_to_target` -- Eq. 4: EMD (POT ``ot.emd2``) between the target's and every client's histogram with
  the Euclidean distances between the K-means centroids as ground cost. Laplace noise spreads the centroids, so
  with the raw distances the EMD *grows* with the noise (measured: docs/results_earlier.md), while the paper's
  Fig. 3 shows it flattening; ``ground_cost="normalized"`` (distances over their maximum) gives the flattening.
  The strict / lenient rules compare EMDs with a fraction of their maximum, so they select the same clients
  under either cost.
* :func:`select_collaborators` -- strict (d ≤ 0.3·max d) and lenient (d ≤ 0.6·max d) selection (§IV-C), or all /
  none; :func:`emd_bands` -- the three groups of Fig. 5 those thresholds cut (strict, lenient only, excluded);
  :func:`distance_order` -- the order of Algorithm 2 (closest first).
* :func:`membership_inference` -- the Euclidean-distance membership-inference attack of §V-D.
"""

from __future__ import annotations

import math

import numpy as np

SELECTIONS = ("strict", "lenient", "all", "none", "given")
LDP_RANGES = ("public", "local")


def fit_public_pca(public_x: np.ndarray, n_components: int) -> tuple[np.ndarray, np.ndarray]:
    """PCA on the flattened public sample: ``(mean (D,), components (d, D))`` with ``d = min(n_components, n, D)``.

    Uses the exact (LAPACK) solver so every process and run gets the same components.
    """
    from sklearn.decomposition import PCA

    x = np.asarray(public_x, dtype=np.float64).reshape(len(public_x), -1)
    d = int(min(n_components, x.shape[0], x.shape[1]))
    pca = PCA(n_components=d, svd_solver="full").fit(x)
    return pca.mean_, pca.components_


def project(x: np.ndarray, mean: np.ndarray, components: np.ndarray) -> np.ndarray:
    """``(x − mean) · componentsᵀ`` on flattened rows: the client-side feature extraction ``Z_i = M_p(D_i)``."""
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    return (x - mean) @ np.asarray(components).T


def feature_range(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-coordinate ``(min, max)`` of a set of feature rows."""
    z = np.asarray(z, dtype=np.float64)
    return z.min(axis=0), z.max(axis=0)


def laplace_ldp(z: np.ndarray, epsilon: float, rng: np.random.Generator, lo: np.ndarray | None = None,
                hi: np.ndarray | None = None) -> np.ndarray:
    """Laplace release of feature rows ``z`` (Eq. 6), ε-LDP per coordinate (a d-coordinate row: d·ε by
    composition): clip coordinate j to ``[lo_j, hi_j]`` and add ``Lap(0, (hi_j − lo_j) / ε)``. ``lo``/``hi``
    None: the range of ``z`` itself (the paper's §V-D sensitivity; no clipping is then needed).
    ``epsilon = inf``: ``z`` unchanged."""
    z = np.asarray(z, dtype=np.float64)
    if math.isinf(epsilon):
        return z.copy()
    if lo is None or hi is None:
        lo, hi = feature_range(z)
    z = np.clip(z, lo, hi)
    scale = (np.asarray(hi) - np.asarray(lo)) / float(epsilon)
    return z + rng.laplace(0.0, 1.0, size=z.shape) * scale


def cluster_histograms(labels: np.ndarray, owners: np.ndarray, num_owners: int, k: int) -> np.ndarray:
    """``(num_owners, k)``: row i is the fraction of owner i's points in each cluster (zeros for no points)."""
    counts = np.zeros((num_owners, k), dtype=np.float64)
    np.add.at(counts, (np.asarray(owners), np.asarray(labels)), 1.0)
    tot = counts.sum(axis=1, keepdims=True)
    return np.divide(counts, tot, out=np.zeros_like(counts), where=tot > 0)


def kmeans_histograms(features: list[np.ndarray], k: int, seed: int, n_init: int = 1
                      ) -> tuple[np.ndarray, np.ndarray]:
    """K-means with ``k`` clusters on the pooled rows of ``features`` (one array per client); returns the
    centroids ``(k', d)`` and the clients' histograms ``(n_clients, k')`` (``k' = min(k, #points)``)."""
    from sklearn.cluster import KMeans

    pooled = np.concatenate([np.asarray(f, dtype=np.float64) for f in features])
    owners = np.concatenate([np.full(len(f), i) for i, f in enumerate(features)])
    k = int(min(k, len(pooled)))
    km = KMeans(n_clusters=k, n_init=int(n_init), random_state=int(seed)).fit(pooled)
    return km.cluster_centers_, cluster_histograms(km.labels_, owners, len(features), k)


GROUND_COSTS = ("euclidean", "normalized")


def emd_to_target(hists: np.ndarray, target: int, centers: np.ndarray, ground_cost: str = "euclidean") -> np.ndarray:
    """Eq. 4: EMD between row ``target`` of ``hists`` and every row, ground cost = centroid Euclidean distances
    (``normalized``: divided by the largest one, so EMDs lie in [0, 1] whatever the feature scale)."""
    import ot

    cost = ot.dist(np.asarray(centers, dtype=np.float64), np.asarray(centers, dtype=np.float64), metric="euclidean")
    if ground_cost == "normalized" and cost.max() > 0:
        cost = cost / cost.max()
    h = np.asarray(hists, dtype=np.float64)
    return np.array([0.0 if i == target else float(ot.emd2(h[target], h[i], cost)) for i in range(len(h))])


def select_collaborators(emd: np.ndarray, target: int, rule: str, strict_ratio: float = 0.3,
                         lenient_ratio: float = 0.6, given: list[int] | tuple[int, ...] = ()) -> np.ndarray:
    """The target's collaborators (sorted ids, target excluded).

    strict / lenient: clients with ``d_i ≤ ratio · max_{j≠T} d_j`` (§IV-C); all: every other client; none: nobody
    (the target trains alone); given: the ids in ``given`` (fixed groups, e.g. the paper's Exps. 1-16).
    """
    if rule not in SELECTIONS:
        raise ValueError(f"selection {rule!r}; choose one of {', '.join(SELECTIONS)}")
    emd = np.asarray(emd, dtype=np.float64)
    others = np.array([i for i in range(len(emd)) if i != target], dtype=np.int64)
    if rule == "none" or others.size == 0:
        return np.empty(0, dtype=np.int64)
    if rule == "all":
        return others
    if rule == "given":
        return np.array(sorted({int(k) for k in given} - {int(target)}), dtype=np.int64)
    ratio = strict_ratio if rule == "strict" else lenient_ratio
    return others[emd[others] <= ratio * emd[others].max()]


def emd_bands(emd: np.ndarray, target: int, ratios: tuple[float, float] = (0.3, 0.6)) -> np.ndarray:
    """Fig. 5's threshold bands: per client, 0 when ``d_i ≤ ratios[0] · max_{j≠T} d_j`` (strict selection), 1 when
    only ``d_i ≤ ratios[1] · max`` (lenient selection adds it), 2 beyond (excluded); -1 for the target. The
    thresholds are :func:`select_collaborators`' strict / lenient ones, so band ≤ 0 (≤ 1) is its strict (lenient)
    choice."""
    lo, hi = ratios
    if not 0 <= lo <= hi:
        raise ValueError(f"ratios must be 0 <= strict <= lenient, got {ratios}")
    emd = np.asarray(emd, dtype=np.float64)
    others = np.array([i for i in range(len(emd)) if i != target], dtype=np.int64)
    bands = np.full(len(emd), -1, dtype=np.int64)
    if others.size:
        top = emd[others].max()
        bands[others] = np.where(emd[others] <= lo * top, 0, np.where(emd[others] <= hi * top, 1, 2))
    return bands


def distance_order(emd: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """``candidates`` sorted by EMD to the target, closest first (ties by id): the list O of Algorithm 2."""
    c = np.asarray(candidates, dtype=np.int64)
    return c[np.lexsort((c, np.asarray(emd)[c]))]


def membership_inference(x: np.ndarray, epsilon: float, rng: np.random.Generator, n: int = 200,
                         alpha: float = 0.05, trials: int = 50, ldp_range: str = "local") -> dict[str, float]:
    """The Euclidean-distance membership-inference attack of §V-D on one set of PCA rows ``x``.

    Each trial splits ``x`` at random into halves A and B, releases ``Ã = LDP_ε(A)`` (``ldp_range="local"``: the
    sensitivity is A's own coordinate range, as in the paper; ``"global"``: the range of all of ``x``), draws
    ``m = min(n, |A|, |B|)`` members from A and ``m`` non-members from B, and scores each by its distance to the
    nearest released point. The threshold γ is the α-quantile of the non-members' distances (false-positive rate
    α); the power is the fraction of members with distance ≤ γ. The paper calls the B sample "case" and the A
    sample "control" but then tests whether case points are members of A; we use the reading under which its
    stated limits hold (power → 1 for large ε, → α for small ε): members from A, non-members from B.

    Returns the mean over trials of ``power`` (TPR), ``fpr`` and ``advantage = TPR − FPR``.
    """
    from scipy.spatial import cKDTree

    x = np.asarray(x, dtype=np.float64)
    if ldp_range not in ("local", "global"):
        raise ValueError(f"ldp_range {ldp_range!r}; choose local or global")
    glo, ghi = feature_range(x)
    tpr, fpr = [], []
    for _ in range(int(trials)):
        perm = rng.permutation(len(x))
        a, b = x[perm[: len(x) // 2]], x[perm[len(x) // 2:]]
        m = int(min(n, len(a), len(b)))
        lo, hi = (None, None) if ldp_range == "local" else (glo, ghi)
        tree = cKDTree(laplace_ldp(a, epsilon, rng, lo, hi))
        members = a[rng.choice(len(a), m, replace=False)]
        outsiders = b[rng.choice(len(b), m, replace=False)]
        d_in, _ = tree.query(members)
        d_out, _ = tree.query(outsiders)
        gamma = np.quantile(d_out, alpha, method="inverted_cdf")
        tpr.append(float(np.mean(d_in <= gamma)))
        fpr.append(float(np.mean(d_out <= gamma)))
    p, f = float(np.mean(tpr)), float(np.mean(fpr))
    return {"power": p, "fpr": f, "advantage": p - f}
