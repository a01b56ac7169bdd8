"""In-memory data containers shared by datasets, partitions and the orchestrator."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class Dataset:
    """A whole dataset held in memory as tensors.

    ``x_train``/``y_train`` form the pool that partitions deal to clients; ``x_test``/``y_test`` is the official
    test set when the dataset has one (used as the pooled global test set), else ``None``.
    """

    name: str
    x_train: torch.Tensor  # float32, (N, *input_shape); int64 token ids (N, L) for text (see ``vocab``)
    y_train: torch.Tensor  # int64, (N,)
    num_classes: int
    x_test: torch.Tensor | None = None
    y_test: torch.Tensor | None = None
    class_names: list[str] | None = None
    # Naturally federated data (optional). ``client_ids[i]`` is the natural client (writer, user, site) of pool
    # sample ``i`` and ``client_ids_test`` the same for the official test set; a ``natural`` partition keeps them.
    client_ids: np.ndarray | None = None  # int64, (N,)
    client_ids_test: np.ndarray | None = None  # int64, (N_test,)
    # Per-sample metadata columns of the pool (e.g. ``domain``, ``sex``, ``age``, ``view``), int64 (N,) each, from
    # which metadata/domain partitions plant their distributions; ``meta_test`` the same for the test set.
    meta: dict[str, np.ndarray] | None = None
    meta_test: dict[str, np.ndarray] | None = None
    # Multi-label data: ``y`` is float32 (N, num_classes) of 0/1 targets instead of int64 (N,) class indices.
    multilabel: bool = False
    # Text data: ``x`` is int64 token ids (N, L) and ``vocab[i]`` the word of id ``i`` (0: padding, 1: unknown), so
    # ``len(vocab)`` is the embedding size a model needs (flplat/data/text.py); None for every other dataset.
    vocab: list[str] | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


@dataclass
class ClientSplit:
    """Indices (into the partitioned pool) of one client's local train / validation / test splits."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray

    def all(self) -> np.ndarray:
        return np.concatenate([self.train, self.val, self.test])


@dataclass
class Drift:
    """Training clients whose data change at known rounds (Flux App. D.3's dynamic setting): stage 0 holds from round
    1, stage s >= 1 from round ``rounds[s - 1]`` on; ``stages[s][k]`` is training client k's splits in stage s (indices
    into the partition's pool) and ``distribution[s, k]`` its planted distribution id then (None: not planted).
    Every stage has one entry per training client; the unseen clients do not drift."""

    rounds: list[int]  # the change points, ascending, each >= 2
    stages: list[list[ClientSplit]]  # len(rounds) + 1 stages
    distribution: np.ndarray | None = None  # (len(stages), num_clients) int64

    def stage(self, round: int) -> int:
        """The stage in force in ``round`` (rounds count from 1)."""
        return bisect_right(self.rounds, int(round))


@dataclass
class Partition:
    """What a partition protocol returns (``fn(dataset, cfg, seed) -> Partition``; see :mod:`flplat.data.registry`);
    :func:`flplat.data.partitions.build_federation` cuts and assembles the :class:`FederatedData` from it.

    ``clients`` has one entry per training client: the sorted ``int64`` indices of its samples in the pool (the
    builder cuts them into local train / val / test by the ``partition.*_fraction`` keys, with a random stream of its
    own per client), or a :class:`ClientSplit` when the protocol fixes the client's splits itself. Clients never
    share a sample. ``x`` / ``y`` replace the dataset's pool when the protocol builds a new one (shifted copies,
    the pool and the official test set together); the indices then refer to it. ``global_test=False`` drops the
    official test set as the pooled global test set (it belongs to none of the planted distributions).
    ``distribution`` / ``unseen_distribution``: the planted distribution id of each training / unseen client
    (a protocol registered with ``plants=True`` gives them); ``meta``: anything else worth keeping. ``drift``: the
    training clients' data change at known rounds (:class:`Drift`; its stage 0 is ``clients`` and ``distribution``).
    """

    clients: list
    unseen: list[ClientSplit] = field(default_factory=list)  # test-only clients (Flux's test phase)
    x: torch.Tensor | None = None
    y: torch.Tensor | None = None
    global_test: bool = True
    public_indices: np.ndarray | None = None  # rows of the global test set forming a public sample (PQFed)
    distribution: np.ndarray | None = None
    unseen_distribution: np.ndarray | None = None
    meta: dict = field(default_factory=dict)
    drift: Drift | None = None


@dataclass
class FederatedData:
    """The partitioned federation: one pool of tensors plus each client's index splits.

    Clients never hold copies: a client's batch is ``x[idx]`` on the pooled tensor, so the hot path needs no
    DataLoader. ``x_global_test`` is the pooled global test set (the official test set) when there is one.

    ``unseen`` are test-only clients (Flux's test phase): they never train and their labels are never shown to a
    method; they take the ids ``num_clients .. num_clients + len(unseen) - 1`` in :meth:`indices`, so the
    executor's ``evaluate``/``compute`` work for them unchanged, while ``num_clients`` (and everything that loops
    over training clients) counts the training clients only.

    ``drift`` (a partition's :class:`Drift`): the training clients' data change at known rounds. The orchestrator
    calls :meth:`enter_round` before each round, which puts the stage in force in ``clients`` and its planted ids in
    ``meta["distribution"]``; everything that reads a client's data then reads its current stage. All stages' samples
    live in the one pool, so a change swaps index arrays only.
    """

    x: torch.Tensor
    y: torch.Tensor
    num_classes: int
    clients: list[ClientSplit]
    x_global_test: torch.Tensor | None = None
    y_global_test: torch.Tensor | None = None
    meta: dict = field(default_factory=dict)
    public_indices: np.ndarray | None = None  # rows of the global test set forming a public sample (PQFed)
    unseen: list[ClientSplit] = field(default_factory=list)
    drift: Drift | None = None
    stage: int = 0  # the drift stage ``clients`` holds

    def enter_round(self, round: int) -> bool:
        """Put the drift stage in force in ``round`` in place (its clients' splits, its planted ids); True when the
        clients' data changed. Without a drift: nothing, False."""
        if self.drift is None:
            return False
        s = self.drift.stage(round)
        if s == self.stage:
            return False
        self.clients = list(self.drift.stages[s])
        if self.drift.distribution is not None:
            self.meta["distribution"] = np.asarray(self.drift.distribution[s], dtype=np.int64)
        self.stage = s
        return True

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])

    def indices(self, client: int, split: str) -> np.ndarray:
        """Pool indices of a client's ``train`` | ``val`` | ``test`` split, or ``all`` of its data."""
        c = self.clients[client] if client < len(self.clients) else self.unseen[client - len(self.clients)]
        return c.all() if split == "all" else getattr(c, split)

    @property
    def multilabel(self) -> bool:
        """Multi-label data (``Dataset.multilabel``): ``y`` is float (N, C) of 0/1 instead of class indices (N,)."""
        return self.y.dim() == 2

    @property
    def unseen_ids(self) -> list[int]:
        """Client ids of the unseen (test-only) clients."""
        return list(range(self.num_clients, self.num_clients + len(self.unseen)))

    def _split_indices(self, split: str) -> list[np.ndarray]:
        """Every training client's ``split`` indices (without a method call per client: 10,000 clients)."""
        if split == "all":
            return [self.indices(k, split) for k in range(self.num_clients)]
        return [getattr(c, split) for c in self.clients]

    def num_samples(self, split: str = "train") -> np.ndarray:
        return np.fromiter(map(len, self._split_indices(split)), dtype=np.int64, count=self.num_clients)

    def label_counts(self, split: str = "train") -> np.ndarray:
        """(K, C) matrix of per-client label counts on a split (what clients report to the server); one
        ``bincount`` over (client, label) cells, not one per client (10,000 clients). Multi-label data: the number
        of a client's samples positive for each label."""
        y = self.y.numpy() if isinstance(self.y, torch.Tensor) else np.asarray(self.y)
        parts = self._split_indices(split)
        sizes = np.fromiter(map(len, parts), dtype=np.int64, count=self.num_clients)
        if not sizes.sum():
            return np.zeros((self.num_clients, self.num_classes), dtype=np.int64)
        owner = np.repeat(np.arange(self.num_clients, dtype=np.int64), sizes)
        if y.ndim == 2:  # multi-label: per client, the number of samples positive for each label
            out = np.zeros((self.num_clients, self.num_classes), dtype=np.int64)
            np.add.at(out, owner, (y[np.concatenate(parts)] > 0.5).astype(np.int64))
            return out
        cells = owner * self.num_classes + y[np.concatenate(parts)].astype(np.int64)
        return np.bincount(cells, minlength=self.num_clients * self.num_classes).reshape(self.num_clients, -1)
