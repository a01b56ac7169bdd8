"""``label_shards``: McMahan et al.'s pathological non-IID split (AISTATS 2017, §3): sort the pool by label, cut it
into ``shards_per_client`` x K equal shards and give every client ``shards_per_client`` shards drawn at random (2 in
the paper), so most clients see about that many classes.

It reads the pool's labels only, so it registers as a label protocol (``takes="labels"``: ``fn(labels, cfg, rng)``);
its one key, ``partition.shards_per_client``, is the field of its Config, checked like any flplat key.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flplat.api import check_range, register_partition


@dataclass
class LabelShardsConfig:
    shards_per_client: int = 2  # partition.shards_per_client

    def check(self) -> None:
        check_range(self.shards_per_client >= 1, "partition.shards_per_client", self.shards_per_client,
                    "an integer >= 1")


@register_partition("label_shards", LabelShardsConfig, takes="labels")
def label_shards(labels: np.ndarray, cfg, rng: np.random.Generator) -> list[np.ndarray]:
    k, s = int(cfg.num_clients), int(cfg.shards_per_client)
    order = np.argsort(labels, kind="stable")
    shards = np.array_split(order, s * k)
    picks = rng.permutation(s * k)
    return [np.concatenate([shards[i] for i in picks[s * c:s * (c + 1)]]) for c in range(k)]
