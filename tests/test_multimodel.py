"""The pure maths behind IFCA, FeSEM, FedEM, FedRC and FedDrift, on hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from flplat.algorithms.fedrc import FedRC
from flplat.algorithms.fesem import nearest_center, weighted_kmeans_step
from flplat.api import (
    ParamLayout,
    draw_components,
    mixture_correct,
    random_models,
    responsibilities,
    sample_losses,
    stacked_logits,
)
from flplat.maths.feddrift import cluster_losses, drift_distance, merge_groups


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 4)).eval()


def test_stacked_logits_and_losses_equal_one_model_at_a_time():
    net = _net()
    lay = ParamLayout(net)
    models = torch.stack([lay.flatten(), lay.flatten() * 0.5, -lay.flatten()])
    x, y = torch.randn(7, 3), torch.tensor([0, 1, 2, 3, 0, 1, 2])
    got = stacked_logits(net, lay, models, x, chunk=3)
    torch.testing.assert_close(stacked_logits(net, lay, models, x, model_chunk=2), got)
    losses = sample_losses(net, lay, models, x, y, chunk=4)
    for m in range(3):
        lay.load(models[m])
        with torch.no_grad():
            ref = net(x)
        torch.testing.assert_close(got[m], ref)
        torch.testing.assert_close(losses[m], nn.functional.cross_entropy(ref, y, reduction="none"))


def test_responsibilities_by_hand():
    losses = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    q = responsibilities(losses, torch.log(torch.tensor([0.5, 0.5])))
    a = 1 / (1 + math.exp(-1))
    torch.testing.assert_close(q, torch.tensor([[a, 1 - a], [1 - a, a]], dtype=torch.float64))
    # a prior of 3:1 on component 0 with equal losses gives q = (0.75, 0.25)
    q = responsibilities(torch.zeros(2, 1), torch.log(torch.tensor([0.75, 0.25])))
    torch.testing.assert_close(q[:, 0], torch.tensor([0.75, 0.25], dtype=torch.float64))
    # per-sample prior (FedRC): log π − log P_k(y): equal losses, P_0(y) = 0.5, P_1(y) = 0.25 → q ∝ (2, 4)
    lp = torch.log(torch.tensor([[0.5], [0.5]])) - torch.log(torch.tensor([[0.5], [0.25]]))
    torch.testing.assert_close(responsibilities(torch.zeros(2, 1), lp)[:, 0],
                               torch.tensor([1 / 3, 2 / 3], dtype=torch.float64))


def test_mixture_prediction_by_hand():
    # component 0 says class 0 (p = 0.73), component 1 says class 1 (p = 0.98): with weights (0.9, 0.1) the
    # mixture says 0 (0.9·0.73 + 0.1·0.02 > 0.9·0.27 + 0.1·0.98); with (0.5, 0.5) it says 1
    logits = torch.tensor([[[1.0, 0.0]], [[0.0, 4.0]]])
    assert mixture_correct(logits, torch.tensor([0.9, 0.1]), torch.tensor([0])) == 1
    assert mixture_correct(logits, torch.tensor([0.5, 0.5]), torch.tensor([0])) == 0


def test_drift_distance_and_cluster_losses_by_hand():
    cl = np.array([[1.0, 3.0], [2.0, 0.5]])
    # D(0,1) = max(L_0(θ_1) − L_0(θ_0), L_1(θ_0) − L_1(θ_1), 0) = max(2, 1.5, 0)
    np.testing.assert_allclose(drift_distance(cl), [[0.0, 2.0], [2.0, 0.0]])
    losses = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 0.0]])
    out = cluster_losses(losses, np.array([0, 0, 2]), np.array([1.0, 3.0, 2.0]), 3)
    np.testing.assert_allclose(out[0], [(1 + 9) / 4, (2 + 12) / 4])
    assert np.isnan(out[1]).all()
    np.testing.assert_allclose(out[2], [5.0, 0.0])


def test_merge_groups_is_complete_linkage_below_threshold():
    d = np.array([[0.0, 0.05, 0.5], [0.05, 0.0, 0.08], [0.5, 0.08, 0.0]])
    # 0 and 1 merge (0.05); the merged group is max(0.5, 0.08) = 0.5 from 2, so 2 stays (single linkage would join)
    np.testing.assert_array_equal(merge_groups(d, 0.1), [0, 0, 2])
    np.testing.assert_array_equal(merge_groups(d, 0.6), [0, 0, 0])
    np.testing.assert_array_equal(merge_groups(d, 0.05), [0, 1, 2])  # strictly below
    nan = d.copy()
    nan[0, 1] = nan[1, 0] = np.nan  # unknown distances never merge
    np.testing.assert_array_equal(merge_groups(nan, 0.1), [0, 1, 1])


def test_nearest_center_and_kmeans_step_by_hand():
    w = torch.tensor([[0.0, 0.0], [1.0, 0.0], [10.0, 10.0]])
    c = torch.tensor([[0.0, 1.0], [9.0, 9.0]])
    np.testing.assert_array_equal(nearest_center(w, c), [0, 0, 1])
    r, new = weighted_kmeans_step(w, torch.tensor([1.0, 3.0, 2.0]), c)
    np.testing.assert_array_equal(r, [0, 0, 1])
    torch.testing.assert_close(new, torch.tensor([[0.75, 0.0], [10.0, 10.0]]))
    # an empty cluster keeps its centre
    _, new = weighted_kmeans_step(w[:2], torch.ones(2), c)
    torch.testing.assert_close(new[1], c[1])


def test_draw_components_follows_responsibilities():
    q = torch.tensor([[1.0, 0.0, 0.5], [0.0, 1.0, 0.5]], dtype=torch.float64)
    z = draw_components(q, np.random.default_rng(0))
    assert z[0] == 0 and z[1] == 1
    big = torch.tensor([[0.2], [0.8]], dtype=torch.float64).repeat(1, 20000)
    share = (draw_components(big, np.random.default_rng(1)) == 1).mean()
    assert share == pytest.approx(0.8, abs=0.01)


def test_fedrc_label_prior_by_hand():
    mass = np.array([[[3.0, 1.0], [0.0, 0.0]], [[1.0, 3.0], [2.0, 2.0]]])  # (K=2, M=2, C=2)
    np.testing.assert_allclose(FedRC.label_prior(mass, 1e-6), [[0.5, 0.5], [0.5, 0.5]])
    np.testing.assert_allclose(FedRC.label_prior(mass[:1], 1e-6), [[0.75, 0.25], [1e-6, 1e-6]])


def test_random_models_differ_but_keep_each_tensors_values():
    net = _net()
    lay = ParamLayout(net)
    w = lay.flatten()
    ms = random_models(w, lay, 3, np.random.default_rng(0))
    assert torch.equal(ms[0], w) and not torch.equal(ms[1], w) and not torch.equal(ms[1], ms[2])
    for a, b in zip(lay.offsets[:-1], lay.offsets[1:]):
        assert torch.equal(ms[1][a:b].sort().values, w[a:b].sort().values)


# ---- the stacked forward (flplat/maths/stacked.py) with batch norm ------------------------------------------------

def _bn_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU(), nn.Flatten(),
                         nn.Linear(3 * 4 * 4, 5), nn.BatchNorm1d(5), nn.Linear(5, 2)).double()


@pytest.mark.parametrize("padded", [True, False], ids=["masked", "no_padding"])
def test_stacked_batch_norm_uses_each_models_real_rows_and_returns_its_statistics(padded):
    """Training mode: each model's batch statistics over its real rows only (padded rows change nothing), its
    gradients, and its running statistics as ``F.batch_norm`` updates them in its own module (float64: equal)."""
    import copy

    from flplat.maths.stacked import StackedForward

    net = _bn_net().train()
    lay = ParamLayout(net)
    g, w = 3, 6
    counts = [6, 4, 5] if padded else [6, 6, 6]
    gen = torch.Generator().manual_seed(1)
    models = torch.stack([lay.flatten().double() + 0.05 * torch.randn(lay.size, generator=gen, dtype=torch.float64)
                          for _ in range(g)])
    tensors = [v.reshape(g, *s).clone().requires_grad_(p) for v, s, p in
               zip(models.split(lay.numels, dim=1), lay.shapes, lay.is_param)]
    x, y = torch.randn(g, w, 1, 4, 4, generator=gen, dtype=torch.float64), torch.randint(0, 2, (g, w), generator=gen)
    x[0, 5] = 1e3  # a huge padded row would move the statistics if it counted
    mask = (torch.arange(w)[None] < torch.tensor(counts)[:, None]).double()
    fwd = StackedForward(net, lay.names, randomness="different")
    out, stats = fwd.with_stats(tensors, x, mask if padded else None)
    loss = (nn.functional.cross_entropy(out.flatten(0, 1), y.flatten(), reduction="none").view(g, w) * mask).sum()
    grads = torch.autograd.grad(loss, [t for t in tensors if t.requires_grad])
    assert sorted(stats) == sorted(n for n in lay.names if "running" in n)
    for k in range(g):
        own = copy.deepcopy(net)
        ParamLayout(own).load(models[k])
        n = counts[k]
        ref = own(x[k, :n])
        torch.testing.assert_close(out[k, :n], ref, rtol=1e-10, atol=1e-12)
        ref_grads = torch.autograd.grad(nn.functional.cross_entropy(ref, y[k, :n], reduction="sum"),
                                        list(own.parameters()))
        for got, want in zip(grads, ref_grads):
            torch.testing.assert_close(got[k], want, rtol=1e-9, atol=1e-12)
        for name, t in own.state_dict().items():
            if name in stats:
                torch.testing.assert_close(stats[name][k], t, rtol=1e-10, atol=1e-12)
    net.eval()  # evaluation mode: each model's own running statistics, none returned
    with torch.no_grad():
        eval_out, none = fwd.with_stats([t.detach() for t in tensors], x)
        assert none == {}
        for k in range(g):
            own = copy.deepcopy(net)
            ParamLayout(own).load(models[k])
            torch.testing.assert_close(eval_out[k], own(x[k]), rtol=1e-10, atol=1e-12)


def test_stack_reason_names_normalisation_state_the_stack_cannot_keep():
    from flplat.maths.stacked import stack_reason

    assert stack_reason(_bn_net()) is None
    assert "momentum=None" in stack_reason(nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3, momentum=None)))
    assert "InstanceNorm2d" in stack_reason(nn.Sequential(nn.InstanceNorm2d(3, track_running_stats=True)))
    assert stack_reason(nn.Sequential(nn.InstanceNorm2d(3), nn.LayerNorm(3))) is None
