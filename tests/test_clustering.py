"""The silhouette search for the number of clusters (Clust-PSI-PFL, Sec. III-B) and its degenerate cases."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import silhouette_score

from flplat.maths.clustering import kmeans, silhouette_kmeans


def blobs(centers, n=10, spread=0.05, seed=0):
    rng = np.random.default_rng(seed)
    return np.concatenate([np.asarray(c) + spread * rng.standard_normal((n, 2)) for c in centers])


def test_three_separated_blobs_give_three_clusters_matching_the_blobs():
    X = blobs([(0, 0), (5, 0), (0, 5)])
    r = silhouette_kmeans(X, seed=0)
    assert r.k == 3 and r.reason == ""
    np.testing.assert_array_equal(r.labels, np.repeat([0, 1, 2], 10))  # renumbered by first appearance
    assert set(r.scores) == set(range(2, 30))  # j = 2..K-1
    assert r.silhouette == max(r.scores.values()) == r.scores[3]
    assert r.silhouette == pytest.approx(silhouette_score(X, r.labels))
    assert r.centroids.shape == (3, 2)
    np.testing.assert_allclose(r.centroids, [X[:10].mean(0), X[10:20].mean(0), X[20:].mean(0)])


def test_ties_pick_the_smallest_j_within_tolerance(monkeypatch):
    fake = {2: 0.4, 3: 0.7, 4: 0.7 + 1e-14, 5: 0.7 - 1e-9, 6: 0.1}
    import sklearn.metrics

    monkeypatch.setattr(sklearn.metrics, "silhouette_score", lambda X, labels, **kw: fake[int(labels.max()) + 1])
    r = silhouette_kmeans(blobs([(0, 0), (5, 0), (0, 5)], n=3), k_max=6)
    assert r.scores == fake and r.k == 3  # 4 is higher by 1e-14 only: a tie, the smaller j wins


def test_exact_ties_from_duplicated_points():
    # two groups of identical rows: j=2 has silhouette 1; j>=3 would need more distinct rows than exist
    X = np.array([[0.0, 0.0]] * 3 + [[1.0, 1.0]] * 3)
    r = silhouette_kmeans(X)
    assert r.k == 2 and r.scores == {2: 1.0}
    np.testing.assert_array_equal(r.labels, [0, 0, 0, 1, 1, 1])


@pytest.mark.parametrize("K", [1, 2])
def test_one_or_two_clients_form_one_cluster(K):
    r = silhouette_kmeans(np.arange(2.0 * K).reshape(K, 2))
    assert r.k == 1 and (r.labels == 0).all() and np.isnan(r.silhouette)
    assert "no candidate j" in r.reason and r.scores == {}


def test_three_clients_try_only_j2_and_allow_a_singleton_cluster():
    r = silhouette_kmeans(np.array([[0.0], [0.1], [10.0]]))
    assert set(r.scores) == {2} and r.k == 2
    np.testing.assert_array_equal(r.labels, [0, 0, 1])  # a cluster of one client is allowed


def test_identical_rows_have_no_defined_silhouette_and_form_one_cluster():
    r = silhouette_kmeans(np.ones((8, 3)))
    assert r.k == 1 and r.scores == {} and "undefined" in r.reason
    np.testing.assert_array_equal(r.centroids, np.ones((1, 3)))


def test_no_cluster_structure_gives_one_cluster_or_the_argmax_on_request():
    # 4 unit vectors: every pairwise distance is sqrt(2), so every silhouette is exactly 0
    X = np.eye(4)
    r = silhouette_kmeans(X)
    assert r.scores == {2: 0.0, 3: 0.0}
    assert r.k == 1 and "<= 0" in r.reason
    r = silhouette_kmeans(X, nonpositive="argmax")
    assert r.k == 2 and r.silhouette == 0.0 and "arg max" in r.reason


def test_cap_on_candidates_and_subsampled_silhouettes():
    X = blobs([(0, 0), (5, 0), (0, 5), (5, 5)], n=50)
    r = silhouette_kmeans(X, k_max=6, subsample=60, rng=np.random.default_rng(1))
    assert set(r.scores) == set(range(2, 7)) and r.k == 4
    again = silhouette_kmeans(X, k_max=6, subsample=60, rng=np.random.default_rng(1))
    assert again.scores == r.scores  # deterministic given the generator
    full = silhouette_kmeans(X, k_max=6)
    assert full.k == 4 and full.scores != r.scores  # the subsample only approximates s(j)


def test_kmeans_with_fixed_k_and_bad_inputs():
    labels, cents = kmeans(np.array([[0.0], [0.2], [9.0], [9.2]]), 2)
    np.testing.assert_array_equal(labels, [0, 0, 1, 1])
    np.testing.assert_allclose(cents, [[0.1], [9.1]])
    labels, cents = kmeans(np.array([[1.0], [3.0]]), 1)
    assert (labels == 0).all() and cents.tolist() == [[2.0]]
    with pytest.raises(ValueError, match="non-finite"):
        silhouette_kmeans(np.array([[0.0], [np.nan], [1.0]]))
    with pytest.raises(ValueError, match="nonpositive"):
        silhouette_kmeans(np.zeros((4, 1)), nonpositive="bogus")


def test_precomputed_distances_and_parallel_fits_give_the_same_search():
    # the search reads one precomputed distance matrix; the silhouettes equal scikit-learn's on the raw rows, and
    # fitting the candidates in worker processes (jobs) changes nothing
    X = blobs([(0, 0), (4, 0), (0, 4), (4, 4)], n=6)
    r = silhouette_kmeans(X, seed=3)
    assert sorted(r.scores) == list(range(2, len(X)))
    for j in (2, 4, 7):
        labels, _ = kmeans(X, j, 3, 10)
        assert r.scores[j] == pytest.approx(silhouette_score(X, labels), abs=1e-12)
    p = silhouette_kmeans(X, seed=3, jobs=2)
    assert p.k == r.k and p.scores == pytest.approx(r.scores, abs=1e-12)
    np.testing.assert_array_equal(p.labels, r.labels)
