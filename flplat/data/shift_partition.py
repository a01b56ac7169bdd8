"""Flux's shift generators (Fenoglio et al., App. B.1 and F.1 Table 9; the authors' public code where the paper is
open): ``partition.name=shift``, keys ``partition.type``, ``level``, ``num_unseen_clients``, ``samples_per_client``,
``label_bank_size``, ``train_copies`` (:class:`ShiftConfig`).

The pool is first dealt IID to ``num_clients`` training clients plus ``num_unseen_clients`` test-only clients
(``samples_per_client`` each, or the pool split evenly). A shift type defines a finite list of *distributions*
(transformations of (x, y)); every training client draws one, and every unseen client draws one of the
distributions the training clients use (so a cluster exists for it). The transformations are applied **once**,
here: the returned :class:`~flplat.data.containers.Partition` holds a new pool of transformed tensors, one block
per client, and nothing is transformed per batch. ``meta["distribution"]`` / ``meta["unseen_distribution"]``
record each client's true distribution id (ids are shared: equal transformations get equal ids).

Shift types (``partition.type``) and levels (``partition.level`` = the row of Table 9):

* ``feature`` — P(X): a client applies one (rotation, colour) pattern to all its images. Level l uses
  r = (2, 3, 4, 5, 2, 3, 4, 5)[l-1] rotations by i·360/r degrees (counter-clockwise) and, from level 5, the colours
  {red, blue, green}; M = r (levels 1–4) or 3r (levels 5–8). Colour: grey images are repeated to 3 channels and
  the chosen channel is set to the brightest value of the pool (the authors' code sets one RGB channel to 1).
  Multiples of 90° are exact (``torch.rot90``); other angles use bilinear resampling, the corners filled with
  each channel's background (its minimum) value.
* ``label`` — P(Y): a bank of ``label_bank_size`` (5) class sets of size C + 1 − l (11 − l for 10 classes), drawn
  once; a client keeps only the classes of its set, then each of its splits is resampled with replacement back to
  the size it had before the filtering (as the authors' code does). Resampling happens after the train/val/test
  split, so no image is in two splits of a client. M = bank size.
* ``concept_yx`` — P(Y|X): a swap pool of l classes is drawn once; each training client draws an independent
  random permutation of the pool and relabels its samples (y -> perm[y]). Clients with the same permutation share a
  distribution id. No test phase exists for this shift (labels are needed): ``meta["test_phase"]`` says so.
* ``concept_xy`` — P(X|Y): l classes are drawn once; each training client draws a rotation in {0, 90, 180, 270}
  for each of them and rotates the images of those classes; the other classes stay unrotated.

The building blocks are pure functions the other Flux partitions reuse: :func:`deal`, :func:`distributions`,
:func:`base_splits` (each client's rows before any transformation) and :func:`transform_clients` (those rows under
given distributions, as blocks of a new pool): ``mixed_shift`` (:mod:`flplat.data.mixed_shift_partition`, two shifts
together) and ``drift`` (:mod:`flplat.data.drift_partition`, a client's rows under a new distribution per stage).

The official test set is dropped (``x_global_test = None``): it belongs to none of the M distributions.
Unseen clients hold all their samples in their ``test`` split (train and val empty).

Scaling the number of clients (App. F.2): "to ensure sufficient training data per client, local datasets are
duplicated based on the number of clients" (×2 at 25 clients, ×4 at 50, ×8 at 100; the factor for 1,200 clients is
not stated). ``train_copies`` = c repeats each training client's train split c times — in index space, so the pool
does not grow. Only the train split is repeated: repeating the validation and test splits would leave every
accuracy unchanged (each sample counted c times) at c times the evaluation cost, and repeating before the split
would put copies of one image in a client's train and test splits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from flplat.data.containers import ClientSplit, Dataset, Partition
from flplat.data.registry import register_partition
from flplat.data.splits import as_labels, split_client
from flplat.errors import ConfigError, check_choice, check_range

SHIFT_TYPES = ("feature", "label", "concept_yx", "concept_xy")
FEATURE_ROTATIONS = (2, 3, 4, 5, 2, 3, 4, 5)  # Table 9, P(X) column: rotations per level
COLOURS = ("red", "blue", "green")
COLOUR_CHANNEL = {"red": 0, "blue": 2, "green": 1}


@dataclass
class ShiftConfig:
    """``shift`` (Flux App. B.1 / F.1 Table 9)."""

    type: str = "feature"  # feature (P(X)) | label (P(Y)) | concept_yx (P(Y|X)) | concept_xy (P(X|Y))
    level: int = 1  # 1..8, the rows of Table 9
    num_unseen_clients: int = 0  # extra test-only clients drawn from the training clients' distributions
    samples_per_client: int = 0  # samples dealt to each client (0: the pool split evenly)
    label_bank_size: int = 5  # type=label: number of class sets in the bank
    train_copies: int = 1  # each training client's train split repeated this many times (Flux App. F.2)

    def check(self) -> None:
        check_choice("partition.type", self.type, SHIFT_TYPES)
        check_range(1 <= self.level <= 8, "partition.level", self.level, "an integer in 1..8")
        check_range(self.num_unseen_clients >= 0, "partition.num_unseen_clients", self.num_unseen_clients,
                    "an integer >= 0")
        check_range(self.samples_per_client >= 0, "partition.samples_per_client", self.samples_per_client,
                    "an integer >= 0 (0: the pool split evenly)")
        check_range(self.label_bank_size >= 1, "partition.label_bank_size", self.label_bank_size, "an integer >= 1")
        check_range(self.train_copies >= 1, "partition.train_copies", self.train_copies, "an integer >= 1")


@dataclass(frozen=True)
class Distribution:
    """One underlying distribution: what a client applies to its (x, y)."""

    rotation: float = 0.0  # degrees, all images (feature shift)
    colour: str | None = None  # feature shift
    classes: tuple[int, ...] | None = None  # label shift: classes kept
    label_map: tuple[tuple[int, int], ...] = ()  # concept_yx: (from, to) pairs
    class_rotation: tuple[tuple[int, float], ...] = ()  # concept_xy: (class, degrees) pairs


def rotate(x: torch.Tensor, degrees: float) -> torch.Tensor:
    """Rotate images ``(N, C, H, W)`` counter-clockwise; exact for multiples of 90°, else bilinear with each
    channel's minimum (the background of standardised images) as fill."""
    k, rem = divmod(float(degrees) % 360.0, 90.0)
    if abs(rem) < 1e-9:
        return torch.rot90(x, int(k), dims=(2, 3)) if int(k) else x
    bg = x.amin(dim=(0, 2, 3), keepdim=True)
    a = math.radians(degrees)
    theta = torch.tensor([[math.cos(a), math.sin(a), 0.0], [-math.sin(a), math.cos(a), 0.0]], dtype=x.dtype)
    grid = F.affine_grid(theta.expand(len(x), 2, 3), list(x.shape), align_corners=False)
    return F.grid_sample(x - bg, grid, mode="bilinear", padding_mode="zeros", align_corners=False) + bg


def colourise(x: torch.Tensor, colour: str, bright: float) -> torch.Tensor:
    """Grey images repeated to 3 channels (RGB images kept), then the colour's channel set to ``bright``."""
    if x.shape[1] == 1:
        x = x.repeat(1, 3, 1, 1)
    x = x.clone()
    x[:, COLOUR_CHANNEL[colour]] = bright
    return x


def apply(dist: Distribution, x: torch.Tensor, y: torch.Tensor, bright: float, colour_images: bool
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """The transformed copy of one client's ``(x, y)`` under ``dist``."""
    if dist.rotation:
        x = rotate(x, dist.rotation)
    if colour_images:  # every client of a coloured level gets 3 channels
        x = colourise(x, dist.colour, bright)
    if dist.label_map:
        lut = torch.arange(int(y.max()) + 1 if len(y) else 1)
        for a, b in dist.label_map:
            if a < len(lut):
                lut[a] = b
        y = lut[y]
    if dist.class_rotation:
        x = x.clone()
        for c, deg in dist.class_rotation:
            sel = y == c
            if deg and sel.any():
                x[sel] = rotate(x[sel], deg)
    return x, y


def distributions(shift: str, level: int, num_classes: int, num_clients: int, bank_size: int,
                  rng: np.random.Generator) -> tuple[list[Distribution], np.ndarray]:
    """The distinct candidate distributions of a shift and each training client's index into them (candidates
    that coincide, e.g. two equal class sets in a label bank, are one distribution)."""
    cands, which = _draw(shift, level, num_classes, num_clients, bank_size, rng)
    distinct = list(dict.fromkeys(cands))
    remap = np.array([distinct.index(c) for c in cands], dtype=np.int64)
    return distinct, remap[which]


def _draw(shift: str, level: int, num_classes: int, num_clients: int, bank_size: int,
          rng: np.random.Generator) -> tuple[list[Distribution], np.ndarray]:
    if shift == "feature":
        r = FEATURE_ROTATIONS[level - 1]
        colours = COLOURS if level >= 5 else (None,)
        cands = [Distribution(rotation=i * 360.0 / r, colour=c) for i in range(r) for c in colours]
        return cands, rng.integers(len(cands), size=num_clients)
    if shift == "label":
        size = max(1, num_classes + 1 - level)
        cands = [Distribution(classes=tuple(sorted(rng.choice(num_classes, size=size, replace=False).tolist())))
                 for _ in range(bank_size)]
        return cands, rng.integers(len(cands), size=num_clients)
    pool = np.sort(rng.choice(num_classes, size=min(level, num_classes), replace=False))
    per_client = []
    for _ in range(num_clients):
        if shift == "concept_yx":
            perm = rng.permutation(pool)
            per_client.append(Distribution(label_map=tuple(zip(pool.tolist(), perm.tolist()))))
        else:
            rots = rng.integers(4, size=len(pool)) * 90.0
            per_client.append(Distribution(class_rotation=tuple(zip(pool.tolist(), rots.tolist()))))
    return per_client, np.arange(num_clients)


def deal(n: int, k: int, per_client: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``k`` disjoint sorted parts of a shuffled ``range(n)``: ``per_client`` each, or the whole range split evenly."""
    perm = rng.permutation(n)
    if per_client == 0:
        return [np.sort(p) for p in np.array_split(perm, k)]
    if per_client * k > n:
        raise ConfigError(f"partition.samples_per_client={per_client} times {k} clients (training + unseen) exceeds "
                          f"the {n} pool samples; lower partition.samples_per_client or the number of clients")
    return [np.sort(perm[i * per_client:(i + 1) * per_client]) for i in range(k)]


def _resample(idx: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """``idx`` plus draws with replacement from it up to ``size`` entries."""
    if len(idx) == 0 or len(idx) >= size:
        return idx
    return np.concatenate([idx, rng.choice(idx, size=size - len(idx), replace=True)])


def base_splits(parts: list[np.ndarray], k: int, cfg: Any, split_ss: np.random.SeedSequence
                ) -> list[list[np.ndarray]]:
    """Each client's [train, val, test] dataset rows before any transformation: the first ``k`` (training) clients
    cut by the ``partition.*_fraction`` keys, the others (unseen) all in test; one stream per client from
    ``split_ss``."""
    out = []
    for i, (part, ss) in enumerate(zip(parts, split_ss.spawn(len(parts)))):
        srng = np.random.default_rng(ss)
        if i < k:
            sp = split_client(part, cfg, srng)
            out.append([sp.train, sp.val, sp.test])
        else:
            out.append([np.empty(0, np.int64), np.empty(0, np.int64), srng.permutation(part)])
    return out


def _client_block(dist: Distribution, splits: list[np.ndarray], dataset: Dataset, bright: float,
                  colour_images: bool, offset: int) -> tuple[torch.Tensor, torch.Tensor, ClientSplit]:
    """One client's transformed samples (its splits in order) and their splits as positions in the new pool."""
    order = np.concatenate(splits)
    x, y = apply(dist, dataset.x_train[torch.as_tensor(order)], dataset.y_train[torch.as_tensor(order)], bright,
                 colour_images)
    bounds = np.cumsum([0] + [len(s) for s in splits]) + offset
    return x, y, ClientSplit(*(np.arange(bounds[j], bounds[j + 1], dtype=np.int64) for j in range(3)))


def transform_clients(dists: list[Distribution], splits: list[list[np.ndarray]], dataset: Dataset,
                      colour_images: bool, res_rng: np.random.Generator, offset: int = 0
                      ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[ClientSplit]]:
    """Client i's splits under ``dists[i]``, as blocks of a new pool starting at row ``offset``: a label shift keeps
    its set's classes and resamples each split back to its size (from ``res_rng``, in client order), then
    :func:`apply` transforms. The building block of ``shift``, ``mixed_shift`` and ``drift``."""
    labels, bright = as_labels(dataset.y_train), float(dataset.x_train.max())
    xs, ys, blocks = [], [], []
    for dist, sp in zip(dists, splits):
        if dist.classes is not None:  # label shift: keep the set's classes, resample each split back to its size
            keep = np.asarray(dist.classes)
            sp = [_resample(s[np.isin(labels[s], keep)], len(s), res_rng) for s in sp]
        x, y, block = _client_block(dist, sp, dataset, bright, colour_images, offset)
        xs.append(x)
        ys.append(y)
        blocks.append(block)
        offset += len(x)
    return xs, ys, blocks


def check_images(shifts: tuple[str, ...], dataset: Dataset, key: str = "partition.type") -> None:
    """A shift that rotates needs images ``(N, C, H, W)``: one-line ConfigError otherwise."""
    rotating = [s for s in shifts if s in ("feature", "concept_xy")]
    if rotating and dataset.x_train.dim() != 4:
        raise ConfigError(f"{key}={rotating[0]!r} rotates images; data.name={dataset.name!r} is not an "
                          "image dataset (allowed: digits, mnist, fmnist, cifar10, cifar100)")


@register_partition("shift", ShiftConfig, plants=True)
def shift_partition(dataset: Dataset, cfg: Any, seed: int) -> Partition:
    """Deal, draw distributions, split and transform (see the module docstring); deterministic in ``seed``."""
    shift, level = str(cfg.type), int(cfg.level)
    k, q, copies = int(cfg.num_clients), int(cfg.num_unseen_clients), int(cfg.train_copies)
    check_images((shift,), dataset)
    deal_ss, dist_ss, split_ss, res_ss = np.random.SeedSequence(int(seed)).spawn(4)
    parts = deal(len(dataset.y_train), k + q, int(cfg.samples_per_client), np.random.default_rng(deal_ss))
    drng = np.random.default_rng(dist_ss)
    cands, which = distributions(shift, level, int(dataset.num_classes), k, int(cfg.label_bank_size), drng)
    used = np.unique(which)
    unseen_which = used[drng.integers(len(used), size=q)] if q else np.empty(0, np.int64)
    dists = [cands[int(i)] for i in (*which, *unseen_which)]
    xs, ys, blocks = transform_clients(dists, base_splits(parts, k, cfg, split_ss), dataset,
                                       shift == "feature" and level >= 5, np.random.default_rng(res_ss))
    if copies > 1:  # App. F.2: duplicate the local training data (indices; the pool does not grow)
        for block in blocks[:k]:
            block.train = np.tile(block.train, copies)
    meta = {
        "shift_type": shift, "shift_level": level, "train_copies": copies, "num_unseen_clients": q,
        "assigned_samples": int(sum(map(len, parts))), "num_candidate_distributions": len(cands),
        "distributions": [repr(c) for c in cands],
    }
    if shift == "concept_yx":
        meta["test_phase"] = "not applicable: P(Y|X) shift cannot be detected without labels (Flux Sec. 4.2.2)"
    return Partition(clients=blocks[:k], unseen=blocks[k:], x=torch.cat(xs), y=torch.cat(ys), global_test=False,
                     distribution=which.astype(np.int64), unseen_distribution=np.asarray(unseen_which, np.int64),
                     meta=meta)
