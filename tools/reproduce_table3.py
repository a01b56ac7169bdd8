"""Run Clust-PSI-PFL Table III / IV cells: configs × algorithms × seeds, then print the tables.

Example (the FMNIST K=100 column subset of docs/results.md, reduced training):
  python tools/reproduce_table3.py --dataset fmnist --clients 100 \\
      --cells similarity_0 similarity_0.03 similarity_1 dirichlet_0.3 dirichlet_50 \\
      --algorithms fedavg fedprox cfl haccs clust_psi_pfl --seeds 0 \\
      --set federation.rounds=10 federation.local_epochs=1 --experiment results-fmnist-k100
Every run is an MLflow run in --experiment; the tables come from `flplat table` on that experiment.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="fmnist", choices=("fmnist", "digits"))
    ap.add_argument("--clients", type=int, default=100, choices=(10, 50, 100))
    ap.add_argument("--cells", nargs="+", required=True, help="e.g. dirichlet_0.3 similarity_0")
    ap.add_argument("--algorithms", nargs="+", required=True)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="overrides for every run")
    ap.add_argument("--experiment", required=True)
    args = ap.parse_args()

    from flplat.errors import ConfigError
    from flplat.experiment import load_config, run
    from flplat.tracking.reports import collect_runs, runs_table
    from flplat.tracking.runs import store_uris

    jobs = []
    for cell in args.cells:
        path = ROOT / "configs" / "clust_psi_pfl" / "table3" / f"{args.dataset}_k{args.clients}_{cell}.yaml"
        for algo in args.algorithms:
            for seed in args.seeds:
                over = [*args.set, f"algorithm.name={algo}", f"seed={seed}", f"tracking.experiment={args.experiment}",
                        f"tracking.run_name={algo}-{cell}-s{seed}"]
                try:
                    jobs.append((path, over, load_config(path, over)))
                except ConfigError as e:
                    print(f"skip {path.name} {algo}: {e}", file=sys.stderr)
    for i, (path, _over, cfg) in enumerate(jobs, 1):
        t0 = time.perf_counter()
        try:
            summary, _ = run(cfg, progress=False)
        except ConfigError as e:  # e.g. an infeasible Dirichlet cell
            print(f"[{i}/{len(jobs)}] {path.stem} {cfg.algorithm.name}: skipped ({e})", file=sys.stderr, flush=True)
            continue
        m = summary.metrics
        print(f"[{i}/{len(jobs)}] {path.stem} {cfg.algorithm.name} seed={cfg.seed} acc={m['global_accuracy']:.4f} "
              f"ad={m['ad']:.4f} sdad={m['sdad']:.4f} {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
    uri, _ = store_uris(None, "mlruns")
    rows = collect_runs(args.experiment, uri)
    print("## Global accuracy (mean ± std over seeds)\n")
    print(runs_table(rows, "accuracy"))
    print("\n## AD ± SDAD\n")
    print(runs_table(rows, "fairness"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
