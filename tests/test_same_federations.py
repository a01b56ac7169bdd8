"""Moving the datasets and partitions to their own registered keys (partitions receive the dataset) changed no
client: every built-in partition deals exactly the index arrays, pool and planted ids it dealt before, and two runs
give the same metrics. The digests and numbers below were computed with flplat as it was before the change (the old
keys, e.g. ``partition.pqfed_rates``); the configs here use the current keys, and the old spelling of the same
configs gives the same digests through the deprecation translation."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from flplat.data.datasets import load_dataset
from flplat.data.partitions import build_federation
from flplat.experiment import load_config
from flplat.protocol.seeding import derive_seed

SHIFT = ["data.name=digits", "partition.name=shift"]
PQFED = ["data.name=synthetic", "data.samples=3000", "data.features=20", "partition.name=pqfed"]
NAT = ["data.name=npz", "data.path=TMP/nat.npz"]

# case -> (the config in the current keys, the digest before the change, training clients, unseen clients)
CASES = {
    "iid": (["data.name=digits", "partition.name=iid", "partition.num_clients=10"], "298713a151e97bbe6fbc", 10, 0),
    "dirichlet": (["data.name=digits", "partition.name=dirichlet", "partition.alpha=0.3", "partition.num_clients=10"],
                  "5bae27527d3ccc749dd2", 10, 0),
    "similarity": (["data.name=digits", "partition.name=similarity", "partition.similarity=0.5",
                    "partition.num_clients=10", "partition.train_fraction=0.7", "partition.val_fraction=0.1"],
                   "e84d8aa470e0d51a9441", 10, 0),
    "cafa": (["data.name=digits", "partition.name=cafa", "partition.num_clients=10", "partition.iid_fraction=0.3",
              "partition.train_fraction=0.6", "partition.val_fraction=0.2"], "0910a20eb4dcf916c3b9", 10, 0),
    "shift_feature_l5": ([*SHIFT, "partition.type=feature", "partition.level=5", "partition.num_clients=6",
                          "partition.num_unseen_clients=2", "partition.samples_per_client=100",
                          "partition.train_fraction=0.6", "partition.val_fraction=0.2"], "f997611b1d9decd4889c", 6, 2),
    "shift_label_l3": ([*SHIFT, "partition.type=label", "partition.level=3", "partition.num_clients=6",
                        "partition.num_unseen_clients=2", "partition.train_fraction=0.6",
                        "partition.val_fraction=0.2"], "e7ce7504dba2f6a61fa0", 6, 2),
    "shift_concept_xy_l2": ([*SHIFT, "partition.type=concept_xy", "partition.level=2", "partition.num_clients=5",
                             "partition.train_copies=2", "seed=3"], "70552bdc2e4f44282043", 5, 0),
    "shift_concept_yx_l4": ([*SHIFT, "partition.type=concept_yx", "partition.level=4", "partition.num_clients=5",
                             "partition.num_unseen_clients=1", "partition.label_bank_size=3"],
                            "8b6773c4f697bc82d33a", 5, 1),
    "pqfed": ([*PQFED, "partition.num_clients=4", "partition.rates=[0.0,0.5,1.0]", "partition.sources=6",
               "partition.target_sources=2", "partition.samples_per_source=40",
               "partition.target_test_per_source=20", "partition.public_size=100", "partition.pca_components=10"],
              "bd4a3e6d74190e9e7e92", 4, 0),
    "pqfed_single": ([*PQFED, "partition.num_clients=3", "partition.rates=[0.3,0.8]", "partition.sources=5",
                      "partition.target_sources=2", "partition.samples_per_source=30",
                      "partition.target_test_per_source=10", "partition.public_size=80",
                      "partition.pca_components=8", "partition.diff=single", "partition.val_fraction=0.2",
                      "partition.train_fraction=0.6"], "5f2568691c95702c6308", 3, 0),
    "natural_split": ([*NAT, "data.client_column=client", "partition.name=natural", "partition.test=split",
                       "partition.min_samples=2"], "9a6a8ce3235e16e99911", 8, 0),
    "natural_official": ([*NAT, "data.client_column=client", "partition.name=natural", "partition.val_fraction=0.2",
                          "partition.train_fraction=0.6"], "9f4392e554080cbb77cc", 8, 0),
    "natural_users": (["data.name=npz", "data.path=TMP/users.npz", "data.client_column=client",
                       "partition.name=natural", "partition.max_clients=5"], "b7a7986a693308da617c", 5, 8),
    "metadata_random": ([*NAT, "data.meta_columns=[site,age]", "partition.name=metadata",
                         "partition.columns=[site,age]", "partition.bins={age: [50]}", "partition.num_clients=6",
                         "partition.num_unseen_clients=2"], "b385a5efe2388cd20ad7", 6, 2),
    "metadata_balanced": ([*NAT, "data.meta_columns=[site]", "partition.name=metadata", "partition.columns=[site]",
                           "partition.assign=balanced", "partition.num_clients=5", "partition.num_unseen_clients=1",
                           "partition.samples_per_client=10", "seed=2"], "2f277b0d9c5277b376c7", 5, 1),
}

#: the old spelling of some of the cases above (what configs written before the change hold)
OLD = {
    "shift_label_l3": [*SHIFT, "partition.shift_type=label", "partition.shift_level=3", "partition.num_clients=6",
                       "partition.num_unseen_clients=2", "partition.train_fraction=0.6", "partition.val_fraction=0.2"],
    "pqfed": ["data.name=synthetic", "data.synthetic_samples=3000", "data.synthetic_features=20",
              "partition.name=pqfed", "partition.num_clients=4", "partition.pqfed_rates=[0.0,0.5,1.0]",
              "partition.pqfed_sources=6", "partition.pqfed_target_sources=2", "partition.pqfed_samples_per_source=40",
              "partition.pqfed_target_test_per_source=20", "partition.pqfed_public_size=100",
              "partition.pqfed_pca_components=10"],
    "natural_split": [*NAT, "data.client_column=client", "partition.name=natural", "partition.natural_test=split",
                      "partition.natural_min_samples=2"],
    "metadata_random": [*NAT, "data.meta_columns=[site,age]", "partition.name=metadata",
                        "partition.meta_columns=[site,age]", "partition.meta_bins={age: [50]}",
                        "partition.num_clients=6", "partition.num_unseen_clients=2"],
}


def write_npz(tmp) -> None:
    rng = np.random.default_rng(0)
    n, nt = 240, 60
    x, y = rng.normal(size=(n, 5)).astype(np.float32), rng.integers(0, 4, n)
    client, client_t = rng.integers(0, 8, n), rng.integers(0, 8, nt)
    xt, yt = rng.normal(size=(nt, 5)).astype(np.float32), rng.integers(0, 4, nt)
    site, age = rng.integers(0, 3, n), rng.integers(20, 80, n)
    np.savez(f"{tmp}/nat.npz", x=x, y=y, x_test=xt, y_test=yt, client=client, client_test=client_t, site=site,
             age=age)
    np.savez(f"{tmp}/users.npz", x=x, y=y, x_test=xt, y_test=yt, client=client, client_test=client_t + 100)


def digest(fed) -> str:
    """Each client's splits (training then unseen), the pool, the planted ids and IID flags, the public sample and
    the global test set, hashed in that order (the same function computed the expected values)."""
    h = hashlib.sha256()
    for c in [*fed.clients, *fed.unseen]:
        for a in (c.train, c.val, c.test):
            h.update(np.asarray(a, np.int64).tobytes())
            h.update(b"|")
    h.update(fed.x.numpy().tobytes())
    h.update(fed.y.numpy().tobytes())
    for key in ("distribution", "unseen_distribution", "iid"):
        if key in fed.meta:
            h.update(key.encode())
            h.update(np.asarray(fed.meta[key]).astype(np.int64).tobytes())
    if fed.public_indices is not None:
        h.update(b"pub")
        h.update(np.asarray(fed.public_indices, np.int64).tobytes())
    if fed.x_global_test is not None:
        h.update(b"test")
        h.update(fed.x_global_test.numpy().tobytes())
    return h.hexdigest()[:20]


def federation(overrides: list[str], tmp) -> object:
    cfg = load_config(None, [o.replace("TMP", str(tmp)) for o in overrides] + ["tracking.enabled=false"])
    dataset = load_dataset(cfg.data, derive_seed(cfg.seed, "data"))
    return build_federation(dataset, cfg.partition, derive_seed(cfg.seed, "partition"))


@pytest.mark.parametrize("case", list(CASES))
def test_every_partition_deals_what_it_dealt_before(case, tmp_path):
    write_npz(tmp_path)
    overrides, expected, k, unseen = CASES[case]
    fed = federation(overrides, tmp_path)
    assert (digest(fed), fed.num_clients, len(fed.unseen)) == (expected, k, unseen)


@pytest.mark.parametrize("case", list(OLD))
def test_the_old_spelling_deals_the_same_clients(case, tmp_path):
    write_npz(tmp_path)
    with pytest.warns(DeprecationWarning):
        assert digest(federation(OLD[case], tmp_path)) == CASES[case][1]


# per round: global_accuracy, mean_local_accuracy, train_loss (computed before the change)
QUICKSTART = [(0.5027932960893855, 0.4916798365405177, 1.594068116400131),
              (0.4134078212290503, 0.4135975943793281, 1.1547988391383577)]
SHIFT_RUN = [(0.25555555555555554, 0.2555555555555556, 2.2619404792785645),
             (0.4111111111111111, 0.41111111111111115, 2.180691639582316)]


@pytest.mark.parametrize("path,overrides,expected", [
    ("configs/quickstart.yaml", ["federation.rounds=2"], QUICKSTART),
    (None, [*SHIFT, "partition.type=label", "partition.level=2", "partition.num_clients=6",
            "partition.num_unseen_clients=2", "partition.train_fraction=0.6", "partition.val_fraction=0.2",
            "federation.rounds=2", "model.name=mlp", "algorithm.name=fedavg"], SHIFT_RUN),
])
def test_runs_give_the_metrics_they_gave_before(path, overrides, expected):
    from conftest import REPO

    from flplat.experiment import run

    cfg = load_config(REPO / path if path else None, [*overrides, "tracking.enabled=false", "fabric.num_threads=1"])
    summary, _ = run(cfg, progress=False)
    got = [h[k] for h in summary.history for k in ("global_accuracy", "mean_local_accuracy", "train_loss")]
    assert got == pytest.approx([v for row in expected for v in row], rel=1e-9, abs=1e-12)
