"""LEAF-format FEMNIST files of the paper's size, and the peak memory of loading them (README, "Data").

``write DIR`` writes ``DIR/femnist/data/all_data/all_data_<i>.json`` as LEAF's ``data/femnist/preprocess.sh`` does
before its split step: 805,263 samples of 3,550 writers (LEAF's paper, Table 1: 226.83 samples per user on average,
standard deviation 88.94; here each writer's count is drawn from that normal law, at least 1, and the total fixed),
100 writers per file (36 files), each file ``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [[784
floats], ...], "y": [ints]}}}`` written with ``json.dump``'s separators. A pixel is LEAF's value ``k / 255`` as
Python writes the float (``1.0`` is the white background; 80 % of the pixels here, the rest ink of random ``k``), a
label uniform over the 62 classes. The images are drawn from a pool of ``--pool`` distinct ones (the text, and so the
parsing, is the same as with all distinct ones; writing is fast). The files take about 6 GB.

``measure DIR`` loads them with flplat's FEMNIST loader in a fresh process and prints its peak resident memory
(``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss``), the time and the shapes; ``--first-files K`` loads only the
first K files (through symlinks in a temporary directory), ``--classes`` sets ``data.classes`` (``all``: the
62 classes; default: the loader's default, ``a``-``j``). The loader is the ``flplat`` that ``PYTHONPATH`` selects, so
two checkouts can be compared::

    python tools/generators/make_leaf_femnist.py write /tmp/leaf
    python tools/generators/make_leaf_femnist.py measure /tmp/leaf --classes all
    PYTHONPATH=/path/to/other/checkout python tools/generators/make_leaf_femnist.py measure /tmp/leaf --first-files 4
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

LEAF_SAMPLES, LEAF_USERS, LEAF_MEAN, LEAF_STD = 805_263, 3_550, 226.83, 88.94


def user_counts(samples: int, users: int, rng: np.random.Generator) -> np.ndarray:
    """Samples per writer: normal(LEAF_MEAN, LEAF_STD) rounded, at least 1, scaled so they sum to ``samples``."""
    raw = np.maximum(1, np.rint(rng.normal(LEAF_MEAN, LEAF_STD, users)))
    counts = np.maximum(1, np.floor(raw * samples / raw.sum())).astype(np.int64)
    short = samples - int(counts.sum())
    counts[rng.choice(users, size=abs(short), replace=abs(short) > users)] += int(np.sign(short))
    assert counts.sum() == samples and counts.min() >= 1
    return counts


def image_pool(size: int, rng: np.random.Generator) -> list[str]:
    """``size`` distinct images as the JSON text ``json.dump`` writes for LEAF's ``vec.tolist()`` of ``k / 255``."""
    pool = []
    for _ in range(size):
        k = np.full(784, 255, dtype=np.int64)
        ink = rng.random(784) < 0.2
        k[ink] = rng.integers(0, 255, int(ink.sum()))
        pool.append(json.dumps((k / 255).tolist()))
    return pool


def write(out: Path, samples: int, users: int, per_file: int, pool_size: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    counts = user_counts(samples, users, rng)
    pool = image_pool(pool_size, rng)
    names = [f"f{i:04d}_{int(rng.integers(0, 100)):02d}" for i in range(users)]
    d = out / "femnist" / "data" / "all_data"
    d.mkdir(parents=True, exist_ok=True)
    for f, start in enumerate(range(0, users, per_file)):
        chunk = range(start, min(start + per_file, users))
        with open(d / f"all_data_{f}.json", "w", encoding="utf-8") as fh:
            fh.write('{"users": ' + json.dumps([names[u] for u in chunk]) + ', "num_samples": '
                     + json.dumps([int(counts[u]) for u in chunk]) + ', "user_data": {')
            for j, u in enumerate(chunk):
                idx = rng.integers(0, pool_size, int(counts[u]))
                ys = rng.integers(0, 62, int(counts[u])).tolist()
                fh.write(("" if j == 0 else ", ") + json.dumps(names[u]) + ': {"x": [' + ", ".join(pool[i] for i in idx)
                         + '], "y": ' + json.dumps(ys) + "}")
            fh.write("}}")
        print(f"{d / f'all_data_{f}.json'}: {len(chunk)} users, {int(counts[list(chunk)].sum())} samples",
              file=sys.stderr)


LOAD = """
import resource, sys, time
from flplat.data.datasets import load_dataset
from flplat.experiment import load_config
cfg = load_config(None, ["data.name=femnist", "data.root=" + sys.argv[1]] + sys.argv[2:]).data
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
ds = load_dataset(cfg, 0)
print(base, f"{time.perf_counter() - t0:.1f}", tuple(ds.x_train.shape), ds.num_classes,
      len(set(ds.client_ids.tolist())))
"""


def measure(root: Path, first_files: int, classes: str | None) -> None:
    over = [] if classes is None else [f"data.classes={'[]' if classes == 'all' else '[' + classes + ']'}"]
    with tempfile.TemporaryDirectory() as tmp:
        src = root / "femnist" / "data" / "all_data"
        if first_files:
            d = Path(tmp) / "femnist" / "data" / "all_data"
            d.mkdir(parents=True)
            files = sorted(src.glob("all_data_*.json"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))[:first_files]
            for p in files:
                os.symlink(p, d / p.name)
            root = Path(tmp)
        res = subprocess.run([sys.executable, "-c", LOAD, str(root), *over], capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(res.stderr[-3000:])
    base, secs, shape = res.stdout.split(maxsplit=2)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB on Linux -> GiB
    print(f"peak RSS {peak:.2f} GiB ({int(base) / 2**20:.2f} GiB before the load: the imports), load {secs} s, "
          f"x_train shape, classes, writers: {shape.strip()} (files: {first_files or 'all'}, classes: "
          f"{classes or 'default'})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write", help="write LEAF-format FEMNIST all_data files")
    w.add_argument("out", type=Path)
    w.add_argument("--samples", type=int, default=LEAF_SAMPLES)
    w.add_argument("--users", type=int, default=LEAF_USERS)
    w.add_argument("--users-per-file", type=int, default=100)
    w.add_argument("--pool", type=int, default=2000, help="distinct images (default 2000)")
    w.add_argument("--seed", type=int, default=0)
    m = sub.add_parser("measure", help="peak memory of flplat's FEMNIST loader on them")
    m.add_argument("root", type=Path)
    m.add_argument("--first-files", type=int, default=0, help="load only the first K files (default: all)")
    m.add_argument("--classes", default=None, help="'all', or comma-separated characters (default: a-j)")
    a = ap.parse_args()
    t0 = time.perf_counter()
    if a.cmd == "write":
        write(a.out, a.samples, a.users, a.users_per_file, a.pool, a.seed)
        print(f"written in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    else:
        measure(a.root, a.first_files, a.classes)


if __name__ == "__main__":
    main()
