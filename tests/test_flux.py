"""Flux: descriptor maths, adaptive DBSCAN, the start rule, the algorithm's defining behaviour and the test phase."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flplat.errors import ConfigError
from flplat.experiment import load_config, prepare, run
from flplat.maths.clustering import (
    adaptive_dbscan,
    dynamic_start,
    gap_index,
    knee_eps,
    kneedle_index,
    nearest_other_distances,
)
from flplat.maths.flux_descriptors import (
    DescriptorScaler,
    add_laplace,
    flatten,
    laplace_scales,
    merge_bounds,
    moments,
    projected_ranges,
    shared_pca,
)


# ---------------------------------------------------------------------------------------------- pure maths
def test_moments_hand_computed():
    z = torch.tensor([[0.0, 2.0], [2.0, 2.0], [4.0, 8.0]])
    y = torch.tensor([0, 0, 1])
    marg, cond, counts = moments(z, y, num_classes=3)
    assert marg.tolist() == pytest.approx([2.0, 4.0, np.sqrt(8 / 3), np.sqrt(8)])
    assert counts.tolist() == [2, 1, 0]
    assert cond[0].tolist() == pytest.approx([1.0, 2.0, 1.0, 0.0])
    assert torch.isnan(cond[1]).all() and torch.isnan(cond[2]).all()  # fewer than 2 samples: no statistics
    _, cond_free, _ = moments(z, None, num_classes=3)
    assert torch.isnan(cond_free).all()
    assert flatten(marg, cond).shape == (2 * (3 + 1) * 2,)  # 2(U+1)l


def test_bounds_pca_and_ranges():
    lo, hi = merge_bounds([(torch.tensor([0.0, 1.0]), torch.tensor([2.0, 3.0])),
                           (torch.tensor([-1.0, 2.0]), torch.tensor([1.0, 5.0]))])
    assert lo.tolist() == [-1.0, 1.0] and hi.tolist() == [2.0, 5.0]
    m1, c1 = shared_pca(np.zeros(5), np.ones(5), 200, 3, seed=7)
    m2, c2 = shared_pca(np.zeros(5), np.ones(5), 200, 3, seed=7)
    assert c1.shape == (3, 5) and np.array_equal(c1, c2) and np.array_equal(m1, m2)  # every client derives the same
    assert shared_pca(np.zeros(4), np.ones(4), 200, 10, seed=0)[1].shape == (4, 4)  # l capped at D
    comps = np.array([[1.0, 0.0], [0.6, -0.8]])
    assert projected_ranges(comps, np.zeros(2), np.array([1.0, 2.0])).tolist() == pytest.approx([1.0, 2.2])
    assert laplace_scales(np.array([2.0]), 100, 10.0).tolist() == pytest.approx([0.002])


def test_laplace_noise_shrinks_with_epsilon_and_keeps_missing_classes_missing():
    marg = torch.zeros(4, dtype=torch.float64)
    cond = torch.zeros(2, 4, dtype=torch.float64)
    cond[1] = float("nan")
    counts = torch.tensor([50, 0])
    ranges = np.array([1.0, 1.0])
    big = add_laplace(marg, cond, 100, counts, ranges, 0.01, seed=1)
    small = add_laplace(marg, cond, 100, counts, ranges, 100.0, seed=1)
    assert big[0].abs().mean() > 100 * small[0].abs().mean()
    assert torch.isnan(big[1][1]).all() and torch.isfinite(big[1][0]).all()


def test_descriptor_scaler_groups_and_fill():
    s = DescriptorScaler(l=1, fill=-1.0)
    d = np.array([[0.0, 1.0, 2.0, 0.5], [2.0, 3.0, np.nan, np.nan]])  # [mu_x, sd_x, mu_1, sd_1]
    assert s.groups(4).tolist() == [0, 1, 2, 3]
    out = s.fit(d).transform(d)
    assert out.tolist() == [[0.0, 0.0, 0.0, 0.0], [1.0, 1.0, -1.0, -1.0]]


def test_adaptive_dbscan_planted_groups_outlier_and_fallback():
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(c, 0.01, (4, 3)) for c in (0.0, 1.0, 2.0)] + [np.full((1, 3), 9.0)])
    curve = nearest_other_distances(X)
    assert np.all(np.diff(curve) >= 0) and curve[-1] > 5  # sorted; the outlier is far from everything
    res = adaptive_dbscan(X)
    assert res.knee_found and res.num_noise == 1
    assert res.labels.tolist() == [0] * 4 + [1] * 4 + [2] * 4 + [3]  # noise point -> its own singleton cluster
    two = adaptive_dbscan(np.array([[0.0, 0.0], [3.0, 4.0]]))  # no knee on 2 points: eps = max distance
    assert not two.knee_found and two.eps == pytest.approx(5.0) and two.labels.tolist() == [0, 0]
    assert knee_eps(np.array([1.0, 1.0, 1.0]), "median") == (1.0, False)
    assert adaptive_dbscan(np.ones((1, 2))).labels.tolist() == [0]


# MNIST P(Y) level 8 (issue 11): seven dense nearest-other distances, then three far clients at the tail
TAIL3 = np.array([0.59, 0.60, 0.63, 0.63, 0.68, 0.68, 0.84, 12.43, 12.50, 12.79])


def test_kneedle_finds_the_dense_to_sparse_transition_with_several_far_points():
    assert kneedle_index(TAIL3) == 6 and knee_eps(TAIL3) == (0.84, True)  # not the last point 12.79
    flat2 = np.array([0.5] * 8 + [12.0, 12.0])  # kneed 0.8.5 and 0.9.0 disagree here
    assert knee_eps(flat2) == (0.5, True) and knee_eps(flat2, rule="gap") == (0.5, True)
    assert kneedle_index(np.array([1.0, 1.0, 4.0])) == 1  # hand-computed: x - y = (0, 0.5, 0)
    assert kneedle_index(np.array([1.0, 2.0, 3.0])) is None  # a straight curve has no knee -> no_knee decides
    assert knee_eps(np.array([1.0, 2.0, 3.0])) == (3.0, False)
    assert gap_index(np.array([0.1, 0.2, 0.9, 1.0])) == 1
    with pytest.raises(ValueError, match="rule"):
        knee_eps(TAIL3, rule="nope")


def test_adaptive_dbscan_keeps_groups_apart_when_the_tail_holds_several_outliers():
    rng = np.random.default_rng(1)
    groups = [rng.normal(c, 0.01, (3, 2)) for c in (0.0, 1.0)]
    far = np.array([[20.0, 0.0], [20.0, 12.5], [20.0, -12.8]])  # nearest-other distances 12.5, 12.5, 12.8
    res = adaptive_dbscan(np.concatenate(groups + [far]))
    assert res.knee_found and res.eps < 1.0
    assert res.labels.tolist() == [0, 0, 0, 1, 1, 1, 2, 3, 4]  # two groups, three singletons
    legacy = adaptive_dbscan(np.concatenate(groups + [far]), knee="kneed")  # the library's offline knee: 12.8
    assert legacy.eps > 12 and legacy.labels.max() == 1  # (both groups merged: the defect of issue 11)


def test_dynamic_start_eq14():
    acc = [0.1, 0.3, 0.5, 0.7, 0.72]
    assert not dynamic_start(2, acc[:2], 10)  # r < 3
    assert not dynamic_start(3, acc[:3], 10)  # dA(3) = 0.2
    assert not dynamic_start(4, acc[:4], 10)
    assert dynamic_start(5, acc, 10)  # dA(5) = 0.02 < 0.06
    assert dynamic_start(8, [0.1, 0.3, 0.5, 0.7, 0.9, 1.1, 1.3, 1.5], 10)  # r >= 0.8 R
    assert not dynamic_start(7, [0.1, 0.3, 0.5, 0.7, 0.9, 1.1, 1.3], 10)


# ------------------------------------------------------------------------------------------- algorithm
def flux_cfg(**extra):
    over = {"data.name": "digits", "partition.name": "shift", "partition.type": "label",
            "partition.level": 6, "partition.num_clients": 8, "partition.num_unseen_clients": 4,
            "partition.samples_per_client": 120, "partition.train_fraction": 0.6, "partition.val_fraction": 0.2,
            "partition.test_fraction": 0.2, "model.name": "mlp", "model.hidden": "[32]", "algorithm.name": "flux",
            "federation.rounds": 4, "federation.client_fraction": 1.0,
            "federation.local_epochs": 1, "federation.batch_size": 32, "federation.optimizer.lr": 0.003,
            "fabric.num_threads": 1, "tracking.enabled": "false", "seed": 0}
    if str(extra.get("algorithm.name", "flux")).startswith("flux"):
        over["algorithm.start_round"] = 3
    over.update(extra)
    return load_config(None, [f"{k}={v}" for k, v in over.items()])


def _run(cfg):
    return run(cfg, progress=False)[0]


def test_flux_recovers_planted_distributions_and_assigns_unseen_clients():
    cfg = flux_cfg()
    p = prepare(cfg)
    s = _run(cfg)
    true = p.data.meta["distribution"]
    assert s.history[2]["clustering_started"] == 1.0 and s.history[1]["clustering_started"] == 0.0
    assert s.metrics["ari"] == 1.0 and s.metrics["tau"] == len(np.unique(true))
    # unseen clients: the label-free descriptor picks the cluster of their true distribution
    strat, state = p.strategy, s.state
    from flplat.engine.executor import LocalExecutor

    ex = LocalExecutor(p.trainer, p.data, 0)
    w = strat.test_time_weights(state, ex, p.data.unseen_ids)
    got = [next(c for c in range(state.clusters.shape[0]) if torch.equal(state.clusters[c], wq)) for wq in w]
    want = [int(state.assignment[np.flatnonzero(true == u)[0]]) for u in p.data.meta["unseen_distribution"]]
    assert got == want
    assert 0.0 <= s.metrics["test_phase_accuracy"] <= 1.0 and "known_association_accuracy" in s.metrics
    assert s.metrics["descriptor_bytes_per_client"] == 2 * (10 + 1) * 10 * 4
    assert s.history[2]["descriptor_bytes"] > 0 and s.history[3]["descriptor_bytes"] == 0
    arts = strat.artifacts(state)
    assert arts["clustering/assignment_by_round.csv"].splitlines()[0] == "client,round_3,round_4"
    pts, labels = strat.scatter(state)["flux_descriptors_2d"]
    assert pts.shape == (8, 2) and labels.tolist() == state.assignment.tolist()


def test_flux_prior_uses_true_m():
    cfg = flux_cfg(**{"algorithm.name": "flux_prior"})
    p = prepare(cfg)
    s = _run(cfg)
    assert s.metrics["tau"] == p.data.meta["num_distributions"] and s.metrics["ari"] == 1.0


def test_the_true_number_of_distributions_is_logged_for_every_method():
    """The partition's M beside τ (``flplat reproduce flux tau``), also for a method without clusters (no ARI)."""
    cfg = flux_cfg(**{"algorithm.name": "fedavg", "federation.rounds": 1})
    m = prepare(cfg).data.meta["num_distributions"]
    s = _run(cfg)
    assert m >= 2 and s.metrics["num_distributions"] == m and "ari" not in s.metrics and "tau" not in s.metrics


def test_late_joiners_are_assigned_to_the_nearest_centroid():
    # 6 of 8 clients take part in the clustering round; the other two join their distribution's cluster later
    s = _run(flux_cfg(**{"federation.client_fraction": 0.75, "federation.rounds": 5, "algorithm.start_round": 2}))
    assigned = [h.get("assigned_clients") for h in s.history]
    assert assigned[1] == 6 and assigned[-1] == 8
    assert s.metrics["ari"] == 1.0


def test_flux_without_clustering_is_fedavg():
    base = {"algorithm.start_round": 0, "algorithm.start_min_round": 50, "algorithm.start_max_fraction": 1.0}
    a = _run(flux_cfg(**base))
    b = _run(flux_cfg(**{"algorithm.name": "fedavg"}))
    assert torch.equal(a.state.weights, b.state.weights)
    assert a.state.clusters is None


def test_flux_soft_and_recluster_run_and_keep_structure():
    soft = _run(flux_cfg(**{"algorithm.name": "flux_soft"}))
    assert soft.state.personal is not None and soft.state.personal.has(0)
    rows = torch.stack([soft.state.personal.get(k) for k in range(8)])
    assert not torch.equal(rows[0], rows[1]) or not torch.equal(rows[0], rows[-1])
    assert "test_phase_accuracy" in soft.metrics
    rec = _run(flux_cfg(**{"algorithm.recluster_every": 1, "federation.rounds": 5}))
    assert rec.metrics["ari"] == 1.0


def test_test_phase_ensemble_for_methods_without_mechanism_and_yx_not_applicable():
    cfg = flux_cfg(**{"algorithm.name": "fedavg"})
    p = prepare(cfg)
    s = _run(cfg)
    from flplat.engine.executor import LocalExecutor

    ex = LocalExecutor(p.trainer, p.data, 0)
    direct = np.mean([r.accuracy for r in ex.evaluate([(q, s.state.weights) for q in p.data.unseen_ids], "test")])
    assert s.metrics["test_phase_accuracy"] == pytest.approx(direct)  # one-model ensemble = the global model
    yx = _run(flux_cfg(**{"partition.type": "concept_yx"}))
    assert "test_phase_accuracy" not in yx.metrics and "known_association_accuracy" in yx.metrics


def test_flux_config_errors():
    with pytest.raises(ConfigError, match="algorithm.clustering"):
        flux_cfg(**{"algorithm.clustering": "spectral"})
    with pytest.raises(ConfigError, match="algorithm.dp_epsilon"):
        flux_cfg(**{"algorithm.dp_epsilon": -1})
    with pytest.raises(ConfigError, match="algorithm.start_min_round"):
        flux_cfg(**{"algorithm.start_min_round": 1})


def test_recluster_warm_starts_each_new_cluster_from_the_nearest_previous_centroid():
    from flplat.algorithms.flux import Flux, FluxState
    from flplat.api import FederationInfo, ParamLayout, ServerState

    info = FederationInfo(num_clients=4, num_classes=2, num_samples=np.ones(4), label_counts=np.ones((4, 2)),
                          client_fraction=1.0, local_epochs=1, layout=ParamLayout(torch.nn.Linear(1, 1)),
                          all_train_indices=np.arange(4))
    flux = Flux(Flux.Config(clustering="kmeans", num_clusters=2), info)
    L = 2 * (2 + 1) * 1  # 2(U+1)l with U = 2 classes, l = 1
    new = np.array([[0.9] * L, [1.0] * L, [0.1] * L, [0.0] * L])  # clients 0, 1 now sit at the old centroid 1

    class Ops:
        def compute(self, requests, fn, split="train", seed=0):
            return [new[k] for k, _ in requests]

    state = ServerState(round=5, weights=torch.zeros(2), clusters=torch.tensor([[10.0, 10.0], [20.0, 20.0]]),
                        assignment=np.array([0, 0, 1, 1]))
    state.method = FluxState(pca_components=torch.zeros(1, 1), pca_mean=torch.zeros(1), pca_ranges=np.ones(1),
                             descriptor_model=torch.zeros(2),
                             scaler=np.stack([np.zeros(4), np.ones(4)]),  # identity scaling
                             centroids=np.stack([np.zeros(L), np.ones(L)]), descriptors=np.full((4, L), np.nan))
    flux._recluster(state, np.arange(4), Ops())
    assert state.assignment.tolist() == [0, 0, 1, 1]  # renumbered by first appearance
    assert state.clusters.tolist() == [[20.0, 20.0], [10.0, 10.0]]  # cluster 0 warm-starts from old cluster 1
    assert np.allclose(state.method.centroids[0], 0.95)


def test_flux_soft_weights_are_similarity_times_size_over_participants():
    """App. D.3: client k's model is Σ_j s_kj n_j θ_j / Σ_j s_kj n_j, s_kj = exp(−‖d_k − d_j‖² / 2h²) (0 below the
    threshold)."""
    from types import SimpleNamespace

    from flplat.algorithms.flux import FluxSoft, FluxState
    from flplat.api import ClientResult, ClientStore, ServerState

    def personal_models(threshold):
        strat = FluxSoft.__new__(FluxSoft)
        strat.cfg, strat.info = FluxSoft.Config(soft_threshold=threshold), SimpleNamespace(num_clients=3)
        state = ServerState(weights=torch.zeros(1))
        state.method = FluxState(descriptors=np.array([[0.0], [1.0], [3.0]]), bandwidth=1.0)
        state.personal = ClientStore(3, 1, torch.zeros(1))
        results = [ClientResult(0, torch.tensor([0.0]), 1, 0.0), ClientResult(1, torch.tensor([1.0]), 3, 0.0)]
        strat._soft_aggregate(state, results, np.array([0, 1]))
        return [float(state.personal.get(k)[0]) for k in range(3)]

    e5, e2, e45 = np.exp(-0.5), np.exp(-2.0), np.exp(-4.5)  # s for distances 1, 2, 3 (h = 1)
    assert personal_models(0.01) == pytest.approx([3 * e5 / (1 + 3 * e5), 3 / (e5 + 3), 3 * e2 / (e45 + 3 * e2)],
                                                  rel=1e-6)
    assert personal_models(0.02)[2] == pytest.approx(1.0)  # s_20 = 0.011 < 0.02 dropped: only client 1 counts


def test_test_phase_ensemble_weights_each_cluster_model_by_its_number_of_clients():
    """App. F.2: methods without a test-time mechanism predict with Σ_c (n_c / Σ n) softmax(f(x; θ_c))."""
    from types import SimpleNamespace

    from flplat.api import ClusteredStrategy, ServerState
    from flplat.engine.evaluation import Evaluator, ensemble_accuracy

    probs = {0.0: torch.tensor([[0.7, 0.3]]), 1.0: torch.tensor([[0.1, 0.9]])}  # model θ_c = [c]

    class Ops:
        def compute(self, requests, fn, split="train", seed=0):
            return [(probs[float(w[0])], torch.tensor([0])) for _, w in requests]

    state = ServerState(clusters=torch.tensor([[0.0], [1.0]]), assignment=np.array([0, 0, 0, 1]))
    strategy = ClusteredStrategy.__new__(type("C", (ClusteredStrategy,), {"aggregate": None}))
    ev = Evaluator(strategy, Ops(), SimpleNamespace(num_clients=4))

    def accuracy(trained=None):
        return ensemble_accuracy(ev.executor, ev.ensemble(state, trained), [4])

    # 3:1 -> (0.55, 0.45): class 0, right; equal weights would give (0.4, 0.6): class 1, wrong
    assert accuracy() == [1.0]
    state.assignment = np.array([0, 1, 1, 1])  # 1:3 -> (0.25, 0.75): class 1
    assert accuracy() == [0.0]
    # only clients that have trained count: clients 0 and 1 -> 1:1 -> (0.4, 0.6): class 1; client 0 alone: class 0
    assert accuracy(np.array([True, True, False, False])) == [0.0]
    assert accuracy(np.array([True, False, False, False])) == [1.0]
