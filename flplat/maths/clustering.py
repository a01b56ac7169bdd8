"""Choosing the number of clusters by the silhouette of K-means++ (Clust-PSI-PFL, Sec. III-B), as pure functions.

:func:`silhouette_kmeans` is the paper's "PSI-based algorithm for selecting the number of clusters": for every
candidate j in ``k_min..min(k_max, K - 1)`` run scikit-learn ``KMeans(init="k-means++")`` on the rows of ``X``
(``K`` points; standardising them is the caller's job) and score it with the average silhouette
(``sklearn.metrics.silhouette_score``, Euclidean); tau is the SMALLEST j whose score is within ``tol`` of the
maximum (the paper's rule for ties, Sec. IV-B, Fig. 5).

Cases the paper leaves open, decided here (``SilhouetteSearch.reason`` says which one decided):

* ``K <= 2``: there is no candidate j in ``2..K-1`` -> one cluster. ``K = 3`` has the single candidate j = 2;
  it is kept only when its silhouette is positive (next rule).
* a candidate j whose silhouette is undefined is skipped: fewer distinct rows than j (K-means would return
  duplicate centres / empty clusters), K-means finding fewer than j non-empty clusters, or a silhouette
  subsample holding fewer than 2 (or as many as its size) clusters. No valid j at all (e.g. all rows identical)
  -> one cluster.
* every valid s(j) <= 0 (no cluster structure; the authors' code crashes here) -> one cluster by default
  (``nonpositive="one_cluster"``); ``nonpositive="argmax"`` takes the best j anyway.
* a cluster holding a single client is allowed (its silhouette contributes 0, as in scikit-learn).

Cost (the paper's Sec. III-C): one K-means per candidate, O(I·K·j·D) each, and one silhouette per candidate. The
pairwise distances of the scored rows are computed once and every silhouette reads them
(``silhouette_score(..., metric="precomputed")``: the same values as from the raw rows, O(m²) per candidate
instead of O(m²·D)). ``k_max`` caps the candidates (None: the paper's ``K - 1``), ``subsample`` scores every j on
the same random subset of m rows (the paper's remark on very large federations) and ``jobs`` fits the candidates
in that many worker processes (the same result: every candidate has its own seeded K-means). With the full scan the
K-means fits dominate: K = 1,000 (j = 2..999, n_init = 10) took 305 CPU s against 2 s at K = 100
(docs/performance.md, ``tools/benchmarks/bench_clustering.py``). Cluster ids are renumbered by first appearance
(client 0 is in cluster 0).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
from threadpoolctl import threadpool_limits

NONPOSITIVE_RULES = ("one_cluster", "argmax")


@dataclass
class SilhouetteSearch:
    """Outcome of :func:`silhouette_kmeans`."""

    k: int  # the chosen number of clusters tau
    labels: np.ndarray  # (K,) cluster of each row, renumbered by first appearance
    centroids: np.ndarray  # (k, D)
    silhouette: float  # s(tau); NaN when tau = 1 (undefined for one cluster)
    scores: dict[int, float] = field(default_factory=dict)  # s(j) for every valid candidate j
    reason: str = ""  # set when a degenerate-case rule, not the arg max, decided


def _renumber(labels: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    _, first = np.unique(labels, return_index=True)
    order = labels[np.sort(first)]  # old ids in order of first appearance
    new = np.empty(int(labels.max()) + 1, dtype=np.int64)
    new[order] = np.arange(len(order))
    return new[labels], centroids[order]


def kmeans(X: np.ndarray, k: int, seed: int = 0, n_init: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """K-means++ with ``k`` clusters: ``(labels (K,), centroids (k, D))``, renumbered by first appearance."""
    from sklearn.cluster import KMeans  # heavy imports stay out of `import flplat` (see tests/test_imports.py)
    from sklearn.exceptions import ConvergenceWarning

    X = np.asarray(X, dtype=np.float64)
    if k == 1:
        return np.zeros(len(X), dtype=np.int64), X.mean(axis=0, keepdims=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # fewer distinct points than k: caller checks
        km = KMeans(n_clusters=k, init="k-means++", n_init=n_init, random_state=seed).fit(X)
    return _renumber(km.labels_.astype(np.int64), km.cluster_centers_)


def silhouette_kmeans(X: np.ndarray, k_min: int = 2, k_max: int | None = None, seed: int = 0, n_init: int = 10,
                      subsample: int | None = None, rng: np.random.Generator | None = None,
                      nonpositive: str = "one_cluster", tol: float = 1e-12, threads: int | None = 1,
                      jobs: int = 1, progress=None) -> SilhouetteSearch:
    """Select tau = argmin{j : s(j) >= max s - tol} over j in ``k_min..min(k_max, K - 1)`` (see the module doc).

    ``rng``, when given, supplies the K-means seed and the silhouette subsample instead of ``seed``. ``threads``
    caps the OpenMP/BLAS threads during the search (None: no cap): these problems are too small to gain from
    threads, and on a busy machine OpenMP oversubscription made the search up to 100x slower. ``jobs`` > 1 fits
    the candidates in that many processes (joblib), each single-threaded; the result does not depend on it.

    ``progress(done, total)`` is called after each candidate j (K = 1,000 clients: up to 999 K-means fits, minutes).
    None: a progress bar with the time left on stderr when there are :data:`PROGRESS_FROM` candidates or more and
    stderr is a terminal (nothing in logs); the result does not depend on it.
    """
    with threadpool_limits(limits=threads):
        return _search(np.asarray(X, dtype=np.float64), k_min, k_max, seed, n_init, subsample, rng, nonpositive, tol,
                       int(jobs), progress)


PROGRESS_FROM = 50  # candidates of a τ search from which it shows a progress bar (a terminal only)


def _bar(total: int):
    """A ``progress(done, total)`` drawing a tqdm bar (with the time left) on a terminal; None when not worth it."""
    if total < PROGRESS_FROM:
        return None
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc="τ search (silhouette)", unit="k", leave=False, disable=None)
    if bar.disable:  # not a terminal: logs stay clean
        return None

    def step(done: int, total: int) -> None:
        bar.update(done - bar.n)
        if done >= total:
            bar.close()
    return step


def _fit_candidate(X: np.ndarray, j: int, seed: int, n_init: int) -> tuple[np.ndarray, np.ndarray]:
    with threadpool_limits(limits=1):  # in a worker process: one thread each
        return kmeans(X, j, seed, n_init)


def _search(X, k_min, k_max, seed, n_init, subsample, rng, nonpositive, tol, jobs=1, progress=None, fit=None
            ) -> SilhouetteSearch:
    """The τ search; ``fit(X, j) -> (labels, centroids)`` replaces K-means (serially) when given."""
    if X.ndim != 2 or len(X) == 0:
        raise ValueError(f"X must be a non-empty (K, D) matrix, got shape {X.shape}")
    if not np.isfinite(X).all():
        raise ValueError("X has non-finite entries")
    if nonpositive not in NONPOSITIVE_RULES:
        raise ValueError(f"nonpositive={nonpositive!r}; choose one of: {', '.join(NONPOSITIVE_RULES)}")
    K = len(X)
    gen = rng if rng is not None else np.random.default_rng(seed)
    km_seed = int(gen.integers(2**31 - 1)) if rng is not None else seed
    from sklearn.metrics import silhouette_score

    hi = K - 1 if k_max is None else min(int(k_max), K - 1)
    lo = max(int(k_min), 2)
    n_distinct = len(np.unique(X, axis=0))
    idx = None
    if subsample is not None and subsample < K:
        idx = np.sort(gen.choice(K, size=int(subsample), replace=False))  # one subset for every j
    from sklearn.metrics import pairwise_distances

    dist = pairwise_distances(X if idx is None else X[idx])  # once; every silhouette reads it
    candidates = range(lo, min(hi, n_distinct) + 1)
    if fit is not None:
        fitted = (fit(X, j) for j in candidates)
    elif jobs > 1 and len(candidates) > 1:
        from joblib import Parallel, delayed

        fitted = Parallel(n_jobs=jobs)(delayed(_fit_candidate)(X, j, km_seed, n_init) for j in candidates)
    else:
        fitted = (kmeans(X, j, km_seed, n_init) for j in candidates)
    scores: dict[int, float] = {}
    fits: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    report = progress if progress is not None else _bar(len(candidates))
    for n, (j, (labels, centroids)) in enumerate(zip(candidates, fitted), start=1):
        ls = labels if idx is None else labels[idx]
        if labels.max() + 1 >= j and 2 <= len(np.unique(ls)) <= len(ls) - 1:
            scores[j] = float(silhouette_score(dist, ls, metric="precomputed"))
            fits[j] = (labels, centroids)
        if report is not None:
            report(n, len(candidates))

    def one(reason: str) -> SilhouetteSearch:
        labels, centroids = kmeans(X, 1)
        return SilhouetteSearch(1, labels, centroids, float("nan"), scores, reason)

    if lo > hi:
        return one(f"no candidate j in {lo}..{hi} (K={K})")
    if not scores:
        return one(f"silhouette undefined for every j in {lo}..{hi} ({n_distinct} distinct rows)")
    best = max(scores.values())
    if best <= 0 and nonpositive == "one_cluster":
        return one(f"every silhouette <= 0 (max {best:.4g}): no cluster structure")
    tau = min(j for j, s in scores.items() if s >= best - tol)
    labels, centroids = fits[tau]
    reason = f"every silhouette <= 0 (max {best:.4g}); arg max taken" if best <= 0 else ""
    return SilhouetteSearch(tau, labels, centroids, scores[tau], scores, reason)


# ------------------------------------------------------------------------------------------- adaptive DBSCAN (Flux)

NO_KNEE_RULES = ("max", "median")
KNEE_RULES = ("kneedle", "kneed", "gap")
KNEE_GUARDS = ("noise", "none")  # Flux's algorithm.knee_guard: adaptive_dbscan with or without the noise guard
GUARD_CODES = ("", "within", "beyond")  # AdaptiveDBSCAN.guard values, in the order logged as numbers


@dataclass
class AdaptiveDBSCAN:
    """Outcome of :func:`adaptive_dbscan`."""

    labels: np.ndarray  # (K,) cluster of each row, noise points as singleton clusters, renumbered by first appearance
    eps: float  # the DBSCAN radius used
    knee_found: bool  # False: ``no_knee`` decided eps
    curve: np.ndarray  # sorted distances to the nearest other point (the curve the knee is sought on)
    num_noise: int = 0  # points DBSCAN left as noise (each became its own cluster)
    guard: str = ""  # "": the knee decided; "within": every nearest neighbour within noise; "beyond": none


def _distances(X: np.ndarray) -> np.ndarray:
    """Euclidean distances between the rows (SciPy), computed once per clustering."""
    from scipy.spatial.distance import cdist

    return cdist(X, X)


def _nearest(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index, distance) of every row's nearest *other* row, from the rows' distance matrix ``d``."""
    d = d.copy()
    np.fill_diagonal(d, np.inf)
    nn = d.argmin(axis=1)
    return nn, d[np.arange(len(d)), nn]


def _mst_edges(d: np.ndarray) -> np.ndarray:
    """Sorted edge lengths of the minimum spanning tree of the distance matrix ``d`` (SciPy)."""
    from scipy.sparse.csgraph import minimum_spanning_tree

    return np.sort(minimum_spanning_tree(d).data)


def _largest_step(sorted_values: np.ndarray) -> float:
    """Largest ratio of consecutive values of a sorted positive sequence (1.0 for fewer than two)."""
    v = np.asarray(sorted_values, dtype=np.float64)
    if len(v) < 2:
        return 1.0
    return float(np.max(v[1:] / np.maximum(v[:-1], np.finfo(np.float64).tiny)))


def nearest_other_distances(X: np.ndarray) -> np.ndarray:
    """Sorted (ascending) distance of every row to its nearest *other* row: the second-nearest neighbour when the
    point itself counts as the first (Flux App. D.2)."""
    return np.sort(_nearest(_distances(np.asarray(X, dtype=np.float64)))[1])


def kneedle_index(curve: np.ndarray) -> int | None:
    """Index of the knee of an ascending convex curve by Kneedle's difference curve (Satopää et al., 2011, the
    algorithm kneed implements): with x and y min-max normalised to [0, 1], the knee is the first arg max of
    x − y, the point farthest below the chord from the first to the last point. None when no point lies below
    the chord (fewer than 3 points, a flat or straight curve).

    Unlike kneed's offline mode this takes the global maximum of the difference curve, without kneed's threshold
    scan (which, when the tail holds two or more far points, returns the curve's last point, and whose result
    changed between kneed 0.8.5 and 0.9.0)."""
    c = np.asarray(curve, dtype=np.float64)
    if len(c) < 3 or not c[-1] > c[0]:
        return None
    diff = np.linspace(0.0, 1.0, len(c)) - (c - c[0]) / (c[-1] - c[0])
    i = int(np.argmax(diff))
    return i if diff[i] > 1e-12 else None


def gap_index(curve: np.ndarray) -> int | None:
    """Index of the point before the largest jump of an ascending curve (the last dense point); None when the curve
    has fewer than 3 points or is flat."""
    c = np.asarray(curve, dtype=np.float64)
    if len(c) < 3 or not c[-1] > c[0]:
        return None
    return int(np.argmax(np.diff(c)))


def knee_eps(curve: np.ndarray, no_knee: str = "max", rule: str = "kneedle") -> tuple[float, bool]:
    """(eps, found): the dense→sparse transition of the sorted curve (App. D.2) by ``rule``:

    * ``kneedle`` (default): Kneedle's difference-curve maximum (:func:`kneedle_index`), computed here;
    * ``kneed``: the kneed library's offline knee (``curve="convex"``, ``direction="increasing"``), as the
      authors' code calls it; lands on the last point when the tail holds several far points (kept for comparison);
    * ``gap``: the point before the largest jump (:func:`gap_index`).

    When the rule finds none (fewer than 3 points, a straight or flat curve) eps is the curve's max
    (``no_knee="max"``: every point reaches its nearest neighbour, so clusters are the connected components of that
    graph) or median."""
    if no_knee not in NO_KNEE_RULES:
        raise ValueError(f"no_knee={no_knee!r}; choose one of: {', '.join(NO_KNEE_RULES)}")
    if rule not in KNEE_RULES:
        raise ValueError(f"rule={rule!r}; choose one of: {', '.join(KNEE_RULES)}")
    curve = np.asarray(curve, dtype=np.float64)
    knee = None
    if rule == "kneed":
        if len(curve) >= 3 and curve[-1] > curve[0]:
            from kneed import KneeLocator

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # kneed warns when it finds no knee
                loc = KneeLocator(np.arange(len(curve)), curve, curve="convex", direction="increasing")
            knee = loc.knee_y if loc.knee is not None else None
    else:
        i = kneedle_index(curve) if rule == "kneedle" else gap_index(curve)
        knee = None if i is None else curve[i]
    if knee is not None:
        return float(knee), True
    return float(np.max(curve) if no_knee == "max" else np.median(curve)), False


def noise_ratios(X: np.ndarray, variance: np.ndarray) -> np.ndarray:
    """(K,) each row's distance to its nearest other row divided by √(v_a + v_b), the distance two samples of one
    distribution would have at the rows' sampling variances ``variance`` (K,): ≈ 1 or below when the two rows can
    come from one distribution, well above when they cannot."""
    return _ratios(*_nearest(_distances(np.asarray(X, dtype=np.float64))), variance)


def _ratios(nn: np.ndarray, dist: np.ndarray, variance: np.ndarray) -> np.ndarray:
    v = np.asarray(variance, dtype=np.float64)
    scale = np.sqrt(v + v[nn])
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(scale > 0, dist / scale, np.where(dist > 0, np.inf, 0.0))


def adaptive_dbscan(X: np.ndarray, scaling: float = 1.0, min_samples: int = 2, no_knee: str = "max",
                    knee: str = "kneedle", variance: np.ndarray | None = None, noise_ratio: float = 1.2,
                    noise_jump: float = 2.0) -> AdaptiveDBSCAN:
    """Flux's clustering U (App. D.2): eps = knee (by ``knee``, see :func:`knee_eps`) of the sorted
    nearest-other-point distances × ``scaling``,
    scikit-learn ``DBSCAN(eps, min_samples)``, noise points turned into singleton clusters. One row -> one cluster;
    eps = 0 (duplicate rows) is raised to the smallest positive float so identical rows still group.

    Noise guard (``variance`` given: each row's sampling variance, see
    :func:`flplat.maths.flux_descriptors.sampling_variance`). The knee is the transition from dense to sparse, and a
    curve can hold only one of the two. When every row's nearest neighbour is within ``noise_ratio`` of the
    sampling noise (:func:`noise_ratios`), no pair can be told apart: eps is the curve's max (``guard="within"``:
    the connected components of the nearest-neighbour graph). When none is and the rows have no group structure
    either — the sorted edge lengths of their minimum spanning tree (single linkage's merge heights) never grow by a
    factor ``noise_jump`` from one to the next — no two rows come from one distribution: every row is its own
    cluster (``guard="beyond"``). Otherwise the knee decides: rows beyond noise with such a jump are groups whose
    members differ by more than sampling (e.g. clients of one label distribution with different class
    proportions), far apart from each other."""
    from sklearn.cluster import DBSCAN

    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or len(X) == 0:
        raise ValueError(f"X must be a non-empty (K, D) matrix, got shape {X.shape}")
    if len(X) == 1:
        return AdaptiveDBSCAN(np.zeros(1, dtype=np.int64), 0.0, False, np.zeros(0))
    d = _distances(X)
    nn, dist = _nearest(d)
    curve = np.sort(dist)
    guard = ""
    if variance is not None:
        r = _ratios(nn, dist, variance)
        guard = ("within" if (r <= noise_ratio).all() else
                 "beyond" if (r > noise_ratio).all() and _largest_step(_mst_edges(d)) < noise_jump else "")
    if guard == "within":
        eps, found = float(curve[-1]), False
    elif guard == "beyond":
        eps, found = 0.0, False
    else:
        eps, found = knee_eps(curve, no_knee, knee)
        eps *= float(scaling)
    # the knee point's own distance is eps: nudge eps up (relative 1e-9) so rounding in scikit-learn's distance
    # computation does not drop the knee point from its neighbourhood
    eps = max(eps * (1 + 1e-9), np.finfo(np.float64).tiny)
    labels = DBSCAN(eps=eps, min_samples=int(min_samples)).fit(X).labels_.astype(np.int64)
    return AdaptiveDBSCAN(noise_as_singletons(labels), float(eps), found, curve, int((labels < 0).sum()), guard)


def noise_as_singletons(labels: np.ndarray) -> np.ndarray:
    """Density-based labels with every noise point (-1) its own cluster (Flux App. D.2: "reassigning noise points as
    singleton clusters"), renumbered by first appearance."""
    labels = np.asarray(labels, dtype=np.int64).copy()
    noise = labels < 0
    labels[noise] = labels.max(initial=-1) + 1 + np.arange(int(noise.sum()))
    return _renumber(labels, np.zeros((labels.max() + 1, 1)))[0]


def dynamic_start(round: int, accuracy: np.ndarray, total_rounds: int, threshold: float = 0.06, min_round: int = 3,
                  max_fraction: float = 0.8) -> bool:
    """Flux Eq. 14: cluster at round r when r >= ``min_round`` and (min_{min_round <= r' <= r} dA/dr(r') < T or
    r >= ``max_fraction`` · R). ``accuracy[i]`` is the global model's accuracy after round i + 1 and
    dA/dr(r') = A(r') − A(r' − 1) (one round apart)."""
    r = int(round)
    if r < min_round:
        return False
    if r >= max_fraction * total_rounds:
        return True
    acc = np.asarray(accuracy, dtype=np.float64)[:r]
    d = np.diff(acc)[max(min_round - 2, 0):r - 1]  # d[i] = A(i + 2) − A(i + 1)
    return bool(len(d) and d.min() < threshold)


# ------------------------------------------------------------- other unsupervised clusterings (Flux App. F.6.2)
# Flux is agnostic to the clustering algorithm as long as it needs no prior such as the number of clusters (§4.2.1,
# App. F.6.2, Tables 63-64). The paper names the algorithms (unsupervised k-means, HDBSCAN, agglomerative) and no
# parameter: scikit-learn's estimators with its defaults, except where a default cannot work without a prior (the
# number of clusters: chosen by the silhouette, as :func:`silhouette_kmeans`) or on ten clients (HDBSCAN's
# min_cluster_size 5: 2 here, the smallest group, as Flux's DBSCAN min_samples).


def agglomerative(X: np.ndarray, k: int, linkage: str = "ward") -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn ``AgglomerativeClustering(n_clusters=k, linkage)`` on the rows: ``(labels, centroids)`` (the
    clusters' means), renumbered by first appearance."""
    from sklearn.cluster import AgglomerativeClustering

    X = np.asarray(X, dtype=np.float64)
    if k == 1:
        return kmeans(X, 1)
    labels = AgglomerativeClustering(n_clusters=int(k), linkage=linkage).fit(X).labels_.astype(np.int64)
    cents = np.stack([X[labels == c].mean(axis=0) for c in range(int(labels.max()) + 1)])
    return _renumber(labels, cents)


LINKAGES = ("ward", "complete", "average", "single")


def silhouette_agglomerative(X: np.ndarray, linkage: str = "ward", k_max: int | None = None,
                             nonpositive: str = "one_cluster", tol: float = 1e-12, threads: int | None = 1
                             ) -> SilhouetteSearch:
    """Agglomerative clustering with the number of clusters chosen as :func:`silhouette_kmeans` chooses it: the
    smallest j in ``2..min(k_max, K - 1)`` whose average silhouette is within ``tol`` of the best, one cluster when
    there is no candidate or every silhouette is <= 0 (``nonpositive``)."""
    if linkage not in LINKAGES:
        raise ValueError(f"linkage={linkage!r}; choose one of: {', '.join(LINKAGES)}")
    with threadpool_limits(limits=threads):
        return _search(np.asarray(X, dtype=np.float64), 2, k_max, 0, 1, None, None, nonpositive, tol,
                       fit=lambda x, j: agglomerative(x, j, linkage))


def hdbscan(X: np.ndarray, min_cluster_size: int = 2, min_samples: int | None = None) -> np.ndarray:
    """scikit-learn ``HDBSCAN(min_cluster_size, min_samples)`` (its other parameters at their defaults) with noise
    points as singleton clusters (:func:`noise_as_singletons`), renumbered by first appearance. Fewer rows than
    ``min_cluster_size`` (or ``min_samples``) can form no cluster: every row its own."""
    from sklearn.cluster import HDBSCAN

    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or len(X) == 0:
        raise ValueError(f"X must be a non-empty (K, D) matrix, got shape {X.shape}")
    if len(X) < max(2, int(min_cluster_size), int(min_samples or 0)):
        return np.arange(len(X), dtype=np.int64)
    fit = HDBSCAN(min_cluster_size=int(min_cluster_size), min_samples=min_samples, copy=True).fit(X)
    return noise_as_singletons(fit.labels_)
