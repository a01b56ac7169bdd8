"""Accuracy and fairness metrics (Clust-PSI-PFL §IV-A-e)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from flplat.metrics.evaluation import (
    accuracy_quantiles,
    ad_sdad,
    ecdf,
    global_accuracy,
    local_accuracies,
    summarize,
)


def test_ad_sdad_by_hand() -> None:
    # |A - 1| = (0, 0.5): AD = 0.25; SDAD = sqrt(((0-0.25)^2 + (0.5-0.25)^2) / 2) = 0.25
    ad, sdad = ad_sdad(np.array([1.0, 0.5]))
    assert ad == pytest.approx(0.25)
    assert sdad == pytest.approx(0.25)
    # (0.9, 0.6, 0.6): d = (0.1, 0.4, 0.4), AD = 0.3, SDAD = sqrt((0.04 + 0.01 + 0.01)/3) = sqrt(0.02)
    ad, sdad = ad_sdad([0.9, 0.6, 0.6])
    assert ad == pytest.approx(0.3)
    assert sdad == pytest.approx(math.sqrt(0.02))
    assert ad_sdad([1.0, 0.5, np.nan]) == pytest.approx((0.25, 0.25))  # NaN clients excluded
    assert all(math.isnan(v) for v in ad_sdad([]))


def test_global_accuracy_is_weighted_mean_of_local() -> None:
    correct, n = np.array([10, 15]), np.array([10, 30])
    acc = local_accuracies(correct, n)
    np.testing.assert_allclose(acc, [1.0, 0.5])
    # (10*1.0 + 30*0.5) / 40 = 25/40 = 0.625 (not the plain mean 0.75)
    assert global_accuracy(correct, n) == pytest.approx(0.625)
    assert global_accuracy(correct, n) == pytest.approx(float(np.sum(n * acc) / np.sum(n)))
    assert math.isnan(global_accuracy([0], [0]))


def test_zero_sample_clients_are_nan_and_excluded() -> None:
    correct, n = np.array([10, 0, 15]), np.array([10, 0, 30])
    acc = local_accuracies(correct, n)
    assert np.isnan(acc[1])
    s = summarize(correct, n)
    assert s["global_accuracy"] == pytest.approx(0.625)
    assert s["mean_local_accuracy"] == pytest.approx(0.75)
    assert s["ad"] == pytest.approx(0.25) and s["sdad"] == pytest.approx(0.25)
    assert not any(math.isnan(v) for v in s.values())


def test_quantiles_and_ecdf() -> None:
    acc = np.array([1.0, 0.0, 0.5, 0.25, 0.75, np.nan])
    q = accuracy_quantiles(acc)
    assert set(q) == {"acc_q10", "acc_q25", "acc_q50", "acc_q75", "acc_q90"}
    # linear interpolation on (0, .25, .5, .75, 1): the q-quantile is q itself
    for key, val in q.items():
        assert val == pytest.approx(int(key[5:]) / 100)
    assert set(accuracy_quantiles(acc, qs=(0.025,))) == {"acc_q2.5"}
    x, f = ecdf(acc)
    np.testing.assert_allclose(x, [0.0, 0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(f, [0.2, 0.4, 0.6, 0.8, 1.0])


def test_summarize_keys() -> None:
    s = summarize([8, 9, 5], [10, 10, 10])
    assert set(s) == {"global_accuracy", "ad", "sdad", "mean_local_accuracy",
                      "acc_q10", "acc_q25", "acc_q50", "acc_q75", "acc_q90"}
    assert s["global_accuracy"] == pytest.approx(22 / 30)
    assert s["ad"] == pytest.approx(1 - 22 / 30)
    assert all(isinstance(v, float) for v in s.values())
