"""CReFF: closed-form class gradients of the head, gradient matching, classifier re-training, the strategy."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from flplat.algorithms.creff import CReFF
from flplat.errors import ConfigError
from flplat.experiment import run
from flplat.maths.creff_features import class_head_gradients, match_features, matching_distance, retrain_head


def test_class_head_gradients_match_autograd():
    g = torch.Generator().manual_seed(0)
    feats, y = torch.randn(12, 5, generator=g), torch.tensor([0, 1, 2, 0, 0, 1, 2, 2, 0, 1, 1, 0])
    W, b = torch.randn(4, 5, generator=g), torch.randn(4, generator=g)  # 4 outputs, class 3 absent
    dW, db, n = class_head_gradients(feats, y, W, b, 4)
    assert n.tolist() == [5, 4, 3, 0]
    for c in range(3):
        Wr, br = W.clone().requires_grad_(True), b.clone().requires_grad_(True)
        sel = y == c
        gw, gb = torch.autograd.grad(F.cross_entropy(feats[sel] @ Wr.T + br, y[sel]), [Wr, br])
        torch.testing.assert_close(dW[c], gw)
        torch.testing.assert_close(db[c], gb)
    assert dW[3].abs().sum() == 0 and db[3].abs().sum() == 0


def test_matching_distance_by_hand():
    syn = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    real = torch.tensor([[2.0, 0.0], [1.0, 0.0]])
    assert float(matching_distance(syn, real)) == pytest.approx(0.0 + 1.0)
    assert float(matching_distance(syn, real, torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 0.0]))) == \
        pytest.approx(1.0 + 2.0)


def test_match_features_reduces_the_distance_and_only_moves_matched_classes():
    g = torch.Generator().manual_seed(1)
    C, d = 3, 6
    W, b = torch.randn(C, d, generator=g), torch.zeros(C)
    real = torch.randn(60, d, generator=g) + 2 * torch.eye(C, d).repeat_interleave(20, 0)
    dW_real, db_real, _ = class_head_gradients(real, torch.arange(C).repeat_interleave(20), W, b, C)
    feats = torch.randn(C, 10, d, generator=g)
    have = torch.tensor([True, True, False])
    _, d0 = match_features(feats, dW_real, db_real, have, W, b, 1, 1e-9, 0.0, False)
    new, d1 = match_features(feats, dW_real, db_real, have, W, b, 50, 0.1, 0.5, False)
    assert d1 < 0.5 * d0
    assert torch.equal(new[2], feats[2]) and not torch.equal(new[0], feats[0])


def test_retrain_head_fits_the_federated_features():
    g = torch.Generator().manual_seed(2)
    feats = torch.randn(3, 20, 4, generator=g) + 3 * torch.eye(3, 4)[:, None, :]
    W, b = retrain_head(feats, torch.zeros(3, 4), torch.zeros(3), 200, 0.1, 16, torch.Generator().manual_seed(0))
    pred = (feats.reshape(60, 4) @ W.T + b).argmax(1)
    assert (pred == torch.arange(3).repeat_interleave(20)).float().mean() > 0.95


def test_validate_config():
    with pytest.raises(ConfigError, match="algorithm.feature_lr"):
        CReFF.validate_config(CReFF.Config(feature_lr=0.0), "algorithm")


def test_creff_trains_like_fedavg_and_evaluates_the_retrained_classifier(tiny_cfg):
    avg, _ = run(tiny_cfg(**{"algorithm.name": "fedavg", "federation.rounds": 1}), progress=False)
    cr, _ = run(tiny_cfg(**{"algorithm.name": "creff", "algorithm.match_steps": 5, "algorithm.retrain_steps": 20,
                            "federation.rounds": 1}),
                progress=False)
    assert torch.equal(avg.state.weights, cr.state.weights)  # the carried model is FedAvg's
    ev = cr.state.method.eval
    diff = (ev != cr.state.weights).nonzero().reshape(-1)
    head = cr.state.weights.numel() - 4 * 16 - 4  # the head is the last block of the flat vector (mlp [16], 4 classes)
    assert len(diff) > 0 and diff.min() >= head  # only the classifier was re-trained
    assert "match_distance" in cr.metrics and cr.history[0]["bytes_up"] > avg.history[0]["bytes_up"]
    zero, _ = run(tiny_cfg(**{"algorithm.name": "creff", "algorithm.retrain_steps": 0, "algorithm.match_steps": 0,
                              "federation.rounds": 1}),
                  progress=False)
    assert torch.equal(zero.state.method.eval, avg.state.weights)  # no re-training: the FedAvg model
