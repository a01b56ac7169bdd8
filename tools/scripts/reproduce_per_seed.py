"""Per-seed values of some rows of a reproduced table, read from the reproduction store (no training).

``flplat reproduce`` renders mean ± std per cell; this prints each seed's value of several metrics for the rows
given, so two rows can be compared run by run (e.g. where Flux's noise guard helps and on which seeds)::

    python tools/scripts/reproduce_per_seed.py flux known_association --scale reduced --seeds 0,1,2 \
        --methods "Flux,Flux + noise guard" --metrics tau,ari,known_association_accuracy \
        --store-dir /work/repro/store [--set fabric.num_threads=1]

A run that is not in the store shows "—". ``--set`` must repeat the reproduce command's overrides (they are part of
each run's config hash). Output: one markdown table, a row per cell, a column per method, each entry the seeds'
values of each metric joined by " / " (metrics separated by "; ").
"""

from __future__ import annotations

import argparse
import sys

from flplat.errors import ConfigError
from flplat.studies.reproduction.grid import paper_tables, plan, select
from flplat.studies.reproduction.store import Store


def fmt(v: float | None, metric: str) -> str:
    if v is None:
        return "—"
    if metric == "tau" or metric == "num_distributions":
        return f"{v:.0f}"
    if metric.endswith("accuracy"):
        return f"{100 * v:.1f}"
    return f"{v:.2f}"


def per_seed(paper: str, table: str, scale: str, seeds: list[int], methods: list[str], metrics: list[str],
             store_dir: str, overrides: list[str], cells: list[str] | None = None) -> str:
    t = select(paper_tables(paper), [table], "tables", "id")[0]
    jobs = plan(paper, t, scale, seeds, methods, cells, overrides, f"reproduce-{paper}", store_dir)
    done = Store(f"reproduce-{paper}", store_dir).finished(paper)
    value = {(j.cell, j.method, j.seed): done.get(j.key, (None, {}))[1] for j in jobs}
    head = f"| cell | {' | '.join(methods)} |"
    lines = [f"Per seed ({', '.join(map(str, seeds))}): {'; '.join(metrics)}", "", head,
             "|" + "---|" * (len(methods) + 1)]
    for c in dict.fromkeys(j.cell for j in jobs):
        row = []
        for m in methods:
            parts = []
            for metric in metrics:
                vals = [value.get((c, m, s), {}).get(metric) for s in seeds]
                parts.append(" / ".join(fmt(v, metric) for v in vals))
            row.append("; ".join(parts))
        lines.append(f"| {c} | {' | '.join(row)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paper")
    ap.add_argument("table")
    ap.add_argument("--scale", default="reduced")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--methods", required=True, help="comma-separated row names of the table")
    ap.add_argument("--metrics", required=True, help="comma-separated logged metrics (e.g. tau,ari)")
    ap.add_argument("--cells", default=None)
    ap.add_argument("--store-dir", default="mlruns")
    ap.add_argument("--set", nargs="*", default=[], dest="overrides")
    a = ap.parse_args(argv)
    try:
        print(per_seed(a.paper, a.table, a.scale, [int(s) for s in a.seeds.split(",")], a.methods.split(","),
                       a.metrics.split(","), a.store_dir, a.overrides, a.cells.split(",") if a.cells else None))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
