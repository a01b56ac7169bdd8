"""Partition protocols: how the training pool is dealt to clients, and each client's local splits.

Every protocol is a pure function ``fn(labels, cfg, rng) -> list[np.ndarray]`` of the pool's labels, a
:class:`~flplat.config.PartitionConfig` and a ``numpy.random.Generator``; it returns one sorted ``int64`` index
array per client, the arrays pairwise disjoint. The registry :data:`PARTITIONS` maps ``partition.name`` to them.

Protocols (Clust-PSI-PFL §IV-A-b, following the authors' code as recorded in SEED-NOTES.md):

* ``iid`` -- shuffle all indices and deal them evenly (``np.array_split``: sizes differ by at most one).
* ``dirichlet`` -- the FedArtML / NIID-Bench label-skew protocol. For each class (in label order) draw
  ``p ~ Dir(alpha * 1_K)``; a client already holding ``>= N/K`` samples gets probability 0 for this and further
  classes (``p`` renormalised); the class's shuffled indices are cut at ``floor(cumsum(p) * n_c)``. Everything
  is redrawn while the smallest client holds fewer than ``partition.min_samples`` samples. Unlike the original
  code (which loops forever when that is infeasible) we draw at most ``1 + partition.max_retries`` times and then
  raise :class:`InfeasiblePartitionError`; ``num_clients * min_samples > N`` fails before any draw.
* ``shift`` -- Flux's four shift types x 8 levels with unseen test clients; it transforms the data as well, so
  :func:`build_federation` hands it to :func:`flplat.data.shift_partition.build_shift_federation` (its registry
  entry is the IID dealing step alone).
* ``similarity`` -- the Similarity(S) protocol: shuffle all indices; the IID part is the first ``round(S * N)``;
  the rest is stably sorted by label; client ``u`` gets ``iid[u*a:(u+1)*a]`` and ``niid[u*b:(u+1)*b]`` with
  ``a = |iid| // K`` and ``b = |niid| // K``. All clients have the same size and the leftovers (fewer than ``K``
  samples of each part) are dropped, as in the authors' code. ``round`` is Python's (half to even).
* ``cafa`` -- CAFA's extreme non-IID setting (CAFA §IV-B, Tables II-III): the first ``round(iid_fraction * K)``
  clients are IID (:func:`cafa_iid_flags`), the others each hold ``m_k`` classes drawn uniformly without
  replacement, ``m_k`` uniform in ``ceil(class_fraction_min * C) .. floor(class_fraction_max * C)`` (20-40% of
  the classes by default, i.e. 2-4 of 10), with equal shares of those classes. Client sizes are random: ``u_k``
  uniform in ``[size_min, size_max]``, sizes proportional to ``u_k`` (equal sizes, the authors' code, with
  ``size_min = size_max``). An IID client asks ``n_k * p_c`` samples of class c (``p`` = the pool's class pmf).
  The absolute scale is the largest one that every class's supply can meet (at most ``N / K`` per unit of
  ``u``), so the demand of the concentrated non-IID clients never exceeds a class; leftovers are dropped. The
  true IID flags go to ``FederatedData.meta["iid"]`` (CBCC's detection metrics).
* ``natural`` -- keeps the dataset's natural clients (``Dataset.client_ids``), and ``metadata`` -- planted
  distributions = level combinations of metadata columns (Flux's CheXpert non-IID levels and Office-Home domains,
  App. B.1, F.4); both need the dataset, not the labels alone: :mod:`flplat.data.group_partitions`.

:func:`split_client` cuts one client's data into local train / validation / test splits and
:func:`build_federation` puts it all together from a :class:`~flplat.data.containers.Dataset` and a seed, with
independent random streams for the partition and for each client's split (``SeedSequence.spawn``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from flplat.data.containers import Dataset, FederatedData
from flplat.data.splits import InfeasiblePartitionError, as_labels, split_client
from flplat.errors import ConfigError
from flplat.protocol.registry import add

__all__ = ["PARTITIONS", "InfeasiblePartitionError", "build_federation", "partition", "register_partition",
           "split_client"]

PartitionFn = Callable[[np.ndarray, Any, np.random.Generator], list[np.ndarray]]


def _finish(parts: list[np.ndarray] | list[list[int]]) -> list[np.ndarray]:
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def iid(labels: np.ndarray, cfg: Any, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffle all indices and deal them evenly to ``cfg.num_clients`` clients (sizes differ by at most 1)."""
    n = len(labels)
    return _finish(np.array_split(rng.permutation(n), int(cfg.num_clients)))


def _infeasible(cfg: Any, n: int, detail: str, hint: str = "") -> InfeasiblePartitionError:
    return InfeasiblePartitionError(
        f"partition.name='dirichlet' is infeasible: {detail} (N={n} samples, partition.alpha={cfg.alpha}, "
        f"partition.num_clients={cfg.num_clients}, partition.min_samples={cfg.min_samples}); "
        f"raise partition.alpha, lower partition.num_clients or lower partition.min_samples{hint}"
    )


def dirichlet(labels: np.ndarray, cfg: Any, rng: np.random.Generator) -> list[np.ndarray]:
    """Dirichlet(alpha) label skew, FedArtML style (see the module docstring).

    Draws at most ``1 + cfg.max_retries`` times; raises :class:`InfeasiblePartitionError` when no draw gives every
    client at least ``cfg.min_samples`` samples, or at once when ``num_clients * min_samples > N``.
    """
    labels = as_labels(labels)
    n, k = len(labels), int(cfg.num_clients)
    alpha, min_samples, max_retries = float(cfg.alpha), int(cfg.min_samples), int(cfg.max_retries)
    if k * min_samples > n:
        raise _infeasible(cfg, n, f"num_clients * min_samples = {k * min_samples} exceeds the pool")
    classes = np.unique(labels)
    by_class = [np.flatnonzero(labels == c) for c in classes]
    cap = n / k
    best = 0
    for _ in range(1 + max_retries):
        parts: list[list[np.ndarray]] = [[] for _ in range(k)]
        sizes = np.zeros(k, dtype=np.int64)
        for idx_c in by_class:
            idx_c = rng.permutation(idx_c)
            p = rng.dirichlet(np.full(k, alpha))
            p = np.where(sizes < cap, p, 0.0)
            total = p.sum()
            # Cannot be all-zero in exact arithmetic (some client is below N/K while classes remain), but a tiny
            # alpha can underflow every open entry to 0: spread the class uniformly over the open clients then.
            p = p / total if total > 0 else (sizes < cap) / max(int((sizes < cap).sum()), 1)
            cuts = (np.cumsum(p) * len(idx_c)).astype(np.int64)[:-1]
            for j, chunk in enumerate(np.split(idx_c, cuts)):
                if len(chunk):
                    parts[j].append(chunk)
                    sizes[j] += len(chunk)
        smallest = int(sizes.min())
        if smallest >= min_samples:
            return _finish([np.concatenate(p) if p else np.empty(0, np.int64) for p in parts])
        best = max(best, smallest)
    raise _infeasible(
        cfg, n, f"in {1 + max_retries} draws the smallest client never reached min_samples (best draw: {best})",
        hint=f" (or raise partition.max_retries={max_retries})",
    )


def similarity(labels: np.ndarray, cfg: Any, rng: np.random.Generator) -> list[np.ndarray]:
    """Similarity(S): ``round(S*N)`` samples IID, the rest sorted by label; equal sizes, leftovers dropped."""
    labels = as_labels(labels)
    n, k, s = len(labels), int(cfg.num_clients), float(cfg.similarity)
    perm = rng.permutation(n)
    n_iid = round(s * n)
    iid_part = perm[:n_iid]
    rest = perm[n_iid:]
    niid_part = rest[np.argsort(labels[rest], kind="stable")]
    a, b = len(iid_part) // k, len(niid_part) // k
    if a + b == 0:
        raise ConfigError(
            f"partition.name='similarity' would give every client 0 samples (N={n}, partition.similarity={s}, "
            f"partition.num_clients={k}); lower partition.num_clients"
        )
    return _finish([np.concatenate([iid_part[u * a:(u + 1) * a], niid_part[u * b:(u + 1) * b]]) for u in range(k)])


def cafa_iid_flags(num_clients: int, iid_fraction: float) -> np.ndarray:
    """``(K,)`` booleans: which clients of the ``cafa`` partition are IID (the first ``round(f * K)``)."""
    flags = np.zeros(int(num_clients), dtype=bool)
    flags[:round(float(iid_fraction) * int(num_clients))] = True
    return flags


def cafa(labels: np.ndarray, cfg: Any, rng: np.random.Generator) -> list[np.ndarray]:
    """CAFA's partition: a share of IID clients, the rest holding 20-40% of the classes (module docstring)."""
    labels = as_labels(labels)
    n, k = len(labels), int(cfg.num_clients)
    classes = np.unique(labels)
    c = len(classes)
    lo, hi = math.ceil(float(cfg.class_fraction_min) * c - 1e-9), math.floor(float(cfg.class_fraction_max) * c + 1e-9)
    lo, hi = max(lo, 1), min(hi, c)
    if lo > hi:
        raise ConfigError(f"partition.class_fraction_min={cfg.class_fraction_min} / class_fraction_max="
                          f"{cfg.class_fraction_max} select no whole number of the {c} classes; widen the bounds")
    iid_flags = cafa_iid_flags(k, cfg.iid_fraction)
    by_class = [rng.permutation(np.flatnonzero(labels == cl)) for cl in classes]
    supply = np.array([len(b) for b in by_class], dtype=np.float64)
    u = rng.uniform(float(cfg.size_min), float(cfg.size_max), size=k)
    share = np.zeros((k, c))  # share[j, c]: fraction of client j's data from class c
    share[iid_flags] = supply / n
    for j in np.flatnonzero(~iid_flags):
        held = rng.choice(c, size=int(rng.integers(lo, hi + 1)), replace=False)
        share[j, held] = 1.0 / len(held)
    demand = u[:, None] * share  # per unit of scale
    scale = min(n / k, float(np.min(supply / np.maximum(demand.sum(axis=0), 1e-12))))
    counts = np.floor(demand * scale).astype(np.int64)
    if counts.sum(axis=1).min() < int(cfg.min_samples):
        raise InfeasiblePartitionError(
            f"partition.name='cafa' is infeasible: a client gets {int(counts.sum(axis=1).min())} < partition."
            f"min_samples={cfg.min_samples} samples (N={n}, partition.num_clients={k}); lower partition.num_clients, "
            "narrow partition.size_min..size_max or lower partition.min_samples")
    offsets = np.zeros(c, dtype=np.int64)
    parts = []
    for j in range(k):
        chunks = []
        for cl in range(c):
            chunks.append(by_class[cl][offsets[cl]:offsets[cl] + counts[j, cl]])
            offsets[cl] += counts[j, cl]
        parts.append(np.concatenate(chunks))
    return _finish(parts)


def _shift(labels: np.ndarray, cfg: Any, rng: np.random.Generator) -> list[np.ndarray]:
    from flplat.data.shift_partition import deal_for_registry

    return deal_for_registry(labels, cfg, rng)


def _needs_dataset(labels: np.ndarray, cfg: Any, rng: np.random.Generator) -> list[np.ndarray]:
    raise ConfigError(f"partition.name={cfg.name!r} builds clients from the images, not the labels alone; "
                      "use build_federation")


#: protocols that never read the labels (the ones multi-label data can use)
LABEL_FREE_PARTITIONS = ("iid", "natural", "metadata")

#: protocols that need the whole dataset (features, test set), not only the labels; see build_federation
DATASET_PARTITIONS = ("pqfed",)

def _needs_groups(labels: np.ndarray, cfg: Any, rng: np.random.Generator) -> list[np.ndarray]:
    from flplat.data.group_partitions import needs_groups

    return needs_groups(labels, cfg, rng)


PARTITIONS: dict[str, PartitionFn] = {"iid": iid, "dirichlet": dirichlet, "similarity": similarity,
                                      "cafa": cafa, "shift": _shift,
                                      "pqfed": _needs_dataset, "natural": _needs_groups, "metadata": _needs_groups}


def register_partition(name: str) -> Callable[[PartitionFn], PartitionFn]:
    """Decorator: register a protocol ``fn(labels, cfg, rng) -> list[np.ndarray]`` under ``name`` in
    :data:`PARTITIONS` (``partition.name=NAME``).

    ``labels`` is the training pool's ``(N,)`` int64 labels, ``cfg`` the :class:`~flplat.config.PartitionConfig`
    (``cfg.num_clients`` clients; the existing ``partition.*`` keys, e.g. ``alpha``, are the parameters a protocol
    can read), ``rng`` a ``numpy.random.Generator`` (the partition's own stream, seeded from the run's seed). It
    returns one index array per client into the pool, pairwise disjoint; samples left out are dropped. Each
    client's train / val / test split is then cut by :func:`split_client`, as for the built-in protocols."""

    def deco(fn: PartitionFn) -> PartitionFn:
        add("partition", PARTITIONS, name, fn, getattr(fn, "__module__", None))
        return fn

    return deco


def partition(labels: np.ndarray, cfg: Any, rng: np.random.Generator) -> list[np.ndarray]:
    """Dispatch on ``cfg.name``; checks that there are at least as many samples as clients."""
    labels = as_labels(labels)
    name = cfg.name
    if name not in PARTITIONS:
        raise ConfigError(f"partition.name={name!r} is not valid; choose one of: {', '.join(sorted(PARTITIONS))}")
    k, n = int(cfg.num_clients), len(labels)
    if k < 1:
        raise ConfigError(f"partition.num_clients={k} is out of range; allowed: an integer >= 1")
    if k > n:
        raise ConfigError(f"partition.num_clients={k} exceeds the {n} training samples; lower partition.num_clients")
    return _finish(PARTITIONS[name](labels, cfg, rng))  # sorted int64, whoever registered the protocol


def build_federation(dataset: Dataset, cfg: Any, seed: int) -> FederatedData:
    """Partition ``dataset``'s training pool with ``cfg`` and split every client; deterministic in ``seed``.

    The partition and the splits use independent streams spawned from ``SeedSequence(seed)`` (one per client for
    the splits), so changing the split fractions never changes which samples a client holds. The official test
    set (possibly ``None``) becomes the pooled global test set.
    """
    if cfg.name == "shift" and dataset.multilabel:
        raise ConfigError(f"partition.name='shift' needs one class per sample, but data.name={dataset.name!r} is "
                          f"multi-label; allowed: {', '.join(LABEL_FREE_PARTITIONS)}")
    if cfg.name == "shift":  # Flux's shift generators transform the data too (flplat/data/shift_partition.py)
        from flplat.data.shift_partition import build_shift_federation

        return build_shift_federation(dataset, cfg, seed)
    if cfg.name in ("natural", "metadata"):  # the dataset's own clients / metadata (flplat/data/group_partitions.py)
        from flplat.data.group_partitions import build_group_federation

        return build_group_federation(dataset, cfg, seed)
    part_ss, split_ss = np.random.SeedSequence(int(seed)).spawn(2)
    if dataset.multilabel:  # no single class per sample: only the label-free protocols apply
        if cfg.name not in LABEL_FREE_PARTITIONS:
            raise ConfigError(f"partition.name={cfg.name!r} deals samples by their class, but data.name="
                              f"{dataset.name!r} is multi-label; allowed: {', '.join(LABEL_FREE_PARTITIONS)}")
        labels = np.zeros(len(dataset.y_train), dtype=np.int64)
    else:
        labels = as_labels(dataset.y_train)
    fixed, public, extra = {}, None, {}
    if cfg.name in DATASET_PARTITIONS:  # PQFed's construction (flplat/data/pqfed_partition.py)
        from flplat.data.pqfed_partition import pqfed_partition

        res = pqfed_partition(dataset, cfg, np.random.default_rng(part_ss))
        parts, fixed, public, extra = res.parts, res.fixed_splits, res.public_indices, res.meta
    else:
        parts = partition(labels, cfg, np.random.default_rng(part_ss))
    clients = [fixed[k] if k in fixed else split_client(p, cfg, np.random.default_rng(s))
               for k, (p, s) in enumerate(zip(parts, split_ss.spawn(len(parts))))]
    sizes = np.array([len(p) for p in parts], dtype=np.int64)
    meta: dict[str, Any] = {
        "partition": cfg.name,
        "num_clients": int(cfg.num_clients),
        "seed": int(seed),
        "pool_samples": len(labels),
        "assigned_samples": int(sizes.sum()),
        "dropped_samples": int(len(labels) - sizes.sum()),
        "min_client_samples": int(sizes.min()),
        "max_client_samples": int(sizes.max()),
    }
    if cfg.name == "dirichlet":
        meta["alpha"] = float(cfg.alpha)
    elif cfg.name == "similarity":
        meta["similarity"] = float(cfg.similarity)
    elif cfg.name == "cafa":
        meta["iid_fraction"] = float(cfg.iid_fraction)
        meta["iid"] = cafa_iid_flags(int(cfg.num_clients), cfg.iid_fraction)
    meta.update(extra)
    return FederatedData(
        x=dataset.x_train,
        y=dataset.y_train,
        num_classes=int(dataset.num_classes),
        clients=clients,
        x_global_test=dataset.x_test,
        y_global_test=dataset.y_test,
        meta=meta,
        public_indices=public,
    )
