"""`flplat check NAME [key=value ...]`: the conformance suite (:mod:`flplat.studies.conformance`) on a registered
algorithm, built-in or plugin; ``--dataset`` / ``--partition``: NAME is a dataset / partition and the suite is
:mod:`flplat.studies.conformance_data`'s. One line per property, exit 1 when a property fails."""

from __future__ import annotations

import argparse
import json
import sys

EPILOG_CHECK = """examples:
  flplat check fedprox
  flplat check myalgo algorithm.k=2 --only smoke,determinism,checkpoint
  flplat check fedavg --json
  flplat check --dataset digits
  flplat check --dataset npz data.path=my.npz data.client_column=writer
  flplat check --partition shift partition.type=feature

Properties: registry, smoke, determinism, sharded (1 vs 2 processes), checkpoint (round trip), kill_resume
(SIGKILL + flplat run --resume), vectorize, failures (30 % drop-outs), invalid_config. They run on a tiny synthetic
federation (600 samples, 6 clients, an MLP, 3 rounds); KEY=VALUE overrides come last (e.g. what the algorithm needs
to run there). Exit status: 0 all pass, 1 a property fails, 2 bad name, override or --only.
--dataset NAME: registry, dtypes, shapes, classes, determinism, invalid_config on the dataset loaded with the overrides.
--partition NAME: registry, disjoint, in_range, pure, planted, invalid_config on a small check dataset (digits with
natural clients and metadata; data.* overrides load another)."""


def add_check(sub) -> None:
    c = sub.add_parser("check", help="run the conformance suite on a registered algorithm (built-in or plugin)",
                       description="Check the platform's guarantees on one registered algorithm: one line per "
                                   "property, PASS or FAIL with a short reason.", epilog=EPILOG_CHECK,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("name", help="a registered algorithm name (see `flplat list`), or with --dataset / --partition a "
                                "dataset / partition name")
    kind = c.add_mutually_exclusive_group()
    kind.add_argument("--dataset", action="store_const", const="dataset", dest="kind", help="NAME is a dataset")
    kind.add_argument("--partition", action="store_const", const="partition", dest="kind", help="NAME is a partition")
    c.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides of the tiny federation")
    c.add_argument("--only", default=None, metavar="PROP,...", help="comma-separated properties (default: all)")
    c.add_argument("--json", action="store_true", help="print the results as one JSON list instead of lines")


def cmd_check(args) -> int:
    from flplat.studies.conformance import check

    only = [p.strip() for p in args.only.split(",") if p.strip()] if args.only else None

    def report(r):
        if not args.json:
            print(r.line(), flush=True)

    if getattr(args, "kind", None):
        from flplat.studies.conformance_data import check_entry

        results = check_entry(args.kind, args.name, args.overrides, only, report)
    else:
        results = check(args.name, args.overrides, only, report)
    if args.json:
        print(json.dumps([{"property": r.prop, "ok": r.ok, "detail": r.detail, "seconds": round(r.seconds, 2)}
                          for r in results], indent=2))
    failed = [r.prop for r in results if not r.ok]
    if failed:
        print(f"flplat check {args.name}: {len(failed)} of {len(results)} properties fail: {', '.join(failed)}",
              file=sys.stderr)
        return 1
    return 0
