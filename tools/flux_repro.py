"""Flux reproduction grid (App. F.1 / Fig. 4): methods x shift types x levels x seeds on the configs/flux/table1 cells.

Runs every cell in this process, one after another, appends one JSON line per run to ``--jsonl`` (so a long grid
can be interrupted and resumed: finished cells are skipped) and writes a Markdown table of known-association and
test-phase accuracy (mean ± std over seeds; P(Y|X) test phase is "n/a": it needs labels) to ``--out``.

    python tools/flux_repro.py --dataset mnist --levels 2,5,8 --methods fedavg,cfl,flux,flux_prior --seeds 0 \\
        --jsonl docs/results/flux/runs.jsonl --out docs/results/flux/table.md -- \\
        partition.samples_per_client=300 fabric.num_threads=1

``--report a.jsonl,b.jsonl`` only writes the table of runs already recorded (e.g. from two processes).
Everything after ``--`` is passed as config overrides to every run (reductions for CPU time go there).
The method list is a parameter, so methods from other branches (ifca, apfl, ...) run the same way.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's flplat, not an installed one

SHIFTS = ("feature", "label", "concept_yx", "concept_xy")
KEYS = ("known_association_accuracy", "test_phase_accuracy", "global_accuracy", "ari", "tau")


DBSCAN_SCALING = {"fmnist": 0.95, "cifar100": 0.98}  # App. D.2 (1.0 elsewhere)


def run_cell(config: Path, method: str, seed: int, overrides: list[str], dataset: str) -> dict:
    from flplat.experiment import load_config, run

    extra = [f"algorithm.dbscan_scaling={DBSCAN_SCALING[dataset]}"] if method.startswith("flux") and \
        dataset in DBSCAN_SCALING else []
    cfg = load_config(config, [f"algorithm.name={method}", f"seed={seed}", *extra, *overrides])
    t0 = time.perf_counter()
    summary, _ = run(cfg, progress=False)
    out = {k: summary.metrics[k] for k in KEYS if k in summary.metrics}
    out["wall_s"] = time.perf_counter() - t0
    return out


def table(rows: list[dict], methods: list[str], shifts: list[str], levels: list[int]) -> str:
    """Markdown: one row per (shift, level), per method "known association / test phase" accuracy (%), then the
    clustering quality (ARI against the true distributions, tau) of the clustered methods. "n/a": P(Y|X) has no
    test phase; "—": not run."""
    def pick(m, s, lv):
        return [r for r in rows if r["method"] == m and r["shift"] == s and r["level"] == lv]

    def fmt(vals, scale=100.0, digits=1):
        if not vals:
            return None
        mean = scale * np.mean(vals)
        return f"{mean:.{digits}f}" + (f" ± {scale * np.std(vals):.{digits}f}" if len(vals) > 1 else "")

    lines = ["**Accuracy (%): known association / test phase**", "",
             "| shift | level | " + " | ".join(methods) + " |", "|---|---|" + "---|" * len(methods)]
    means = {m: ([], []) for m in methods}
    for s in shifts:
        for lv in levels:
            cells = []
            for m in methods:
                sel = pick(m, s, lv)
                ka = [r["known_association_accuracy"] for r in sel if "known_association_accuracy" in r]
                tp = [r["test_phase_accuracy"] for r in sel if "test_phase_accuracy" in r]
                if ka:
                    means[m][0].append(np.mean(ka))
                if tp:
                    means[m][1].append(np.mean(tp))
                tp_text = fmt(tp) or ("n/a" if s == "concept_yx" and sel else "—")
                cells.append(f"{fmt(ka) or '—'} / {tp_text}")
            lines.append(f"| {s} | {lv} | " + " | ".join(cells) + " |")
    def avg(vals):
        return f"{100 * np.mean(vals):.1f}" if vals else "—"

    lines.append("| **mean of the cells** | | " + " | ".join(f"{avg(means[m][0])} / {avg(means[m][1])}"
                                                          for m in methods) + " |")
    clustered = [m for m in methods if any("ari" in r for r in rows if r["method"] == m)]
    if clustered:
        lines += ["", "**Clustering: ARI against the true distribution ids / number of clusters tau "
                  "(Flux-prior's tau is the true M)**", "",
                  "| shift | level | " + " | ".join(clustered) + " |", "|---|---|" + "---|" * len(clustered)]
        for s in shifts:
            for lv in levels:
                cells = []
                for m in clustered:
                    sel = pick(m, s, lv)
                    ari, tau = [r["ari"] for r in sel if "ari" in r], [r["tau"] for r in sel if "tau" in r]
                    cells.append(f"{fmt(ari, 1.0, 2) or '—'} / {fmt(tau, 1.0, 0) or '—'}")
                lines.append(f"| {s} | {lv} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="mnist")
    ap.add_argument("--shifts", default=",".join(SHIFTS))
    ap.add_argument("--levels", default="2,5,8")
    ap.add_argument("--methods", default="fedavg,cfl,flux,flux_prior")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--configs", default="configs/flux/table1")
    ap.add_argument("--jsonl", default="docs/results/flux/runs.jsonl")
    ap.add_argument("--out", default="docs/results/flux/table.md")
    ap.add_argument("--report", default=None,
                    help="comma-separated JSONL files: only write the table of their runs (no training)")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    shifts, methods = args.shifts.split(","), args.methods.split(",")
    levels, seeds = [int(v) for v in args.levels.split(",")], [int(v) for v in args.seeds.split(",")]
    if args.report:
        rows = [json.loads(line) for f in args.report.split(",") for line in Path(f).read_text().splitlines()]
        Path(args.out).write_text(table(rows, methods, shifts, levels))
        return
    path = Path(args.jsonl)
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    done = {(r["method"], r["shift"], r["level"], r["seed"]) for r in rows}
    for s in shifts:
        for lv in levels:
            for m in methods:
                for seed in seeds:
                    if (m, s, lv, seed) in done:
                        continue
                    res = run_cell(Path(args.configs) / f"{args.dataset}_{s}_l{lv}.yaml", m, seed, args.overrides,
                                   args.dataset)
                    row = {"method": m, "shift": s, "level": lv, "seed": seed, **res}
                    rows.append(row)
                    with path.open("a") as f:
                        f.write(json.dumps(row) + "\n")
                    print(json.dumps(row), flush=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    Path(args.out).write_text(table(rows, methods, shifts, levels) + f"\npeak RSS of the grid process: {rss:.0f} MiB\n")


if __name__ == "__main__":
    main()
