"""``label_shards``: McMahan et al.'s pathological non-IID split (AISTATS 2017, §3): sort the pool by label, cut it
into 2·K equal shards and give every client 2 shards drawn at random, so most clients see about two classes."""

from __future__ import annotations

import numpy as np

from flplat.api import register_partition


@register_partition("label_shards")
def label_shards(labels: np.ndarray, cfg, rng: np.random.Generator) -> list[np.ndarray]:
    k = int(cfg.num_clients)
    order = np.argsort(labels, kind="stable")
    shards = np.array_split(order, 2 * k)
    picks = rng.permutation(2 * k)
    return [np.concatenate([shards[picks[2 * c]], shards[picks[2 * c + 1]]]) for c in range(k)]
