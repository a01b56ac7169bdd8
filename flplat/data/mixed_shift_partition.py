"""Flux's mixed shifts (Fenoglio et al., App. F.3, Tables 56-58): ``partition.name=mixed_shift``, two shift types of
the ``shift`` partition planted together, keys ``partition.type``, ``level``, ``num_unseen_clients``,
``samples_per_client``, ``label_bank_size`` (:class:`MixedShiftConfig`).

F.3 evaluates "combinations of multiple distribution shifts occurring simultaneously": P(X) + P(Y) (Table 56),
P(X|Y) + P(Y) (Table 57) and P(Y|X) + P(Y) (Table 58) at levels 3-6, "see Table 9 for detailed setting of
heterogeneity levels". It says no more. Our reading, the one that plants known distributions (the paper reports
Flux-prior, which needs the true M): at level l each component is the ``shift`` partition's shift at the same level l
(Table 9's row; :mod:`flplat.data.shift_partition`), and every training client draws one distribution of each
component independently, as that partition draws them (P(X): one of the level's (rotation, colour) patterns; P(Y):
one class set of the bank; P(Y|X): its own permutation of the swap pool; P(X|Y): its own rotation per class of the
pool). The client's distribution is the pair: its images get both transformations (the classes of the set kept and
resampled back to each split's size first, on the original labels, then the rotation / colour / relabelling), as
the authors' data generator (ANDA) builds its mixed types: the label skew first, then the second shift on the
client's subset. ANDA's mixed types draw the label skew softly (a softmax over the class counts) and plant no
cluster ids; the strict per-shift banks are the ones Tables 12-19 use and give the ids F.3's Flux-prior needs.

Distribution ids. Component ids are those the ``shift`` partition gives (the index into the component's distinct
candidates); the pair (a, b) gets the id ``a * M_b + b``, M_b the number of the second component's candidates, so
two clients share an id exactly when they share both transformations. ``meta["num_candidate_distributions"]`` is
the product M_a * M_b; the planted M (``num_distributions``, what IFCA, FeSEM, FedEM, FedRC and Flux-prior are
given) is the number of distinct pairs the training clients hold, as for ``shift``. ``meta["component_distribution"]``
/ ``meta["unseen_component_distribution"]``: each client's (a, b). Unseen clients draw one of the pairs the training
clients hold (a cluster exists for each). P(Y|X) + P(Y) has a test phase (Table 58 reports one): the label set is
visible without labels, unlike P(Y|X) alone.

Any two different shift types combine (``partition.type=A+B``); the paper's three are ``feature+label``,
``concept_xy+label`` and ``concept_yx+label``. Each component's fields of :class:`Distribution` are its own
(rotation / colour, classes, label_map, class_rotation), so the pair is one :class:`Distribution` with both.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from flplat.data.containers import Dataset, Partition
from flplat.data.registry import register_partition
from flplat.data.shift_partition import (
    SHIFT_TYPES,
    Distribution,
    base_splits,
    check_images,
    deal,
    distributions,
    transform_clients,
)
from flplat.errors import check_range

#: the paper's three mixtures (App. F.3, Tables 56 / 57 / 58)
PAPER_MIXES = ("feature+label", "concept_xy+label", "concept_yx+label")
_ORDER = ("feature", "concept_xy", "concept_yx", "label")  # a mixture's canonical order: P(Y) last, as the paper's
assert set(_ORDER) == set(SHIFT_TYPES)
MIXES = tuple(f"{a}+{b}" for i, a in enumerate(_ORDER) for b in _ORDER[i + 1:])
_ALIASES = {f"{b}+{a}": f"{a}+{b}" for a, b in (m.split("+") for m in MIXES)}


@dataclass
class MixedShiftConfig:
    """``mixed_shift`` (Flux App. F.3, Tables 56-58)."""

    type: str = "feature+label"  # two shift types joined by "+": feature+label, concept_xy+label, concept_yx+label, ...
    level: int = 3  # 1..8, the row of Table 9 both components use (the paper: 3..6)
    num_unseen_clients: int = 0  # extra test-only clients drawn from the training clients' pairs
    samples_per_client: int = 0  # samples dealt to each client (0: the pool split evenly)
    label_bank_size: int = 5  # the P(Y) component: number of class sets in the bank

    def check(self) -> None:
        allowed = ", ".join(MIXES)
        check_range(self.components() is not None, "partition.type", self.type,
                    f"two different shift types joined by '+': {allowed}")
        check_range(1 <= self.level <= 8, "partition.level", self.level, "an integer in 1..8")
        check_range(self.num_unseen_clients >= 0, "partition.num_unseen_clients", self.num_unseen_clients,
                    "an integer >= 0")
        check_range(self.samples_per_client >= 0, "partition.samples_per_client", self.samples_per_client,
                    "an integer >= 0 (0: the pool split evenly)")
        check_range(self.label_bank_size >= 1, "partition.label_bank_size", self.label_bank_size, "an integer >= 1")

    def components(self) -> tuple[str, str] | None:
        """The two shift types in the canonical order (P(Y) last; ``label+feature`` is ``feature+label``), or None when
        ``type`` is not a mixture."""
        name = _ALIASES.get(str(self.type), str(self.type))
        return tuple(name.split("+")) if name in MIXES else None  # type: ignore[return-value]


def combine(a: Distribution, b: Distribution) -> Distribution:
    """One distribution with the transformations of both (their fields are disjoint: each shift type sets its own)."""
    changed = {f.name: getattr(b, f.name) for f in dataclasses.fields(b)
               if getattr(b, f.name) != f.default}
    return dataclasses.replace(a, **changed)


def pairs(first: str, second: str, level: int, num_classes: int, k: int, q: int, bank: int,
          rng: np.random.Generator) -> tuple[dict[int, Distribution], np.ndarray, np.ndarray, int]:
    """Draw each training client's component distributions (first, then second, from ``rng``), then the unseen
    clients' pairs among the training clients'. Returns id -> combined distribution, the (k + q, 2) component ids,
    the k + q pair ids ``a * M_b + b`` and the number of candidate pairs M_a * M_b."""
    cands_a, which_a = distributions(first, level, num_classes, k, bank, rng)
    cands_b, which_b = distributions(second, level, num_classes, k, bank, rng)
    comp = np.stack([which_a, which_b], axis=1).astype(np.int64)
    ids = comp[:, 0] * len(cands_b) + comp[:, 1]
    used = np.unique(ids)
    unseen = used[rng.integers(len(used), size=q)] if q else np.empty(0, np.int64)
    ids = np.concatenate([ids, unseen]).astype(np.int64)
    comp = np.concatenate([comp, np.stack([unseen // len(cands_b), unseen % len(cands_b)], axis=1)]).astype(np.int64)
    dists = {int(i): combine(cands_a[int(i) // len(cands_b)], cands_b[int(i) % len(cands_b)]) for i in np.unique(ids)}
    return dists, comp, ids, len(cands_a) * len(cands_b)


@register_partition("mixed_shift", MixedShiftConfig, plants=True)
def mixed_shift_partition(dataset: Dataset, cfg: Any, seed: int) -> Partition:
    """Deal, draw the two components per client, split and transform (see the module docstring); deterministic in
    ``seed``."""
    first, second = MixedShiftConfig(cfg.type).components()
    level, k, q = int(cfg.level), int(cfg.num_clients), int(cfg.num_unseen_clients)
    check_images((first, second), dataset)
    deal_ss, dist_ss, split_ss, res_ss = np.random.SeedSequence(int(seed)).spawn(4)
    parts = deal(len(dataset.y_train), k + q, int(cfg.samples_per_client), np.random.default_rng(deal_ss))
    dists, comp, ids, m = pairs(first, second, level, int(dataset.num_classes), k, q, int(cfg.label_bank_size),
                                np.random.default_rng(dist_ss))
    colour = "feature" in (first, second) and level >= 5
    xs, ys, blocks = transform_clients([dists[int(i)] for i in ids], base_splits(parts, k, cfg, split_ss), dataset,
                                       colour, np.random.default_rng(res_ss))
    meta = {
        "shift_type": f"{first}+{second}", "shift_level": level, "num_unseen_clients": q,
        "assigned_samples": int(sum(map(len, parts))), "num_candidate_distributions": m,
        "component_distribution": comp[:k], "unseen_component_distribution": comp[k:],
        "distributions": {i: repr(d) for i, d in dists.items()},
    }
    return Partition(clients=blocks[:k], unseen=blocks[k:], x=torch.cat(xs), y=torch.cat(ys), global_test=False,
                     distribution=ids[:k], unseen_distribution=ids[k:], meta=meta)
