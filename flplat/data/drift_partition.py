"""Flux's dynamic setting (Fenoglio et al., App. D.3, Table 6): ``partition.name=drift``, a ``shift`` whose training
clients change distribution at known rounds, and whose test data come from yet another distribution. Keys
``partition.type``, ``level``, ``change_rounds``, ``test_drift``, ``num_unseen_clients``, ``samples_per_client``,
``label_bank_size``, ``concept_bank_size`` (:class:`DriftConfig`).

D.3 validates Flux's dynamic variant "on MNIST under a dynamic setting with two distribution drifts during training
and one during testing (Table 6), while all other settings match those in Table 1", over "all four types of
distribution shifts and three levels of heterogeneity for each". The authors' generator (ANDA's ``trDR_teDR`` mode,
called from their FLUX repository's public/generate_datasets.py) gives each client a bank of distributions of one
shift type, two training stages of two distributions drawn from the bank (``DA_epoch_locker_num = 2``: the second
from round ``drifting_round`` on, every client at the same round), and a test set of a third distribution, none of
its training ones. We read the sentence that way: the two training distributions are the "two distribution drifts
during training", the test distribution the "one during testing" (``change_rounds`` takes more stages).

What we build, per seed:

* The bank: the ``shift`` partition's candidates at Table 9's ``level`` (:mod:`flplat.data.shift_partition`):
  P(X) every (rotation, colour) pattern of the level, P(Y) the bank of ``label_bank_size`` class sets; for the
  concept shifts, where ``shift`` gives every client its own permutation / rotation pattern, ``concept_bank_size``
  draws of one (ANDA's dynamic mode also draws these from a finite bank), the equal ones merged.
* Each training client draws, for every stage, a distribution uniformly from the bank, independently (ANDA: repeats
  are allowed, so a client may keep its distribution across a change point; ``meta["drifted_clients"]`` lists those
  that change). Stage 0 holds from round 1, stage s from round ``change_rounds[s - 1]`` on. A stage is the client's
  *same* dealt samples (the same train / val / test rows) under the stage's distribution: a drift changes how the
  data are distributed, not how many there are (a P(Y) stage keeps its classes and resamples each split back to its
  size, as ``shift``), so the sizes the clients report stay what they were.
* ``test_drift`` (default, the paper's "one [drift] during testing"): unseen client j holds the test data of
  training client j mod K: its own dealt samples under a distribution that client never trained on, drawn among the
  distributions training clients hold in the last stage (a cluster exists for it; if every one of those is the
  client's own, among the rest of the bank). ``meta["unseen_of"]`` gives j's training client. Without it, unseen
  clients draw one of the last stage's distributions, as ``shift``'s.

How the change reaches training (:class:`~flplat.data.containers.Drift`): every stage's samples are materialised
once, here, in the one pool; the partition returns stage 0 as its clients and every stage's splits and planted ids
as ``Partition.drift``. Before each round the orchestrator calls ``FederatedData.enter_round(t)``, which puts the
stage in force in ``clients`` and ``meta["distribution"]``, so every method, metric and executor reads the client's
current data through the same index arrays as always; nothing else in the engine knows about drift. Evaluation knows
the change points: the per-round ARI and ``num_distributions`` are against the ids of the stage in force, the
known-association accuracy is on each client's current test split, and Table 6's accuracy is the test phase on the
drifted test clients (``test_phase_accuracy``; P(Y|X) included, as Table 6's mean over the four shifts). The planted
M (``num_distributions``) is the number of distinct ids over all stages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from flplat.data.containers import Dataset, Drift, Partition
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
from flplat.errors import ConfigError, check_choice, check_range


@dataclass
class DriftConfig:
    """``drift`` (Flux App. D.3, Table 6's dynamic setting)."""

    type: str = "feature"  # feature (P(X)) | label (P(Y)) | concept_yx (P(Y|X)) | concept_xy (P(X|Y))
    level: int = 3  # 1..8, the row of Table 9 the bank comes from
    # rounds from which the clients hold their next stage (ANDA's locker 0.5 of Table 1's R = 10 rounds: round 5)
    change_rounds: list[int] = field(default_factory=lambda: [5])
    test_drift: bool = True  # unseen client j: training client j mod K's test data under a distribution it never had
    num_unseen_clients: int = 0  # test-only clients (Table 6: one per training client)
    samples_per_client: int = 0  # samples dealt to each client (0: the pool split evenly)
    label_bank_size: int = 5  # type=label: number of class sets in the bank
    concept_bank_size: int = 4  # type=concept_*: draws of a permutation / rotation pattern forming the bank

    def check(self) -> None:
        check_choice("partition.type", self.type, SHIFT_TYPES)
        check_range(1 <= self.level <= 8, "partition.level", self.level, "an integer in 1..8")
        rounds = [int(r) for r in self.change_rounds]
        check_range(len(rounds) >= 1 and rounds == sorted(set(rounds)) and rounds[0] >= 2, "partition.change_rounds",
                    list(self.change_rounds), "a non-empty ascending list of distinct rounds >= 2, e.g. [5]")
        check_range(self.num_unseen_clients >= 0, "partition.num_unseen_clients", self.num_unseen_clients,
                    "an integer >= 0")
        check_range(self.samples_per_client >= 0, "partition.samples_per_client", self.samples_per_client,
                    "an integer >= 0 (0: the pool split evenly)")
        check_range(self.label_bank_size >= 1, "partition.label_bank_size", self.label_bank_size, "an integer >= 1")
        check_range(self.concept_bank_size >= 2, "partition.concept_bank_size", self.concept_bank_size,
                    "an integer >= 2")


def bank(shift: str, level: int, num_classes: int, label_bank: int, concept_bank: int,
         rng: np.random.Generator) -> list[Distribution]:
    """The distinct distributions the clients draw from (module docstring)."""
    per_client = shift in ("concept_yx", "concept_xy")
    cands, _ = distributions(shift, level, num_classes, concept_bank if per_client else 1, label_bank, rng)
    if len(cands) < 2:
        raise ConfigError(f"partition.type={shift} at partition.level={level} gives {len(cands)} distinct "
                          "distribution; a drift needs at least 2 (allowed: a higher partition.level or "
                          "partition.concept_bank_size)")
    return cands


def schedule(m: int, k: int, q: int, stages: int, test_drift: bool, rng: np.random.Generator
             ) -> tuple[np.ndarray, np.ndarray]:
    """Bank indices: (stages, k) per training client and stage, each uniform over the bank, then (q,) per unseen
    client (module docstring: with ``test_drift``, one training client j mod k never had)."""
    ids = rng.integers(m, size=(stages, k)).astype(np.int64)
    last = np.unique(ids[-1])
    test = np.empty(q, np.int64)
    for j in range(q):
        own = set(ids[:, j % k].tolist()) if test_drift else set()
        pool = [d for d in last.tolist() if d not in own] or [d for d in range(m) if d not in own] or \
            [d for d in range(m) if d != ids[-1, j % k]]
        test[j] = pool[int(rng.integers(len(pool)))]
    return ids, test


@register_partition("drift", DriftConfig, plants=True)
def drift_partition(dataset: Dataset, cfg: Any, seed: int) -> Partition:
    """Deal, draw the bank and every client's stages, split once and transform each stage (module docstring);
    deterministic in ``seed``."""
    shift, level = str(cfg.type), int(cfg.level)
    k, q, rounds = int(cfg.num_clients), int(cfg.num_unseen_clients), [int(r) for r in cfg.change_rounds]
    check_images((shift,), dataset)
    deal_ss, dist_ss, split_ss, res_ss = np.random.SeedSequence(int(seed)).spawn(4)
    parts = deal(len(dataset.y_train), k + q, int(cfg.samples_per_client), np.random.default_rng(deal_ss))
    drng = np.random.default_rng(dist_ss)
    cands = bank(shift, level, int(dataset.num_classes), int(cfg.label_bank_size), int(cfg.concept_bank_size), drng)
    ids, test = schedule(len(cands), k, q, len(rounds) + 1, bool(cfg.test_drift), drng)
    splits, res_rng, colour = base_splits(parts, k, cfg, split_ss), np.random.default_rng(res_ss), \
        shift == "feature" and level >= 5
    xs, ys, stages, offset = [], [], [], 0
    for stage_ids in ids:  # every stage: the same dealt rows of the training clients, under the stage's distributions
        x, y, blocks = transform_clients([cands[int(i)] for i in stage_ids], splits[:k], dataset, colour, res_rng,
                                         offset)
        xs += x
        ys += y
        stages.append(blocks)
        offset += sum(len(t) for t in x)
    x, y, unseen = transform_clients([cands[int(i)] for i in test], splits[k:], dataset, colour, res_rng, offset)
    meta = {
        "shift_type": shift, "shift_level": level, "num_unseen_clients": q, "test_drift": bool(cfg.test_drift),
        "assigned_samples": int(sum(map(len, parts))), "num_candidate_distributions": len(cands),
        "distributions": [repr(c) for c in cands], "unseen_of": np.arange(q, dtype=np.int64) % max(k, 1),
        "drifted_clients": np.flatnonzero((ids != ids[:1]).any(axis=0)).astype(np.int64),
    }
    return Partition(clients=stages[0], unseen=unseen, x=torch.cat([*xs, *x]), y=torch.cat([*ys, *y]),
                     global_test=False, distribution=ids[0], unseen_distribution=test,
                     drift=Drift(rounds, stages, ids), meta=meta)
