"""Simulated client failures (federation.failures): every registered algorithm survives rounds with drop-outs,
stragglers and NaN/Inf updates, and rounds where every sampled client fails (the ``failures`` property of
``flplat check``, flplat/studies/conformance.py); the counts are logged per round;
a round whose every real update is NaN stops the run with "diverged at round t"."""

from __future__ import annotations

import pytest
import torch

from flplat.api import ClientPlan
from flplat.engine.failures import FailureModel, reject_nonfinite
from flplat.errors import RunFailed
from flplat.experiment import run


def _timeless(history):
    return [{k: v for k, v in h.items() if k != "round_time_s"} for h in history]


# every registered algorithm surviving 30 % drop-outs, stragglers and NaN updates, and rounds where every sampled
# client fails: the `failures` property of `flplat check`, run registry-wide by test_algorithms.py::test_conformance


def test_failure_draws_are_seeded_and_counted():
    cfg = type("C", (), {"dropout": 0.5, "straggler": 0.5, "corrupt": 0.0, "straggler_policy": "partial"})
    fm = FailureModel(cfg, seed=0, local_epochs=4)
    plans = [(k, ClientPlan(weights=torch.zeros(3))) for k in range(40)]
    a, counts, _ = fm.plan(plans, round=1)
    b, _, _ = fm.plan(plans, round=1)
    assert [c for c, _ in a] == [c for c, _ in b]  # seeded
    assert 0 < counts["dropped_clients"] < 40 and len(a) == 40 - counts["dropped_clients"]
    cut = [p.epochs for _, p in a if p.epochs is not None]
    assert len(cut) == counts["straggler_clients"] and all(1 <= e <= 4 for e in cut)
    # the same client fails the same way whoever else is sampled
    alone, _, _ = fm.plan([plans[a[0][0]]], round=1)
    assert [c for c, _ in alone] == [a[0][0]]
    cfg.straggler_policy = "drop"
    d, counts_d, _ = FailureModel(cfg, seed=0, local_epochs=4).plan(plans, round=1)
    assert len(d) == 40 - counts["dropped_clients"] - counts["straggler_clients"]


def test_nonfinite_updates_are_rejected():
    from flplat.api import ClientResult

    rs = [ClientResult(0, torch.ones(3), 5, 0.1), ClientResult(1, torch.tensor([1.0, float("nan"), 0.0]), 5, 0.1),
          ClientResult(2, torch.tensor([float("inf"), 0.0, 0.0]), 5, 0.1), ClientResult(1, torch.ones(3), 5, 0.1)]
    kept, rejected = reject_nonfinite(rs)
    assert [r.client for r in kept] == [0] and rejected == 2  # client 1 fails as a whole (all its jobs)


def test_finite_check_decides_by_the_sum_and_is_exact_where_the_sum_overflows(monkeypatch):
    from flplat.engine.failures import all_finite

    big = torch.full((4,), 3e38)  # finite, but the sum overflows to inf
    assert all_finite(big) and all_finite(torch.zeros(0)) and all_finite(torch.ones(5, dtype=torch.float16) * 6e4)
    for bad in (float("nan"), float("inf"), -float("inf")):
        assert not all_finite(torch.tensor([1.0, bad, 2.0])) and not all_finite(torch.tensor([3e38, 3e38, bad]))
    assert not all_finite(torch.tensor([float("inf"), -float("inf")]))
    sizes, isfinite = [], torch.isfinite
    monkeypatch.setattr(torch, "isfinite", lambda t: sizes.append(t.numel()) or isfinite(t))
    assert all_finite(torch.ones(1000))
    assert sizes == [1]  # a finite vector: one test of its sum, no element-wise pass


def test_stragglers_do_less_work(tiny_cfg):
    s, _ = run(tiny_cfg(**{"federation.local_epochs": 4, "federation.rounds": 2, "federation.client_fraction": 1.0,
                           "federation.failures.straggler": 1.0}), progress=False)
    full, _ = run(tiny_cfg(**{"federation.local_epochs": 4, "federation.rounds": 2,
                              "federation.client_fraction": 1.0}), progress=False)
    assert [h["straggler_clients"] for h in s.history] == [6, 6]
    assert _timeless(s.history) != _timeless(full.history)


def test_diverged_run_stops_with_one_line(tiny_cfg):
    with pytest.raises(RunFailed, match="diverged at round 1"):
        run(tiny_cfg(**{"federation.optimizer.lr": "1e30", "federation.optimizer.name": "sgd"}), progress=False)
