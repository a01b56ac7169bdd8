"""Flux's ablation options (App. F.6.2-F.6.4, C.1.2): the other clusterings, the descriptor parts, the random
test-time assignment and the fidelity ξ, by hand on tiny inputs and end to end; their ``flplat reproduce`` tables
(pooled cells, the paper's numbers, one smoke cell each)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_flux import _run, flux_cfg

from flplat.algorithms.flux import FluxState
from flplat.api import ConfigError, ServerState
from flplat.cli import main
from flplat.maths.clustering import (
    hdbscan,
    noise_as_singletons,
    silhouette_agglomerative,
    silhouette_kmeans,
)
from flplat.maths.flux_descriptors import part_mask
from flplat.maths.flux_fidelity import (
    descriptor_distance,
    empirical_w2,
    fidelity_errors,
    joint_w2,
    shared_classes,
    summary,
)
from flplat.studies import reproduce as rp

# two pairs and a far point: {0, 0.1}, {5, 5.1}, {20}
X5 = np.array([[0.0], [0.1], [5.0], [5.1], [20.0]])


# ------------------------------------------------------------------------------------------------ clustering maths
def test_noise_points_become_singletons_renumbered_by_first_appearance():
    assert noise_as_singletons(np.array([-1, 0, -1, 0, 1])).tolist() == [0, 1, 2, 1, 3]


def test_silhouette_picks_the_two_pairs_and_the_far_point_for_kmeans_and_agglomerative():
    # k = 3: a = 0.1 inside a pair, b = the mean distance to the nearest other pair (5.05 or 4.95), s(far point) = 0:
    # s = (1 - 0.1/5.05) * 2 / 5 + (1 - 0.1/4.95) * 2 / 5
    s3 = (1 - 0.1 / 5.05) * 0.4 + (1 - 0.1 / 4.95) * 0.4
    for res in (silhouette_kmeans(X5), silhouette_agglomerative(X5), silhouette_agglomerative(X5, "average")):
        assert res.k == 3 and res.labels.tolist() == [0, 0, 1, 1, 2]
        assert res.scores[3] == pytest.approx(s3) and max(res.scores.values()) == res.scores[3]
    # no candidate with a valid silhouette (identical rows): one cluster
    assert silhouette_agglomerative(np.zeros((4, 2))).labels.tolist() == [0, 0, 0, 0]
    with pytest.raises(ValueError, match="linkage='median'"):
        silhouette_agglomerative(X5, "median")


def test_hdbscan_groups_the_pairs_and_makes_noise_a_singleton():
    assert hdbscan(X5).tolist() == [0, 0, 1, 1, 2]  # the far point is noise: its own cluster
    assert hdbscan(X5, min_cluster_size=3).tolist() == [0, 1, 2, 3, 4]  # no group of 3: all noise
    assert hdbscan(X5[:1]).tolist() == [0] and hdbscan(X5[:2], min_cluster_size=3).tolist() == [0, 1]


# ---------------------------------------------------------------------------------------------- descriptor parts
def test_descriptor_part_masks_by_hand():
    # l = 1, U = 2: [mu_x, sd_x, mu_1, sd_1, mu_2, sd_2]
    want = {"full": [1, 1, 1, 1, 1, 1], "marginal": [1, 1, 0, 0, 0, 0], "means": [1, 0, 1, 0, 1, 0],
            "mu_x": [1, 0, 0, 0, 0, 0]}
    for part, mask in want.items():
        assert part_mask(6, 1, part).astype(int).tolist() == mask, part
    assert part_mask(12, 2, "means").astype(int).tolist() == [1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0]


def test_descriptor_parts_send_their_entries_and_cluster_on_them():
    """Table 66's rows: μx alone sends l floats, μx μu (U + 1)l; both recover the planted distributions (label shift,
    digits: U = 10, l = 10)."""
    for part, floats in (("mu_x", 10), ("means", 110)):
        s = _run(flux_cfg(**{"algorithm.descriptor_part": part}))
        assert s.metrics["descriptor_bytes_per_client"] == floats * 4, part
        assert s.state.method.centroids.shape[1] == floats and s.metrics["ari"] == 1.0


def test_the_clustering_sees_only_the_part():
    """Two groups differ in μx alone; a noisy σx splits them otherwise: ``mu_x`` keeps the groups, ``marginal`` not."""
    strat = {p: flux_cfg(**{"algorithm.descriptor_part": p}) for p in ("mu_x", "marginal")}
    from flplat.experiment import prepare

    d = np.full((6, 2 * 11 * 1), -1.0)  # l = 1, U = 10, scaled; class part missing
    d[:, 0] = [0.0, 0.01, 0.02, 1.0, 1.01, 1.02]
    d[:, 1] = [0.0, 1.0, 0.5, 0.2, 0.9, 0.4]
    got = {}
    for p, cfg in strat.items():
        s = prepare(cfg).strategy
        state = ServerState(weights=torch.zeros(1), method=FluxState(pca_components=torch.zeros(1, 4)))
        got[p] = s._cluster(state, d, np.arange(6)).tolist()
    assert got["mu_x"] == [0, 0, 0, 1, 1, 1] and got["marginal"] != got["mu_x"]


# ------------------------------------------------------------------------------------------- the other clusterings
@pytest.mark.parametrize("clustering", ["kmeans_silhouette", "agglomerative"])
def test_unsupervised_clusterings_recover_the_planted_distributions(clustering):
    s = _run(flux_cfg(**{"algorithm.clustering": clustering}))
    assert s.metrics["ari"] == 1.0 and s.metrics["tau"] == 4 and "dbscan_eps" not in s.metrics


def test_hdbscan_runs_in_flux_and_logs_no_dbscan_eps():
    s = _run(flux_cfg(**{"algorithm.clustering": "hdbscan"}))
    assert s.metrics["tau"] >= 2 and "dbscan_eps" not in s.metrics


# ------------------------------------------------------------------------------------------ test-time assignment
def _assign(mode: str, seed_rng: int = 0):
    """Three clusters (models [0], [1], [2], centroids 0, 1, 2 in the one label-free entry kept); six unseen
    clients whose descriptors sit on centroid 0."""
    from flplat.experiment import prepare

    strat = prepare(flux_cfg(**{"algorithm.test_assignment": mode, "algorithm.descriptor_part": "mu_x"})).strategy
    state = strat.init_state(torch.zeros(1), np.random.default_rng(seed_rng), None)
    L = 2 * (strat.info.num_classes + 1)  # l = 1
    state.clusters = torch.tensor([[0.0], [1.0], [2.0]])
    st = state.method
    st.pca_components, st.pca_mean, st.pca_ranges = torch.zeros(1, 4), torch.zeros(4), np.ones(1)
    st.descriptor_model, st.scaler = torch.zeros(1), np.stack([np.zeros(4), np.ones(4)])
    st.centroids, st.descriptors = np.array([[0.0], [1.0], [2.0]]), np.zeros((8, L))

    class Ops:
        def compute(self, requests, fn, split="train", seed=0):
            return [np.zeros(L) for _ in requests]

    return [int(w[0]) for w in strat.test_time_weights(state, Ops(), list(range(6)))], state


def test_random_test_time_assignment_differs_from_the_nearest_centroid():
    nearest, _ = _assign("descriptor")
    assert nearest == [0] * 6
    rand, state = _assign("random")
    assert rand != nearest and set(rand) <= {0, 1, 2} and rand == _assign("random")[0]  # reproducible
    assert state.method.assignment_seed is not None and _assign("descriptor")[1].method.assignment_seed is None
    assert _assign("random", seed_rng=1)[0] != rand  # a run seed of its own


def test_random_assignment_leaves_training_unchanged():
    """Its stream is a child of the server's generator: the random row trains exactly as Flux (paired runs)."""
    rng = np.random.default_rng(3)
    from flplat.experiment import prepare

    strat = prepare(flux_cfg(**{"algorithm.test_assignment": "random"})).strategy
    strat.init_state(torch.zeros(1), rng, None)
    assert rng.random() == np.random.default_rng(3).random()
    a, b = _run(flux_cfg()), _run(flux_cfg(**{"algorithm.test_assignment": "random"}))
    assert torch.equal(a.state.clusters, b.state.clusters)
    assert a.metrics["known_association_accuracy"] == b.metrics["known_association_accuracy"]


@pytest.mark.parametrize("key, value", [("clustering", "spectral"), ("test_assignment", "nearest"),
                                        ("hdbscan_min_cluster_size", 1), ("hdbscan_min_samples", -1),
                                        ("agglomerative_linkage", "median"), ("silhouette_k_max", 1),
                                        ("descriptor_part", "sigma_x")])
def test_ablation_keys_reject_bad_values(key, value):
    with pytest.raises(ConfigError, match=f"algorithm.{key}"):
        flux_cfg(**{f"algorithm.{key}": value})


# ---------------------------------------------------------------------------------------------- fidelity (Table 4)
def test_empirical_w2_by_hand():
    # 1-D, sorted matching: 0->0, 0->3, 3->3: costs 0, 9, 0: W2^2 = 3
    assert empirical_w2(np.array([[0.0], [0.0], [3.0]]), np.array([[0.0], [3.0], [3.0]])) ** 2 == pytest.approx(3.0)
    assert empirical_w2(np.array([[0.0], [2.0]]), np.array([[0.0], [0.0], [2.0], [2.0]])) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="samples on both sides"):
        empirical_w2(np.zeros((0, 1)), np.zeros((2, 1)))


def test_joint_w2_descriptor_distance_and_shared_classes_by_hand():
    z1, z2, y = np.array([[0.0], [0.0], [3.0]]), np.array([[0.0], [3.0], [3.0]]), np.zeros(3, dtype=np.int64)
    assert joint_w2(z1, y, z2, y, [0]) == pytest.approx(math.sqrt(6.0))  # marginal 3 + class 0 3
    assert joint_w2(z1, y, z2, y, []) == pytest.approx(math.sqrt(3.0))
    d1, d2 = np.array([1.0, 1.0, 2.0, 2.0, 9.0, 9.0]), np.array([0.0, 1.0, 2.0, 0.0, 0.0, 0.0])  # l = 1, U = 2
    assert descriptor_distance(d1, d2, 1, [0]) == pytest.approx(math.sqrt(5.0))
    assert descriptor_distance(d1, d2, 1, []) == pytest.approx(1.0)
    assert descriptor_distance(d1, d2, 1, [0, 1]) == pytest.approx(math.sqrt(1 + 4 + 81 + 81))
    assert shared_classes(np.array([0, 0, 1, 1, 2]), np.array([0, 0, 1, 2, 2]), 3) == [0]
    multi = np.array([[1, 1], [1, 0], [0, 1]])  # multi-label: label 0 on rows 0, 1; label 1 on rows 0, 2
    assert shared_classes(multi, multi, 2) == [0, 1] and shared_classes(multi, multi, 2, 3) == []


def test_fidelity_error_by_hand():
    # μ, σ: (1, √2) and (2, √2): descriptor distance² = 1 (marginal) + 1 (class 0) = 2; W2² = 3 + 3
    samples = [(np.array([[0.0], [0.0], [3.0]]), np.zeros(3, dtype=np.int64)),
               (np.array([[0.0], [3.0], [3.0]]), np.zeros(3, dtype=np.int64))]
    assert fidelity_errors(samples, 1).tolist() == pytest.approx([math.sqrt(6) - math.sqrt(2)])
    # a location-scale pair (2 points each): W2 equals the moments' distance, ξ = 0
    pair = [(np.array([[0.0], [2.0]]), np.zeros(2, dtype=np.int64)),
            (np.array([[1.0], [5.0]]), np.zeros(2, dtype=np.int64))]
    assert fidelity_errors(pair, 1).tolist() == pytest.approx([0.0], abs=1e-12)
    assert summary(np.array([1.0, 2.0, 3.0])) == pytest.approx({"max": 3.0, "min": 1.0, "mean": 2.0,
                                                                "std": math.sqrt(2 / 3)})


def test_fidelity_check_logs_table_4s_columns():
    s = _run(flux_cfg(**{"algorithm.fidelity_check": "true"}))
    m = {k: s.metrics[f"descriptor_w2_error_{k}"] for k in ("max", "min", "mean", "std")}
    assert m["max"] >= m["mean"] >= m["min"] >= 0 and m["std"] >= 0
    assert "descriptor_w2_error_mean" not in _run(flux_cfg()).metrics  # off by default


# --------------------------------------------------------------------------------------------- the reproduce items
def _table(tid):
    return next(t for t in rp.paper_tables("flux") if t.id == tid)


@pytest.mark.parametrize("tid, cell, method, expected", [
    ("clustering_algorithms", "known_association", "Unsupervised k-Means", (86.8, 14.6)),
    ("clustering_algorithms", "test_phase", "Agglomerative", (94.2, 0.8)),
    ("clustering_algorithms_cifar100", "known_association", "Flux", (41.7, 11.0)),
    ("test_assignment", "cifar100_label", "Random", (15.9, 3.9)),
    ("descriptor_parts", "known_association", "mu_x mu_u (1l)", (93.07, 0.75)),
    ("descriptor_parts", "test_phase", "mu_x sigma_x mu_u sigma_u (2l)", (96.06, 1.11)),
    ("descriptor_fidelity", "cifar10_l5", "Max", (3.464, None)),
])
def test_ablation_paper_values_sample(tid, cell, method, expected):
    mean, std, _ = rp.paper_value(rp.load_paper_values("flux"), tid, cell, method)
    assert (mean, std) == pytest.approx(expected)


def test_pooled_cells_run_one_job_per_member_and_share_runs():
    t = _table("clustering_algorithms")
    jobs = {s: rp.plan("flux", t, s, [0], ["Flux"], None, [], "e", "/tmp/u") for s in ("smoke", "reduced", "paper")}
    cells = ("known_association", "test_phase")
    count = {s: {c: sum(j.cell == c for j in js) for c in cells} for s, js in jobs.items()}
    assert count == {"smoke": {"known_association": 1, "test_phase": 1},
                     "reduced": {"known_association": 8, "test_phase": 6},  # 4 (3) shifts x levels 2, 8
                     "paper": {"known_association": 32, "test_phase": 24}}  # x levels 1-8
    ka = {j.key for j in jobs["paper"] if j.cell == "known_association"}
    assert {j.key for j in jobs["paper"] if j.cell == "test_phase"} < ka  # the test phase reads the same runs
    names = [o for j in jobs["reduced"] for o in j.overrides if o.startswith("tracking.run_name=")]
    assert len(set(names)) == len(names) and "tracking.run_name=clustering_algorithms/test_phase/label_l8/Flux/s0" \
        in names
    assert any(j.config.endswith("configs/flux/table1/mnist_concept_xy_l8.yaml") for j in jobs["paper"])


def test_a_pooled_cells_members_share_one_printed_command(tmp_path):
    from flplat.studies.reproduction.jobs import job_commands

    out = job_commands("flux", ["test_assignment"], "reduced", [0], ["Random"], ["mnist_label"], str(tmp_path))
    assert len(out.splitlines()) == 1 and "--cells mnist_label --methods Random --seeds 0" in out


@pytest.mark.parametrize("table, cell, method, row", [
    ("clustering_algorithms", "test_phase", "HDBSCAN", "| test_phase | HDBSCAN | 92.9 ± 2.6 | "),
    ("test_assignment", "mnist_label", "Random", "| mnist_label | Random | 69.2 ± 17.2 | "),
    ("descriptor_parts", "known_association", "mu_x (1l)", "| known_association | mu_x (1l) | 90.96 ± 2.09 | "),
    ("descriptor_fidelity", "mnist_l3", "Mean", "| mnist_l3 | Mean | 0.526 | "),
])
def test_ablation_smoke_cells(tmp_path, capsys, small_mnist, table, cell, method, row):
    assert main(["reproduce", "flux", table, "--scale", "smoke", "--cells", cell, "--methods", method,
                 "--store-dir", str(tmp_path)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(row))
    assert " (1) | " in line  # one member at smoke, seed 0


def test_cifar_cells_are_defined_and_wait_for_their_data(tmp_path, capsys, small_mnist):
    assert main(["reproduce", "flux", "clustering_algorithms_cifar100", "--scale", "smoke", "--cells", "test_phase",
                 "--methods", "Flux", "--store-dir", str(tmp_path)]) == 1
    out = capsys.readouterr()
    assert "| test_phase | Flux | 41.3 ± 7.8 | — | — | not run: skipped, see note 1 |" in out.out


def test_a_skip_note_names_each_seed_once_though_a_pooled_cells_members_share_it():
    from flplat.studies.reproduction.render import skip_note

    assert skip_note([(0, "no data"), (0, "no data"), (1, "no data")]) == "seeds 0, 1: no data"
