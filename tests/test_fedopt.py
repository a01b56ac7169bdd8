"""The FedOpt family: server optimizers checked by hand on 2–3-element tensors, reductions to FedAvg, state."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

from flplat.algorithms import ALGORITHMS
from flplat.algorithms.fedopt import FedAdam, FedOpt
from flplat.api import ClientResult
from flplat.errors import ConfigError
from flplat.experiment import run
from flplat.maths import fedopt as server_opt
from flplat.maths.fedopt import ServerOpt

SPACE = Path(__file__).resolve().parents[1] / "configs" / "search_spaces" / "table2.yaml"
W = torch.tensor([1.0, 2.0, 3.0])


def _step(hp, w, avg, state=None):
    return server_opt.step(hp, server_opt.init(hp, w) if state is None else state, w, avg)


# ---- one table over every kind (optax style) -------------------------------------------------------------
@pytest.mark.parametrize("kind", server_opt.KINDS)
def test_every_kind_is_pure_and_keeps_w_when_clients_do_not_move(kind):
    hp = ServerOpt(kind=kind, momentum=0.9, tau=0.1)
    state = server_opt.init(hp, W)
    snapshot = {k: v.clone() for k, v in state.items()}
    w_new, st = server_opt.step(hp, state, W, W.clone())
    assert torch.equal(w_new, W)  # zero update from fresh state (m = 0, v_momentum = 0)
    assert set(st) == set(state) and int(st["step"]) == 1
    assert all(torch.equal(state[k], snapshot[k]) for k in state)  # inputs untouched
    w_new, st = server_opt.step(hp, st, W, torch.tensor([0.0, 5.0, -1.0]))
    assert torch.isfinite(w_new).all() and not torch.equal(w_new, W) and int(st["step"]) == 2


def test_unknown_kind_is_rejected():
    with pytest.raises(ValueError, match="nesterov"):
        ServerOpt(kind="nesterov")


# ---- SGD and FedAvgM ---------------------------------------------------------------------------------------
def test_server_sgd_with_eta_one_is_fedavg_bit_exactly():
    w = torch.tensor([1e8, 0.1, -3.7])
    avg = torch.tensor([1.0, 0.3, 2.9])  # w + (avg - w) would round 1e8 - ... to 0, not 1
    assert torch.equal(_step(ServerOpt("sgd", lr=1.0), w, avg)[0], avg)


def test_server_sgd_by_hand():
    # w + η Δ with Δ = avg − w = [2, 0, −3], η = 0.5
    w_new, _ = _step(ServerOpt("sgd", lr=0.5), W, torch.tensor([3.0, 2.0, 0.0]))
    torch.testing.assert_close(w_new, torch.tensor([2.0, 2.0, 1.5]))


def test_fedavgm_with_zero_momentum_and_eta_one_is_fedavg_over_rounds():
    hp = ServerOpt("momentum", lr=1.0, momentum=0.0)
    state, w = server_opt.init(hp, W), W
    for avg in (torch.tensor([0.5, 2.5, -1.0]), torch.tensor([0.25, 3.0, 7.0])):
        w, state = server_opt.step(hp, state, w, avg)
        assert torch.equal(w, avg)


def test_fedavgm_two_steps_by_hand():
    hp = ServerOpt("momentum", lr=0.5, momentum=0.9)
    # round 1: g1 = w0 − avg1 = [1, 0, −1]; v1 = g1; w1 = w0 − 0.5 v1 = [0.5, 2, 3.5]
    w1, st = _step(hp, W, torch.tensor([0.0, 2.0, 4.0]))
    torch.testing.assert_close(w1, torch.tensor([0.5, 2.0, 3.5]))
    torch.testing.assert_close(st["v"], torch.tensor([1.0, 0.0, -1.0]))
    # round 2: g2 = w1 − avg2 = [0, 1, 0]; v2 = 0.9 v1 + g2 = [0.9, 1, −0.9]; w2 = w1 − 0.5 v2
    w2, st = server_opt.step(hp, st, w1, torch.tensor([0.5, 1.0, 3.5]))
    torch.testing.assert_close(st["v"], torch.tensor([0.9, 1.0, -0.9]))
    torch.testing.assert_close(w2, torch.tensor([0.05, 1.5, 3.95]))


# ---- adaptive kinds ----------------------------------------------------------------------------------------
def test_adaptive_state_starts_at_m_zero_and_v_tau_squared():
    st = server_opt.init(ServerOpt("adam", tau=0.1), W)
    torch.testing.assert_close(st["m"], torch.zeros(3))
    torch.testing.assert_close(st["v"], torch.full((3,), 0.01))
    assert torch.equal(server_opt.init(ServerOpt("yogi", tau=0.1, v_init=0.0), W)["v"], torch.zeros(3))


def test_adam_one_step_by_hand():
    # β1 = 0: m = Δ = [2, −2, 14]; v0 = τ² = 4, β2 = 0.5: v = 0.5·4 + 0.5·Δ² = [4, 4, 100]
    # w + η m / (√v + τ) = [1, 2, 3] + 0.3·[2/4, −2/4, 14/12] = [1.15, 1.85, 3.35]
    hp = ServerOpt("adam", lr=0.3, beta1=0.0, beta2=0.5, tau=2.0)
    w_new, st = _step(hp, W, W + torch.tensor([2.0, -2.0, 14.0]))
    torch.testing.assert_close(st["v"], torch.tensor([4.0, 4.0, 100.0]))
    torch.testing.assert_close(w_new, torch.tensor([1.15, 1.85, 3.35]))


def test_adam_first_moment_by_hand():
    # β1 = 0.5, v0 = 0, β2 = 0: m = 0.5 Δ, v = Δ²; Δ = [2, −4] → w + 1·[1/(2+1), −2/(4+1)]
    hp = ServerOpt("adam", lr=1.0, beta1=0.5, beta2=0.0, tau=1.0, v_init=0.0)
    w = torch.tensor([0.0, 1.0])
    w_new, st = _step(hp, w, torch.tensor([2.0, -3.0]))
    torch.testing.assert_close(st["m"], torch.tensor([1.0, -2.0]))
    torch.testing.assert_close(w_new, torch.tensor([1 / 3, 1.0 - 0.4]))


@pytest.mark.parametrize("kind", server_opt.ADAPTIVE)
def test_first_step_tends_to_eta_sign_delta_as_tau_vanishes(kind):
    # From m = 0, v = 0 with β1 = 0: m1 = Δ.  Adagrad: v1 = 0 + Δ².  Adam: v1 = β2·0 + (1−β2)Δ² = Δ² for β2 = 0.
    # Yogi: v1 = 0 − (1−β2)Δ² sign(0 − Δ²) = (1−β2)Δ² = Δ² for β2 = 0.  So w1 = w + η Δ/(|Δ| + τ) → w + η sign(Δ)
    # as τ → 0 (a zero entry stays: 0/τ = 0).  With β2 > 0 Adam/Yogi give η sign(Δ)/√(1−β2) instead.
    hp = ServerOpt(kind, lr=0.1, beta1=0.0, beta2=0.0, tau=1e-12, v_init=0.0)
    w = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    delta = torch.tensor([0.7, 0.0, -250.0], dtype=torch.float64)
    w_new, _ = _step(hp, w, w + delta)
    torch.testing.assert_close(w_new, w + 0.1 * torch.sign(delta), rtol=0, atol=1e-9)


def test_yogi_sign_rule_differs_from_adam():
    # v = 4; Δ = [1, 3] so Δ² = [1, 9]: below and above v; 1 − β2 = 0.1
    # Adam:    v ← 0.9·4 + 0.1Δ²          = [3.7, 4.5]   (moves v a fraction of the way to Δ²)
    # Yogi:    v ← 4 − 0.1Δ² sign(4 − Δ²) = [3.9, 4.9]   (moves by 0.1Δ², decreases only slowly when v > Δ²)
    # Adagrad: v ← 4 + Δ²                 = [5, 13]
    w, avg = torch.zeros(2), torch.tensor([1.0, 3.0])
    got = {k: _step(ServerOpt(k, beta1=0.0, beta2=0.9, tau=2.0), w, avg)[1]["v"] for k in server_opt.ADAPTIVE}
    torch.testing.assert_close(got["adam"], torch.tensor([3.7, 4.5]))
    torch.testing.assert_close(got["yogi"], torch.tensor([3.9, 4.9]))
    torch.testing.assert_close(got["adagrad"], torch.tensor([5.0, 13.0]))


# ---- the strategies -----------------------------------------------------------------------------------------
def _results(*rows):
    return [ClientResult(client=i, weights=torch.tensor(w), num_samples=n, train_loss=0.0)
            for i, (w, n) in enumerate(rows)]


def test_aggregate_steps_from_the_sample_weighted_average_and_keeps_state_in_opt():
    strat = FedAdam(FedAdam.Config(server_lr=0.1, beta1=0.0, beta2=0.0, tau=1e-9, v_init=0.0), info=None)
    state = strat.init_state(W.clone(), None, None)
    assert set(state.opt) == {"step", "m", "v"}
    # avg = (1·[5, 2, 0] + 3·[1, 2, 0]) / 4 = [2, 2, 0] → Δ = [1, 0, −3] → w + 0.1 sign(Δ)
    state = strat.aggregate(state, _results(([5.0, 2.0, 0.0], 1), ([1.0, 2.0, 0.0], 3)), None)
    torch.testing.assert_close(state.weights, torch.tensor([1.1, 2.0, 2.9]))
    torch.testing.assert_close(state.opt["m"], torch.tensor([1.0, 0.0, -3.0]))
    assert int(state.opt["step"]) == 1


def test_server_state_round_trips_through_a_checkpoint():
    strat = FedAdam(FedAdam.Config(), info=None)
    r1, r2 = _results(([0.0, 1.0, 5.0], 2)), _results(([2.0, 2.0, 2.0], 1), ([1.0, 0.0, 4.0], 2))
    state = strat.aggregate(strat.init_state(W.clone(), None, None), r1, None)
    buf = io.BytesIO()
    torch.save({"weights": state.weights, "opt": state.opt}, buf)
    buf.seek(0)
    saved = torch.load(buf)
    a = strat.aggregate(state, r2, None)
    b = strat.init_state(saved["weights"], None, None)
    b.opt = saved["opt"]
    b = strat.aggregate(b, r2, None)
    assert torch.equal(a.weights, b.weights) and all(torch.equal(a.opt[k], b.opt[k]) for k in a.opt)
    assert int(b.opt["step"]) == 2


def test_plan_sends_the_client_learning_rate():
    s = ALGORITHMS["fedyogi"](ALGORITHMS["fedyogi"].Config(client_lr=0.01), info=None)
    state = s.init_state(W.clone(), None, None)
    assert s.plan(state, 0).lr == 0.01 and FedOpt(FedOpt.Config(), None).plan(state, 0).lr is None


def test_named_variants_differ_only_in_defaults():
    expect = {"fedavgm": ("momentum", 1.0, 0.7), "fedadagrad": ("adagrad", 0.3162, 0.1),
              "fedyogi": ("yogi", 0.001, 0.01), "fedadam": ("adam", 0.001, 0.001)}
    for name, (kind, lr, third) in expect.items():
        cls = ALGORITHMS[name]
        c = cls.Config()
        assert issubclass(cls, FedOpt) and cls.aggregate is FedOpt.aggregate and cls.plan is FedOpt.plan
        third_got = c.server_momentum if kind == "momentum" else c.tau
        assert (c.server_optimizer, c.server_lr, third_got) == (kind, lr, third)
    assert (ALGORITHMS["fedyogi"].Config().beta1, ALGORITHMS["fedyogi"].Config().beta2) == (0.9, 0.99)


@pytest.mark.parametrize("override, key", [
    ({"algorithm.name": "fedadam", "algorithm.server_optimizer": "sgd"}, "algorithm.server_optimizer"),
    ({"algorithm.name": "fedopt", "algorithm.server_optimizer": "rmsprop"}, "algorithm.server_optimizer"),
    ({"algorithm.name": "fedyogi", "algorithm.tau": 0.0}, "algorithm.tau"),
    ({"algorithm.name": "fedavgm", "algorithm.server_momentum": 1.0}, "algorithm.server_momentum"),
    ({"algorithm.name": "fedadagrad", "algorithm.client_lr": -1.0}, "algorithm.client_lr"),
])
def test_bad_config_names_the_key(tiny_cfg, override, key):
    with pytest.raises(ConfigError, match=key):
        tiny_cfg(**override)


# ---- end to end: reductions to FedAvg ------------------------------------------------------------------------
def test_reduces_to_fedavg_end_to_end(tiny_cfg):
    avg, _ = run(tiny_cfg(**{"federation.rounds": 3}), progress=False)
    for over in ({"algorithm.name": "fedopt"},  # server SGD, η = 1 by default
                 {"algorithm.name": "fedopt", "algorithm.server_optimizer": "momentum", "algorithm.client_lr": 0.001},
                 {"algorithm.name": "fedavgm", "algorithm.server_momentum": 0.0}):
        opt, _ = run(tiny_cfg(**{"federation.rounds": 3, **over}), progress=False)
        assert torch.equal(avg.state.weights, opt.state.weights), over
        assert int(opt.state.opt["step"]) == 3


# ---- the Table II search space ------------------------------------------------------------------------------
def test_table2_search_space_names_valid_keys_and_holds_the_defaults(tiny_cfg):
    from flplat.studies.tuning import load_space

    space = {name: load_space(SPACE, name) for name in ("fedavgm", "fedadagrad", "fedyogi", "fedadam")}
    for name, grid in space.items():
        assert grid["federation.optimizer.lr"] == [0.001, 0.01, 0.1]
        assert grid["federation.batch_size"] == [16, 32, 64]
        assert grid["federation.optimizer.name"] == ["adam", "sgd"]
        for i in (0, -1):  # every key is a valid override for that algorithm
            cfg = tiny_cfg(**{"algorithm.name": name, **{k: v[i] for k, v in grid.items()}})
            assert cfg.algorithm.name == name
        default = ALGORITHMS[name].Config()
        for key, values in grid.items():
            if key.startswith("algorithm.") and key != "algorithm.client_lr":
                assert getattr(default, key.split(".", 1)[1]) in values, (name, key)


# ---- FedAdam's bias correction (Flower: η_t = η √(1 − β2^t) / (1 − β1^t), t = server_round + 1) ---------------
def _adam_by_hand(t_offset: int, corrected: bool):
    """Two FedAdam steps written out on one weight: w0 = 1, avg1 = 2, avg2 = 0; η = 0.5, β = (0.9, 0.99), τ = 0.1,
    v starts at 0 (Flower)."""
    import math

    eta, b1, b2, tau = 0.5, 0.9, 0.99, 0.1

    def lr(t):
        return eta * math.sqrt(1 - b2 ** (t + t_offset)) / (1 - b1 ** (t + t_offset)) if corrected else eta

    w0 = 1.0
    d1 = 2.0 - w0                                # Δ1 = 1
    m1, v1 = 0.1 * d1, 0.01 * d1 ** 2            # 0.1, 0.01
    w1 = w0 + lr(1) * m1 / (math.sqrt(v1) + tau)
    d2 = 0.0 - w1
    m2, v2 = 0.9 * m1 + 0.1 * d2, 0.99 * v1 + 0.01 * d2 ** 2
    w2 = w1 + lr(2) * m2 / (math.sqrt(v2) + tau)
    return w1, w2


@pytest.mark.parametrize("correction,offset,corrected", [("flower", 1, True), ("adam", 0, True),
                                                         ("none", 0, False)])
def test_fedadam_bias_correction_two_steps_by_hand(correction, offset, corrected):
    hp = ServerOpt("adam", lr=0.5, beta1=0.9, beta2=0.99, tau=0.1, v_init=0.0, bias_correction=correction)
    w0 = torch.tensor([1.0], dtype=torch.float64)
    w1, st = _step(hp, w0, torch.tensor([2.0], dtype=torch.float64))
    w2, st = server_opt.step(hp, st, w1, torch.tensor([0.0], dtype=torch.float64))
    want1, want2 = _adam_by_hand(offset, corrected)
    assert w1.item() == pytest.approx(want1, abs=1e-12) and w2.item() == pytest.approx(want2, abs=1e-12)
    if correction == "flower":  # the first step: η·√(1 − 0.99²)/(1 − 0.9²) · 0.1/0.2 = 0.5 · 0.742460 · 0.5
        assert w1.item() == pytest.approx(1.0 + 0.5 * 0.5 * (1 - 0.99**2) ** 0.5 / (1 - 0.9**2), abs=1e-12)
        assert w1.item() == pytest.approx(1.18561495, abs=1e-8)


def test_fedadam_defaults_to_flowers_bias_correction_and_other_kinds_ignore_it():
    assert FedAdam.Config().bias_correction == "flower" and FedOpt.Config().bias_correction == "none"
    assert FedAdam(FedAdam.Config(), None).hp.bias_correction == "flower"  # the strategy's server step uses it
    w0, avg = torch.tensor([1.0, -2.0]), torch.tensor([2.0, 0.5])
    for kind in ("yogi", "adagrad"):  # Flower's FedYogi / FedAdagrad have no correction
        plain = _step(ServerOpt(kind, tau=0.1), w0, avg)[0]
        assert torch.equal(_step(ServerOpt(kind, tau=0.1, bias_correction="flower"), w0, avg)[0], plain)
    with pytest.raises(ValueError, match="bias_correction"):
        ServerOpt("adam", bias_correction="kingma")


def test_fedadam_bias_correction_key_is_validated(tiny_cfg):
    with pytest.raises(ConfigError, match=r"algorithm\.bias_correction='x'.*none, flower, adam"):
        tiny_cfg(**{"algorithm.name": "fedadam", "algorithm.bias_correction": "x"})
