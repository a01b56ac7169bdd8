"""Conformance over the whole algorithm registry, plus reduction checks between related algorithms."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flplat.algorithms import ALGORITHMS
from flplat.experiment import prepare, run


def _run(cfg):
    summary, run_id = run(cfg, progress=False)
    assert run_id is None
    return summary


# The registry-wide conformance tests: the properties of `flplat check` (flplat/studies/conformance.py) on every
# registered algorithm, one test per algorithm so that the runs the properties share (the reference run and its
# checkpoint) are made once. The two that start other processes (sharded, kill_resume) run registry-wide under
# `-m slow` (tests/test_sharding.py, tests/test_checkpoint.py) and for a representative in the default suite.
FAST = ("registry", "smoke", "determinism", "checkpoint", "vectorize", "failures", "invalid_config", "declarations",
        "evaluation")


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_conformance(name):
    from flplat.studies.conformance import check

    results = check(name, only=FAST)
    assert [r.prop for r in results] == list(FAST)
    failed = [r.line() for r in results if not r.ok]
    assert not failed, "\n".join(failed)


def test_fedprox_with_mu_zero_is_exactly_fedavg(tiny_cfg):
    avg = _run(tiny_cfg(**{"algorithm.name": "fedavg", "federation.rounds": 3}))
    prox = _run(tiny_cfg(**{"algorithm.name": "fedprox", "algorithm.mu": 0.0, "federation.rounds": 3}))
    assert torch.equal(avg.state.weights, prox.state.weights)


def test_fedprox_mu_pulls_clients_towards_global(tiny_cfg):
    # with a huge mu the local models barely move, so the global model changes far less than FedAvg's
    cfg_avg = tiny_cfg(**{"algorithm.name": "fedavg", "federation.rounds": 1})
    p = prepare(cfg_avg)
    w0 = p.init_weights
    avg = _run(cfg_avg)
    prox = _run(tiny_cfg(**{"algorithm.name": "fedprox", "algorithm.mu": 100.0, "federation.rounds": 1}))
    assert (prox.state.weights - w0).norm() < 0.5 * (avg.state.weights - w0).norm()


def test_fedavg_selects_fraction_q(tiny_cfg):
    s = _run(tiny_cfg(**{"federation.client_fraction": 0.5}))
    assert all(h["num_participants"] == 3 for h in s.history)  # round(0.5 * 6)


def test_fedavg_with_full_participation_and_one_client_equals_local(tiny_cfg):
    over = {"partition.num_clients": 1, "federation.client_fraction": 1.0, "partition.name": "iid"}
    a = _run(tiny_cfg(**{"algorithm.name": "fedavg", **over}))
    b = _run(tiny_cfg(**{"algorithm.name": "local", **over}))
    assert torch.equal(a.state.weights, b.state.personal.get(0))


def test_local_only_keeps_one_model_per_client_and_sends_nothing(tiny_cfg):
    s = _run(tiny_cfg(**{"algorithm.name": "local", "federation.client_fraction": 1.0}))
    rows = torch.stack([s.state.personal.get(k) for k in range(6)])
    assert len({tuple(r.tolist()[:5]) for r in rows}) == 6  # all different
    assert s.metrics["bytes_up"] == 0 and s.metrics["bytes_down"] == 0


def test_centralized_trains_on_the_pooled_train_splits(tiny_cfg):
    cfg = tiny_cfg(**{"algorithm.name": "centralized"})
    p = prepare(cfg)
    s = _run(cfg)
    assert s.history[0]["num_participants"] == 1
    assert sorted(p.strategy.info.all_train_indices.tolist()) == sorted(
        np.concatenate([c.train for c in p.data.clients]).tolist())
    assert s.metrics["global_accuracy"] > 0.5


def test_bytes_count_the_model_both_ways(tiny_cfg):
    cfg = tiny_cfg()
    p = prepare(cfg)
    s = _run(cfg)
    per_model = p.init_weights.numel() * 4
    assert s.history[0]["bytes_down"] == 3 * per_model and s.history[0]["bytes_up"] == 3 * per_model


def test_centralized_trains_one_model_on_the_pooled_train_splits(tiny_cfg):
    from flplat.experiment import prepare, run

    p = prepare(tiny_cfg(**{"algorithm.name": "centralized"}))
    state = p.strategy.init_state(p.init_weights, np.random.default_rng(0), None)
    plan = p.strategy.plan(state, int(p.strategy.select(state, np.random.default_rng(0), None)[0]))
    pooled = np.sort(np.concatenate([c.train for c in p.data.clients]))
    assert np.array_equal(np.sort(plan.indices), pooled)  # every client's train split, nothing else
    s, _ = run(tiny_cfg(**{"algorithm.name": "centralized"}), progress=False)
    assert all(h["num_participants"] == 1 and h["bytes_up"] == h["bytes_down"] == 0 for h in s.history)
