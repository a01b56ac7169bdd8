"""Mean ± std over seeds of the last-10-round mean personalised accuracy, per (cell, method), from grid.py's JSONL
files, with the mean (over seeds) first round whose accuracy reaches 80 % / 90 % (Table VI's C_acc; "—" when a
seed never reaches it):  python tools/investigations/dapfl/table.py docs/results/dapfl/investigation/*.jsonl"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np


def first(curve, target):
    return next((i + 1 for i, x in enumerate(curve) if x is not None and x >= target), None)


def main() -> int:
    acc = defaultdict(list)
    for p in sys.argv[1:]:
        for line in Path(p).read_text().splitlines():
            r = json.loads(line)
            cell = Path(r["config"]).stem
            acc[(Path(p).stem, cell, r["method"])].append((r["seed"], 100 * r["acc_last10"], r["curve"]))
    print("| runs | cell | method | accuracy (%) mean ± std | n | per seed | C_acc(80%) | C_acc(90%) |")
    print("|---|---|---|---|---|---|---|---|")
    for (runs, cell, m), v in acc.items():
        v = sorted({seed: (x, c) for seed, x, c in v}.items())
        a = np.array([x for _, (x, _) in v])
        sd = f"{a.std(ddof=1):.2f}" if len(a) > 1 else "—"
        hit = [[first(c, t) for _, (_, c) in v] for t in (0.8, 0.9)]
        rt = ["—" if None in h else f"{np.mean(h):.0f}" for h in hit]
        print(f"| {runs} | {cell} | {m} | {a.mean():.2f} ± {sd} | {len(a)} | {', '.join(f'{x:.2f}' for x in a)} | "
              f"{rt[0]} | {rt[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
