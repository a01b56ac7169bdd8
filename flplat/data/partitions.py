"""The label partition protocols, and the federation builder every partition goes through.

Every partition is an entry of :data:`~flplat.data.registry.PARTITIONS` (:mod:`flplat.data.registry`: its keys, its
``fn(dataset, cfg, seed) -> Partition``); :func:`build_federation` runs the chosen one and only cuts each client's
local splits and assembles the :class:`~flplat.data.containers.FederatedData`. The protocols that need the whole
dataset live in their own modules: ``shift`` (:mod:`flplat.data.shift_partition`, Flux's shift generators),
``pqfed`` (:mod:`flplat.data.pqfed_partition`), ``natural`` and ``metadata`` (:mod:`flplat.data.group_partitions`).
The four here read the pool's labels only (``takes="labels"``): pure functions ``fn(labels, cfg, rng)`` of the
labels, their ``partition.*`` keys and a ``numpy.random.Generator``, returning one sorted ``int64`` index array per
client, pairwise disjoint; :func:`partition` runs one on labels alone.

Protocols (Clust-PSI-PFL §IV-A-b, following the authors' public code):

* ``iid`` -- shuffle all indices and deal them evenly (``np.array_split``: sizes differ by at most one).
* ``dirichlet`` -- the FedArtML / NIID-Bench label-skew protocol. For each class (in label order) draw
  ``p ~ Dir(alpha * 1_K)``; a client already holding ``>= N/K`` samples gets probability 0 for this and further
  classes (``p`` renormalised); the class's shuffled indices are cut at ``floor(cumsum(p) * n_c)``. Everything
  is redrawn while the smallest client holds fewer than ``partition.min_samples`` samples. Unlike the original
  code (which loops forever when that is infeasible) we draw at most ``1 + partition.max_retries`` times and then
  raise :class:`InfeasiblePartitionError`; ``num_clients * min_samples > N`` fails before any draw.
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

:func:`build_federation` puts it all together from a :class:`~flplat.data.containers.Dataset` and a seed, with
independent random streams for the partition (``SeedSequence(seed).spawn(2)[0]`` for a label protocol; a protocol
of the dataset spawns its own from the seed) and for each client's split (``SeedSequence(seed).spawn(2)[1]``,
one child per client, :func:`split_client`), so changing the split fractions never changes which samples a client
holds. The official test set (possibly ``None``) becomes the pooled global test set unless the protocol drops it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from flplat.data.containers import ClientSplit, Dataset, Drift, FederatedData, Partition
from flplat.data.registry import PARTITIONS, load_builtins, partition_config, register_partition
from flplat.data.splits import InfeasiblePartitionError, as_labels, run_label_protocol, split_client
from flplat.errors import ConfigError, check_range

__all__ = ["PARTITIONS", "InfeasiblePartitionError", "assemble", "build_federation", "partition", "register_partition",
           "split_client"]


@dataclass
class DirichletConfig:
    """``dirichlet``: Dir(alpha) label skew, redrawn while a client holds fewer than ``min_samples``."""

    alpha: float = 0.3  # concentration
    min_samples: int = 10  # redraw while a client holds fewer samples
    max_retries: int = 100  # give up (with an error) after this many redraws

    def check(self) -> None:
        check_range(self.alpha > 0 and math.isfinite(self.alpha), "partition.alpha", self.alpha, "a finite number > 0")
        check_range(self.min_samples >= 1, "partition.min_samples", self.min_samples, "an integer >= 1")
        check_range(self.max_retries >= 1, "partition.max_retries", self.max_retries, "an integer >= 1")


@dataclass
class SimilarityConfig:
    """``similarity``: S, the IID share of the data."""

    similarity: float = 0.5

    def check(self) -> None:
        check_range(0.0 <= self.similarity <= 1.0, "partition.similarity", self.similarity, "a number in [0, 1]")


@dataclass
class CAFAConfig:
    """``cafa`` (CAFA §IV-B): share of IID clients; classes per non-IID client; relative client sizes."""

    iid_fraction: float = 0.5
    class_fraction_min: float = 0.2
    class_fraction_max: float = 0.4
    size_min: float = 0.5
    size_max: float = 1.0
    min_samples: int = 10  # a client with fewer samples is an error

    def check(self) -> None:
        check_range(0.0 <= self.iid_fraction <= 1.0, "partition.iid_fraction", self.iid_fraction, "a number in [0, 1]")
        check_range(0.0 < self.class_fraction_min <= 1.0, "partition.class_fraction_min", self.class_fraction_min,
                    "a number in (0, 1]")
        check_range(self.class_fraction_min <= self.class_fraction_max <= 1.0, "partition.class_fraction_max",
                    self.class_fraction_max, "a number in [partition.class_fraction_min, 1]")
        check_range(self.size_min > 0 and math.isfinite(self.size_min), "partition.size_min", self.size_min,
                    "a finite number > 0")
        check_range(self.size_min <= self.size_max and math.isfinite(self.size_max), "partition.size_max",
                    self.size_max, "a finite number >= partition.size_min")
        check_range(self.min_samples >= 1, "partition.min_samples", self.min_samples, "an integer >= 1")


@register_partition("iid", takes="labels", multilabel=True)
def iid(labels: np.ndarray, cfg: Any, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffle all indices and deal them evenly to ``cfg.num_clients`` clients (sizes differ by at most 1)."""
    n = len(labels)
    return np.array_split(rng.permutation(n), int(cfg.num_clients))


def _infeasible(cfg: Any, n: int, detail: str, hint: str = "") -> InfeasiblePartitionError:
    return InfeasiblePartitionError(
        f"partition.name='dirichlet' is infeasible: {detail} (N={n} samples, partition.alpha={cfg.alpha}, "
        f"partition.num_clients={cfg.num_clients}, partition.min_samples={cfg.min_samples}); "
        f"raise partition.alpha, lower partition.num_clients or lower partition.min_samples{hint}"
    )


@register_partition("dirichlet", DirichletConfig, takes="labels")
def dirichlet(labels: np.ndarray, cfg: Any, rng: np.random.Generator) -> Partition:
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
            return Partition(clients=[np.concatenate(p) if p else np.empty(0, np.int64) for p in parts],
                             meta={"alpha": alpha})
        best = max(best, smallest)
    raise _infeasible(
        cfg, n, f"in {1 + max_retries} draws the smallest client never reached min_samples (best draw: {best})",
        hint=f" (or raise partition.max_retries={max_retries})",
    )


@register_partition("similarity", SimilarityConfig, takes="labels")
def similarity(labels: np.ndarray, cfg: Any, rng: np.random.Generator) -> Partition:
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
    return Partition(clients=[np.concatenate([iid_part[u * a:(u + 1) * a], niid_part[u * b:(u + 1) * b]])
                              for u in range(k)], meta={"similarity": s})


def cafa_iid_flags(num_clients: int, iid_fraction: float) -> np.ndarray:
    """``(K,)`` booleans: which clients of the ``cafa`` partition are IID (the first ``round(f * K)``)."""
    flags = np.zeros(int(num_clients), dtype=bool)
    flags[:round(float(iid_fraction) * int(num_clients))] = True
    return flags


@register_partition("cafa", CAFAConfig, takes="labels")
def cafa(labels: np.ndarray, cfg: Any, rng: np.random.Generator) -> Partition:
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
    return Partition(clients=parts, meta={"iid_fraction": float(cfg.iid_fraction), "iid": iid_flags})


def partition(labels: np.ndarray, cfg: Any, rng: np.random.Generator) -> list[np.ndarray]:
    """Run the label protocol ``cfg.name`` on ``labels`` alone: one sorted ``int64`` index array per client
    (``cfg``: a validated section, a mapping or :func:`~flplat.data.registry.partition_config`'s object)."""
    cfg = partition_config(cfg)
    spec = PARTITIONS[cfg.name]
    if spec.labels is None:
        raise ConfigError(f"partition.name={cfg.name!r} builds clients from the dataset, not the labels alone; "
                          "use build_federation")
    return run_label_protocol(spec.labels, as_labels(labels), cfg, rng).clients


def _multilabel_partitions() -> str:
    return ", ".join(sorted(n for n, s in PARTITIONS.items() if s.multilabel))


def build_federation(dataset: Dataset, cfg: Any, seed: int) -> FederatedData:
    """Partition ``dataset`` with the protocol ``cfg.name`` and cut every client's local splits; deterministic in
    ``seed``. ``cfg``: the validated ``partition`` section (or a mapping / object with its keys)."""
    cfg = partition_config(cfg)
    spec = PARTITIONS[cfg.name]
    if dataset.multilabel and not spec.multilabel:
        raise ConfigError(f"partition.name={cfg.name!r} needs one class per sample, but data.name={dataset.name!r} "
                          f"is multi-label; allowed: {_multilabel_partitions()}")
    part = spec.build(dataset, cfg, int(seed))
    if not isinstance(part, Partition):
        raise TypeError(f"partition {cfg.name!r} returned {type(part).__name__}, not a Partition "
                        "(flplat.api.Partition; see flplat/data/registry.py)")
    return assemble(dataset, cfg, int(seed), part)


def assemble(dataset: Dataset, cfg: Any, seed: int, part: Partition) -> FederatedData:
    """The federation of a protocol's :class:`Partition`: index arrays cut into local splits (one stream per client
    from ``SeedSequence(seed).spawn(2)[1]``), fixed splits kept, the pool and the global test set chosen."""
    split_ss = np.random.SeedSequence(int(seed)).spawn(2)[1]
    clients = [c if isinstance(c, ClientSplit) else split_client(c, cfg, np.random.default_rng(ss))
               for c, ss in zip(part.clients, split_ss.spawn(len(part.clients)))]
    sizes = np.array([len(c.all()) if isinstance(c, ClientSplit) else len(c) for c in part.clients], dtype=np.int64)
    n = len(dataset.y_train)
    meta: dict[str, Any] = {
        "partition": cfg.name, "num_clients": len(clients), "seed": int(seed), "pool_samples": n,
        "assigned_samples": int(sizes.sum()), "dropped_samples": int(n - sizes.sum()),
        "min_client_samples": int(sizes.min()) if len(sizes) else 0,
        "max_client_samples": int(sizes.max()) if len(sizes) else 0,
    }
    if part.distribution is not None:
        meta["distribution"] = np.asarray(part.distribution, dtype=np.int64)
        meta["num_distributions"] = int(len(np.unique(meta["distribution"])))
    if part.unseen_distribution is not None:
        meta["unseen_distribution"] = np.asarray(part.unseen_distribution, dtype=np.int64)
    if part.unseen:
        meta["num_unseen_clients"] = len(part.unseen)
    drift = _drift(part, clients)
    if drift is not None:
        meta["drift_rounds"] = list(drift.rounds)
        if drift.distribution is not None:  # M: every distribution the training clients hold in some stage
            meta["num_distributions"] = int(len(np.unique(drift.distribution)))
    meta.update(part.meta)
    own_pool = part.x is not None
    return FederatedData(
        x=part.x if own_pool else dataset.x_train, y=part.y if own_pool else dataset.y_train,
        num_classes=int(dataset.num_classes), clients=clients,
        x_global_test=dataset.x_test if part.global_test else None,
        y_global_test=dataset.y_test if part.global_test else None,
        meta=meta, public_indices=part.public_indices, unseen=list(part.unseen), drift=drift,
    )


def _drift(part: Partition, clients: list[ClientSplit]) -> Drift | None:
    """The partition's :class:`Drift` with its stage 0 the clients as cut, checked (a broken one is the protocol's
    bug: TypeError naming what is wrong)."""
    d = part.drift
    if d is None:
        return None
    rounds = [int(r) for r in d.rounds]
    k = len(clients)
    if rounds != sorted(set(rounds)) or (rounds and rounds[0] < 2):
        raise TypeError(f"Partition.drift.rounds={rounds}: the change rounds must be distinct, ascending and >= 2")
    if len(d.stages) != len(rounds) + 1 or any(len(st) != k for st in d.stages):
        raise TypeError(f"Partition.drift: {len(rounds)} change rounds need {len(rounds) + 1} stages of {k} clients "
                        f"each, got {[len(st) for st in d.stages]}")
    if not all(isinstance(c, ClientSplit) for st in d.stages[1:] for c in st):
        raise TypeError("Partition.drift: the stages after the first must be ClientSplit (fixed splits)")
    dist = None
    if d.distribution is not None:
        dist = np.asarray(d.distribution, dtype=np.int64)
        if dist.shape != (len(d.stages), k):
            raise TypeError(f"Partition.drift.distribution has shape {dist.shape}, not ({len(d.stages)}, {k})")
    return Drift(rounds, [list(clients), *(list(st) for st in d.stages[1:])], dist)


load_builtins()  # every module of flplat.data registers its entries (importing this module is enough)
