"""`flplat check NAME [key=value ...]`: the conformance suite (:mod:`flplat.studies.conformance`) on a registered
algorithm, built-in or plugin; ``--dataset`` / ``--partition`` / ``--model``: NAME is a dataset / partition / model and
the suite is :mod:`flplat.studies.conformance_data`'s (dataset, partition) or :mod:`flplat.studies.model_check`'s
(model). One line per property, exit 1 when a property fails."""

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
  flplat check --model lenet5
  flplat check --model mymodel model.width=32 --input-shape 3,32,32

Properties: registry, smoke, determinism, sharded (1 vs 2 processes), checkpoint (round trip), kill_resume
(SIGKILL + flplat run --resume), vectorize, failures (30 % drop-outs), invalid_config, declarations
(reduces_across_shards), evaluation (the declared models, trained; clustered state reached). They run on a tiny
synthetic federation (600 samples, 6 clients, an MLP, 3 rounds); KEY=VALUE overrides come last (e.g. what the
algorithm needs to run there). Exit status: 0 all pass, 1 a property fails, 2 bad name, override or --only.
--dataset NAME: registry, dtypes, shapes, classes, determinism, invalid_config on the dataset loaded with the overrides.
--partition NAME: registry, disjoint, in_range, pure, planted, invalid_config on a small check dataset (digits with
natural clients and metadata; data.* overrides load another).
--model NAME: build, split (features -> (B, D), head the final Linear D -> C), init (same seed, same weights),
vectorize (or the reason)."""


def add_check(sub) -> None:
    c = sub.add_parser("check", help="run the conformance suite on a registered algorithm (built-in or plugin)",
                       description="Check the platform's guarantees on one registered algorithm: one line per "
                                   "property, PASS or FAIL with a short reason.", epilog=EPILOG_CHECK,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("name", help="a registered algorithm name (see `flplat list`), or with --dataset / --partition / "
                                "--model a dataset / partition / model name")
    kind = c.add_mutually_exclusive_group()
    kind.add_argument("--dataset", action="store_const", const="dataset", dest="kind", help="NAME is a dataset")
    kind.add_argument("--partition", action="store_const", const="partition", dest="kind", help="NAME is a partition")
    kind.add_argument("--model", action="store_const", const="model", dest="kind", help="NAME is a model")
    c.add_argument("--input-shape", default=None, metavar="C,H,W",
                   help="with --model: the input shape to build it for (default: the first of 1,28,28 / 3,32,32 / 20 "
                        "it accepts)")
    c.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides of the tiny federation")
    c.add_argument("--only", default=None, metavar="PROP,...", help="comma-separated properties (default: all)")
    c.add_argument("--json", action="store_true", help="print the results as one JSON list instead of lines")


def cmd_check(args) -> int:
    only = [p.strip() for p in args.only.split(",") if p.strip()] if args.only else None

    def report(r):
        if not args.json:
            print(r.line(), flush=True)

    kind = getattr(args, "kind", None)
    if args.input_shape and kind != "model":
        from flplat.errors import ConfigError

        raise ConfigError("--input-shape is only for --model NAME")
    if kind == "model":
        from flplat.studies.model_check import check_model

        results = check_model(args.name, args.overrides, _input_shape(args.input_shape), only, report)
    elif kind:
        from flplat.studies.conformance_data import check_entry

        results = check_entry(kind, args.name, args.overrides, only, report)
    else:
        from flplat.studies.conformance import check

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


def _input_shape(text):
    """``--input-shape C,H,W`` as a list of ints (None when not given)."""
    from flplat.errors import ConfigError

    if not text:
        return None
    try:
        return [int(v) for v in text.split(",")]
    except ValueError:
        raise ConfigError(f"--input-shape={text!r} is not valid; allowed: positive integers separated by commas, "
                          "e.g. 3,32,32") from None
