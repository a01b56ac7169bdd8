"""Flux — Fenoglio et al., "Flux: Efficient Descriptor-Driven Clustered Federated Learning under Arbitrary
Distribution Shifts" (seed 003): §4.2, Eqs. 6–9 and 14, Algorithms 1–2, App. C.1–C.2, D.1–D.3.

Training (Algorithm 1). Until clustering starts the federation runs FedAvg; after each round the new global
model's accuracy A on the participants' ``start_split`` (sample-weighted) feeds the dynamic start rule Eq. 14
(:func:`flplat.maths.clustering.dynamic_start`: r >= 3 and min dA/dr < T = 0.06, or r >= 0.8R; ``start_round`` > 0
fixes the round instead). At the end of the start round the round's participants compute descriptors with that
global model (the *descriptor model*, kept for the rest of the run): latent min/max → global bounds (S1), the
shared PCA on 200 seeded uniform points, l = 10 (S2), marginal and class-conditional mean/std of the projected
latents (S3, Eq. 7), optional Laplace DP with ε = ``dp_epsilon`` (S4, App. C.2); all in
:mod:`flplat.maths.flux_descriptors`, run client-side through ``ops.compute``. The server min-max scales each group of
statistics (one scaler, fitted then and reused), clusters with the adaptive DBSCAN of App. D.2
(:func:`flplat.maths.clustering.adaptive_dbscan`: knee of the sorted nearest-other-client distances ×
``dbscan_scaling``, min_samples = 2, noise → singletons, ``no_knee`` when no knee is found), and every cluster
starts from the global model. Then each round is per-cluster FedAvg (Algorithm 1 l. 16–17). A client that was not in the
clustering computes its descriptor with the descriptor model when it is first selected and joins the nearest
centroid (Euclidean, full descriptor; Algorithm 1 l. 20–25).

Test phase (Algorithm 2, Eq. 9): an unseen client computes the label-free part d' = [μ_x, σ_x] with the
descriptor model and uses the cluster whose centroid's d' part is nearest.

Variants: ``flux_prior`` (K-means with M = ``num_clusters``, or the partition's true M when 0), ``flux_soft``
(Flux-soft, App. D.3: after the start every known client k gets its own model
Σ_j s_kj n_j θ_j / Σ_j s_kj n_j over the round's participants j, s_kj = exp(−‖d_k − d_j‖² / 2h²) with
h = ``soft_bandwidth`` × the median pairwise descriptor distance at the start, s_kj < ``soft_threshold`` set to 0
(sparse); an unseen client uses the model of the training client with the nearest d'), and dynamic re-clustering
(``recluster_every`` = n > 0: every n rounds after the start the participants' descriptors are refreshed, all known
clients re-clustered, and each new cluster warm-starts from the previous cluster whose centroid is nearest).

Choices where the paper is open (config keys; the authors' public code where it decides): σ is the diagonal
standard deviation; a class with fewer than ``min_class_samples`` samples gets the scaled value ``missing_fill``;
the PCA box is the paper's
[m⁻, m⁺] (the authors' code uses [0, 1.02·max]); ``no_knee="max"`` (their code has no fallback).

The knee (App. D.2: "the elbow point [...] which marks the transition from dense to sparse regions", found with
kneed). ``knee="kneedle"`` (default) is Kneedle's own definition, the maximum of the difference curve (the point
farthest below the chord of the sorted nearest-other distances), computed in flplat. The authors' call,
kneed's offline ``KneeLocator(convex, increasing)``, is ``knee="kneed"``: whenever the tail holds two or more far
points it returns the curve's last point (eps = the largest distance, one cluster: MNIST P(Y) levels 2 and 8),
and kneed 0.8.5 and 0.9.0 disagree on such curves. ``knee="gap"`` takes the point before the largest jump.

The noise guard (``knee_guard="noise"``, opt-in; the default ``"none"`` is the knee alone, the paper's adaptive DBSCAN
of App. D.2; ``flplat reproduce flux`` shows both as the rows "Flux" and "Flux + noise guard"). A knee needs a dense
and a sparse region, and some curves hold only one: every client of its own distribution (M = K: every knee pairs the
two closest clients), or every client among near-copies of its distribution (P(X) level 2: the curve rises gradually
and the knee cuts a group). The server compares each client's nearest-other distance with the distance two samples
of one distribution would have, √(v_a + v_b), v the sampling variance of the descriptor's statistics
(:func:`flplat.maths.flux_descriptors.sampling_variance`: σ²/m for a mean, σ²/(2m) for a spread, m = n for the
marginal statistics and n/U for a class — the server does not know the class counts —, plus the Laplace noise with
DP). All ratios ≤ ``knee_noise_ratio`` (1.2): eps = the curve's max (the nearest-neighbour graph's components). All
above and no step of a factor ``knee_noise_jump`` (2) between consecutive minimum-spanning-tree edges (no groups):
every client its own cluster. Otherwise the knee. The round metric ``dbscan_guard`` says which decided (0 the knee,
1 all within noise, 2 all beyond). Not in the paper: our answer to curves its rule cannot read; measured on the
planted MNIST shifts in docs/flux_clustering.md ("The knee").

The clustered part of the descriptor (``descriptor_part``). ``"full"`` (default, App. C.1 and Algorithm 1: the whole
d = [μ_x, σ_x, {μ_u, σ_u}] clusters the training clients; App. F.2's 1,200-client run changes only the number of
clients, the participation and the duplicated data). ``"marginal"`` (opt-in, not in the paper): the clients compute
and send only the label-free part d' = [μ_x, σ_x] (the one Algorithm 2 uses for unseen clients), and the clustering,
the centroids, the late joiners' assignment and Flux-soft's similarities use it alone. It cannot see the concept
shifts P(Y|X) and P(X|Y) (App. F.6.4, Table 66), but at 1,200 clients with 27–29 distinct images per client the
class-conditional part is sampling noise and d' alone recovers the four rotations (docs/flux_clustering.md).
``"means"`` (μ_x and the class means μ_u, no spread) and ``"mu_x"`` (μ_x alone) are two more rows of App. F.6.4's
Table 66 (descriptor parts × length l, ``pca_components`` 10 / 20 / 50); every part keeps its label-free entries
first, and the test phase compares those (``mu_x``: μ_x alone; ``means``: μ_x).

Other unsupervised clusterings (``clustering``; App. F.6.2, Tables 63-64; the paper names the algorithms, not their
parameters: scikit-learn's defaults, except as said). ``"kmeans_silhouette"`` ("Unsupervised k-Means"): K-means++
with the number of clusters chosen by the silhouette, k in 2..min(``silhouette_k_max``, K − 1) (0: K − 1), the
smallest k within 1e-12 of the best, one cluster when every silhouette is <= 0
(:func:`flplat.maths.clustering.silhouette_kmeans`; the paper does not say how its k-means chooses k).
``"agglomerative"``: scikit-learn's ``AgglomerativeClustering`` (``agglomerative_linkage``, default ward) with k chosen
by the same silhouette rule (:func:`~flplat.maths.clustering.silhouette_agglomerative`). ``"hdbscan"``: scikit-learn's
``HDBSCAN`` with ``hdbscan_min_cluster_size`` = 2 (its default 5 leaves at most two groups among ten clients; 2 is
the smallest group, as the DBSCAN's min_samples) and ``hdbscan_min_samples`` (0: = the min cluster size), noise →
singletons as the DBSCAN (:func:`~flplat.maths.clustering.hdbscan`). ``"kmeans"`` stays Flux-prior (the true M).

Test-time assignment (``test_assignment``; App. F.6.3, Table 65). ``"descriptor"`` (default, Algorithm 2) as above;
``"random"``: each unseen client uses a uniformly random cluster's model (Flux-soft: a random training client's),
drawn from a stream of its own (a child of the server's generator, which training then draws from unchanged).

Distribution fidelity (``fidelity_check``, off by default; App. C.1.2, Table 4). At the clustering round the
participants also hand their projected latents and labels to the server (a diagnostic: no deployment would) and
the run logs ``descriptor_w2_error_{max,min,mean,std}``: ξ over every pair of them, the descriptor distance against
the exact 2-Wasserstein distance of their data in the same space (:mod:`flplat.maths.flux_fidelity`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from flplat.api import (
    GUARD_CODES,
    KNEE_GUARDS,
    KNEE_RULES,
    LINKAGES,
    NO_KNEE_RULES,
    ClientPlan,
    ClusteredStrategy,
    ConfigError,
    EvalModels,
    ServerState,
    adaptive_dbscan,
    derive_seed,
    dynamic_start,
    fedavg,
    fedavg_by_group,
    hdbscan,
    kmeans,
    param_choice,
    register_algorithm,
    silhouette_agglomerative,
    silhouette_kmeans,
    stack,
    true_m,
)
from flplat.maths.flux_descriptors import (
    PARTS,
    DescriptorScaler,
    add_laplace,
    flatten,
    latent_bounds,
    merge_bounds,
    moments,
    part_mask,
    projected_ranges,
    sampling_variance,
    shared_pca,
)
from flplat.maths.flux_fidelity import fidelity_errors, summary


def cdist(a, b):
    """Pairwise Euclidean distances (scipy's ``cdist``, imported on first use: scipy.spatial is slow to import)."""
    from scipy.spatial.distance import cdist as scipy_cdist

    return scipy_cdist(a, b)


CLUSTERINGS = ("dbscan", "kmeans", "kmeans_silhouette", "hdbscan", "agglomerative")
AGGREGATIONS = ("hard", "soft")
SPLITS = ("val", "train", "test")
DESCRIPTOR_PARTS = tuple(PARTS)  # what clusters the training clients: full d, d' = [μ_x, σ_x], [μ_x, μ_u], μ_x
TEST_ASSIGNMENTS = ("descriptor", "random")
FIDELITY = ("max", "min", "mean", "std")  # Table 4's columns, logged as descriptor_w2_error_<column>


@dataclass
class FluxState:
    """Flux's state. Before clustering: the FedAvg phase's accuracy per round (``accuracy``, the dynamic start's
    input). From the start round (``start_round``) on: the model the descriptors are computed with
    (``descriptor_model``), the shared PCA (``pca_mean``, ``pca_components`` (l, D), ``pca_ranges``), the descriptor
    scaler's (mins, maxs) (``scaler``), every client's scaled descriptor (``descriptors`` (K, len), NaN rows: not
    yet described), the clusters' ``centroids``, Flux-soft's kernel ``bandwidth``, the adaptive DBSCAN's last
    ``dbscan_eps``, ``knee_found`` and ``knee_guard`` (index in GUARD_CODES), and the assignment after every
    clustered round (``assignment_by_round`` (rounds, K) for ``assignment_rounds``). ``descriptor_bytes``: this
    round's descriptor traffic. ``assignment_seed``: the test phase's random assignment stream
    (``test_assignment=random``); ``fidelity``: Table 4's ξ summary (``fidelity_check``)."""

    accuracy: np.ndarray = field(default_factory=lambda: np.zeros(0))
    start_round: int = 0
    descriptor_bytes: float = 0.0
    descriptor_model: torch.Tensor | None = None
    pca_mean: torch.Tensor | None = None
    pca_components: torch.Tensor | None = None
    pca_ranges: np.ndarray | None = None
    scaler: np.ndarray | None = None
    descriptors: np.ndarray | None = None
    centroids: np.ndarray | None = None
    bandwidth: float | None = None
    dbscan_eps: float | None = None
    knee_found: float | None = None
    knee_guard: float | None = None
    assignment_by_round: np.ndarray | None = None
    assignment_rounds: list[int] = field(default_factory=list)
    assignment_seed: int | None = None
    fidelity: np.ndarray | None = None


def _latents(view, chunk: int = 4096) -> torch.Tensor:
    with view.autocast():
        parts = [view.net.latent(view.x[a:a + chunk]).float() for a in range(0, len(view.x), chunk)]
    return torch.cat(parts).cpu() if parts else torch.zeros(0, 0)


def _bounds_fn(view):
    """Client side, S1: element-wise min/max of the latents (None for a client without samples)."""
    lat = _latents(view)
    return latent_bounds(lat) if len(lat) else None


def _projected_fn(view, mean, components):
    """Client side, the fidelity check only: the projected latents z and the labels of the client's split."""
    return ((_latents(view).double() - mean) @ components.T).numpy(), view.y.cpu().numpy()


def _descriptor_fn(view, mean, components, num_classes, min_class_samples, epsilon, ranges, labels):
    """Client side, S2–S4: the descriptor (Eq. 7) of the client's split; ``labels=False``: label-free part only."""
    z = (_latents(view).double() - mean) @ components.T
    if len(z) == 0:
        z = torch.full((1, components.shape[0]), float("nan"), dtype=torch.float64)
    marg, cond, counts = moments(z, view.y if labels else None, num_classes, min_class_samples)
    if epsilon > 0:
        marg, cond = add_laplace(marg, cond, len(z), counts, ranges, epsilon, view.seed)
    return flatten(marg, cond)


#: Algorithm 2: an unseen client's label-free descriptor d' picks the model of the nearest centroid (Flux-soft: of the
#: training client with the nearest descriptor); before clustering starts, the global model
HARD = EvalModels("cluster", "test_time", "the model of the centroid nearest to its label-free descriptor d'")
SOFT = EvalModels("personal", "test_time", "the model of the training client whose descriptor is nearest to its d'")


@register_algorithm
class Flux(ClusteredStrategy):
    name = "flux"
    eval_models = HARD

    @dataclass(frozen=True)
    class Config:
        pca_components: int = 10  # l, the reduced latent dimension
        pca_points: int = 200  # synthetic points the shared PCA is fitted on
        pca_seed: int = 0  # the seed every client shares (S2)
        min_class_samples: int = 2  # class statistics need this many samples (else missing_fill)
        missing_fill: float = -1.0  # scaled value of missing class statistics (outside the scaled [0, 1])
        dp_epsilon: float = 0.0  # > 0: Laplace DP on every statistic with this ε (App. C.2); 0: off
        start_round: int = 0  # 0: dynamic start (Eq. 14); r > 0: cluster at the end of round r
        start_threshold: float = 0.06  # T of Eq. 14
        start_min_round: int = 3  # earliest start round of Eq. 14
        start_max_fraction: float = 0.8  # start at the latest at this fraction of R
        start_split: str = "val"  # split the accuracy A of Eq. 14 is measured on (train when it is empty)
        clustering: str = "dbscan"  # dbscan (adaptive, App. D.2) | kmeans (Flux-prior) | App. F.6.2: kmeans_silhouette,
        #                             hdbscan, agglomerative
        dbscan_scaling: float = 1.0  # eps = knee × scaling (paper: 1.0 MNIST/CIFAR-10, 0.95 FMNIST, 0.98 CIFAR-100)
        dbscan_min_samples: int = 2
        knee: str = "kneedle"  # how the knee is found: kneedle (difference-curve max) | kneed (library) | gap
        knee_guard: str = "none"  # none: the knee alone (paper) | noise: our guard for curves without a transition
        knee_noise_ratio: float = 1.2  # nearest neighbours within this × the sampling-noise distance are "dense"
        knee_noise_jump: float = 2.0  # all beyond noise and no step this large in the MST edges: all singletons
        no_knee: str = "max"  # eps when no knee is found: max | median of the nearest-other distances
        num_clusters: int = 0  # kmeans: M; 0: the partition's true number of distributions (error without one)
        kmeans_seed: int = 0
        kmeans_n_init: int = 10
        aggregation: str = "hard"  # hard: per-cluster FedAvg | soft: Flux-soft (descriptor-similarity weights)
        soft_bandwidth: float = 1.0  # h = soft_bandwidth × median pairwise descriptor distance
        soft_threshold: float = 0.01  # similarities below this are set to 0 (sparse soft assignment)
        recluster_every: int = 0  # > 0: re-cluster every n rounds after the start, warm-starting the models
        descriptor_part: str = "full"  # full: d clusters (paper) | marginal: d' alone | means | mu_x (Table 66)
        silhouette_k_max: int = 0  # kmeans_silhouette / agglomerative: largest k tried; 0: K - 1
        agglomerative_linkage: str = "ward"  # scikit-learn's default
        hdbscan_min_cluster_size: int = 2
        hdbscan_min_samples: int = 0  # 0: = hdbscan_min_cluster_size (scikit-learn's None)
        test_assignment: str = "descriptor"  # descriptor: nearest centroid's d' (Algorithm 2) | random (App. F.6.3)
        fidelity_check: bool = False  # log ξ of App. C.1.2 / Table 4 at the clustering round (a diagnostic)

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        def need(cond, key, allowed):
            if not cond:
                raise ConfigError(f"{section}.{key}={getattr(cfg, key)!r} is out of range; allowed: {allowed}")

        def choice(key, allowed):
            param_choice(section, cfg, key, allowed)

        need(cfg.pca_components >= 1, "pca_components", "an integer >= 1")
        need(cfg.pca_points >= 2, "pca_points", "an integer >= 2")
        need(cfg.min_class_samples >= 1, "min_class_samples", "an integer >= 1")
        need(cfg.dp_epsilon >= 0, "dp_epsilon", "a number >= 0 (0: no DP)")
        need(cfg.start_round >= 0, "start_round", "an integer >= 0 (0: dynamic start, Eq. 14)")
        need(cfg.start_min_round >= 2, "start_min_round", "an integer >= 2")
        need(0 < cfg.start_max_fraction <= 1, "start_max_fraction", "a number in (0, 1]")
        choice("start_split", SPLITS)
        choice("clustering", CLUSTERINGS)
        need(cfg.dbscan_scaling > 0, "dbscan_scaling", "a number > 0")
        need(cfg.dbscan_min_samples >= 1, "dbscan_min_samples", "an integer >= 1")
        choice("knee", KNEE_RULES)
        choice("knee_guard", KNEE_GUARDS)
        need(cfg.knee_noise_ratio > 0, "knee_noise_ratio", "a number > 0")
        need(cfg.knee_noise_jump > 1, "knee_noise_jump", "a number > 1")
        choice("no_knee", NO_KNEE_RULES)
        need(cfg.num_clusters >= 0, "num_clusters", "an integer >= 0 (0: the partition's true M)")
        need(cfg.kmeans_n_init >= 1, "kmeans_n_init", "an integer >= 1")
        choice("aggregation", AGGREGATIONS)
        choice("descriptor_part", DESCRIPTOR_PARTS)
        need(cfg.silhouette_k_max == 0 or cfg.silhouette_k_max >= 2, "silhouette_k_max", "0 (K - 1) or an integer >= 2")
        choice("agglomerative_linkage", LINKAGES)
        need(cfg.hdbscan_min_cluster_size >= 2, "hdbscan_min_cluster_size", "an integer >= 2")
        need(cfg.hdbscan_min_samples >= 0, "hdbscan_min_samples", "an integer >= 0 (0: the min cluster size)")
        choice("test_assignment", TEST_ASSIGNMENTS)
        need(cfg.soft_bandwidth > 0, "soft_bandwidth", "a number > 0")
        need(0 <= cfg.soft_threshold < 1, "soft_threshold", "a number in [0, 1)")
        need(cfg.recluster_every >= 0, "recluster_every", "an integer >= 0 (0: cluster once)")

    def __init__(self, cfg, info):
        if cfg.clustering == "kmeans":
            cfg = replace(cfg, num_clusters=true_m(cfg.num_clusters, info, "algorithm.num_clusters"))
        super().__init__(cfg, info)
        self.eval_models = SOFT if self._soft() else HARD

    # ---- state ----------------------------------------------------------------------------------
    def init_state(self, init_weights, rng, ops):
        st = FluxState()
        if self.cfg.test_assignment == "random":  # a child stream: the server's generator draws on unchanged
            st.assignment_seed = int(rng.spawn(1)[0].integers(2**63 - 1))
        return ServerState(weights=init_weights.clone(),
                           assignment=np.full(self.info.num_clients, -1, dtype=np.int64), method=st)

    def _soft(self) -> bool:
        return self.cfg.aggregation == "soft"

    def _model(self, state, client: int) -> torch.Tensor:
        if self._soft() and state.personal is not None and state.personal.has(client):
            return state.personal.get(client)
        return self.eval_weights_hard(state, client)

    def eval_weights_hard(self, state, client: int) -> torch.Tensor:
        return super().eval_weights(state, client)

    def eval_weights(self, state, client):
        return self._model(state, client)

    def plan(self, state, client):
        return ClientPlan(weights=self._model(state, client))

    # ---- descriptors ----------------------------------------------------------------------------
    def _length(self, state) -> int:
        return 2 * (self.info.num_classes + 1) * int(state.method.pca_components.shape[0])

    def _describe(self, state, clients, ops, labels: bool = True, split: str = "train") -> np.ndarray:
        """The clients' raw descriptors (full length; the part not sent is NaN or unused); counts the bytes sent."""
        st, cfg = state.method, self.cfg
        fn = partial(_descriptor_fn, mean=st.pca_mean, components=st.pca_components,
                     num_classes=self.info.num_classes, min_class_samples=cfg.min_class_samples,
                     epsilon=cfg.dp_epsilon, ranges=st.pca_ranges, labels=labels)
        w = st.descriptor_model
        raw = np.stack(ops.compute([(int(k), w) for k in clients], fn, split,
                                   seed=derive_seed(cfg.pca_seed, "flux-dp", state.round)))
        sent = self._mask(state, free=split == "test").sum()
        st.descriptor_bytes += len(clients) * int(sent) * 4
        return raw

    def _scaler(self, state) -> DescriptorScaler:
        mins, maxs = state.method.scaler
        return DescriptorScaler(int(state.method.pca_components.shape[0]), mins, maxs, self.cfg.missing_fill)

    def _labels(self) -> bool:
        """Whether the training clients' descriptors hold class-conditional statistics (``descriptor_part``)."""
        return any(g >= 2 for g in PARTS[self.cfg.descriptor_part])

    def _mask(self, state, free: bool = False) -> np.ndarray:
        """The entries of a full-length descriptor that ``descriptor_part`` keeps (``free``: its label-free ones)."""
        l = int(state.method.pca_components.shape[0])  # noqa: E741
        mask = part_mask(self._length(state), l, self.cfg.descriptor_part)
        return mask & part_mask(self._length(state), l, "marginal") if free else mask

    def _part(self, state, d: np.ndarray) -> np.ndarray:
        """The part of scaled descriptors the clustering uses (``descriptor_part``; all of d by default)."""
        return d if self.cfg.descriptor_part == "full" else d[:, self._mask(state)]

    def _cluster(self, state, d: np.ndarray, clients: np.ndarray) -> np.ndarray:
        cfg = self.cfg
        part = self._part(state, d)
        k_max = cfg.silhouette_k_max or None
        with threadpool_limits(limits=1):
            if cfg.clustering == "kmeans":
                k = int(min(cfg.num_clusters, len(np.unique(part, axis=0))))
                return kmeans(part, k, cfg.kmeans_seed, cfg.kmeans_n_init)[0]
            if cfg.clustering == "kmeans_silhouette":
                return silhouette_kmeans(part, k_max=k_max, seed=cfg.kmeans_seed, n_init=cfg.kmeans_n_init).labels
            if cfg.clustering == "agglomerative":
                return silhouette_agglomerative(part, cfg.agglomerative_linkage, k_max).labels
            if cfg.clustering == "hdbscan":
                return hdbscan(part, cfg.hdbscan_min_cluster_size, cfg.hdbscan_min_samples or None)
            return self._dbscan(state, d, part, clients)

    def _dbscan(self, state, d: np.ndarray, part: np.ndarray, clients: np.ndarray) -> np.ndarray:
        """The adaptive DBSCAN of App. D.2 (with the noise guard when ``knee_guard=noise``); logs eps and the knee."""
        cfg, st = self.cfg, state.method
        var = None
        if cfg.knee_guard == "noise":  # a missing class part (d' alone) adds no variance; spreads a part drops do
            var = sampling_variance(d, self._scaler(state), self.info.num_samples[clients], self.info.num_classes,
                                    cfg.dp_epsilon, st.pca_ranges)
        res = adaptive_dbscan(part, cfg.dbscan_scaling, cfg.dbscan_min_samples, cfg.no_knee, cfg.knee, var,
                              cfg.knee_noise_ratio, cfg.knee_noise_jump)
        st.dbscan_eps = res.eps
        st.knee_found = float(res.knee_found)
        st.knee_guard = float(GUARD_CODES.index(res.guard))
        return res.labels

    @staticmethod
    def _centroids(d: np.ndarray, labels: np.ndarray) -> np.ndarray:
        return np.stack([d[labels == c].mean(0) for c in range(int(labels.max()) + 1)])

    def _start(self, state, clients: np.ndarray, ops) -> None:
        """Descriptor extraction and unsupervised clustering (Algorithm 1 l. 1–11) at the end of the start round."""
        st, cfg = state.method, self.cfg
        w = state.weights.clone()
        st.descriptor_model = w
        bounds = [b for b in ops.compute([(int(k), w) for k in clients], _bounds_fn, "train") if b is not None]
        lo, hi = merge_bounds(bounds)
        st.descriptor_bytes += len(clients) * 2 * len(lo) * 4
        mean, comps = shared_pca(lo, hi, cfg.pca_points, cfg.pca_components, cfg.pca_seed)
        st.pca_mean, st.pca_components = torch.from_numpy(mean), torch.from_numpy(comps)
        st.pca_ranges = projected_ranges(comps, lo, hi)
        raw = self._describe(state, clients, ops, labels=self._labels())
        scaler = DescriptorScaler(comps.shape[0], fill=cfg.missing_fill).fit(raw)
        st.scaler = np.stack([scaler.mins, scaler.maxs])
        d = scaler.transform(raw)
        st.descriptors = np.full((self.info.num_clients, d.shape[1]), np.nan)
        st.descriptors[clients] = d
        labels = self._cluster(state, d, np.asarray(clients))
        st.centroids = self._centroids(self._part(state, d), labels)
        state.clusters = w[None].repeat(int(labels.max()) + 1, 1)
        state.assignment[clients] = labels
        st.start_round = state.round
        if self._soft():
            pair = cdist(self._part(state, d), self._part(state, d))[np.triu_indices(len(d), 1)]
            med = float(np.median(pair[pair > 0])) if (pair > 0).any() else 1.0
            st.bandwidth = cfg.soft_bandwidth * med
            state.personal = self.info.client_store(default=w, name="flux_soft")
        if cfg.fidelity_check:
            self._fidelity(state, clients, ops)

    def _fidelity(self, state, clients: np.ndarray, ops) -> None:
        """App. C.1.2 / Table 4: ξ over every pair of the clustering round's participants, with the descriptor model
        (the check's own hand-over of projected latents and labels; nothing of it is counted as descriptor bytes)."""
        st = state.method
        fn = partial(_projected_fn, mean=st.pca_mean, components=st.pca_components)
        samples = [s for s in ops.compute([(int(k), st.descriptor_model) for k in clients], fn, "train")
                   if len(s[0])]
        xi = fidelity_errors(samples, self.info.num_classes, self.cfg.min_class_samples)
        st.fidelity = np.array([summary(xi)[k] for k in FIDELITY])

    def _recluster(self, state, clients: np.ndarray, ops) -> None:
        """Dynamic re-clustering with warm start from the nearest previous centroid (App. D.3)."""
        st = state.method
        st.descriptors[clients] = self._scaler(state).transform(self._describe(state, clients, ops,
                                                                                  labels=self._labels()))
        known = np.flatnonzero(np.isfinite(st.descriptors[:, 0]))
        d = st.descriptors[known]
        labels = self._cluster(state, d, known)
        cents = self._centroids(self._part(state, d), labels)
        prev = cdist(cents, st.centroids).argmin(axis=1)
        state.clusters = state.clusters[torch.as_tensor(prev)].clone()
        st.centroids = cents
        state.assignment[known] = labels

    # ---- round ----------------------------------------------------------------------------------
    def select(self, state, rng, ops):
        state.method.descriptor_bytes = 0.0
        sel = super().select(state, rng, ops)
        if state.clusters is not None:  # late joiners: descriptor -> nearest centroid (Algorithm 1 l. 20–25)
            new = np.array([k for k in sel if state.assignment[k] < 0], dtype=np.int64)
            if len(new):
                d = self._scaler(state).transform(self._describe(state, new, ops, labels=self._labels()))
                state.method.descriptors[new] = d
                state.assignment[new] = cdist(self._part(state, d), state.method.centroids).argmin(axis=1)
        return sel

    def _accuracy(self, state, clients, ops) -> float:
        split = self.cfg.start_split
        res = ops.evaluate([(int(k), state.weights) for k in clients], split)
        if sum(r.num_samples for r in res) == 0 and split != "train":
            res = ops.evaluate([(int(k), state.weights) for k in clients], "train")
        n = sum(r.num_samples for r in res)
        return sum(r.correct for r in res) / n if n else 0.0

    def _starts_now(self, state) -> bool:
        cfg, r = self.cfg, state.round
        if cfg.start_round:
            return r >= cfg.start_round
        return dynamic_start(r, state.method.accuracy, self.info.rounds, cfg.start_threshold, cfg.start_min_round,
                             cfg.start_max_fraction)

    def aggregate(self, state, results, ops):
        if results:
            self._aggregate(state, results, ops)
        if state.clusters is not None:  # the round's final assignment, for the per-round artifact
            st = state.method
            past = np.zeros((0, self.info.num_clients)) if st.assignment_by_round is None else st.assignment_by_round
            st.assignment_by_round = np.vstack([past, state.assignment[None]]).astype(np.int64)
            st.assignment_rounds = [*st.assignment_rounds, state.round]
        return state

    def _aggregate(self, state, results, ops) -> None:
        clients = np.array([r.client for r in results], dtype=np.int64)
        st = state.method
        if state.clusters is None:  # FedAvg phase before clustering
            state.weights = fedavg(results)
            if not self.cfg.start_round:
                st.accuracy = np.append(st.accuracy, self._accuracy(state, clients, ops))
            if self._starts_now(state):
                self._start(state, clients, ops)
            return
        state.clusters = fedavg_by_group(results, state.assignment[clients], state.clusters)
        if self._soft():
            self._soft_aggregate(state, results, clients)
        if self.cfg.recluster_every and (state.round - st.start_round) % self.cfg.recluster_every == 0:
            self._recluster(state, clients, ops)

    def _soft_aggregate(self, state, results, clients) -> None:
        """Flux-soft: every known client's model is the similarity- and size-weighted mean of the participants'."""
        w, n = stack(results)
        d = state.method.descriptors
        known = np.flatnonzero(np.isfinite(d[:, 0]))
        s = np.exp(-cdist(self._part(state, d[known]), self._part(state, d[clients])) ** 2
                   / (2 * state.method.bandwidth ** 2))
        s[s < self.cfg.soft_threshold] = 0.0
        coef = torch.as_tensor(s, dtype=w.dtype) * n[None, :]
        total = coef.sum(dim=1)
        rows = torch.nonzero(total > 0).flatten()
        mixed = (coef[rows] / total[rows, None]) @ w
        for i, row in zip(rows.tolist(), mixed):
            state.personal.set(int(known[i]), row)

    # ---- test phase -----------------------------------------------------------------------------
    def test_time_weights(self, state, ops, clients):
        """Algorithm 2: label-free descriptor d' -> nearest centroid's model (Flux-soft: nearest client's model)."""
        if state.clusters is None:
            return [state.weights for _ in clients]
        st = state.method
        known = np.flatnonzero(np.isfinite(st.descriptors[:, 0]))
        if self.cfg.test_assignment == "random":  # App. F.6.3: a random cluster (Flux-soft: training client)
            pick = np.random.default_rng(st.assignment_seed).integers(
                len(known) if self._soft() else state.clusters.shape[0], size=len(clients))
            return ([self._model(state, int(k)) for k in known[pick]] if self._soft()
                    else [state.clusters[int(i)] for i in pick])
        free = self._mask(state, free=True)  # the label-free entries of the part; they come first in the part
        dq = self._scaler(state).transform(self._describe(state, clients, ops, labels=False, split="test"))[:, free]
        if self._soft():
            nearest = known[cdist(dq, st.descriptors[known][:, free]).argmin(axis=1)]
            return [self._model(state, int(k)) for k in nearest]
        c = cdist(dq, st.centroids[:, :int(free.sum())]).argmin(axis=1)
        views = list(state.clusters)
        return [views[int(i)] for i in c]

    # ---- reporting ------------------------------------------------------------------------------
    def round_metrics(self, state):
        m = super().round_metrics(state)
        st = state.method
        m["descriptor_bytes"] = float(st.descriptor_bytes)
        m["clustering_started"] = float(state.clusters is not None)
        if st.pca_components is not None:
            m["descriptor_bytes_per_client"] = float(self._mask(state).sum() * 4)
        if st.fidelity is not None:  # App. C.1.2 / Table 4
            m.update({f"descriptor_w2_error_{k}": float(v) for k, v in zip(FIDELITY, st.fidelity)})
        if st.dbscan_eps is not None:
            m["dbscan_eps"] = float(st.dbscan_eps)
            m["dbscan_knee_found"] = st.knee_found
            m["dbscan_guard"] = st.knee_guard  # index in GUARD_CODES: 0 knee, 1 within, 2 beyond
        return m

    def _known(self, state):
        d = state.method.descriptors
        if d is None:
            return np.zeros(0, dtype=np.int64), np.zeros((0, 0))
        known = np.flatnonzero(np.isfinite(d[:, 0]))
        return known, d[known]

    def scatter(self, state):
        known, d = self._known(state)
        if len(known) < 2:
            return {}
        from sklearn.decomposition import PCA

        k = min(2, d.shape[1], len(known))
        pts = PCA(n_components=k, random_state=0).fit_transform(d)
        if k < 2:
            pts = np.concatenate([pts, np.zeros((len(pts), 2 - k))], axis=1)
        return {"flux_descriptors_2d": (pts, state.assignment[known])}

    def artifacts(self, state):
        out = super().artifacts(state)
        hist = state.method.assignment_by_round
        if hist is not None and len(hist):
            rounds = state.method.assignment_rounds
            head = "client," + ",".join(f"round_{r}" for r in rounds)
            body = "\n".join(f"{k}," + ",".join(str(int(v)) for v in hist[:, k]) for k in range(hist.shape[1]))
            out["clustering/assignment_by_round.csv"] = head + "\n" + body + "\n"
        known, d = self._known(state)
        if len(known):
            head = "client,cluster," + ",".join(f"d{i}" for i in range(d.shape[1]))
            rows = "\n".join(f"{k},{int(state.assignment[k])}," + ",".join(f"{v:.6g}" for v in row)
                             for k, row in zip(known, d))
            out["clustering/descriptors.csv"] = head + "\n" + rows + "\n"
        return out


@register_algorithm
class FluxPrior(Flux):
    """Flux-prior (§5.2, App. D.2): K-means on the descriptors with the true number of distributions M."""

    name = "flux_prior"

    @dataclass(frozen=True)
    class Config(Flux.Config):
        clustering: str = "kmeans"


@register_algorithm
class FluxSoft(Flux):
    """Flux-soft (App. D.3): descriptor-similarity-weighted soft aggregation instead of hard clusters."""

    name = "flux_soft"
    eval_models = SOFT

    @dataclass(frozen=True)
    class Config(Flux.Config):
        aggregation: str = "soft"
