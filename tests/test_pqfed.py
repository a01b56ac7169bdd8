"""PQFed: the pure maths with hand-computed values, the pqfed partition, and the algorithm's defining behaviour."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from flplat.errors import ConfigError
from flplat.experiment import load_config, run
from flplat.maths import pqfed as pm


# ------------------------------------------------------------------------------------------------ pure maths
def test_public_pca_and_projection_by_hand():
    pub = np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]])  # all variance along (1, 1)/√2
    mean, comps = pm.fit_public_pca(pub, n_components=5)  # capped at min(n, D) = 2
    assert comps.shape == (2, 2)
    np.testing.assert_allclose(mean, [1.0, 1.0])
    np.testing.assert_allclose(np.abs(comps[0]), [1 / math.sqrt(2)] * 2)
    z = pm.project(np.array([[3.0, 3.0]]), mean, comps[:1])
    np.testing.assert_allclose(np.abs(z), [[2 * math.sqrt(2)]])  # (3,3)-(1,1) = (2,2), length 2√2


def test_laplace_ldp_clips_and_scales_by_range_over_epsilon():
    z = np.array([[-5.0, 0.5], [0.2, 9.0]])
    lo, hi = np.array([-1.0, 0.0]), np.array([1.0, 4.0])
    assert np.array_equal(pm.laplace_ldp(z, math.inf, np.random.default_rng(0), lo, hi), z)  # ε=∞: untouched
    noisy = pm.laplace_ldp(z, 2.0, np.random.default_rng(3), lo, hi)
    lap = np.random.default_rng(3).laplace(0.0, 1.0, size=z.shape)
    clipped = np.array([[-1.0, 0.5], [0.2, 4.0]])
    np.testing.assert_allclose(noisy, clipped + lap * np.array([2.0 / 2.0, 4.0 / 2.0]))
    # local range (the paper's formula): scale = (max − min)/ε of the data itself; E|Lap(b)| = b
    big = np.random.default_rng(1).uniform(0, 10, size=(20000, 1))
    dev = pm.laplace_ldp(big, 5.0, np.random.default_rng(2)) - big
    assert abs(np.abs(dev).mean() - (big.max() - big.min()) / 5.0) < 0.05


def test_cluster_histograms_and_emd_by_hand():
    h = pm.cluster_histograms(np.array([0, 1, 1, 2]), np.array([0, 0, 1, 1]), 3, 3)
    np.testing.assert_allclose(h, [[0.5, 0.5, 0.0], [0.0, 0.5, 0.5], [0.0, 0.0, 0.0]])
    centers = np.array([[0.0, 0.0], [3.0, 4.0]])  # 5 apart
    hists = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [1.0, 0.0]])
    np.testing.assert_allclose(pm.emd_to_target(hists, 0, centers), [0.0, 5.0, 2.5, 0.0])
    np.testing.assert_allclose(pm.emd_to_target(hists, 0, centers, "normalized"), [0.0, 1.0, 0.5, 0.0])


def test_kmeans_histograms_separates_blobs():
    rng = np.random.default_rng(0)
    a, b = rng.normal(0, 0.1, (30, 2)), rng.normal(10, 0.1, (30, 2))
    centers, hists = pm.kmeans_histograms([a, np.concatenate([a[:15], b[:15]]), b], 2, seed=0)
    assert centers.shape == (2, 2)
    np.testing.assert_allclose(np.sort(hists, axis=1), [[0, 1], [0.5, 0.5], [0, 1]])
    assert hists[0].argmax() != hists[2].argmax()


def test_selection_rules_by_hand():
    emd = np.array([3.0, 0.0, 1.0, 2.0, 5.0, 10.0])  # target 1; max over the others = 10
    assert pm.select_collaborators(emd, 1, "strict").tolist() == [0, 2, 3]  # ≤ 3
    assert pm.select_collaborators(emd, 1, "lenient").tolist() == [0, 2, 3, 4]  # ≤ 6
    assert pm.select_collaborators(emd, 1, "strict", strict_ratio=0.1).tolist() == [2]
    assert pm.select_collaborators(emd, 1, "all").tolist() == [0, 2, 3, 4, 5]
    assert pm.select_collaborators(emd, 1, "none").tolist() == []
    assert pm.select_collaborators(emd, 1, "given", given=[5, 1, 0]).tolist() == [0, 5]
    assert pm.distance_order(emd, np.array([5, 0, 3, 2])).tolist() == [2, 3, 0, 5]
    assert pm.distance_order(np.array([0.0, 1.0, 1.0]), np.array([2, 1])).tolist() == [1, 2]  # ties by id


def test_membership_inference_limits():
    x = np.random.default_rng(0).normal(size=(400, 5))
    open_ = pm.membership_inference(x, math.inf, np.random.default_rng(1), n=100, alpha=0.05, trials=3)
    assert open_["power"] == 1.0 and open_["advantage"] == pytest.approx(0.95, abs=0.02)
    hidden = pm.membership_inference(x, 0.01, np.random.default_rng(1), n=100, alpha=0.05, trials=10)
    assert abs(hidden["advantage"]) < 0.08


# ------------------------------------------------------------------------------------------------ partition
def _pqfed_partition(**extra):
    over = {"data.name": "synthetic", "data.samples": 1500, "data.features": 12,
            "partition.name": "pqfed", "partition.num_clients": 4, "partition.rates": "[0.0,0.5,1.0]",
            "partition.sources": 6, "partition.samples_per_source": 20,
            "partition.target_test_per_source": 10, "partition.public_size": 60,
            "partition.pca_components": 5}
    over.update(extra)
    return [f"{k}={v}" for k, v in over.items()]


def _build(overrides):
    from flplat.data.datasets import load_dataset
    from flplat.data.partitions import build_federation
    from flplat.data.pqfed_partition import pqfed_sources

    cfg = load_config(None, overrides)
    ds = load_dataset(cfg.data, 0)
    data = build_federation(ds, cfg.partition, 5)
    part_ss, _ = np.random.SeedSequence(5).spawn(2)
    _, source = pqfed_sources(ds, cfg.partition, np.random.default_rng(part_ss))
    return data, source


def test_pqfed_partition_builds_the_papers_clients():
    data, source = _build(_pqfed_partition())
    target_src = data.meta["pqfed_target_sources"]
    t = data.clients[0]
    assert len(t.train) == 60 and len(t.test) == 30 and len(t.val) == 0
    assert np.bincount(source[t.train], minlength=6)[target_src].tolist() == [20, 20, 20]
    assert np.bincount(source[t.test], minlength=6)[target_src].tolist() == [10, 10, 10]
    for k, r in zip((1, 2, 3), (0.0, 0.5, 1.0)):
        idx = data.indices(k, "all")
        assert len(idx) == 60
        assert np.isin(source[idx], target_src).sum() == round((1 - r) * 60)
    every = np.concatenate([data.indices(k, "all") for k in range(4)])
    assert len(np.unique(every)) == len(every)  # disjoint clients
    assert data.public_indices is not None and len(data.public_indices) == 60


def test_pqfed_partition_single_diff_source_is_the_literal_reading():
    data, source = _build(_pqfed_partition(**{"partition.diff": "single"}))
    target_src = data.meta["pqfed_target_sources"]
    for k, r in zip((1, 2, 3), (0.0, 0.5, 1.0)):
        idx = data.indices(k, "all")
        inside = np.isin(source[idx], target_src)
        assert inside.sum() == 3 * round((1 - r) * 20) and (~inside).sum() == round(r * 20)
        assert len(np.unique(source[idx[~inside]])) <= 1  # one c_diff


def test_pqfed_partition_prefix_stable_and_checked():
    a, _ = _build(_pqfed_partition())
    b, _ = _build(_pqfed_partition(**{"partition.num_clients": 3, "partition.rates": "[0.0,0.5]"}))
    for k in range(3):
        assert np.array_equal(a.indices(k, "train"), b.indices(k, "train"))
    with pytest.raises(ConfigError, match="num_clients"):
        _build(_pqfed_partition(**{"partition.num_clients": 5}))
    with pytest.raises(ConfigError, match="partition.rates"):
        load_config(None, _pqfed_partition(**{"partition.rates": "[0.5,1.5,0.0]"}))


# ------------------------------------------------------------------------------------------------ algorithm
def _run(tiny_cfg, **extra):
    base = {"algorithm.name": "pqfed", "federation.rounds": 2, "fabric.num_threads": 1}
    base.update(extra)
    return run(tiny_cfg(**base), progress=False)[0]


def _paper_like(**extra):
    over = {k.split("=")[0]: k.split("=", 1)[1] for k in _pqfed_partition()}
    over.update({"algorithm.pca_components": 5, "algorithm.num_clusters": 6, "algorithm.epsilon": "inf",
                 "partition.train_fraction": 0.8, "partition.test_fraction": 0.2})
    over.update(extra)
    return over


def test_emd_grows_with_dissimilarity_and_strict_selection(tiny_cfg):
    s = _run(tiny_cfg, **_paper_like(**{"algorithm.selection": "strict"}))
    emd = s.state.method.emd
    assert emd[0] == 0 and emd[1] < emd[2] < emd[3]  # r = 0, 0.5, 1
    assert s.state.method.order.tolist() == pm.select_collaborators(emd, 0, "strict").tolist()
    assert s.metrics["num_participants"] == 1 + len(s.state.method.order)
    assert 0 <= s.metrics["target_accuracy"] <= 1
    assert s.metrics["target_accuracy"] == s.client_table["accuracy"][0]


def test_strong_ldp_noise_flattens_normalized_emd_and_selection_is_scale_free(tiny_cfg):
    norm = {"federation.rounds": 1, "algorithm.ground_cost": "normalized"}
    clear = _run(tiny_cfg, **_paper_like(**norm)).state.method
    noisy = _run(tiny_cfg, **_paper_like(**norm, **{"algorithm.epsilon": 0.1})).state.method.emd
    assert noisy.max() < 0.5 * clear.emd.max()
    raw = _run(tiny_cfg, **_paper_like(**{"federation.rounds": 1})).state.method
    np.testing.assert_allclose(raw.emd / raw.emd.max(), clear.emd / clear.emd.max())
    assert raw.order.tolist() == clear.order.tolist()


def test_selection_all_equals_fedavg_with_full_participation(tiny_cfg):
    avg = run(tiny_cfg(**{"algorithm.name": "fedavg", "federation.client_fraction": 1.0, "federation.rounds": 2,
                          "fabric.num_threads": 1}), progress=False)[0]
    pq = _run(tiny_cfg, **{"algorithm.selection": "all"})
    assert torch.equal(avg.state.weights, pq.state.weights)


def test_selection_none_trains_the_target_alone(tiny_cfg):
    s = _run(tiny_cfg, **{"algorithm.selection": "none", "algorithm.target": 2})
    assert s.metrics["num_participants"] == 1 and s.metrics["num_collaborators"] == 0


def test_given_collaborators(tiny_cfg):
    s = _run(tiny_cfg, **{"algorithm.selection": "given", "algorithm.collaborators": "[4,1]"})
    assert s.state.method.order.tolist() in ([1, 4], [4, 1])
    assert s.metrics["num_participants"] == 3
    with pytest.raises(ConfigError, match="algorithm.collaborators"):
        _run(tiny_cfg, **{"algorithm.selection": "given", "algorithm.collaborators": "[7]"})


def test_fedprox_inner_with_mu_zero_equals_fedavg_inner(tiny_cfg):
    a = _run(tiny_cfg, **{"algorithm.selection": "lenient"})
    b = _run(tiny_cfg, **{"algorithm.selection": "lenient", "algorithm.inner": "fedprox",
                          "algorithm.inner_params": "{mu: 0.0}"})
    c = _run(tiny_cfg, **{"algorithm.selection": "lenient", "algorithm.inner": "fedprox",
                          "algorithm.inner_params": "{mu: 10.0}"})
    assert torch.equal(a.state.weights, b.state.weights) and not torch.equal(a.state.weights, c.state.weights)


def test_incremental_visits_clients_by_distance_and_stops(tiny_cfg):
    over = _paper_like(**{"algorithm.selection": "all", "algorithm.mode": "incremental",
                          "algorithm.rounds_per_stage": 1, "algorithm.incremental_stop": "false",
                          "federation.rounds": 4})
    s = _run(tiny_cfg, **over)
    order = s.state.method.order.tolist()
    assert order == [1, 2, 3]
    assert [h["stage_client"] for h in s.history] == [1, 2, 3, 3]
    assert [h["num_participants"] for h in s.history] == [2, 2, 2, 1]  # after the last stage: frozen
    # with stopping: once the target's accuracy drops the model stays as it is
    over.update({"algorithm.incremental_stop": "true", "federation.optimizer.lr": 0.5, "federation.rounds": 3})
    s = _run(tiny_cfg, **over)
    stops = [h["stopped"] for h in s.history]
    assert stops == [0.0, 1.0, 1.0]
    assert s.history[2]["num_participants"] == 1
    assert s.history[2]["target_accuracy"] == s.history[1]["target_accuracy"] < s.history[0]["target_accuracy"]


def test_algorithm2_outcome_with_and_without_stopping(tiny_cfg):
    """Algorithm 2 breaks at the first stage whose accuracy is below the best so far and returns that (last) model:
    ``algorithm2_stage`` / ``algorithm2_accuracy`` say where and what, the same whether training stops there
    (incremental_stop) or goes on through every stage (Table VIII)."""
    over = _paper_like(**{"algorithm.selection": "all", "algorithm.mode": "incremental",
                          "algorithm.rounds_per_stage": 1, "algorithm.incremental_stop": "false",
                          "federation.optimizer.lr": 0.5, "federation.rounds": 3})
    free = _run(tiny_cfg, **over)
    accs = [h["target_accuracy"] for h in free.history]
    assert free.state.method.stage_acc.tolist() == accs  # one round per stage
    assert accs[1] < accs[0]  # the rule by hand: the first decrease is stage 2
    assert "algorithm2_stage" not in free.history[0]
    assert [h["algorithm2_stage"] for h in free.history[1:]] == [2.0, 2.0]
    assert free.metrics["algorithm2_accuracy"] == accs[1]
    stop = _run(tiny_cfg, **{**over, "algorithm.incremental_stop": "true"})
    assert (stop.metrics["algorithm2_stage"], stop.metrics["algorithm2_accuracy"]) == (2.0, accs[1])
    assert stop.metrics["target_accuracy"] == accs[1]
    best = _run(tiny_cfg, **{**over, "algorithm.incremental_stop": "true", "algorithm.incremental_return": "best"})
    assert (best.metrics["algorithm2_stage"], best.metrics["algorithm2_accuracy"]) == (2.0, accs[0])
    assert best.metrics["target_accuracy"] == accs[0]
    # no decrease (one collaborator, one stage of two rounds): Algorithm 2 returns the model after the last stage
    one = _run(tiny_cfg, **{**over, "algorithm.selection": "given", "algorithm.collaborators": "[1]",
                            "algorithm.rounds_per_stage": 2, "federation.rounds": 2})
    assert "algorithm2_stage" not in one.history[0]
    assert one.metrics["algorithm2_stage"] == 1.0
    assert one.metrics["algorithm2_accuracy"] == one.metrics["target_accuracy"]


@pytest.mark.parametrize("key,value,match", [
    ("algorithm.selection", "loose", "algorithm.selection"),
    ("algorithm.inner", "cfl", "algorithm.inner"),
    ("algorithm.inner_params", "{nu: 1}", "inner_params"),
    ("algorithm.epsilon", "0", "algorithm.epsilon"),
    ("algorithm.mode", "greedy", "algorithm.mode"),
])
def test_bad_config_names_the_key(tiny_cfg, key, value, match):
    with pytest.raises(ConfigError, match=match):
        tiny_cfg(**{"algorithm.name": "pqfed", key: value})


def test_target_out_of_range(tiny_cfg):
    with pytest.raises(ConfigError, match="algorithm.target"):
        _run(tiny_cfg, **{"algorithm.target": 99})


def test_frozen_rounds_with_vectorized_clients(tiny_cfg):
    s = _run(tiny_cfg, **{"algorithm.selection": "all", "algorithm.mode": "incremental",
                          "algorithm.rounds_per_stage": 1, "federation.rounds": 7, "federation.vectorize": "true"})
    assert [h["num_participants"] for h in s.history] == [2] * 5 + [1] * 2
    assert s.history[-1]["target_accuracy"] == s.history[-2]["target_accuracy"] == s.history[4]["target_accuracy"]


def test_feddyn_inner_runs_on_the_selected_clients(tiny_cfg):
    a = _run(tiny_cfg, **{"algorithm.selection": "lenient"})
    d = _run(tiny_cfg, **{"algorithm.selection": "lenient", "algorithm.inner": "feddyn",
                          "algorithm.inner_params": "{alpha: 0.1}"})
    assert d.metrics["num_participants"] == a.metrics["num_participants"]
    assert torch.isfinite(d.state.weights).all() and not torch.equal(a.state.weights, d.state.weights)
    assert 0 <= d.metrics["target_accuracy"] <= 1


# ------------------------------------------------------------------------------------------- inner FedDyn's K
def test_inner_feddyn_divides_h_by_the_inner_federation_not_all_clients():
    """A group of 2 (target 0 + collaborator 5) inside 12 clients, α = 1, θ^{t-1} = 0, client updates +1.5 and +0.5
    on every weight: h = −α (1.5 + 0.5) / 2 = −1.0 (not −2/12 = −0.167) and θ = mean(θ_k) − h/α = 1.0 + 1.0 = 2.0."""
    from torch import nn

    from flplat.algorithms.pqfed import PQFed, PQFedState
    from flplat.api import ClientResult, EvalResult, FederationInfo, ParamLayout

    layout = ParamLayout(nn.Linear(1, 1))  # P = 2
    k = 12
    info = FederationInfo(num_clients=k, num_classes=2, num_samples=np.full(k, 10), label_counts=np.ones((k, 2)),
                          client_fraction=1.0, local_epochs=1, layout=layout, all_train_indices=np.arange(10 * k),
                          public_x=torch.zeros(4, 1))
    cfg = PQFed.Config(selection="given", collaborators=[5], inner="feddyn", inner_params={"alpha": 1.0})
    strat = PQFed(cfg, info)
    state = strat.inner.init_state(torch.zeros(2), np.random.default_rng(0), None)
    state.method = PQFedState(emd=np.zeros(k), order=np.array([5]), inner=state.method)
    state.round = 1
    assert strat.select(state, np.random.default_rng(0), None).tolist() == [0, 5]

    class Ops:
        def evaluate(self, requests, split="val"):
            return [EvalResult(c, 0.0, 1, 2) for c, _ in requests]

    results = [ClientResult(0, torch.full((2,), 1.5), 10, 0.0), ClientResult(5, torch.full((2,), 0.5), 10, 0.0)]
    state = strat.aggregate(state, results, Ops())
    torch.testing.assert_close(state.method.inner.h, torch.full((2,), -1.0))
    torch.testing.assert_close(state.weights, torch.full((2,), 2.0))
    torch.testing.assert_close(state.personal.get(0), torch.full((2,), -1.5))  # h_k − α (θ_k − θ^{t−1})


# ------------------------------------------------------------------------ silent degradations are config errors
def _pqfed_cfg(**extra):
    over = _pqfed_partition(**{"algorithm.name": "pqfed", "algorithm.pca_components": 5, "algorithm.num_clusters": 6,
                               "partition.train_fraction": 1.0, "partition.test_fraction": 0.0,
                               "partition.val_fraction": 0.0, "tracking.enabled": "false", **extra})
    return load_config(None, over)


def test_target_without_a_test_split_is_a_config_error():
    """On the pqfed partition only client 0 (the partition's target) has a test split: target 2 logged NaN."""
    from flplat.experiment import prepare

    with pytest.raises(ConfigError, match=r"algorithm\.target=2: client 2 has no test split.*allowed: a client with "
                                          r"test data \(0\)"):
        prepare(_pqfed_cfg(**{"algorithm.target": 2}))
    p = prepare(_pqfed_cfg(**{"algorithm.target": 2, "partition.train_fraction": 0.8,
                              "partition.test_fraction": 0.2}))  # real support: client 2 then has test data
    assert p.strategy.cfg.target == 2


def test_incremental_stop_on_a_missing_validation_split_is_a_config_error():
    """The pqfed target has no validation split: stop_split=val never stopped Algorithm 2."""
    from flplat.experiment import prepare

    inc = {"algorithm.mode": "incremental", "algorithm.stop_split": "val"}
    with pytest.raises(ConfigError, match=r"algorithm\.stop_split='val': the target client 0 has no validation"):
        prepare(_pqfed_cfg(**inc))
    prepare(_pqfed_cfg(**{**inc, "algorithm.incremental_stop": False}))  # no stopping rule: nothing to check
    prepare(_pqfed_cfg(**{"algorithm.mode": "incremental"}))  # stop_split=test (default)
