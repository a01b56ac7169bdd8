"""CAFA: CBCC / ABFA weights, IID-detection metrics, accuracy-curve summaries, the `cafa` partition, the strategy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from flplat.algorithms.cafa import CAFA
from flplat.api import ClientResult, EvalResult, FederationInfo, ParamLayout
from flplat.data.partitions import cafa_iid_flags, partition
from flplat.data.registry import partition_config
from flplat.errors import ConfigError
from flplat.experiment import run
from flplat.maths.cafa_weights import abfa_weights, cbcc_weights, class_proportions, combine
from flplat.metrics.curves import curve_summary, window_means
from flplat.metrics.iid_detection import detection_metrics


def test_class_proportions_eq1():
    v = class_proportions(np.array([[2, 6, 0], [0, 0, 0], [1, 1, 2]]))
    np.testing.assert_allclose(v, [[0.25, 0.75, 0], [0, 0, 0], [0.25, 0.25, 0.5]])


def test_cbcc_weights_eq7_eq8():
    w, iid, c = cbcc_weights(np.array([0, 0, 1, 0, 2]))
    np.testing.assert_allclose(w, [0.6, 0.6, 0.2, 0.6, 0.2])
    assert c == 0 and iid.tolist() == [True, True, False, True, False]
    _, iid, c = cbcc_weights(np.array([1, 0, 1, 0]))  # tie: the lowest cluster id
    assert c == 0 and iid.tolist() == [False, True, False, True]


def test_abfa_weights_eq9_eq10():
    # model 0: 8/10 on client 0, 2/5 on client 1 -> A_0 = 10/15; model 1: 4/10, 4/5 -> A_1 = 8/15
    np.testing.assert_allclose(abfa_weights(np.array([[8, 2], [4, 4]]), np.array([10, 5])), [10 / 18, 8 / 18])
    np.testing.assert_allclose(abfa_weights(np.zeros((3, 3)), np.zeros(3)), [1 / 3] * 3)  # no validation data
    np.testing.assert_allclose(abfa_weights(np.zeros((2, 2)), np.array([4, 4])), [0.5, 0.5])  # all wrong


def test_combine_eq11():
    np.testing.assert_allclose(combine([np.array([0.5, 0.25, 0.25]), np.array([0.2, 0.4, 0.4])]),
                               [0.1 / 0.3, 0.1 / 0.3, 0.1 / 0.3])
    np.testing.assert_allclose(combine([np.array([0.6, 0.2]), np.array([0.5, 0.5])]), [0.75, 0.25])


def test_detection_metrics_by_hand():
    d = detection_metrics(np.array([1, 1, 0, 0, 1]), np.array([1, 0, 0, 1, 1]))
    assert (d["tp"], d["fp"], d["fn"], d["tn"]) == (2, 1, 1, 1)
    assert d["accuracy"] == pytest.approx(0.6)
    assert d["precision"] == pytest.approx(2 / 3) and d["recall"] == pytest.approx(2 / 3)
    assert d["f1"] == pytest.approx(2 / 3)
    # Table II case 1 shape: 5 IID found plus 1 non-IID taken for IID -> acc .95, precision .83, recall 1, F1 .91
    truth = np.arange(20) < 5
    pred = truth.copy()
    pred[7] = True
    d = detection_metrics(pred, truth)
    assert (round(d["accuracy"], 2), round(d["precision"], 2), d["recall"], round(d["f1"], 2)) == (0.95, 0.83, 1, 0.91)
    assert detection_metrics(np.zeros(3), np.ones(3))["precision"] == 0.0  # nothing predicted: 0, not NaN


def test_window_means_and_curve_summary():
    w = window_means([1, 2, 3, 4, 5], [0.1, 0.3, 0.5, 0.7, 0.9], 2)
    assert [r for r, _ in w] == [2, 4, 6] and [v for _, v in w] == pytest.approx([0.2, 0.6, 0.9])
    hist = [{"a": 0.2}, {"b": 1.0}, {"a": 0.6}, {"a": 0.6}, {"a": 0.4}]  # round 2 not evaluated
    s = curve_summary(hist, "a", 3)
    assert s["best"] == 0.6 and s["best_round"] == 3  # the first round at the maximum
    assert [r for r, _ in s["windows"]] == [3, 6] and [v for _, v in s["windows"]] == pytest.approx([0.4, 0.5])
    assert s["last_window_mean"] == pytest.approx((0.6 + 0.6 + 0.4) / 3)
    assert curve_summary(hist, "missing", 3) == {}


def _labels(n_per_class=400, classes=10, seed=0):
    return np.random.default_rng(seed).permutation(np.repeat(np.arange(classes), n_per_class))


def test_cafa_partition_iid_and_class_bounds():
    labels = _labels()
    cfg = partition_config(name="cafa", num_clients=20, iid_fraction=0.25)
    parts = partition(labels, cfg, np.random.default_rng(0))
    flags = cafa_iid_flags(20, 0.25)
    assert flags.sum() == 5 and flags[:5].all()
    allidx = np.concatenate(parts)
    assert len(np.unique(allidx)) == len(allidx)  # disjoint
    for k, p in enumerate(parts):
        counts = np.bincount(labels[p], minlength=10)
        if flags[k]:
            assert (counts > 0).all() and counts.max() - counts.min() <= 1  # uniform pool -> equal class shares
        else:
            held = counts[counts > 0]
            assert 2 <= len(held) <= 4 and held.max() - held.min() <= 1
    sizes = np.array([len(p) for p in parts])
    assert sizes.max() <= len(labels) / 20 and sizes.max() / sizes.min() <= 2.0 + 0.1  # u in [0.5, 1]
    again = partition(labels, cfg, np.random.default_rng(0))
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))


def test_cafa_partition_equal_sizes_and_bad_bounds():
    cfg = partition_config(name="cafa", num_clients=10, size_min=1.0, size_max=1.0, iid_fraction=1.0)
    sizes = [len(p) for p in partition(_labels(), cfg, np.random.default_rng(1))]
    assert max(sizes) - min(sizes) <= 10  # equal up to per-class flooring
    with pytest.raises(ConfigError, match="class_fraction"):
        partition(_labels(), partition_config(name="cafa", class_fraction_min=0.31, class_fraction_max=0.39),
                  np.random.default_rng(0))


def _info(label_counts, true_iid=None, layout=None):
    K, C = label_counts.shape
    layout = layout or ParamLayout(nn.Linear(2, 1))
    return FederationInfo(num_clients=K, num_classes=C, num_samples=label_counts.sum(1), label_counts=label_counts,
                          client_fraction=0.5, local_epochs=1, layout=layout, all_train_indices=np.arange(1),
                          true_iid=true_iid)


@pytest.mark.parametrize("iid_fraction", [0.25, 0.5])
def test_cbcc_finds_the_iid_clients_of_the_cafa_partition(iid_fraction):
    # Tables II-III: 20 clients with 25% / 50% IID; the IID clients form the largest cluster
    labels = _labels()
    parts = partition(labels, partition_config(name="cafa", num_clients=20, iid_fraction=iid_fraction),
                      np.random.default_rng(3))
    counts = np.stack([np.bincount(labels[p], minlength=10) for p in parts])
    truth = cafa_iid_flags(20, iid_fraction)
    s = CAFA(CAFA.Config(), _info(counts, truth))
    state = s.init_state(torch.zeros(3), np.random.default_rng(0), None)
    m = s.round_metrics(state)
    assert m["iid_detection_recall"] == 1.0 and m["iid_detection_accuracy"] >= 0.9
    assert m["tau"] >= 2 and 0 < m["silhouette"] <= 1


class FakeOps:
    """``correct[model_id][client]`` answers; records the requests."""

    def __init__(self, correct, sizes):
        self.correct, self.sizes, self.calls = correct, sizes, []

    def evaluate(self, requests, split="val"):
        self.calls.append((split, [(c, int(w[0])) for c, w in requests]))
        return [EvalResult(c, 0.0, self.correct[int(w[0])][c], self.sizes[c]) for c, w in requests]


def test_aggregate_is_eq11_with_one_cross_evaluation_call():
    counts = np.array([[5, 5], [5, 5], [5, 5], [10, 0]])  # clients 0-2 one cluster, client 3 alone
    s = CAFA(CAFA.Config(k=2), _info(counts))
    state = s.init_state(torch.zeros(3), np.random.default_rng(0), None)
    np.testing.assert_allclose(state.method.cbcc_weight, [0.75, 0.75, 0.75, 0.25])
    # two sampled clients 1 and 3; model ids 0/1 in the first weight entry
    results = [ClientResult(1, torch.tensor([0.0, 1.0, 0.0]), 10, 0.0),
               ClientResult(3, torch.tensor([1.0, 0.0, 1.0]), 30, 0.0)]
    ops = FakeOps({0: {1: 8, 3: 2}, 1: {1: 4, 3: 4}}, {1: 10, 3: 5})
    out = s.aggregate(state, results, ops)
    assert ops.calls == [("val", [(1, 0), (3, 0), (1, 1), (3, 1)])]  # m x m pairs in one call
    wa = np.array([10 / 18, 8 / 18])
    coef = np.array([0.75, 0.25]) * wa
    expect = coef[0] / coef.sum() * results[0].weights + coef[1] / coef.sum() * results[1].weights
    torch.testing.assert_close(out.weights, expect)
    assert results[0].extra_bytes_up == 3 * 4  # its model went to the one other sampled client


def test_validate_config():
    with pytest.raises(ConfigError, match="algorithm.abfa_split"):
        CAFA.validate_config(CAFA.Config(abfa_split="holdout"), "algorithm")
    with pytest.raises(ConfigError, match="algorithm.k"):
        CAFA.validate_config(CAFA.Config(k=0), "algorithm")


def test_cafa_without_both_factors_but_with_sample_sizes_is_fedavg(tiny_cfg):
    over = {"federation.rounds": 2, "partition.name": "cafa", "partition.num_clients": 8}
    avg, _ = run(tiny_cfg(**{"algorithm.name": "fedavg", **over}), progress=False)
    red, _ = run(tiny_cfg(**{"algorithm.name": "cafa", "algorithm.use_cbcc": False, "algorithm.use_abfa": False,
                             "algorithm.sample_weighting": True, **over}), progress=False)
    assert torch.equal(avg.state.weights, red.state.weights)


def test_cafa_run_logs_detection_and_curve_summaries(tiny_cfg):
    cfg = tiny_cfg(**{"algorithm.name": "cafa", "partition.name": "cafa", "partition.num_clients": 10,
                      "partition.train_fraction": 0.6, "partition.val_fraction": 0.2, "federation.rounds": 3,
                      "federation.accuracy_window": 2})
    s, _ = run(cfg, progress=False)
    assert {"iid_detection_f1", "abfa_weight_max", "tau"} <= set(s.metrics)
    accs = [h["global_test_accuracy"] for h in s.history]
    assert s.final["best_global_test_accuracy"] == max(accs)
    assert s.final["window_mean_global_test_accuracy"] == pytest.approx(np.mean(accs[-2:]))


def test_abfa_without_validation_data_is_a_config_error(tiny_cfg):
    """partition.val_fraction=0 would silently turn ABFA into equal weights (CAFA = CBCC only)."""
    from flplat.experiment import prepare

    with pytest.raises(ConfigError, match=r"algorithm\.abfa_split='val': no client has a val split.*"
                                          r"partition\.val_fraction > 0"):
        prepare(tiny_cfg(**{"algorithm.name": "cafa", "partition.val_fraction": 0.0}))
    for ok in ({"algorithm.use_abfa": False}, {"algorithm.abfa_split": "train"}):  # the documented ways out
        prepare(tiny_cfg(**{"algorithm.name": "cafa", "partition.val_fraction": 0.0, **ok}))
    prepare(tiny_cfg(**{"algorithm.name": "cafa", "partition.train_fraction": 0.6, "partition.val_fraction": 0.2}))
