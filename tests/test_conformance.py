"""`flplat check NAME`: the conformance suite (flplat/studies/conformance.py) finds deliberately broken algorithms
registered the way a plugin registers one (non-deterministic, not resumable, not surviving drop-outs), says which
property failed and exits 1; bad input exits 2 with one line. (Every built-in passes it: test_algorithms.py,
test_checkpoint.py, test_sharding.py.)"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from flplat.algorithms import ALGORITHMS
from flplat.api import FedAvgStrategy, LocalHook
from flplat.cli import main
from flplat.studies import conformance as cf


class NoisyAvg(FedAvgStrategy):
    """FedAvg plus unseeded noise on the aggregate: not deterministic (deliberately broken)."""

    name = "test_noisy_avg"

    def aggregate(self, state, results, ops):
        state = super().aggregate(state, results, ops)
        noise = np.random.default_rng().standard_normal(state.weights.numel()).astype(np.float32)  # OS entropy
        state.weights = state.weights + 1e-3 * torch.from_numpy(noise).to(state.weights.dtype)
        return state


class ForgetfulAvg(FedAvgStrategy):
    """FedAvg whose server step grows with a round counter that its checkpoint leaves out: not resumable."""

    name = "test_forgetful_avg"
    count = 0

    def init_state(self, init_weights, rng, ops):
        self.count = 0
        return super().init_state(init_weights, rng, ops)

    def aggregate(self, state, results, ops):
        self.count += 1
        state = super().aggregate(state, results, ops)
        state.weights = state.weights * (1.0 + 0.01 * self.count)
        return state

    def state_dict(self):
        return {k: v for k, v in super().state_dict().items() if k != "count"}


class FragileAvg(FedAvgStrategy):
    """FedAvg that requires every selected client's result: dies on the first drop-out."""

    name = "test_fragile_avg"

    def select(self, state, rng, ops):
        chosen = super().select(state, rng, ops)
        self.expected = len(chosen)
        return chosen

    def aggregate(self, state, results, ops):
        if len({r.client for r in results}) < self.expected:
            raise RuntimeError("a selected client's result is missing")
        return super().aggregate(state, results, ops)


class Inspect(LocalHook):
    def after_step(self, ctx):
        return None


class InspectingAvg(FedAvgStrategy):
    """FedAvg with an after_step hook, which vectorised clients cannot run: falls back to the per-client loop."""

    name = "test_inspecting_avg"

    def plan(self, state, client):
        p = super().plan(state, client)
        p.hooks = (Inspect(),)
        return p


@pytest.fixture
def register(monkeypatch):
    def add(cls):
        monkeypatch.setitem(ALGORITHMS, cls.name, cls)  # what a plugin's @register does
        return cls.name

    return add


def _lines(text: str) -> dict[str, str]:
    return {line.split()[1]: line for line in text.splitlines() if line.startswith(("PASS", "FAIL"))}


def test_a_non_deterministic_algorithm_fails_determinism(register, capsys):
    name = register(NoisyAvg)
    assert main(["check", name, "--only", "registry,smoke,determinism"]) == 1
    out = capsys.readouterr()
    lines = _lines(out.out)
    assert lines["registry"].startswith("PASS") and lines["smoke"].startswith("PASS")
    assert lines["determinism"].startswith("FAIL  determinism     same seed: round 1: ")
    assert "1 of 3 properties fail: determinism" in out.err


def test_an_algorithm_that_forgets_state_in_its_checkpoint_fails_checkpoint(register, capsys):
    name = register(ForgetfulAvg)
    assert main(["check", name, "--only", "determinism,checkpoint"]) == 1
    lines = _lines(capsys.readouterr().out)
    assert lines["determinism"].startswith("PASS")
    assert lines["checkpoint"].startswith("FAIL  checkpoint      resumed after round 2: round 3: ")


def test_an_algorithm_that_needs_every_client_fails_failures(register, capsys):
    name = register(FragileAvg)
    assert main(["check", name, "--only", "smoke,failures"]) == 1
    lines = _lines(capsys.readouterr().out)
    assert lines["smoke"].startswith("PASS")
    assert lines["failures"] == ("FAIL  failures        30% drop-outs: RuntimeError: a selected client's result is "
                                 "missing")


def test_vectorize_falls_back_with_a_logged_reason(register):
    r = cf.check_vectorize(cf.Target(register(InspectingAvg)))
    assert r.ok and "falls back to the per-client loop, logged:" in r.detail
    assert "hook Inspect declares neither vectorizes nor a Stacked form" in r.detail


def test_invalid_config_refusals_and_a_value_that_is_not_refused(monkeypatch):
    t = cf.Target("fedprox")
    assert cf.invalid_overrides(t) == ["algorithm.no_such_key_flplat_check=1", "algorithm.mu=not_a_float"]
    r = cf.check_invalid_config(t)
    assert r.ok and r.detail == "2 bad values refused with one line (exit 2), no MLflow run"
    monkeypatch.setattr(cf, "invalid_overrides", lambda t: ["algorithm.mu=0.5"])  # a valid value: it runs
    r = cf.check_invalid_config(t)
    assert not r.ok and r.detail == "algorithm.mu=0.5: accepted (the run trained), not exit 2"


class Crashing(FedAvgStrategy):
    """FedAvg that checks its config with a bare ValueError: a traceback, not a one-line error."""

    name = "test_crashing_avg"

    def __init__(self, cfg, info):
        super().__init__(cfg, info)
        raise ValueError("bad config\nsecond line")


def test_invalid_config_fails_for_an_algorithm_that_raises_a_traceback(register, monkeypatch):
    t = cf.Target(register(Crashing))
    monkeypatch.setattr(cf, "invalid_overrides", lambda t: ["federation.rounds=2"])
    r = cf.check_invalid_config(t)
    assert not r.ok and r.detail == ("federation.rounds=2: ValueError (bad config), not a one-line error with "
                                     "exit 2")


def test_json_output_and_exit_0(capsys):
    assert main(["check", "fedavg", "--only", "registry,smoke", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert [(r["property"], r["ok"]) for r in res] == [("registry", True), ("smoke", True)]
    assert res[1]["detail"].startswith("3 rounds, global_accuracy=")


def test_compare_histories_names_the_first_difference():
    a = [{"x": 1.0, "round_time_s": 3.0}, {"x": 2.0}]
    assert cf.compare_histories(a, [{"x": 1.0, "round_time_s": 9.0}, {"x": 2.0}]) is None  # timing left out
    assert cf.compare_histories(a, [{"x": 1.0}, {"x": 2.5}]) == "round 2: x 2.0 != 2.5"
    assert cf.compare_histories(a, [{"x": 1.0}, {"x": 2.0 + 1e-9}], rel=1e-6) is None
    assert cf.compare_histories(a, [{"x": 1.0}]) == "2 rounds instead of 1"


@pytest.mark.parametrize("args,msg", [
    (["no_such_algo"], "algorithm 'no_such_algo' is not registered; allowed: apfl, "),
    (["fedavg", "--only", "smoke,speed"], "--only=speed unknown; allowed: registry, smoke, "),
    (["fedavg", "algorithm.nokey=1"], "unknown key algorithm.nokey for algorithm 'fedavg'"),
    (["fedavg", "federation.rounds=1"], "federation.rounds=1: flplat check needs >= 2 rounds"),
])
def test_bad_input_exits_2_with_one_line(capsys, args, msg):
    assert main(["check", *args]) == 2
    out = capsys.readouterr()
    assert out.out == "" and len(out.err.strip().splitlines()) == 1 and msg in out.err
