"""Run DA-PFL Table I/III-style cells (datasets × clients × Dirichlet α × methods) and write the tables.

Example (the grid of docs/results.md):
  python tools/reproduce_dapfl.py --datasets digits --clients 20 100 --alphas 1.0 0.5 \\
      --results docs/results/dapfl/digits.jsonl --experiment dapfl-digits
  python tools/reproduce_dapfl.py --table-only --results docs/results/dapfl/digits.jsonl docs/results/dapfl/fmnist.jsonl

A method is ``NAME`` from the built-in list (--list) or ``NAME:key=value,key=value`` (e.g. a method added later:
``fedpfa:algorithm.name=fedpfa``). ``ifca`` gets the paper's number of clusters for the cell (§IV-D: "we set the
number of clusters at 3 and 7 based on different client numbers (20 and 100 clients), respectively") unless
``algorithm.num_clusters`` is given. Each finished run appends one JSON line (config cell,
method, final metrics and run summaries) to --results, so an interrupted grid keeps its finished runs; the tables
(Table I/III: mean personalised accuracy over the last 10 rounds; Table IV: Few/Medium/Many; Table V: ablations;
Table VI: rounds to target accuracy) are printed from that file (and written to --out).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's flplat, not another installed copy

# The paper uses the same regularisation coefficient for all regularisation-based methods (§IV-D): λ = μ = 1
# (DA-PFL's λ in the authors' code); FedRep's head/body epochs follow its paper (10 / 1).
METHODS = {
    "fedavg": {"algorithm.name": "fedavg"},
    "fedprox": {"algorithm.name": "fedprox", "algorithm.mu": 1.0},
    "ditto": {"algorithm.name": "ditto", "algorithm.lam": 1.0},
    "fedamp": {"algorithm.name": "fedamp"},
    "dapfl": {"algorithm.name": "dapfl", "algorithm.lam": 1.0},
    "dapfl_agg": {"algorithm.name": "dapfl", "algorithm.lam": 1.0, "algorithm.local_start": "aggregated"},
    "dapfl_v1": {"algorithm.name": "dapfl", "algorithm.lam": 1.0, "algorithm.affinity": False,
                 "algorithm.dynamic": False},
    "dapfl_v2": {"algorithm.name": "dapfl", "algorithm.lam": 1.0, "algorithm.dynamic": False},
    "fedrep": {"algorithm.name": "fedrep", "algorithm.head_epochs": 10, "algorithm.body_epochs": 1},
    "ifca": {"algorithm.name": "ifca"},
}
IFCA_CLUSTERS = {20: 3, 100: 7}  # §IV-D: similarity-based clustering methods, by the number of clients
DEFAULT = ["fedavg", "fedprox", "ditto", "fedamp", "dapfl", "fedrep"]


def parse_method(spec: str, clients: int | None = None) -> tuple[str, dict[str, object]]:
    name, _, rest = spec.partition(":")
    over = dict(METHODS.get(name, {"algorithm.name": name}))
    for kv in filter(None, rest.split(",")):
        k, _, v = kv.partition("=")
        over[k] = v
    if over.get("algorithm.name") == "ifca" and clients in IFCA_CLUSTERS:
        over.setdefault("algorithm.num_clusters", IFCA_CLUSTERS[clients])
    return name, over


def cell_name(r: dict) -> str:
    level = "low" if float(r["alpha"]) >= 1.0 else "high"
    return f"{r['dataset']} K={r['clients']} α={r['alpha']:g} ({level})"


def fmt(v, scale=100.0, nd=2) -> str:
    return "—" if v is None or v != v else f"{v * scale:.{nd}f}"


def tables(rows: list[dict]) -> str:
    cells = sorted({cell_name(r) for r in rows}, key=lambda c: (c.split()[0], int(c.split()[1][2:]), c))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    by = {(r["method"], cell_name(r)): r for r in rows}
    out = ["### Mean personalised accuracy (%) over the last 10 rounds (Table I/III style)", "",
           "| method | " + " | ".join(cells) + " |", "|---|" + "---|" * len(cells)]
    for m in methods:
        out.append(f"| {m} | " + " | ".join(fmt(by[(m, c)]["final"].get("mean_local_accuracy_last10"))
                                            if (m, c) in by else "—" for c in cells) + " |")
    out += ["", "### Few / Medium / Many class accuracy (%), last-10-round means (Table IV style)", "",
            "| method | cell | Many | Medium | Few | Avg |", "|---|---|---|---|---|---|"]
    for c in cells:
        for m in methods:
            if (m, c) in by:
                f = by[(m, c)]["final"]
                out.append(f"| {m} | {c} | {fmt(f.get('acc_many_last10'))} | {fmt(f.get('acc_medium_last10'))} | "
                           f"{fmt(f.get('acc_few_last10'))} | {fmt(f.get('mean_local_accuracy_last10'))} |")
    targets = sorted({k for r in rows for k in r["final"] if k.startswith("rounds_to_acc")})
    out += ["", "### Rounds to reach the target mean personalised accuracy (Table VI style; — = not reached)", "",
            "| method | cell | " + " | ".join(t.replace("rounds_to_acc", "C_acc(") + "%)" for t in targets) + " |",
            "|---|---|" + "---|" * len(targets)]
    for c in cells:
        for m in methods:
            if (m, c) in by:
                f = by[(m, c)]["final"]
                out.append(f"| {m} | {c} | " + " | ".join(fmt(f.get(t), 1.0, 0) for t in targets) + " |")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["digits"], choices=("digits", "fmnist", "cifar10"))
    ap.add_argument("--clients", nargs="+", type=int, default=[20, 100], choices=(20, 100))
    ap.add_argument("--alphas", nargs="+", type=float, default=[1.0, 0.5], choices=(0.5, 1.0))
    ap.add_argument("--methods", nargs="+", default=DEFAULT, help="NAME or NAME:key=value,...")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="overrides for every run")
    ap.add_argument("--experiment", default="dapfl-repro", help="MLflow experiment of the runs")
    ap.add_argument("--no-track", action="store_true", help="do not log the runs to MLflow")
    ap.add_argument("--results", nargs="+", default=["docs/results/dapfl/runs.jsonl"],
                    help="JSON-lines file(s): append / read")
    ap.add_argument("--out", default=None, help="also write the tables (markdown) here")
    ap.add_argument("--table-only", action="store_true", help="only print the tables from --results")
    ap.add_argument("--list", action="store_true", help="print the built-in methods and exit")
    args = ap.parse_args()
    if args.list:
        for k, v in METHODS.items():
            print(k, v)
        return 0

    if not args.table_only:
        from flplat.errors import ConfigError
        from flplat.experiment import load_config, run

        for ds in args.datasets:
            for k in args.clients:
                for a in args.alphas:
                    path = ROOT / "configs" / "dapfl" / f"{ds}_k{k}_a{a}.yaml"
                    for spec in args.methods:
                        name, over = parse_method(spec, k)
                        dots = [*args.set, *(f"{key}={v}" for key, v in over.items()), f"seed={args.seed}",
                                f"tracking.experiment={args.experiment}", f"tracking.run_name={name}-{path.stem}"]
                        if args.no_track:
                            dots.append("tracking.enabled=false")
                        t0 = time.perf_counter()
                        try:
                            summary, run_id = run(load_config(path, dots), progress=False)
                        except ConfigError as e:
                            print(f"{path.stem} {name}: skipped ({e})", file=sys.stderr, flush=True)
                            continue
                        rec = {"dataset": ds, "clients": k, "alpha": a, "method": name, "seed": args.seed,
                               "config": str(path.relative_to(ROOT)), "overrides": dots, "run_id": run_id,
                               "final": summary.final, "metrics": summary.metrics,
                               "seconds": round(time.perf_counter() - t0, 1)}
                        with open(args.results[0], "a") as f:
                            f.write(json.dumps(rec) + "\n")
                        acc = summary.final.get("mean_local_accuracy_last10", float("nan"))
                        print(f"{path.stem} {name}: last10 acc={acc:.4f} {rec['seconds']:.0f}s", file=sys.stderr,
                              flush=True)
    rows: dict[tuple, dict] = {}
    for p in args.results:
        if Path(p).is_file():
            for line in Path(p).read_text().splitlines():
                r = json.loads(line)
                rows[(r["dataset"], r["clients"], r["alpha"], r["method"])] = r  # the latest run of a cell wins
    text = tables(list(rows.values())) if rows else "no runs\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
