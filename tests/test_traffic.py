"""What a round's ``bytes_down`` / ``bytes_up`` count: the part of the model that actually travels.

The tiny federation (flplat/studies/conformance.py): an MLP 12 -> 16 -> 4, i.e. a body ``features.*`` of
12·16 + 16 = 208 floats and a head ``head.*`` of 16·4 + 4 = 68 floats (276 in all); 6 clients, 3 sampled per round.
A method whose head stays on the client (FedRep, a FedPer plugin: ``Strategy.local_prefixes``) sends the body only.
"""

from __future__ import annotations

import pytest

from flplat.api import ClientPlan, Strategy
from flplat.experiment import prepare, run

BODY, HEAD, SAMPLED = 12 * 16 + 16, 16 * 4 + 4, 3


def _history(tiny_cfg, **over):
    return run(tiny_cfg(**{"federation.rounds": 2, **over}), progress=False)[0].history


def test_the_tiny_models_body_and_head_are_as_computed_by_hand(tiny_cfg):
    layout = prepare(tiny_cfg()).trainer.layout
    assert int((~layout.mask("head.")).sum()) == BODY and int(layout.mask("head.").sum()) == HEAD


def test_fedavg_sends_the_whole_model_and_fedrep_the_body_only(tiny_cfg):
    avg = _history(tiny_cfg, **{"algorithm.name": "fedavg"})
    rep = _history(tiny_cfg, **{"algorithm.name": "fedrep", "algorithm.head_epochs": 1})
    for h in avg:
        assert h["bytes_down"] == h["bytes_up"] == 4 * (BODY + HEAD) * SAMPLED  # 3312
    for h in rep:
        assert h["bytes_down"] == h["bytes_up"] == 4 * BODY * SAMPLED  # 2496: the heads never leave the clients


@pytest.mark.parametrize("name", ["ditto", "apfl", "pfedme", "fedamp", "dapfl", "creff", "fedpfa"])
def test_personalised_methods_that_send_a_whole_model_count_it_once(tiny_cfg, name):
    """Ditto sends w down and w's update up (v_k stays home); APFL w (v_i, α_i stay); pFedMe w and the local w
    (θ_i stays); FedAMP / DA-PFL the personalised cloud model u_i / w_i^g down and w_i up; CReFF and FedPFA the whole
    (group) model. Each of those is one full vector per sampled client and direction; CReFF adds its per-class
    head gradients upwards (C·C·(d+1) + C floats)."""
    from flplat.studies.conformance import CHECK_OVERRIDES

    h = _history(tiny_cfg, **{"algorithm.name": name, **CHECK_OVERRIDES.get(name, {})})[0]
    full = 4 * (BODY + HEAD) * SAMPLED
    extra_up = SAMPLED * 4 * (4 * 4 * (16 + 1) + 4) if name == "creff" else 0
    assert h["bytes_down"] == full and h["bytes_up"] == full + extra_up


class FedPer(Strategy):
    """FedPer (Arivazhagan et al., 2019) as a user writes it with flplat.api: FedAvg of the bodies, heads local."""

    name = "fedper_traffic_test"
    local_prefixes = ("head.",)

    def init_state(self, init_weights, rng, ops):
        state = super().init_state(init_weights, rng, ops)
        state.personal = self.info.client_store(default=init_weights.clone())
        return state

    def plan(self, state, client):
        w = state.weights.clone()
        head = self.info.layout.mask("head.")
        w[head] = state.personal.get(client)[head]
        return ClientPlan(weights=w)

    def aggregate(self, state, results, ops):
        for r in results:
            state.personal.set(r.client, r.weights)
        n = sum(r.num_samples for r in results)
        state.weights = sum(r.weights * (r.num_samples / n) for r in results)
        return state

    def eval_weights(self, state, client):
        return self.plan(state, client).weights


def test_a_plugins_local_head_is_not_counted(tiny_cfg, monkeypatch):
    from flplat.protocol.registry import ALGORITHMS

    monkeypatch.setitem(ALGORITHMS, FedPer.name, FedPer)
    for h in _history(tiny_cfg, **{"algorithm.name": FedPer.name}):
        assert h["bytes_down"] == h["bytes_up"] == 4 * BODY * SAMPLED


def test_sent_mask_defaults_to_everything_but_the_local_prefixes(tiny_cfg):
    p = prepare(tiny_cfg(**{"algorithm.name": "fedrep"}))
    for direction in ("down", "up"):
        mask = p.strategy.sent_mask(direction)
        assert mask.tolist() == [True] * BODY + [False] * HEAD
    assert prepare(tiny_cfg()).strategy.sent_mask("up") is None  # FedAvg: all of it
