"""`flplat table`, `flplat compare`: tables and curves from the FINISHED runs of an experiment
(:mod:`flplat.tracking.reports`, :mod:`flplat.tracking.compare`)."""

from __future__ import annotations

import argparse
import sys

from flplat.errors import ConfigError


def add_table(sub) -> None:
    tb = sub.add_parser("table", help="paper-style tables (Table III accuracy / Table IV AD±SDAD) from MLflow runs",
                        description="Aggregate the FINISHED runs of an MLflow experiment into a markdown table: "
                                    "rows = algorithms, columns = partition settings, cells over seeds.")
    tb.add_argument("--experiment", required=True, help="MLflow experiment name")
    tb.add_argument("--kind", choices=("accuracy", "fairness", "best", "window"), default="accuracy",
                    help="accuracy: global accuracy mean ± std; fairness: AD ± SDAD; best / window: best and "
                         "last-window mean global test accuracy (CAFA Tables V / IV; window: "
                         "federation.accuracy_window)")
    tb.add_argument("--metric", default="global_accuracy",
                    help="for --kind accuracy: the run metric shown, e.g. mean_local_accuracy_last10, acc_few_last10, "
                         "rounds_to_acc70 (DA-PFL Tables I, IV, VI)")
    tb.add_argument("--group-by", default="", help="comma-separated params that split rows, e.g. "
                                                   "partition.num_clients")
    tb.add_argument("--store-dir", default="mlruns")
    tb.add_argument("--silhouette-plot", default=None, metavar="PNG",
                    help="also write Fig. 5 (silhouette vs τ of the Clust-PSI-PFL runs) to this file")


def add_compare(sub) -> None:
    c = sub.add_parser("compare", help="final metric mean ± std over seeds per algorithm, and per-round curves "
                                       "with a band over seeds (logged to a parent run)",
                       description="Compare the FINISHED runs of an experiment over seeds: a table of the final "
                                   "metric (mean ± std, n = seeds) per algorithm and partition setting, and a PNG "
                                   "of the per-round curves (mean, ± std band). Both are printed/written and logged "
                                   "to a parent run of the experiment (flplat.kind=compare).",
                       epilog="example:\n  flplat compare --experiment quickstart --metric global_accuracy",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--experiment", required=True, help="MLflow experiment name")
    c.add_argument("--metric", default="global_accuracy", help="per-round run metric (default global_accuracy)")
    c.add_argument("--by", default="algorithm",
                   help="rows: algorithm (default), dataset, model, partition or comma-separated config keys, "
                        "e.g. algorithm,federation.local_epochs")
    c.add_argument("--out", default=None, metavar="PNG", help="also write the curves here (default: "
                                                              "compare_<experiment>_<metric>.png)")
    c.add_argument("--no-log", action="store_true", help="do not log the comparison to a parent run")
    c.add_argument("--store-dir", default="mlruns")


def cmd_table(args) -> int:
    from flplat.tracking.store import reachable_uri

    uri = reachable_uri(None, args.store_dir)  # one short probe (before MLflow is imported): one line, exit 2
    from flplat.tracking.reports import collect_runs, runs_table

    rows = collect_runs(args.experiment, uri)
    if not rows:
        raise ConfigError(f"--experiment={args.experiment!r} has no finished runs in {uri}")
    group = [g for g in args.group_by.split(",") if g]
    params = sorted({k for r in rows for k in r["params"]})
    for g in group:
        if g not in params:
            raise ConfigError(f"--group-by={g!r} is not a param of the runs of {args.experiment!r}; allowed: "
                              + ", ".join(p for p in params if p.startswith(("partition.", "algorithm.", "seed"))))
    metrics = sorted({k for r in rows for k in r["metrics"]})
    if args.kind == "accuracy" and args.metric not in metrics:
        raise ConfigError(f"--metric={args.metric!r} is not a metric of the runs of {args.experiment!r}; allowed: "
                          + ", ".join(metrics))
    print(runs_table(rows, args.kind, group, args.metric))
    if args.silhouette_plot:
        from flplat.tracking.reports import plot_silhouette_curves, silhouette_curves

        curves = silhouette_curves(args.experiment, uri)
        if not curves:
            raise ConfigError(f"--experiment={args.experiment!r} has no Clust-PSI-PFL run with a silhouette curve")
        plot_silhouette_curves(curves, args.silhouette_plot)
        print(f"wrote {args.silhouette_plot}", file=sys.stderr)
    return 0


def cmd_compare(args) -> int:
    from flplat.tracking.store import reachable_uri

    uri = reachable_uri(None, args.store_dir)
    from flplat.tracking.compare import compare

    out = args.out or f"compare_{args.experiment}_{args.metric}.png".replace("/", "_")
    res = compare(args.experiment, uri, args.metric, args.by, out, log=not args.no_log)
    print(res["table"])
    print(f"wrote {out} ({res['runs']} runs)" + (f"; logged to run {res['run_id']}" if res["run_id"] else ""),
          file=sys.stderr)
    return 0
