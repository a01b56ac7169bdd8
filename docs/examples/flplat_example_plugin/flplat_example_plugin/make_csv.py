"""Write ``blobs.csv`` (the example dataset): 600 rows of 4 features around 3 class centres, seed 0.

    python -m flplat_example_plugin.make_csv [OUT]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def make(path: Path, n: int = 600, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 2.0, size=(3, 4))
    y = rng.integers(0, 3, size=n)
    x = centres[y] + rng.normal(0.0, 1.0, size=(n, 4))
    lines = ["x0,x1,x2,x3,label"] + [",".join(f"{v:.4f}" for v in row) + f",{c}" for row, c in zip(x, y)]
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    make(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("blobs.csv"))
