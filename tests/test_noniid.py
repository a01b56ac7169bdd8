"""Hand-computed checks of the non-IID quantifiers (Clust-PSI-PFL Eqs. 1-3; Hellinger, JSD, EMD both as FedArtML's
multi-client definitions, the paper's [14], and as client-to-global distances), pinned against FedArtML itself when
it is installed (``pip install 'flplat[fedartml]'``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon

from flplat.metrics.noniid import (
    client_metrics,
    client_psi,
    current_metrics,
    emd,
    federation_emd,
    federation_hellinger,
    federation_jsd,
    global_distribution,
    hellinger,
    jensen_shannon,
    label_distribution,
    noniid_summary,
    psi,
    psi_per_class,
    wpsi,
)


def test_label_and_global_distribution() -> None:
    counts = np.array([[3, 1], [0, 4], [0, 0]])
    p = label_distribution(counts)
    np.testing.assert_allclose(p[0], [0.75, 0.25])
    np.testing.assert_allclose(p[1], [0.0, 1.0])
    assert np.isnan(p[2]).all()  # an empty client has no pmf
    np.testing.assert_allclose(global_distribution(counts), [3 / 8, 5 / 8])


def test_psi_by_hand() -> None:
    # P = (0.5, 0.5) global, P_i = (0.25, 0.75):
    # (0.5-0.25) ln(0.5/0.25) + (0.5-0.75) ln(0.5/0.75) = 0.25 ln 2 - 0.25 ln(2/3) = 0.25 ln 3 = 0.274653...
    expected = 0.25 * math.log(2) + (-0.25) * math.log(2 / 3)
    assert expected == pytest.approx(0.25 * math.log(3))
    assert psi([0.5, 0.5], [0.25, 0.75], eps=0.0) == pytest.approx(expected, abs=1e-12)
    assert psi([0.5, 0.5], [0.25, 0.75]) == pytest.approx(expected, abs=1e-5)  # eps=1e-6 barely matters here
    np.testing.assert_allclose(
        psi_per_class([0.5, 0.5], [0.25, 0.75], eps=0.0), [0.25 * math.log(2), -0.25 * math.log(2 / 3)]
    )
    # PSI is symmetric (Jeffreys divergence)
    assert psi([0.25, 0.75], [0.5, 0.5], eps=0.0) == pytest.approx(expected)


def test_psi_missing_class_uses_eps() -> None:
    # P = (0.5, 0.5), P_i = (1, 0), eps = 1e-6 added to both pmfs inside the log:
    # (0.5-1) ln(0.500001/1.000001) + (0.5-0) ln(0.500001/0.000001)
    #   = 0.5 ln(1.000001/0.500001) + 0.5 ln(500001) ~= 0.346573 + 6.561183 = 6.907756 (~ ln 1000)
    eps = 1e-6
    expected = -0.5 * math.log((0.5 + eps) / (1 + eps)) + 0.5 * math.log((0.5 + eps) / eps)
    value = psi([0.5, 0.5], [1.0, 0.0], eps=eps)
    assert math.isfinite(value)
    assert value == pytest.approx(expected, rel=1e-12)
    assert value == pytest.approx(6.907756, abs=1e-6)
    # the value depends on eps: with eps = 1e-3 the second term is 0.5 ln(501)
    assert psi([0.5, 0.5], [1.0, 0.0], eps=1e-3) < value


def test_client_psi_and_wpsi_weights() -> None:
    # clients [3,1], [1,3], [8,8]: global = (12,12)/24 = (0.5, 0.5)
    # PSI_A = PSI_B = 0.25 ln 3 (as above, mirrored), PSI_C = 0; n = 4, 4, 16 (N = 24)
    # WPSI = 4/24 * 0.25 ln3 + 4/24 * 0.25 ln3 + 16/24 * 0 = ln(3)/12 = 0.0915510...
    counts = np.array([[3, 1], [1, 3], [8, 8]])
    values, per_class = client_psi(counts, eps=0.0)
    np.testing.assert_allclose(values, [0.25 * math.log(3), 0.25 * math.log(3), 0.0], atol=1e-12)
    assert per_class.shape == (3, 2)
    np.testing.assert_allclose(per_class.sum(axis=1), values)
    assert wpsi(counts, eps=0.0) == pytest.approx(math.log(3) / 12)
    assert wpsi(counts, eps=0.0) != pytest.approx(values.mean())  # weighted, not a plain mean
    # an empty client has weight 0 and does not poison the sum
    assert wpsi(np.vstack([counts, [0, 0]]), eps=0.0) == pytest.approx(math.log(3) / 12)


def test_hellinger_and_jsd_known_values() -> None:
    p, q = np.array([0.5, 0.5]), np.array([1.0, 0.0])
    # Hellinger: BC = sqrt(0.5*1) + 0 = 0.707107; H = sqrt(1 - 0.707107) = 0.541196
    assert hellinger(p, q) == pytest.approx(math.sqrt(1 - math.sqrt(0.5)))
    assert hellinger(p, q) == pytest.approx(0.541196, abs=1e-6)
    # JSD (base 2): m = (0.75, 0.25)
    # KL(p||m) = 0.5 log2(0.5/0.75) + 0.5 log2(0.5/0.25) = 0.5*(-0.584963) + 0.5*1 = 0.207519
    # KL(q||m) = 1 * log2(1/0.75) = 0.415037;  JS = (0.207519 + 0.415037)/2 = 0.311278; distance = 0.557923
    kl_pm = 0.5 * math.log2(0.5 / 0.75) + 0.5 * math.log2(0.5 / 0.25)
    kl_qm = math.log2(1 / 0.75)
    assert jensen_shannon(p, q) == pytest.approx(math.sqrt(0.5 * (kl_pm + kl_qm)))
    assert jensen_shannon(p, q) == pytest.approx(0.557923, abs=1e-6)
    assert jensen_shannon(p, q) == pytest.approx(jensenshannon(p, q, base=2))
    # disjoint supports: both distances reach their maximum 1
    assert hellinger([1, 0], [0, 1]) == pytest.approx(1.0)
    assert jensen_shannon([1, 0], [0, 1]) == pytest.approx(1.0)


def test_hellinger_jsd_match_scipy_on_random_rows() -> None:
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.full(6, 0.5), size=8)
    q = rng.dirichlet(np.ones(6))
    js = jensen_shannon(p, q)
    assert js.shape == (8,)
    np.testing.assert_allclose(js, [jensenshannon(row, q, base=2) for row in p], atol=1e-10)
    bc = np.sqrt(p * q).sum(axis=1)
    np.testing.assert_allclose(hellinger(p, q), np.sqrt(1 - bc))


def test_emd_uniform_is_total_variation_and_index_by_hand() -> None:
    p, q = np.array([0.7, 0.2, 0.1]), np.array([0.1, 0.3, 0.6])
    # uniform 0/1 ground: EMD = TV = 0.5 * (0.6 + 0.1 + 0.5) = 0.6
    assert emd(p, q) == pytest.approx(0.6)
    assert emd(p, q, ground="uniform") == pytest.approx(0.5 * np.abs(p - q).sum())
    # index ground |i-j|/2: move 0.5 from class 0 to class 2 (cost 0.5*1) and 0.1 from 0 to 1 (cost 0.1*0.5)
    # = 0.55; equivalently sum |CDF_p - CDF_q| / (C-1) = (|0.7-0.1| + |0.9-0.4|) / 2 = 0.55
    assert emd(p, q, ground="index") == pytest.approx(0.55)
    # neighbouring vs far classes differ only under the index ground
    assert emd([1, 0, 0], [0, 1, 0], ground="index") == pytest.approx(0.5)
    assert emd([1, 0, 0], [0, 0, 1], ground="index") == pytest.approx(1.0)
    assert emd([1, 0, 0], [0, 1, 0]) == pytest.approx(1.0)
    rows = emd(np.array([[1, 0, 0], [0.7, 0.2, 0.1]]), q)
    np.testing.assert_allclose(rows, [0.9, 0.6])
    with pytest.raises(ValueError):
        emd(p, q, ground="euclid")


@pytest.mark.parametrize("ground", ["uniform", "index"])
def test_emd_closed_form_equals_pots_exact_solver(ground: str) -> None:
    ot = pytest.importorskip("ot")
    from flplat.metrics.noniid import ground_cost

    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.full(7, 0.3), size=20) * rng.integers(1, 50, size=(20, 1))  # unnormalised counts too
    q = rng.dirichlet(np.ones(7))
    m = ground_cost(7, ground)
    want = [ot.emd2(row / row.sum(), q / q.sum(), m) for row in p]
    np.testing.assert_allclose(emd(p, q, ground), want, atol=1e-12)
    assert np.isnan(emd([0.0, 0.0], [0.5, 0.5], ground)) and np.isnan(emd([np.nan, 1.0], [0.5, 0.5], ground))


def test_identical_distributions_give_zero() -> None:
    counts = np.array([[5, 3, 2], [10, 6, 4], [15, 9, 6]])
    summary = noniid_summary(counts)
    assert set(summary) == {"wpsi", "hellinger", "jsd", "emd", "hellinger_to_global", "jsd_to_global",
                            "emd_to_global"}
    for key, value in summary.items():
        assert value == pytest.approx(0.0, abs=1e-7), key
    assert summary["jsd"] == 0.0  # a divergence rounded below 0 is 0, not sqrt(-1e-17) = NaN
    per = client_metrics(counts, ground="index")
    assert set(per) == {"psi", "hellinger_to_global", "jsd_to_global", "emd_to_global"}
    for key, arr in per.items():
        assert arr.shape == (3,)
        np.testing.assert_allclose(arr, 0.0, atol=1e-7, err_msg=key)


def test_summary_to_global_is_sample_weighted() -> None:
    counts = np.array([[3, 1], [1, 3], [8, 8], [0, 0]])
    per = client_metrics(counts)
    assert np.isnan(per["hellinger_to_global"][3]) and np.isnan(per["emd_to_global"][3])
    w = np.array([4, 4, 16]) / 24
    summary = noniid_summary(counts)
    assert summary["wpsi"] == pytest.approx(wpsi(counts))
    for key in ("hellinger_to_global", "jsd_to_global", "emd_to_global"):
        assert summary[key] == pytest.approx(float(np.sum(w * per[key][:3])))
    # client A: p = (0.75, 0.25) vs (0.5, 0.5): TV = 0.25, so the EMD to the global pmf = (4+4)/24 * 0.25
    assert summary["emd_to_global"] == pytest.approx(8 / 24 * 0.25)


# A 3x3 matrix, by hand. Client pmfs p1 = (1, 0, 0), p2 = (0, 1, 0), p3 = (1/2, 1/2, 0) (sizes 4, 2, 6 play no part:
# FedArtML's definitions are unweighted).
# HD:  ½||√p1-√p2||² = 1; ½||√p1-√p3||² = ½((1-1/√2)² + ½) = 1 - √2/2, the same for (p2, p3);
#      the mean over the 3 pairs = (1 + 2 - √2) / 3 = 1 - √2/3, HD = sqrt(1 - √2/3) = 0.727046...
# JSD: mean pmf (1/2, 1/2, 0), entropy 1 bit; entropies 0, 0, 1, mean 1/3; JS = 2/3 bits; K = 3 > 2 so divided by
#      log2 3: JSD = sqrt(2 / (3 log2 3)) = 0.648552...
# EMD: the sorted pmfs are (0,0,1), (0,0,1), (0,1/2,1/2); wasserstein (mean |sorted difference|) 0, 1/3, 1/3; mean
#      2/9, EMD = sqrt(2/9) = √2/3 = 0.471405... (p1 and p2 hold different classes yet are at distance 0)
HAND = np.array([[4, 0, 0], [0, 2, 0], [3, 3, 0]])


def test_fedartml_definitions_by_hand_on_3x3() -> None:
    assert federation_hellinger(HAND) == pytest.approx(math.sqrt(1 - math.sqrt(2) / 3), abs=1e-12)
    assert federation_hellinger(HAND) == pytest.approx(0.727046, abs=1e-6)
    assert federation_jsd(HAND) == pytest.approx(math.sqrt(2 / (3 * math.log2(3))), abs=1e-12)
    assert federation_jsd(HAND) == pytest.approx(0.648552, abs=1e-6)
    assert federation_emd(HAND) == pytest.approx(math.sqrt(2) / 3, abs=1e-12)
    # label-blind: two one-class clients of different classes are at EMD 0, but at HD = JSD = 1
    two = np.array([[5, 0, 0], [0, 7, 0]])
    assert federation_emd(two) == 0.0
    assert federation_hellinger(two) == pytest.approx(1.0) and federation_jsd(two) == pytest.approx(1.0)
    # the run-level names are these definitions; the client-to-global means keep their own names
    s = noniid_summary(HAND)
    assert (s["hellinger"], s["jsd"], s["emd"]) == (federation_hellinger(HAND), federation_jsd(HAND),
                                                    federation_emd(HAND))
    assert s["hellinger_to_global"] != pytest.approx(s["hellinger"])
    # an empty client has no pmf and is left out; one client has no pair (0)
    assert federation_hellinger(np.vstack([HAND, [0, 0, 0]])) == pytest.approx(federation_hellinger(HAND))
    assert federation_emd(np.vstack([HAND, [0, 0, 0]])) == pytest.approx(federation_emd(HAND))
    assert federation_jsd(np.vstack([HAND, [0, 0, 0]])) == pytest.approx(federation_jsd(HAND))
    assert federation_hellinger([[3, 1, 0]]) == federation_jsd([[3, 1, 0]]) == federation_emd([[3, 1, 0]]) == 0.0


def test_federation_emd_is_scipys_wasserstein_of_the_pmf_values() -> None:
    from scipy.stats import wasserstein_distance

    rng = np.random.default_rng(1)
    counts = rng.multinomial(200, rng.dirichlet(np.full(6, 0.5)), size=9)
    p = label_distribution(counts)
    pairs = [wasserstein_distance(p[i], p[j]) for i in range(9) for j in range(i + 1, 9)]
    assert federation_emd(counts) == pytest.approx(math.sqrt(np.mean(pairs)), abs=1e-12)


def _fedartml_function_base():
    """``fedartml.function_base`` without running the package's ``__init__`` (which imports its interactive plots
    and with them ipywidgets); skips when FedArtML is not installed."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("fedartml")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("FedArtML is not installed (pip install 'flplat[fedartml]')")
    pytest.importorskip("pandas")  # function_base imports it
    path = Path(list(spec.submodule_search_locations)[0]) / "function_base.py"
    mod_spec = importlib.util.spec_from_file_location("_fedartml_function_base", path)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    return mod


def _random_counts(rng: np.random.Generator, k: int, c: int, alpha: float) -> np.ndarray:
    counts = rng.multinomial(int(rng.integers(50, 400)), rng.dirichlet(np.full(c, alpha)), size=k)
    return counts[counts.sum(axis=1) > 0]


def test_federation_metrics_equal_fedartml() -> None:
    fb = _fedartml_function_base()
    rng = np.random.default_rng(2026)
    mats = [HAND, np.array([[5, 0, 0], [0, 7, 0]]), np.array([[3, 1], [1, 3], [8, 8]]),
            np.array([[10, 0, 0, 0], [0, 10, 0, 0], [0, 0, 10, 0], [0, 0, 0, 10], [1, 1, 1, 1]]),
            np.array([[7, 1, 0, 2, 9], [0, 0, 13, 1, 1]])]
    mats += [_random_counts(rng, int(rng.integers(2, 60)), int(rng.integers(2, 15)), float(a))
             for a in rng.choice([0.1, 0.5, 1.0, 10.0, 1000.0], size=60)]
    for counts in mats:
        p = label_distribution(counts)  # FedArtML's input: one pmf per client
        assert federation_hellinger(counts) == pytest.approx(fb.hellinger_distance(p), abs=1e-12)
        assert federation_jsd(counts) == pytest.approx(fb.jensen_shannon_distance(list(p)), abs=1e-12)
        assert federation_emd(counts) == pytest.approx(fb.earth_movers_distance(p), abs=1e-12)


def test_federation_jsd_of_identical_clients_is_zero_where_fedartml_rounds() -> None:
    # clients with one and the same pmf: the divergence is 0; FedArtML's float path can leave +-1e-17 under its
    # square root (1e-8.5, or NaN for a negative); ours is exactly 0
    same = np.array([[13, 18, 10, 12, 19, 14]] * 19)  # H(mean) - mean H rounds to -8.9e-16 here
    assert federation_jsd(same) == 0.0
    fb = _fedartml_function_base()
    counts = np.array([[0, 0, 12, 0, 0, 0]] * 26)
    ref = fb.jensen_shannon_distance(list(label_distribution(counts)))
    assert federation_jsd(counts) == 0.0
    assert np.isnan(ref) or ref < 1e-7


def test_runs_logged_before_the_fedartml_definitions_keep_no_value_under_the_new_names() -> None:
    old = {"wpsi": 2.0, "hellinger": 0.4, "jsd": 0.5, "emd": 0.45, "global_accuracy": 0.8}
    now = current_metrics(old)
    assert now == {"wpsi": 2.0, "hellinger_to_global": 0.4, "jsd_to_global": 0.5, "emd_to_global": 0.45,
                   "global_accuracy": 0.8}
    new = {"wpsi": 2.0, "hellinger": 0.7, "jsd": 0.4, "emd": 0.2, "hellinger_to_global": 0.4, "jsd_to_global": 0.5,
           "emd_to_global": 0.45}
    assert current_metrics(new) == new
    assert current_metrics({"global_accuracy": 0.8}) == {"global_accuracy": 0.8}
