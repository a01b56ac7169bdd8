"""Clust-PSI-PFL: PSI descriptors, the clustering it induces, per-cluster aggregation, sampling, reductions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from flplat.algorithms.clust_psi_pfl import ClustPSIPFL, psi_descriptors
from flplat.api import ClientResult, FederationInfo, ParamLayout, ServerState
from flplat.errors import ConfigError
from flplat.experiment import load_config, run
from flplat.metrics.noniid import client_psi

REPO = Path(__file__).resolve().parents[1]


def make(counts, fraction=0.5, **cfg):
    counts = np.asarray(counts, dtype=np.int64)
    layout = ParamLayout(nn.Linear(2, 1))  # P = 3
    info = FederationInfo(num_clients=len(counts), num_classes=counts.shape[1], num_samples=counts.sum(1),
                          label_counts=counts, client_fraction=fraction, local_epochs=1, layout=layout,
                          all_train_indices=np.arange(int(counts.sum())))
    return ClustPSIPFL(ClustPSIPFL.Config(**cfg), info)


# Similarity S=0 by hand: clients 0, 2, 4 hold classes {0, 1}, clients 1, 3, 5 hold {2, 3}
PAIRS = [[50, 50, 0, 0], [0, 0, 45, 55], [60, 40, 0, 0], [0, 0, 50, 50], [40, 60, 0, 0], [0, 0, 55, 45]]


def test_descriptors_are_total_and_per_class_psi():
    d = psi_descriptors(PAIRS, 1e-6)
    total, per_class = client_psi(np.array(PAIRS), 1e-6)
    np.testing.assert_allclose(d, np.column_stack([total, per_class]))
    # hand value: client 0 vs the global pmf (0.25, 0.25, 0.25, 0.25) on class 2 it lacks
    assert d[0, 3] == pytest.approx(0.25 * np.log(0.25 / 1e-6), rel=1e-5)
    assert psi_descriptors([[3, 1], [0, 0]], 1e-6)[1].tolist() == [0.0, 0.0, 0.0]  # no samples: zeros


def test_clients_with_the_same_label_pair_are_clustered_together():
    s = make(PAIRS)
    st = s.init_state(torch.zeros(3), np.random.default_rng(0), None)
    np.testing.assert_array_equal(st.assignment, [0, 1, 0, 1, 0, 1])
    assert st.clusters.shape == (2, 3)
    assert s.round_metrics(st) == {"tau": 2.0, "silhouette": st.method.silhouette}
    assert st.method.silhouette > 0.5
    curve = s.series(st)["silhouette_by_k"]
    assert [j for j, _ in curve] == [2, 3, 4, 5] and max(curve, key=lambda p: p[1])[0] == 2


def test_init_state_leaves_the_client_sampling_stream_untouched():
    rng = np.random.default_rng(7)
    make(PAIRS).init_state(torch.zeros(3), rng, None)
    assert rng.integers(1 << 30, size=4).tolist() == np.random.default_rng(7).integers(1 << 30, size=4).tolist()


def test_identical_histograms_fall_back_to_one_cluster():
    s = make([[10, 20, 30]] * 5)
    st = s.init_state(torch.arange(3.0), np.random.default_rng(0), None)
    assert (st.assignment == 0).all() and st.clusters.shape == (1, 3)
    assert "undefined" in st.method.clustering_reason
    assert s.round_metrics(st) == {"tau": 1.0}  # no silhouette for one cluster
    assert torch.equal(s.eval_weights(st, 3), torch.arange(3.0))


def fixed_state(assignment, tau):
    return ServerState(clusters=torch.zeros(tau, 3), assignment=np.asarray(assignment))


def res(client, value, n):
    return ClientResult(client=client, weights=torch.full((3,), float(value)), num_samples=n, train_loss=0.0)


def test_aggregation_is_fedavg_inside_each_cluster_only():
    s = make(PAIRS)
    st = fixed_state([0, 0, 1, 1, 2, 2], 3)
    st.clusters[2] = 9.0
    out = s.aggregate(st, [res(0, 1.0, 1), res(1, 4.0, 3), res(3, 7.0, 5)], None)
    assert out.clusters[:, 0].tolist() == [3.25, 7.0, 9.0]  # (1·1 + 4·3)/4; 7; no result: kept
    other = s.aggregate(fixed_state([0, 0, 1, 1, 2, 2], 3), [res(0, 1.0, 1), res(1, 4.0, 3), res(3, -50.0, 5)], None)
    assert torch.equal(other.clusters[0], out.clusters[0]) and other.clusters[1, 0] == -50.0
    assert torch.equal(s.plan(out, 1).weights, out.clusters[0]) and torch.equal(s.eval_weights(out, 3), out.clusters[1])


def test_per_cluster_participation_samples_every_cluster():
    s = make(PAIRS, fraction=0.5, participation="per_cluster")
    st = fixed_state([0, 0, 0, 1, 1, 2], 3)
    for seed in range(5):
        sel = s.select(st, np.random.default_rng(seed), None)
        assert np.bincount(st.assignment[sel], minlength=3).tolist() == [2, 1, 1]  # ceil(0.5 · |c|)
    g = make(PAIRS, fraction=0.5).select(st, np.random.default_rng(0), None)
    assert len(g) == 3  # global: round(q · K) over all clients


def test_artifacts_list_sizes_and_descriptors():
    s = make(PAIRS)
    st = s.init_state(torch.zeros(3), np.random.default_rng(0), None)
    a = s.artifacts(st)
    assert a["clustering/cluster_sizes.csv"] == "cluster,size\n0,3\n1,3\n"
    lines = a["clustering/psi_descriptors.csv"].splitlines()
    assert lines[0] == "client,cluster,num_samples,psi,psi_0,psi_1,psi_2,psi_3" and len(lines) == 7
    assert lines[2].startswith("1,1,100,")
    assert "clustering/assignment.csv" in a


def test_one_cluster_is_fedavg_bit_for_bit(tiny_cfg):
    over = {"federation.rounds": 3}
    avg, _ = run(tiny_cfg(**{"algorithm.name": "fedavg", **over}), progress=False)
    one, _ = run(tiny_cfg(**{"algorithm.name": "clust_psi_pfl", "algorithm.tau": 1, **over}), progress=False)
    assert torch.equal(one.state.clusters[0], avg.state.weights)
    for ha, hb in zip(avg.history, one.history):
        for k in ("train_loss", "global_accuracy", "test_loss", "ad", "num_participants", "bytes_up"):
            assert ha[k] == hb[k], k


def test_config_validation_and_quickstart():
    with pytest.raises(ConfigError, match="algorithm.participation"):
        load_config(None, ["algorithm.name=clust_psi_pfl", "algorithm.participation=bogus"])
    with pytest.raises(ConfigError, match="algorithm.max_clusters"):
        load_config(None, ["algorithm.name=clust_psi_pfl", "algorithm.max_clusters=1"])
    cfg = load_config(REPO / "configs" / "clust_psi_pfl_quickstart.yaml")
    assert cfg.algorithm.name == "clust_psi_pfl" and cfg.partition.similarity == 0.0


def test_per_cluster_accuracy_is_logged_per_round(tiny_cfg):
    from flplat.experiment import run

    s, _ = run(tiny_cfg(**{"algorithm.name": "clust_psi_pfl", "partition.name": "similarity",
                           "partition.similarity": 0.0}), progress=False)
    assign = s.client_table["cluster"]
    for c in set(assign.tolist()):
        sel = assign == c
        expect = s.client_table["correct"][sel].sum() / s.client_table["num_test"][sel].sum()
        assert s.metrics[f"cluster_accuracy_{c}"] == expect


def _one_class_groups(groups: int, per_group: int = 2) -> np.ndarray:
    """``groups`` planted label distributions: the clients of group g hold only class g (``groups`` classes)."""
    return np.repeat(np.eye(groups, dtype=np.int64) * 30, per_group, axis=0)


def test_tau_search_scans_every_j_up_to_k_minus_1_by_default():
    # 25 groups of 2 clients: the silhouette is 1 at j = 25 only, above the old default cap of 20
    counts = _one_class_groups(25)
    st = make(counts).init_state(torch.zeros(3), np.random.default_rng(0), None)
    assert st.clusters.shape[0] == 25 and st.method.silhouette == pytest.approx(1.0)
    assert len(np.unique(st.assignment[::2])) == 25 and (st.assignment[::2] == st.assignment[1::2]).all()
    assert st.method.silhouette_by_k[:, 0].tolist() == list(range(2, 26))  # 25 distinct rows: j <= 25
    capped = make(counts, max_clusters=20).init_state(torch.zeros(3), np.random.default_rng(0), None)
    assert capped.clusters.shape[0] <= 20 and capped.method.silhouette_by_k[:, 0].max() == 20  # the opt-in cap
    assert ClustPSIPFL.Config().max_clusters is None


def test_descriptors_are_standardised_before_k_means(monkeypatch):
    # the paper (Sec. III-B): "These features are standardized to have a mean of zero and a variance of one"
    import flplat.algorithms.clust_psi_pfl as mod

    seen = {}
    real = mod.silhouette_kmeans

    def spy(X, **kw):
        seen["X"] = X
        return real(X, **kw)

    monkeypatch.setattr(mod, "silhouette_kmeans", spy)
    counts = np.array([[50, 50, 0, 0], [0, 0, 45, 55], [60, 40, 0, 0], [0, 0, 50, 50], [90, 5, 5, 0], [10, 20, 30, 40]])
    make(counts).init_state(torch.zeros(3), np.random.default_rng(0), None)
    X = seen["X"]
    raw = psi_descriptors(counts, 1e-6)
    np.testing.assert_allclose(X, (raw - raw.mean(0)) / raw.std(0), atol=1e-12)
    np.testing.assert_allclose(X.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(X.std(0), 1, atol=1e-12)
