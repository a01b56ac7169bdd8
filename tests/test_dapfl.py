"""DA-PFL (Yang et al.): affinity maths (Eqs. 3–8) on hand-computed inputs, the paper's Fig. 1 example, the
vectorised personalised aggregation (Eq. 9), the Few/Medium/Many and run-summary metrics, and reductions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from flplat.algorithms.dapfl import DAPFL, ProximalStep
from flplat.api import ClientPlan, FederationInfo, ParamLayout, ProximalTerm
from flplat.errors import ConfigError
from flplat.experiment import load_config, prepare, run
from flplat.maths.dapfl_affinity import (
    adjusted_cosine,
    affinity_matrix,
    dynamic_weights,
    pairwise_distances,
    raw_affinity,
)
from flplat.metrics.personalized import bucket_accuracy, mean_last_rounds, rounds_to_target, run_summary
from tests.conftest import tiny_overrides

# Fig. 1: client 0 holds 80/50/20 samples of classes A/B/C; client 1 the same (group 1), client 4 the reverse
# (group 4); clients 2 and 3 swap two classes.
FIG1 = np.array([[80, 50, 20], [80, 50, 20], [80, 20, 50], [50, 80, 20], [20, 50, 80]])


def test_fig1_complementary_client_has_highest_affinity_identical_lowest():
    raw = raw_affinity(FIG1)
    # centred on the joint mean 50: identical -> cos 1 -> c = 3/3 (2 - 1) = 1; reversed -> cos -1 -> c = 3;
    # one swap -> (30, 0, -30)·(30, -30, 0) / 1800 = 0.5 -> c = 1.5
    assert raw[0, 1:] == pytest.approx([1.0, 1.5, 1.5, 3.0])
    c = affinity_matrix(FIG1)
    assert c[0] == pytest.approx(np.array([0.0, 1.0, 1.5, 1.5, 3.0]) / 7.0)
    others = c[0, 1:]
    assert np.argmax(others) + 1 == 4 and np.argmin(others) + 1 == 1


def test_adjusted_cosine_partial_overlap_by_hand():
    s = np.array([[10, 0, 30, 20], [5, 5, 0, 15]])
    # shared classes {0, 3}: E01 = (10, 20), E10 = (5, 15), s̄ = 50/4 = 12.5
    # centred (-2.5, 7.5), (-7.5, 2.5): cos = 37.5 / 62.5 = 0.6; c = 2/4 (2 - 0.6) = 0.7
    cos, shared = adjusted_cosine(s, min_shared=1)
    assert shared[0, 1] == 2 and cos[0, 1] == pytest.approx(0.6) and cos[1, 0] == pytest.approx(0.6)
    assert raw_affinity(s, min_shared=1)[0, 1] == pytest.approx(0.7)


def test_no_overlap_pairs_get_the_minimum_affinity_times_fill_factor():
    s = np.array([[10, 10, 0, 0], [0, 0, 10, 10], [10, 0, 10, 0]])
    # (0,1) share nothing; (0,2) and (1,2) share one class with equal counts: zero denominator -> cos 0 -> c = 0.5
    raw = raw_affinity(s, min_shared=1)
    assert np.isnan(raw[0, 1]) and raw[0, 2] == pytest.approx(0.5) and raw[1, 2] == pytest.approx(0.5)
    c = affinity_matrix(s, min_shared=1, fill_factor=0.9)
    assert c[0] == pytest.approx([0.0, 0.45 / 0.95, 0.5 / 0.95])
    assert np.allclose(c.sum(axis=1), 1.0) and np.all(np.diag(c) == 0) and np.all((0 <= c) & (c <= 1))
    # with min_shared = 2 no pair overlaps: equal affinities
    assert np.allclose(affinity_matrix(s, min_shared=2), (1 - np.eye(3)) / 2)


def test_dynamic_weights_eqs_7_and_8_by_hand():
    c = torch.tensor([[0.0, 0.6, 0.2], [0.3, 0.0, 0.3], [0.5, 0.5, 0.0]], dtype=torch.float64)
    d = torch.tensor([[0.0, 1.0, 2.0], [1.0, 0.0, 3.0], [2.0, 3.0, 0.0]], dtype=torch.float64)
    a = dynamic_weights(c, d, sigma=2.0, eps=0.0)
    t1, t2 = 0.75 * (1 - math.exp(-0.5)), 0.25 * (1 - math.exp(-1.0))
    assert a[0].tolist() == pytest.approx([0.0, t1 / (t1 + t2), t2 / (t1 + t2)])
    assert torch.allclose(a.sum(dim=1), torch.ones(3, dtype=torch.float64))
    # V2 (no dynamic term): normalised affinity
    assert dynamic_weights(c, None)[0].tolist() == pytest.approx([0.0, 0.75, 0.25])
    # identical models with eps = 0: the zero factor becomes 1 -> affinity weights
    assert dynamic_weights(c, torch.zeros(3, 3), eps=0.0)[1].tolist() == pytest.approx([0.5, 0.0, 0.5])
    assert dynamic_weights(torch.zeros(1, 1), torch.zeros(1, 1)).tolist() == [[0.0]]


def test_pairwise_distances_power():
    w = torch.tensor([[0.0, 0.0], [3.0, 4.0]])
    assert pairwise_distances(w, 2.0)[0, 1].item() == pytest.approx(25.0)
    assert pairwise_distances(w, 1.0)[1, 0].item() == pytest.approx(5.0)


def _strategy(counts, **cfg):
    layout = ParamLayout(nn.Linear(2, 2))  # P = 6
    k = len(counts)
    info = FederationInfo(num_clients=k, num_classes=counts.shape[1], num_samples=counts.sum(1),
                          label_counts=counts, client_fraction=0.6, local_epochs=1, layout=layout,
                          all_train_indices=np.arange(10))
    return DAPFL(DAPFL.Config(**cfg), info)


def test_personalised_aggregation_matches_eqs_7_to_9_written_out():
    strat = _strategy(FIG1, sigma=50.0, eps=1e-3)
    state = strat.init_state(torch.zeros(6), np.random.default_rng(0), None)
    g = torch.Generator().manual_seed(0)
    for k in range(5):
        state.personal.set(k, torch.randn(6, generator=g) * (k + 1))
    clients = np.array([0, 2, 4])
    got = strat.aggregated_models(state, clients)
    c = affinity_matrix(FIG1)
    for a, i in enumerate(clients):
        wi = state.personal.get(int(i)).double()
        csum = sum(c[i, j] for j in clients if j != i)
        theta = {j: c[i, j] / csum * (1 - math.exp(-((wi - state.personal.get(int(j)).double()).pow(2).sum().item()
                                                       + 1e-3) / 50.0)) for j in clients if j != i}
        want = sum(theta[j] / sum(theta.values()) * state.personal.get(int(j)).double() for j in theta)
        assert torch.allclose(got[a].double(), want, atol=1e-6)


def test_ablation_v1_is_the_uniform_mean_of_the_other_participants():
    strat = _strategy(FIG1, affinity=False, dynamic=False)
    state = strat.init_state(torch.zeros(6), np.random.default_rng(0), None)
    for k in range(5):
        state.personal.set(k, torch.full((6,), float(k)))
    got = strat.aggregated_models(state, np.array([1, 3, 4]))
    assert torch.allclose(got[:, 0], torch.tensor([3.5, 2.5, 2.0]))


def test_dapfl_config_errors():
    with pytest.raises(ConfigError, match="algorithm.sigma"):
        load_config(None, tiny_overrides(**{"algorithm.name": "dapfl", "algorithm.sigma": 0}))
    with pytest.raises(ConfigError, match="algorithm.local_start"):
        load_config(None, tiny_overrides(**{"algorithm.name": "dapfl", "algorithm.local_start": "x"}))
    with pytest.raises(ConfigError, match="algorithm.pull"):
        load_config(None, tiny_overrides(**{"algorithm.name": "dapfl", "algorithm.pull": "momentum"}))
    with pytest.raises(ConfigError, match="metrics.class_bucket_edges"):
        load_config(None, tiny_overrides(**{"metrics.class_bucket_edges": "[80, 30]"}))


def test_dapfl_with_lambda_zero_is_exactly_local_training(tiny_cfg):
    d = run(tiny_cfg(**{"algorithm.name": "dapfl", "algorithm.lam": 0.0, "federation.rounds": 3}), progress=False)[0]
    loc = run(tiny_cfg(**{"algorithm.name": "local", "federation.rounds": 3}), progress=False)[0]
    for k in range(6):
        assert d.state.personal.has(k) == loc.state.personal.has(k)
        assert torch.equal(d.state.personal.get(k), loc.state.personal.get(k))
    a = run(tiny_cfg(**{"algorithm.name": "dapfl", "federation.rounds": 3}), progress=False)[0]
    assert not torch.equal(a.state.personal.get(int(np.flatnonzero(a.state.personal._written)[0])),
                           loc.state.personal.get(int(np.flatnonzero(a.state.personal._written)[0])))


def test_post_step_pull_is_the_authors_update_after_each_optimizer_step(tiny_cfg):
    """pull=step: after the SGD step θ' = θ − lr·g, θ ← θ' − lr·λ·(θ' − c), with the plan's lr (the trainer's
    HookContext.lr); one full-batch step so the expected weights follow from a run without the hook."""
    p = prepare(tiny_cfg(**{"algorithm.name": "dapfl", "federation.batch_size": 1000,
                            "federation.optimizer.name": "sgd", "federation.optimizer.momentum": 0.0,
                            "federation.optimizer.weight_decay": 0.0}))
    idx = p.data.clients[0].train
    w0 = p.init_weights
    center = w0 + torch.linspace(-1.0, 1.0, w0.numel())
    plain = p.trainer.train(0, ClientPlan(weights=w0, lr=0.3), idx, seed=5).weights
    pulled = p.trainer.train(0, ClientPlan(weights=w0, lr=0.3, hooks=(ProximalStep(center, 2.0),)), idx, seed=5)
    assert torch.allclose(pulled.weights, plain - 0.3 * 2.0 * (plain - center), atol=1e-6)
    # the loss-term pull of Eq. 10 differs: its gradient λ(θ − c) is taken before the step
    term = p.trainer.train(0, ClientPlan(weights=w0, lr=0.3, hooks=(ProximalTerm(center, 2.0),)), idx, seed=5)
    assert torch.allclose(term.weights, plain - 0.3 * 2.0 * (w0 - center), atol=1e-6)


def test_dapfl_pull_key_selects_the_hook():
    strat = _strategy(FIG1, pull="step")
    state = strat.init_state(torch.zeros(6), np.random.default_rng(0), None)
    strat.select(state, np.random.default_rng(0), None)
    part = int(state.method.participants[0])
    assert [type(h) for h in strat.plan(state, part).hooks] == [ProximalStep]
    assert [type(h) for h in _strategy(FIG1).plan(state, part).hooks] == [ProximalTerm]


# ---- metrics -------------------------------------------------------------------------------------------


def test_bucket_accuracy_by_hand():
    train = np.array([[29, 30, 81], [80, 100, 0]])
    correct = np.array([[1, 2, 9], [3, 4, 0]])
    total = np.array([[4, 5, 10], [5, 6, 2]])
    # few: (0,0) and (1,2) -> 1/6; medium: (0,1), (1,0) -> 5/10; many: (0,2), (1,1) -> 13/16
    out = bucket_accuracy(correct, total, train, (30, 80))
    assert out == pytest.approx({"acc_few": 1 / 6, "acc_medium": 0.5, "acc_many": 13 / 16})
    assert np.isnan(bucket_accuracy(correct, total, np.full((2, 3), 50), (30, 80))["acc_few"])


def test_last_rounds_and_rounds_to_target_with_evaluation_gaps():
    hist = [{"acc": 0.1}, {}, {"acc": 0.5}, {}, {"acc": 0.4}, {"acc": 0.7}]
    assert mean_last_rounds(hist, "acc", 3) == pytest.approx(0.55)  # rounds 5, 6
    assert mean_last_rounds(hist, "acc", 10) == pytest.approx(1.7 / 4)
    assert rounds_to_target(hist, "acc", 0.45) == 3.0 and rounds_to_target(hist, "acc", 0.7) == 6.0
    assert np.isnan(rounds_to_target(hist, "acc", 0.9))
    s = run_summary(hist, "acc", 3, [0.45])
    assert s["acc_last3"] == pytest.approx(0.55) and s["rounds_to_acc45"] == 3.0


def test_run_logs_class_buckets_and_final_summaries(tiny_cfg):
    s = run(tiny_cfg(**{"algorithm.name": "dapfl", "federation.rounds": 3, "metrics.last_rounds": 2,
                        "metrics.target_accuracy": "[0.01, 1.0]"}), progress=False)[0]
    for key in ("acc_few", "acc_medium", "acc_many"):
        assert key in s.metrics
    assert s.final["mean_local_accuracy_last2"] == pytest.approx(
        np.mean([h["mean_local_accuracy"] for h in s.history[1:]]))
    assert s.final["rounds_to_acc1"] == 1.0 and np.isnan(s.final["rounds_to_acc100"])


def test_tracked_run_logs_summaries_and_table_shows_them(tmp_path):
    from flplat.tracking.reports import collect_runs, runs_table
    from flplat.tracking.store import store_uris

    store = str(tmp_path / "mlruns")
    over = tiny_overrides(**{"algorithm.name": "dapfl", "tracking.enabled": "true", "tracking.experiment": "dapfl-t",
                             "tracking.store_dir": store, "tracking.plots": "false",
                             "metrics.target_accuracy": "[0.01]"})
    summary = run(load_config(None, over), progress=False)[0]
    (row,) = collect_runs("dapfl-t", store_uris(None, store)[0])
    assert row["metrics"]["mean_local_accuracy_last10"] == pytest.approx(summary.final["mean_local_accuracy_last10"])
    assert row["metrics"]["rounds_to_acc1"] == 1.0 and "acc_few" in row["metrics"]
    table = runs_table([row], metric="mean_local_accuracy_last10").splitlines()
    assert table[2].startswith("| dapfl | ") and f"{summary.final['mean_local_accuracy_last10']:.2f}" in table[2]


def test_data_subsampling_is_deterministic_and_sized():
    from flplat.data.datasets import load_dataset
    from flplat.data.registry import data_config

    a = load_dataset(data_config(name="digits", max_train_samples=500), 3)
    b = load_dataset(data_config(name="digits", max_train_samples=500), 3)
    full = load_dataset(data_config(name="digits"), 3)
    assert len(a.y_train) == 500 and torch.equal(a.x_train, b.x_train)
    assert len(full.y_train) > 500 and len(load_dataset(data_config(name="digits", max_train_samples=10**6), 3)
                                         .y_train) == len(full.y_train)
    with pytest.raises(ConfigError, match="data.max_train_samples"):
        load_config(None, tiny_overrides(**{"data.max_train_samples": -1}))


def test_proximal_centre_is_the_personalised_aggregate_not_the_start():
    # Eq. 10: the local objective pulls w_i towards w_i^g (Eq. 9); local training starts from w_i^{t-1} (default)
    strat = _strategy(FIG1, sigma=50.0, eps=1e-3, lam=2.0)
    state = strat.init_state(torch.zeros(6), np.random.default_rng(0), None)
    for k in range(5):
        state.personal.set(k, torch.full((6,), float(k)))
    chosen = strat.select(state, np.random.default_rng(1), None)
    for a, k in enumerate(chosen):
        plan = strat.plan(state, int(k))
        (hook,) = plan.hooks
        assert torch.equal(hook.center, state.method.aggregated[a]) and hook.mu == 2.0
        assert torch.equal(plan.weights, state.personal.get(int(k)))
        assert not torch.equal(hook.center, plan.weights)
