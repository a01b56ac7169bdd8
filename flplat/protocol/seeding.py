"""Seed derivation: every random stream of a run has its own seed, derived from the root seed and a path of keys.

Used by the data layer (partitions, dataset sampling), the algorithms (their own random streams) and the engine
(client batches, failures), so it sits at the bottom, in the protocol layer.
"""

from __future__ import annotations

import zlib

import numpy as np

__all__ = ["derive_seed"]


def derive_seed(root: int, *keys: int | str) -> int:
    """A 32-bit seed derived from the root seed and a path of keys (strings hashed with CRC32).

    Every random stream of a run (partition, model init, client sampling, each client's batches in each
    round) has its own derived seed, so results do not depend on execution order or on which process
    trains a client.
    """
    ints = [int(root) & 0xFFFFFFFF]
    ints += [zlib.crc32(k.encode()) if isinstance(k, str) else int(k) & 0xFFFFFFFF for k in keys]
    return int(np.random.SeedSequence(ints).generate_state(1)[0])
