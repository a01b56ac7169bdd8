"""The DA-PFL investigation's runner (docs/dapfl_investigation.md): every (method, seed) of one config cell in
one process, one JSON line per finished run (skipped when the same config/method/seed/overrides line is already
in --out).

  python tools/investigations/dapfl/grid.py configs/dapfl/digits_k20_a1.0.yaml --seeds 0 1 2 \
      --out docs/results/dapfl/investigation/h1.jsonl --set fabric.num_threads=1 \
      --methods fedavg:algorithm.name=fedavg dapfl:algorithm.name=dapfl,algorithm.lam=1.0

A method is NAME:key=value,key=value (the overrides of that method); --set applies to every run. Tracking is off.
Besides the summary, each line keeps the per-round mean personalised accuracy and DA-PFL's mean α_max.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from flplat.engine.events import Callback
from flplat.experiment import load_config, run


class Curve(Callback):
    def __init__(self):
        self.acc, self.alpha = [], []

    def on_round_end(self, end):
        metrics = end.metrics
        self.acc.append(metrics.get("mean_local_accuracy"))
        if "dapfl_alpha_max" in metrics:
            self.alpha.append(metrics["dapfl_alpha_max"])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--methods", nargs="+", required=True)
    ap.add_argument("--set", nargs="*", default=[])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out = Path(a.out)
    done = set()
    if out.is_file():
        for line in out.read_text().splitlines():
            r = json.loads(line)
            done.add((r["config"], r["method"], r["seed"], tuple(r["overrides"])))
    for spec in a.methods:
        name, _, rest = spec.partition(":")
        over = [kv for kv in rest.split(",") if kv]
        for seed in a.seeds:
            dots = [*a.set, *over, f"seed={seed}", "tracking.enabled=false"]
            if (a.config, name, seed, tuple(dots)) in done:
                continue
            cb = Curve()
            t0 = time.perf_counter()
            summary, _ = run(load_config(a.config, dots), callbacks=[cb], progress=False)
            rec = {"config": a.config, "method": name, "seed": seed, "overrides": dots,
                   "acc_last10": summary.final.get("mean_local_accuracy_last10"),
                   "final": summary.final, "curve": cb.acc,
                   "alpha_max_mean": sum(cb.alpha) / len(cb.alpha) if cb.alpha else None,
                   "seconds": round(time.perf_counter() - t0, 1)}
            with out.open("a") as f:
                f.write(json.dumps(rec) + "\n")
            print(f"{Path(a.config).stem} {name} seed={seed}: {100 * rec['acc_last10']:.2f} "
                  f"({rec['seconds']:.0f}s)", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
