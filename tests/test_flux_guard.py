"""Flux's adaptive DBSCAN noise guard (issue 11, item 1): the sampling variance of a descriptor, the guard's three
outcomes, and the algorithm passing it on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flplat.algorithms.flux import FluxState
from flplat.api import ServerState
from flplat.experiment import load_config, prepare
from flplat.maths.clustering import adaptive_dbscan, noise_ratios
from flplat.maths.flux_descriptors import DescriptorScaler, flatten, moments, sampling_variance


def test_sampling_variance_by_hand():
    # l = 1, U = 2: [mu_x, sd_x, mu_1, sd_1, mu_2, sd_2]; groups 0 1 2 3 2 3; spans (2, 2, 4, 4)
    sc = DescriptorScaler(1, np.array([0.0, 1.0, 0.0, 1.0]), np.array([2.0, 3.0, 4.0, 5.0]), fill=-1.0)
    d = np.array([[0.5, 0.5, 0.25, 0.25, -1.0, -1.0]])  # raw sd_x = 0.5*2+1 = 2, sd_1 = 0.25*4+1 = 2; class 2 missing
    # marginal, n = 8: 4/8/2^2 + 4/(2*8)/2^2 = 0.1875; class 1, n/U = 4: 4/4/4^2 + 4/(2*4)/4^2 = 0.09375
    assert sampling_variance(d, sc, np.array([8]), 2) == pytest.approx([0.28125])
    # Laplace DP, eps = 2, range 1: b = 1/16 (marginal), 1/8 (class 1); 2b^2 (1/2^2 + 1/2^2) + 2b^2 (1/4^2 + 1/4^2)
    assert sampling_variance(d, sc, np.array([8]), 2, 2.0, np.array([1.0])) == pytest.approx([0.28125 + 0.0078125])
    with pytest.raises(ValueError, match="2\\(U\\+1\\)l"):
        sampling_variance(d[:, :4], sc, np.array([8]), 2)


def test_sampling_variance_is_the_expected_squared_distance_between_two_samples_of_one_distribution():
    """Clients drawn from one distribution: the mean squared distance of their scaled descriptors is Σ v (the
    quantity the guard compares distances with)."""
    rng = np.random.default_rng(0)
    l, u, n, k = 3, 2, 400, 120  # noqa: E741
    scale = np.array([1.0, 2.0, 0.5])
    raw = []
    for _ in range(k):
        y = torch.from_numpy(rng.integers(0, u, n))
        z = torch.from_numpy(rng.normal(0, 1, (n, l)) * scale + y.numpy()[:, None])
        raw.append(flatten(*moments(z, y, u)[:2]))
    raw = np.stack(raw)
    sc = DescriptorScaler(l).fit(raw)
    d = sc.transform(raw)
    v = sampling_variance(d, sc, np.full(k, n), u)
    a, b = np.triu_indices(k, 1)
    observed = np.mean(np.sum((d[a] - d[b]) ** 2, axis=1))
    assert observed == pytest.approx(np.mean(v[a] + v[b]), rel=0.1)


def test_noise_ratios_by_hand():
    X = np.array([[0.0], [1.0], [4.0]])  # nearest other: 1, 1, 3
    r = noise_ratios(X, np.array([0.5, 0.5, 4.0]))  # scales sqrt(1), sqrt(1), sqrt(4 + 0.5)
    assert r == pytest.approx([1.0, 1.0, 3.0 / np.sqrt(4.5)])


def test_guard_beyond_noise_every_client_is_its_own_cluster():
    # every client its own distribution (M = K): nearest distances 1.0 ... 1.5, no jump; the knee pairs clients
    X = np.diag([1.0, 1.05, 1.1, 1.2, 1.3, 1.4, 1.5]) / np.sqrt(2)
    X[0, 1] = 0.01
    knee = adaptive_dbscan(X)
    assert knee.labels.max() + 1 < len(X)
    res = adaptive_dbscan(X, variance=np.full(len(X), 0.01))
    assert res.guard == "beyond" and res.labels.tolist() == list(range(len(X)))


def test_guard_within_noise_takes_the_connected_components():
    # two far groups whose chains rise gradually (0.8 ... 1.0) with no jump: the knee splits a chain
    X = np.array([0.0, 0.8, 1.7, 2.7, 100.0, 100.9, 101.9])[:, None]
    assert adaptive_dbscan(X).labels.max() + 1 > 2
    res = adaptive_dbscan(X, variance=np.full(len(X), 0.5))  # two clients of one distribution ≈ 1.0 apart
    assert res.guard == "within" and res.labels.tolist() == [0, 0, 0, 0, 1, 1, 1]


def test_guard_beyond_noise_with_a_jump_leaves_the_knee_to_decide():
    # one label distribution's clients differ by more than sampling (class proportions) but far less than the
    # distributions do: every ratio is above the noise ratio, and the spanning tree's edges jump (1.3 -> 17.5):
    # the guard steps aside and the knee decides as without it
    X = np.array([0.0, 1.3, 2.5, 20.0, 21.4, 22.6])[:, None]
    res = adaptive_dbscan(X, variance=np.full(len(X), 0.4))
    assert (noise_ratios(X, np.full(len(X), 0.4)) > 1.2).all()
    assert res.guard == "" and res.labels.tolist() == adaptive_dbscan(X).labels.tolist()
    assert adaptive_dbscan(X, variance=np.full(len(X), 0.4), noise_jump=20.0).guard == "beyond"


def _flux(**extra):
    over = {"data.name": "digits", "partition.name": "shift", "partition.type": "label",
            "partition.level": 6, "partition.num_clients": 6, "partition.samples_per_client": 100,
            "model.name": "mlp", "model.hidden": "[8]", "algorithm.name": "flux", "algorithm.pca_components": 1,
            "tracking.enabled": "false"}
    over.update(extra)
    return prepare(load_config(None, [f"{k}={v}" for k, v in over.items()])).strategy


def _state(strat, d):
    sc = DescriptorScaler(1).fit(d)
    return ServerState(weights=torch.zeros(1), method=FluxState(pca_components=torch.zeros(1, 4), pca_ranges=np.ones(1),
                                                                scaler=np.stack([sc.mins, sc.maxs])))


def test_flux_clusters_with_the_knee_alone_by_default_and_the_noise_guard_when_asked():
    """The paper's adaptive DBSCAN (the knee alone) is the default; ``knee_guard=noise`` is opt-in and logged."""
    assert _flux().cfg.knee_guard == "none"
    strat = _flux(**{"algorithm.knee_guard": "noise"})
    n = strat.info.num_samples[:6]
    u = strat.info.num_classes
    # six clients, each its own distribution: marginal means 1.0 ... 1.2 apart, far beyond the noise of 80 samples
    raw = np.zeros((6, 2 * (u + 1)))
    raw[:, 0] = [0.0, 1.0, 2.05, 3.15, 4.3, 5.5]
    raw[:, 1::2] = 0.02  # equal spreads (scaler span 0 -> 1) and class means: only the marginal mean differs
    state = _state(strat, raw)
    d = strat._scaler(state).transform(raw)
    assert (noise_ratios(d, sampling_variance(d, strat._scaler(state), n, u)) > 1.2).all()
    labels = strat._cluster(state, d, np.arange(6))
    assert labels.tolist() == list(range(6)) and state.method.knee_guard == 2.0  # "beyond"
    assert strat.round_metrics(state)["dbscan_guard"] == 2.0
    off = _flux()  # the default: the knee alone pairs some of them
    assert off._cluster(_state(off, raw), d, np.arange(6)).max() + 1 < 6


def test_descriptor_part_marginal_clusters_on_the_label_free_part_alone():
    """``algorithm.descriptor_part=marginal`` (opt-in, not in the paper; the 1,200-client setting): the clustering
    sees only d' = [mu_x, sigma_x]; the default (the paper's full descriptor) lets a noisy class part decide."""
    u = _flux().info.num_classes
    rng = np.random.default_rng(0)
    raw = np.zeros((6, 2 * (u + 1)))
    raw[:, 0] = [0.0, 0.01, 0.02, 1.0, 1.01, 1.02]  # d': two groups of three
    raw[:, 1] = 0.5
    raw[:, 2:] = rng.uniform(0, 1, (6, 2 * u))  # the class part: sampling noise, far larger than d' differences
    full, marg = _flux(), _flux(**{"algorithm.descriptor_part": "marginal"})
    assert full.cfg.descriptor_part == "full"
    d = full._scaler(_state(full, raw)).transform(raw)
    want = [0, 0, 0, 1, 1, 1]
    assert marg._cluster(_state(marg, raw), d, np.arange(6)).tolist() == want
    assert full._cluster(_state(full, raw), d, np.arange(6)).tolist() != want


def test_descriptor_part_marginal_end_to_end_sends_only_the_label_free_part():
    from flplat.experiment import run

    over = {"data.name": "digits", "partition.name": "shift", "partition.type": "feature",
            "partition.level": 3, "partition.num_clients": 8, "partition.num_unseen_clients": 2,
            "partition.samples_per_client": 100, "model.name": "mlp", "model.hidden": "[16]",
            "algorithm.name": "flux", "algorithm.descriptor_part": "marginal", "algorithm.start_round": 2,
            "algorithm.pca_components": 3, "federation.rounds": 3, "federation.client_fraction": 0.75,
            "federation.local_epochs": 1, "fabric.num_threads": 1, "tracking.enabled": "false", "seed": 0}
    s = run(load_config(None, [f"{k}={v}" for k, v in over.items()]), progress=False)[0]
    assert s.metrics["descriptor_bytes_per_client"] == 2 * 3 * 4  # 2l floats, no class statistics
    d = s.state.method.descriptors
    known = np.isfinite(d[:, 0])
    assert known.sum() >= 6 and (d[known, 6:] == -1.0).all()  # the class part is the missing fill
    assert s.state.method.centroids.shape[1] == 6  # centroids in d' (late joiners, test phase)
    with pytest.raises(Exception, match="algorithm.descriptor_part='labels' is not valid"):
        load_config(None, ["algorithm.name=flux", "algorithm.descriptor_part=labels"])


def test_flux_prior_clusters_the_same_whatever_the_dbscan_scaling():
    """Flux-prior's K-means never reads ``dbscan_scaling`` (issue 24, item 2: its FMNIST rows need no runs at 1.0),
    while Flux's adaptive DBSCAN does: the same descriptors, scaling 0.95 against 1.0."""
    raw = np.zeros((6, 2 * (_flux().info.num_classes + 1)))
    raw[:, 0] = [0.0, 0.1, 0.2, 3.0, 3.1, 3.35]
    raw[:, 1::2] = 0.02
    labels = {}
    for name in ("flux_prior", "flux"):
        for scaling in (0.5, 1.0):
            strat = _flux(**{"algorithm.name": name, "algorithm.dbscan_scaling": scaling,
                             "algorithm.num_clusters": 2})
            state = _state(strat, raw)
            labels[name, scaling] = strat._cluster(state, strat._scaler(state).transform(raw), np.arange(6)).tolist()
    assert labels["flux_prior", 0.5] == labels["flux_prior", 1.0]
    assert labels["flux", 0.5] != labels["flux", 1.0]
