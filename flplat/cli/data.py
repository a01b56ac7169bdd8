"""`flplat partition-stats`, `flplat noniid-plot`, `flplat list`: the datasets, partitions and their non-IID
metrics, and the registries; no training, no MLflow run."""

from __future__ import annotations

import json
import os
import sys

from flplat.errors import ConfigError


def add_partition_stats(sub) -> None:
    s = sub.add_parser("partition-stats", help="print per-client label counts and non-IID metrics",
                       description="Partition a dataset and print each client's label counts and the non-IID "
                                   "metrics (PSI/WPSI, Hellinger, JSD, EMD).")
    s.add_argument("--dataset", default="digits", help="dataset name (default: digits)")
    s.add_argument("--partition", default="dirichlet", help="iid | dirichlet | similarity (default: dirichlet)")
    s.add_argument("--alpha", type=float, default=0.3, help="Dirichlet concentration (default 0.3)")
    s.add_argument("--s", type=float, default=0.5, dest="similarity", help="Similarity S in [0,1] (default 0.5)")
    s.add_argument("--clients", type=int, default=10, help="number of clients (default 10)")
    s.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    s.add_argument("--data-root", default=None, help="directory holding the dataset files")
    s.add_argument("--json", action="store_true", help="print JSON (default: a readable table)")


def add_noniid_plot(sub) -> None:
    npl = sub.add_parser("noniid-plot", help="Fig. 3: WPSI / HD / JSD / EMD against Dirichlet α and Similarity S",
                         description="Partition a dataset for several α and S values and plot the non-IID metrics "
                                     "(means over seeds); also prints them as JSON.")
    npl.add_argument("--dataset", default="digits")
    npl.add_argument("--clients", type=int, default=10)
    npl.add_argument("--alphas", default="50,5,1,0.7,0.5,0.3,0.2,0.1,0.09,0.07,0.05")
    npl.add_argument("--s-values", default="1,0.9,0.7,0.5,0.3,0.2,0.1,0.07,0.05,0.03,0")
    npl.add_argument("--seeds", default="0,1,2,3,4")
    npl.add_argument("--data-root", default=None)
    npl.add_argument("--out", default="noniid.png", help="output image (default noniid.png)")


def add_list(sub) -> None:
    sub.add_parser("list", help="list datasets, partitions, models and algorithms",
                   description="List the registered datasets, partitions, models and algorithms, and where each "
                               "comes from: built-in, or which plugin (module, distribution, entry point).")


def cmd_partition_stats(args) -> int:
    from flplat.data.datasets import load_dataset
    from flplat.data.partitions import build_federation
    from flplat.experiment import load_config
    from flplat.metrics.noniid import client_metrics, noniid_summary
    from flplat.protocol.seeding import derive_seed

    own = {"dirichlet": [f"partition.alpha={args.alpha}"], "similarity": [f"partition.similarity={args.similarity}"]}
    overrides = [f"data.name={args.dataset}", f"partition.name={args.partition}", *own.get(args.partition, []),
                 f"partition.num_clients={args.clients}", f"seed={args.seed}"]
    if args.data_root:
        overrides.append(f"data.root={args.data_root}")
    cfg = load_config(None, overrides)
    dataset = load_dataset(cfg.data, derive_seed(cfg.seed, "data"))
    fed = build_federation(dataset, cfg.partition, derive_seed(cfg.seed, "partition"))
    counts = fed.label_counts("all")  # multi-label data: per label, the number of samples positive for it
    sizes = fed.num_samples("all")
    per = client_metrics(counts)
    out = {
        "dataset": cfg.data.name, "partition": cfg.partition.name, "num_clients": fed.num_clients,
        "num_classes": fed.num_classes, "seed": cfg.seed,
        "params": {"alpha": cfg.partition.alpha} if cfg.partition.name == "dirichlet" else
                  ({"s": cfg.partition.similarity} if cfg.partition.name == "similarity" else {}),
        "summary": {k: float(v) for k, v in noniid_summary(counts).items()},
        "clients": [{"client": k, "num_samples": int(sizes[k]), "label_counts": counts[k].tolist(),
                     **{m: float(per[m][k]) for m in per}} for k in range(fed.num_clients)],
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{out['dataset']} / {out['partition']} {out['params']} / {fed.num_clients} clients / seed {cfg.seed}")
    print("  " + "  ".join(f"{k}={v:.4f}" for k, v in out["summary"].items()))
    for c in out["clients"]:
        print(f"  client {c['client']:>4} n={c['num_samples']:>6} psi={c['psi']:.4f} counts={c['label_counts']}")
    return 0


def _floats(text: str, flag: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{flag}={text!r} must be comma-separated numbers") from None


def cmd_noniid_plot(args) -> int:
    from flplat.data.datasets import load_dataset
    from flplat.experiment import load_config
    from flplat.protocol.seeding import derive_seed
    from flplat.tracking.reports import noniid_curves, plot_noniid_curves

    over = [f"data.name={args.dataset}"] + ([f"data.root={args.data_root}"] if args.data_root else [])
    cfg = load_config(None, over)
    seeds = [int(x) for x in _floats(args.seeds, "--seeds")]
    alphas, s_values = _floats(args.alphas, "--alphas"), _floats(args.s_values, "--s-values")
    if not seeds:
        raise ConfigError(f"--seeds={args.seeds!r} names no seed; allowed: comma-separated integers, e.g. 0,1,2")
    if any(not (a > 0) or a == float("inf") for a in alphas):
        raise ConfigError(f"--alphas={args.alphas!r} is out of range; allowed: finite numbers > 0")
    if any(not (0.0 <= v <= 1.0) for v in s_values):
        raise ConfigError(f"--s-values={args.s_values!r} is out of range; allowed: numbers in [0, 1]")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir):
        raise ConfigError(f"--out={args.out!r}: directory {out_dir} does not exist; allowed: a path in an existing "
                          "directory")
    dataset = load_dataset(cfg.data, derive_seed(0, "data"))
    skipped: list[str] = []
    curves = noniid_curves(dataset, args.clients, alphas, s_values, seeds, skipped=skipped)
    if not any(curves.values()):
        raise ConfigError(f"--clients={args.clients}: no partition can meet any point ({', '.join(skipped) or 'none'}"
                          f": {args.dataset} cannot give {args.clients} clients 10 samples each at these settings); "
                          "allowed: fewer --clients, larger --alphas / --s-values")
    if skipped:
        print(f"flplat: warning: skipped {len(skipped)} point(s) no partition can meet with --clients="
              f"{args.clients}: {', '.join(skipped)}", file=sys.stderr)
    plot_noniid_curves(curves, args.out)
    print(json.dumps(curves, indent=2))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def cmd_list(args) -> int:
    """One line per registry: the built-in names, then each plugin's names with where they come from (the plugin
    module, and the distribution and entry point when an installed package declared it)."""
    from flplat.algorithms import ALGORITHMS
    from flplat.data.datasets import DATASETS
    from flplat.data.partitions import PARTITIONS
    from flplat.models import MODELS
    from flplat.plugins import load_plugins
    from flplat.protocol.registry import BUILTIN, origin

    load_plugins()  # entry points and $FLPLAT_PLUGINS (--plugin)
    for title, kind, reg in (("datasets", "dataset", DATASETS), ("partitions", "partition", PARTITIONS),
                             ("models", "model", MODELS), ("algorithms", "algorithm", ALGORITHMS)):
        by: dict[str, list[str]] = {}
        for name in sorted(reg):
            by.setdefault(origin(kind, name), []).append(name)
        groups = [f"{', '.join(by.pop(BUILTIN, []))} ({BUILTIN})"]
        groups += [f"{', '.join(names)} ({where})" for where, names in sorted(by.items())]
        print(f"{title}: {'; '.join(groups)}")
    return 0
