"""Partitions that keep groups the data already has: ``natural`` (its clients; keys ``partition.min_samples``,
``max_clients``, ``test``: :class:`NaturalConfig`) and ``metadata`` (its domains; keys ``partition.columns``,
``bins``, ``assign``, ``num_unseen_clients``, ``samples_per_client``: :class:`MetadataConfig`).

``natural`` -- naturally federated data (FEMNIST writers, a table's user column): every distinct
``Dataset.client_ids`` value is one client, holding exactly its samples. Clients with fewer than
``partition.min_samples`` pool samples are left out; ``partition.max_clients`` > 0 keeps the
first N of a shuffle seeded by the partition seed. Clients are ordered by their id (the code of the sorted
original values, see :mod:`flplat.data.user_files`); ``meta["natural_client_ids"]`` maps client k to it. The local
splits: ``partition.test=split`` cuts each client's samples into train / val / test by the usual
``partition.*_fraction`` (:func:`~flplat.data.splits.split_client`); ``official`` takes a client's test split from
the official test set (its samples whose ``client_ids_test`` is the client's; the pool and the test set are
concatenated into one pool) and cuts its pool samples into train / val with val share
``val_fraction / (train_fraction + val_fraction)`` (``test_fraction`` is not used); test users that are not
training clients are not clients (counted in ``meta["test_samples_without_client"]``), and when no kept client has
an official test sample that is an error naming ``users`` and ``split``. ``users`` is for an official test set of
other users than the pool's, as LEAF's ``-t user`` split writes it (whole users in train or test; ``-t sample``
cuts every user's samples): each training client is cut by the usual fractions as under ``split``, and every test
user that is not a training client becomes an unseen test-only client holding all its test samples
(``FederatedData.unseen``, Flux's test phase: ``test_phase_accuracy`` is the accuracy on users never trained on,
``known_association_accuracy`` the training clients' own), left out, like a training client, below
``min_samples``; a test user that is also a training client adds its test samples to that client's test
split. ``meta["num_unseen_clients"]`` and ``meta["unseen_client_ids"]`` say which. ``auto`` (default) is
``official`` when the official test set's client ids include a pool client's, ``users`` when it has client ids
none of which does, else ``split``. The official test set stays the pooled global test set.
``partition.num_clients`` is not used (the data decides; the log says how many clients were kept, and
the run logs that number as ``partition.num_clients``: :func:`flplat.experiment.fill_num_clients`).

``metadata`` -- Flux's real-world distributions (Fenoglio et al., App. B.1 and F.4, Table 59): each combination
of levels of the metadata columns ``partition.columns`` is one planted distribution. App. B.1 for CheXpert:
"Low heterogeneity: 2 distributions based on ViewPosition (Frontal vs. Lateral). Medium heterogeneity: 4
distributions based on ViewPosition and Age (<50 vs. >=50). High heterogeneity: 8 distributions based on
ViewPosition, Age, and Sex (Male vs. Female)", i.e. ``columns=[view]``, ``[view, age]`` and
``[view, age, sex]`` with ``partition.bins.age=[50]`` (the column names are the loader's; the authors'
generator, public/generate_datasets_chexpert.py, cuts age at 60 instead: ``bins.age=[60]``); for Office-Home
"the four inherent domains of the dataset: Art, Clipart, Product, and Real-World" (``columns=[domain]``).
``partition.bins`` cuts a numeric column at increasing points (``[50]``: level 0 ``< 50``, level 1
``>= 50``); a column without cuts uses its values as levels. A sample with a missing value (``-1``) in a used
column belongs to no distribution and is left out (``meta["dropped_samples"]``), as the authors' masks leave out
CheXpert's unknown sex. Distribution ids are the observed level combinations in lexicographic order.

Clients: ``partition.num_clients`` training clients and ``partition.num_unseen_clients`` test-only clients (Flux's
test phase). ``partition.assign=random`` (default): each training client draws a distribution uniformly, as
the authors' CheXpert generator does (``np.random.choice`` over the distribution bank), so a distribution may have
no client; ``balanced``: the distributions are cycled over the clients and the order shuffled, as their Office-Home
generator does (``itertools.cycle`` over the domains, then ``random.shuffle``). An unseen client takes a
distribution of the training clients the same way (uniformly / cycled over the distributions used). A
distribution's samples, shuffled, are dealt to its clients (training, then unseen): ``partition.samples_per_client``
each (an error when the distribution has too few), or with 0 (default) split evenly among them (the Office-Home
generator). Clients never share a sample. A training client's samples are split into train / val / test by the
usual fractions; an unseen client holds all its samples in its test split. The authors' CheXpert generator deals
150 training / 280 test images per client, but takes them from the unshuffled head of the distribution (every
client of a distribution gets the same images, its test images included): we do not copy that; use
``samples_per_client`` for the size. The official test set stays the pooled global test set (it is drawn from the
same distributions, unlike the shift partition's).

Planted ids exactly as :mod:`flplat.data.shift_partition` exposes them, so ARI, the true M (``num_distributions``)
and the test phase read them unchanged: ``meta["distribution"]`` (each training client's id),
``meta["unseen_distribution"]``, ``meta["num_distributions"]`` (distinct ids of the training clients),
``meta["num_candidate_distributions"]`` and ``meta["distributions"]`` (each id's levels as text).
"""

from __future__ import annotations

import itertools
import logging
import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from flplat.data.containers import ClientSplit, Dataset, Partition
from flplat.data.registry import register_partition
from flplat.data.splits import InfeasiblePartitionError, split_client
from flplat.errors import ConfigError, check_choice, check_range

log = logging.getLogger("flplat")


@dataclass
class NaturalConfig:
    """``natural``: every client id of the dataset is one client."""

    min_samples: int = 1  # drop natural clients with fewer pool samples
    max_clients: int = 0  # keep at most this many (the first of a seeded shuffle); 0: all
    test: str = "auto"  # split (test_fraction) | official (client_ids_test) | users (test users unseen) | auto

    def check(self) -> None:
        check_range(self.min_samples >= 1, "partition.min_samples", self.min_samples, "an integer >= 1")
        check_range(self.max_clients >= 0, "partition.max_clients", self.max_clients, "an integer >= 0 (0: all)")
        check_choice("partition.test", self.test, ("auto", "split", "official", "users"))


@dataclass
class MetadataConfig:
    """``metadata``: distributions = level combinations of dataset metadata columns."""

    columns: list[str] = field(default_factory=list)  # e.g. [view, age, sex] (Flux CheXpert high, App. B.1)
    bins: dict[str, list[float]] = field(default_factory=dict)  # cut points, e.g. {age: [50]}: <50 | >=50
    assign: str = "random"  # random: each client draws a distribution | balanced: distributions cycled
    num_unseen_clients: int = 0  # extra test-only clients drawn from the training clients' distributions
    samples_per_client: int = 0  # samples dealt to each client (0: a distribution's samples split evenly)

    def check(self) -> None:
        check_range(len(self.columns) >= 1, "partition.columns", list(self.columns),
                    "a non-empty list of the dataset's metadata columns, e.g. [view]")
        for col, cuts in self.bins.items():
            check_range(list(cuts) == sorted(cuts) and all(math.isfinite(c) for c in cuts), f"partition.bins.{col}",
                        list(cuts), "increasing finite cut points, e.g. [50]")
        check_choice("partition.assign", self.assign, ("random", "balanced"))
        check_range(self.num_unseen_clients >= 0, "partition.num_unseen_clients", self.num_unseen_clients,
                    "an integer >= 0")
        check_range(self.samples_per_client >= 0, "partition.samples_per_client", self.samples_per_client,
                    "an integer >= 0 (0: a distribution's samples split evenly)")


def _num_labels(dataset: Dataset) -> int:
    return len(dataset.y_train)


# ------------------------------------------------------------------------------------------------------ natural


def natural_clients(client_ids: np.ndarray, min_samples: int, max_clients: int, rng: np.random.Generator
                    ) -> tuple[np.ndarray, list[np.ndarray]]:
    """The kept natural client ids (sorted) and each one's pool indices (sorted)."""
    ids = np.asarray(client_ids, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    uniq, starts, counts = np.unique(ids[order], return_index=True, return_counts=True)
    keep = np.flatnonzero(counts >= int(min_samples))
    if max_clients and len(keep) > max_clients:
        keep = np.sort(rng.permutation(keep)[:int(max_clients)])
    return uniq[keep], [np.sort(order[starts[i]:starts[i] + counts[i]]) for i in keep]


def _natural_test_mode(dataset: Dataset, cfg: Any) -> str:
    """``partition.test`` resolved: ``auto`` is ``official`` when the official test set's users include a
    pool user (LEAF's ``-t sample``), ``users`` when none does (``-t user``), ``split`` without test client ids."""
    mode = str(cfg.test)
    if mode in ("official", "users") and dataset.client_ids_test is None:
        raise ConfigError(f"partition.test={mode!r} needs the official test set's client ids, and data."
                          f"name={dataset.name!r} has none; allowed: split, auto")
    if mode != "auto":
        return mode
    if dataset.client_ids_test is None:
        return "split"
    return "official" if np.isin(dataset.client_ids_test, dataset.client_ids).any() else "users"


def _test_users(test_ids: np.ndarray) -> dict[int, np.ndarray]:
    """Each official test user's sample indices (sorted), by user id."""
    order = np.argsort(test_ids, kind="stable")
    uniq, start, count = np.unique(test_ids[order], return_index=True, return_counts=True)
    return {int(u): np.sort(order[s:s + c]).astype(np.int64) for u, s, c in zip(uniq, start, count)}


def _official_federation(dataset: Dataset, cfg: Any, mode: str, kept: np.ndarray, parts: list[np.ndarray],
                         split_ss: np.random.SeedSequence) -> tuple[Any, Any, list, list, dict]:
    """The pool and the official test set as one pool (the test samples at ``n + i``) and the clients of
    ``official`` / ``users`` (module docstring), with their meta entries."""
    import torch

    n = _num_labels(dataset)
    x, y = torch.cat([dataset.x_train, dataset.x_test]), torch.cat([dataset.y_train, dataset.y_test])
    tr, va = float(cfg.train_fraction), float(cfg.val_fraction)
    local = SimpleNamespace(val_fraction=va / (tr + va), test_fraction=0.0) if mode == "official" else cfg
    tests = _test_users(np.asarray(dataset.client_ids_test, dtype=np.int64))
    clients, none = [], np.empty(0, np.int64)
    for cid, part, ss in zip(kept.tolist(), parts, split_ss.spawn(len(parts))):
        sp = split_client(part, local, np.random.default_rng(ss))
        sp.test = np.concatenate([sp.test, n + tests.pop(cid, none)]).astype(np.int64)
        clients.append(sp)
    if mode == "official" and not any(len(c.test) for c in clients):
        raise InfeasiblePartitionError(
            f"partition.test='official' gives no client a test sample: none of the official test set's "
            f"{len(tests)} users is one of the {len(kept)} kept clients (LEAF's -t user split puts whole users in "
            "train or test); allowed: partition.test=users (the test users become unseen test-only clients) "
            "or split (each client's test split cut by partition.test_fraction)")
    unseen_ids = [u for u, idx in tests.items() if mode == "users" and len(idx) >= int(cfg.min_samples)]
    unseen = [ClientSplit(train=none, val=none, test=n + tests.pop(u)) for u in unseen_ids]
    meta = {"test_samples_without_client": int(sum(len(v) for v in tests.values()))}
    if mode == "users":
        meta.update(num_unseen_clients=len(unseen), unseen_client_ids=np.asarray(unseen_ids, dtype=np.int64))
    return x, y, clients, unseen, meta


@register_partition("natural", NaturalConfig, multilabel=True)
def natural_partition(dataset: Dataset, cfg: Any, seed: int) -> Partition:
    """``partition.name=natural`` (module docstring); deterministic in ``seed``. Under ``test=split`` the builder
    cuts the clients' splits (its streams are this module's ``split_ss``)."""
    if dataset.client_ids is None:
        raise ConfigError(f"partition.name='natural' needs the natural client of every sample, and data.name="
                          f"{dataset.name!r} has none; allowed: a dataset with client ids (imagefolder / npz / table "
                          "with data.client_column=...) or another partition.name")
    mode = _natural_test_mode(dataset, cfg)
    pick_ss, split_ss = np.random.SeedSequence(int(seed)).spawn(2)
    kept, parts = natural_clients(dataset.client_ids, int(cfg.min_samples), int(cfg.max_clients),
                                  np.random.default_rng(pick_ss))
    n = _num_labels(dataset)
    if not len(kept):
        raise InfeasiblePartitionError(f"partition.name='natural' keeps no client: none of the "
                                       f"{len(np.unique(dataset.client_ids))} natural clients has "
                                       f"partition.min_samples={cfg.min_samples} samples; lower it")
    x, y, unseen, meta = None, None, [], {}
    if mode == "split":
        clients = list(parts)
    else:
        x, y, clients, unseen, meta = _official_federation(dataset, cfg, mode, kept, parts, split_ss)
    sizes = np.array([len(p) for p in parts], dtype=np.int64)
    log.info("partition.name=natural: %d natural clients kept of %d (partition.num_clients is not used); test "
             "splits from %s", len(kept), len(np.unique(dataset.client_ids)), {
                 "official": "the official test set's client ids", "split": "partition.test_fraction",
                 "users": f"partition.test_fraction; the official test set's {len(unseen)} users are unseen "
                          "test-only clients"}[mode])
    meta = {
        "assigned_samples": int(sizes.sum()), "dropped_samples": int(n - sizes.sum()),
        "min_client_samples": int(sizes.min()), "max_client_samples": int(sizes.max()),
        "natural_clients": int(len(np.unique(dataset.client_ids))), "natural_client_ids": kept,
        "natural_test": mode, **meta,
    }
    return Partition(clients=clients, unseen=unseen, x=x, y=y, meta=meta)


# ----------------------------------------------------------------------------------------------------- metadata


def metadata_groups(meta: dict[str, np.ndarray], columns: list[str], bins: dict[str, list[float]]
                    ) -> tuple[np.ndarray, list[str]]:
    """Each sample's distribution id (``-1``: a missing level) and each id's description.

    A column with cut points in ``bins`` is digitised (``np.digitize``: level i holds ``cuts[i-1] <= v <
    cuts[i]``); the ids are the observed level combinations in lexicographic order.
    """
    n = len(next(iter(meta.values())))
    levels = np.empty((n, len(columns)), dtype=np.int64)
    missing = np.zeros(n, dtype=bool)
    for j, col in enumerate(columns):
        v = np.asarray(meta[col], dtype=np.int64)
        missing |= v < 0
        cuts = bins.get(col)
        levels[:, j] = np.digitize(v, np.asarray(cuts, dtype=np.float64)) if cuts else v
    combos, inverse = np.unique(levels[~missing], axis=0, return_inverse=True)
    ids = np.full(n, -1, dtype=np.int64)
    ids[~missing] = inverse.reshape(-1)

    def level(col: str, value: int) -> str:
        cuts = list(bins.get(col) or [])
        if not cuts:
            return f"{col}={value}"
        lo = f"{cuts[value - 1]:g} <= " if value > 0 else ""
        hi = f" < {cuts[value]:g}" if value < len(cuts) else ""
        return f"{lo}{col}{hi}"

    return ids, [", ".join(level(c, int(v)) for c, v in zip(columns, row)) for row in combos]


def _assign(kind: str, choices: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    if count == 0 or len(choices) == 0:
        return np.empty(0, dtype=np.int64)
    if kind == "balanced":
        return rng.permutation(np.fromiter(itertools.islice(itertools.cycle(choices), count), np.int64, count))
    return choices[rng.integers(len(choices), size=count)].astype(np.int64)


def _distributions_of(dataset: Dataset, cfg: Any) -> tuple[list[str], np.ndarray, list[str]]:
    """The columns, each sample's distribution id and each id's description; one-line errors for columns the
    dataset lacks and bins of columns not used."""
    columns = list(cfg.columns)
    have = sorted(dataset.meta or {})
    missing = [c for c in columns if c not in have]
    if not columns or missing:
        raise ConfigError(f"partition.columns={columns} is not valid for data.name={dataset.name!r}; choose "
                          f"among its metadata columns: {', '.join(have) or 'none (the dataset has no metadata)'}")
    bins = {str(k): [float(c) for c in v] for k, v in dict(cfg.bins).items()}
    unknown = sorted(set(bins) - set(columns))
    if unknown:
        raise ConfigError(f"partition.bins.{unknown[0]} cuts a column not in partition.columns={columns}")
    group, names = metadata_groups(dataset.meta, columns, bins)
    if not names:
        raise InfeasiblePartitionError(f"partition.columns={columns}: every sample of data.name={dataset.name!r} "
                                       "misses a level (-1) of one of them; no distribution to deal")
    return columns, group, names


@register_partition("metadata", MetadataConfig, plants=True, multilabel=True)
def metadata_partition(dataset: Dataset, cfg: Any, seed: int) -> Partition:
    """``partition.name=metadata`` (module docstring); deterministic in ``seed``."""
    columns, group, names = _distributions_of(dataset, cfg)
    k, q, per = int(cfg.num_clients), int(cfg.num_unseen_clients), int(cfg.samples_per_client)
    assign_ss, deal_ss, split_ss = np.random.SeedSequence(int(seed)).spawn(3)
    arng = np.random.default_rng(assign_ss)
    which = _assign(str(cfg.assign), np.arange(len(names)), k, arng)
    used = np.unique(which)
    unseen_which = _assign(str(cfg.assign), used, q, arng)
    owner = np.concatenate([which, unseen_which])
    drng = np.random.default_rng(deal_ss)
    parts: list[np.ndarray] = [np.empty(0, np.int64)] * (k + q)
    for g in np.unique(owner):
        members = np.flatnonzero(owner == g)
        idx = drng.permutation(np.flatnonzero(group == g))
        if per:
            if per * len(members) > len(idx):
                raise InfeasiblePartitionError(
                    f"partition.samples_per_client={per} times {len(members)} clients of distribution {g} "
                    f"({names[g]}) exceeds its {len(idx)} samples; lower partition.samples_per_client or "
                    "partition.num_clients")
            chunks = [idx[i * per:(i + 1) * per] for i in range(len(members))]
        else:
            chunks = np.array_split(idx, len(members))
        for m, chunk in zip(members, chunks):
            parts[m] = np.sort(chunk)
    empty = [i for i, p in enumerate(parts) if len(p) == 0]
    if empty:
        raise InfeasiblePartitionError(
            f"partition.name='metadata': client {empty[0]} of distribution {owner[empty[0]]} "
            f"({names[owner[empty[0]]]}) gets no sample; lower partition.num_clients / num_unseen_clients")
    clients, unseen = [], []
    for i, (part, ss) in enumerate(zip(parts, split_ss.spawn(k + q))):
        if i < k:
            clients.append(split_client(part, cfg, np.random.default_rng(ss)))
        else:
            none = np.empty(0, np.int64)
            unseen.append(ClientSplit(train=none, val=none, test=part))
    sizes = np.array([len(p) for p in parts], dtype=np.int64)
    n = _num_labels(dataset)
    meta = {
        "num_unseen_clients": q, "assigned_samples": int(sizes.sum()), "dropped_samples": int(n - sizes.sum()),
        "missing_level_samples": int((group < 0).sum()),
        "min_client_samples": int(sizes[:k].min()), "max_client_samples": int(sizes[:k].max()),
        "meta_columns": columns, "meta_assign": str(cfg.assign), "num_candidate_distributions": len(names),
        "distributions": names,
    }
    return Partition(clients=clients, unseen=unseen, distribution=which.astype(np.int64),
                     unseen_distribution=unseen_which.astype(np.int64), meta=meta)
