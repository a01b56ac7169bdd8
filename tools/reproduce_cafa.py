"""Reproduce CAFA's tables: Tables II-III (CBCC's IID detection) and Tables IV-V (windowed / best accuracy of FedAvg,
FedProx, CAFA and the CBCC-only / ABFA-only ablations).

Examples (the runs of docs/results.md):
  python tools/reproduce_cafa.py detection --dataset fmnist --seeds 0 1 2 3 4
  python tools/reproduce_cafa.py train --config configs/cafa/table5_fmnist.yaml --seeds 0 \\
      --set federation.rounds=50 federation.accuracy_window=10 partition.size_min=0.1 partition.size_max=0.2 \\
      fabric.num_threads=1 --out docs/results/cafa/table5.json

``detection`` partitions the dataset with ``partition.name=cafa`` (25% / 50% IID; 20, 40, 60 clients as the paper's
Cases 1-3) and runs CBCC exactly as the ``cafa`` strategy does (class proportions of the train splits, silhouette
K-means over k = 2..n-1, largest cluster = IID); no training. ``train`` runs every method on one config (each an
MLflow run in the config's experiment), keeps the per-round global test accuracy in ``--out`` (JSON) and prints
Table IV (mean accuracy per window of ``federation.accuracy_window`` rounds) and Table V (best accuracy, CAFA's
improvement). ``table`` re-prints the tables from such JSON files (merged; ``--rounds R`` keeps each run's first R
rounds). ``import`` reads the per-round accuracy of MLflow runs by name (also of runs stopped early) into such a file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's flplat, not an installed one

METHODS = {  # name in the tables -> overrides
    "FedAvg": ["algorithm.name=fedavg"],
    "FedProx": ["algorithm.name=fedprox"],
    "CAFA": ["algorithm.name=cafa"],
    "CBCC-only": ["algorithm.name=cafa", "algorithm.use_abfa=false"],
    "ABFA-only": ["algorithm.name=cafa", "algorithm.use_cbcc=false"],
}


def detection(args) -> None:
    from flplat.data.datasets import load_dataset
    from flplat.data.partitions import build_federation
    from flplat.engine.state import derive_seed
    from flplat.experiment import load_config
    from flplat.maths.cafa_weights import cbcc_weights, class_proportions
    from flplat.maths.clustering import silhouette_kmeans
    from flplat.metrics.iid_detection import detection_metrics

    for frac, title in ((0.25, "Table II: 25% IID"), (0.5, "Table III: 50% IID")):
        print(f"\n### {title} ({args.dataset}, mean over seeds {' '.join(map(str, args.seeds))})\n")
        print("| case | IID | non-IID | k (mean) | Acc | Precision | Recall | F1 |\n|---|---|---|---|---|---|---|---|")
        avg = []
        for case, k in enumerate((20, 40, 60), 1):
            rows = []
            for seed in args.seeds:
                cfg = load_config(None, [f"data.name={args.dataset}", "partition.name=cafa",
                                         f"partition.num_clients={k}", f"partition.iid_fraction={frac}",
                                         "partition.train_fraction=0.8", "partition.val_fraction=0.2",
                                         "partition.test_fraction=0.0", f"seed={seed}", *args.set])
                ds = load_dataset(cfg.data, derive_seed(seed, "data"))
                fed = build_federation(ds, cfg.partition, derive_seed(seed, "partition"))
                res = silhouette_kmeans(class_proportions(fed.label_counts("train")),
                                        rng=np.random.default_rng(derive_seed(seed, "server")).spawn(1)[0])
                _, pred, _ = cbcc_weights(res.labels)
                d = detection_metrics(pred, fed.meta["iid"])
                rows.append([res.k, d["accuracy"], d["precision"], d["recall"], d["f1"]])
            m = np.mean(rows, axis=0)
            avg.append(m[1:])
            n_iid = round(frac * k)
            cells = " | ".join(f"{v:.2f}" for v in m[1:])
            print(f"| Case {case} | {n_iid} | {k - n_iid} | {m[0]:.1f} | {cells} |")
        a = np.mean(avg, axis=0)
        print("| Average | - | - | - | " + " | ".join(f"{v:.2f}" for v in a) + " |")


def train(args) -> None:
    from flplat.experiment import load_config, run

    out = json.loads(Path(args.out).read_text()) if Path(args.out).exists() else {}
    for seed in args.seeds:
        for name, over in METHODS.items():
            if args.methods and name not in args.methods:
                continue
            key = f"{name}/seed{seed}"
            if key in out:
                continue
            cfg = load_config(args.config, [*args.set, *over, f"seed={seed}", f"tracking.run_name={name}-s{seed}"])
            t0 = time.perf_counter()
            summary, _ = run(cfg, progress=False)
            acc = [h.get("global_test_accuracy", float("nan")) for h in summary.history]
            out[key] = {"acc": acc, "window": int(cfg.federation.accuracy_window), "final": summary.final}
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(out, indent=1))
            print(f"{key}: best={max(acc):.4f} last={acc[-1]:.4f} {time.perf_counter() - t0:.0f}s", file=sys.stderr,
                  flush=True)
    tables(out)


def import_runs(args) -> None:
    """Per-round ``global_test_accuracy`` of MLflow runs (by run name, e.g. ``FedProx-s0``; also runs that were
    stopped early) into a JSON file like ``train`` writes."""
    from mlflow.tracking import MlflowClient

    from flplat.tracking.runs import store_uris

    client = MlflowClient(tracking_uri=store_uris(None, args.store_dir)[0])
    exp = client.get_experiment_by_name(args.experiment)
    out = json.loads(Path(args.out).read_text()) if Path(args.out).exists() else {}
    for name in args.runs:
        runs = client.search_runs([exp.experiment_id], f"attributes.run_name = '{name}'", max_results=1,
                                  order_by=["attributes.start_time DESC"])
        hist = sorted((m.step, m.value) for m in client.get_metric_history(runs[0].info.run_id, "global_test_accuracy"))
        method, seed = name.rsplit("-s", 1)
        out[f"{method}/seed{seed}"] = {"acc": [v for _, v in hist], "window": args.window, "final": {},
                                       "run_id": runs[0].info.run_id}
        print(f"{name}: {len(hist)} rounds", file=sys.stderr)
    Path(args.out).write_text(json.dumps(out, indent=1))


def tables(out: dict, rounds: int | None = None) -> None:
    """Tables IV-V; ``rounds`` truncates every history to its first rounds (a run's first R rounds are exactly those
    of an R-round run with the same config and seed)."""
    from flplat.metrics.curves import curve_summary

    if rounds:
        short = [k for k, v in out.items() if len(v["acc"]) < rounds]
        if short:
            raise SystemExit(f"runs with fewer than {rounds} rounds: {', '.join(short)}")
        out = {k: {**v, "acc": v["acc"][:rounds]} for k, v in out.items()}

    names = [n for n in METHODS if any(k.startswith(n + "/") for k in out)]
    summ = {}
    for n in names:
        runs = [v for k, v in out.items() if k.startswith(n + "/")]
        per = [curve_summary([{"a": a} for a in r["acc"]], "a", r["window"]) for r in runs]
        summ[n] = (np.mean([p["best"] for p in per]), np.mean([[v for _, v in p["windows"]] for p in per], axis=0),
                   [r for r, _ in per[0]["windows"]], len(per))
    ends = summ[names[0]][2]
    w = ends[1] - ends[0] if len(ends) > 1 else ends[0]
    print("\n### Table IV style: mean global test accuracy (%) per window of rounds\n")
    print("| method | " + " | ".join(f"{e - w}-{e - 1}" for e in ends) + " |")
    print("|---|" + "---|" * len(ends))
    for n in names:
        print(f"| {n} | " + " | ".join(f"{100 * v:.2f}" for v in summ[n][1]) + " |")
    print("\n### Table V style: best global test accuracy (%) and CAFA's improvement (points)\n")
    print("| method | best accuracy | CAFA improvement | runs |\n|---|---|---|---|")
    cafa = summ.get("CAFA", (None,))[0]
    for n in names:
        imp = "—" if cafa is None or n == "CAFA" else f"{100 * (cafa - summ[n][0]):+.2f}"
        print(f"| {n} | {100 * summ[n][0]:.2f} | {imp} | {summ[n][3]} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("detection")
    d.add_argument("--dataset", default="fmnist")
    d.add_argument("--seeds", nargs="+", type=int, default=[0])
    d.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    t = sub.add_parser("train")
    t.add_argument("--config", required=True)
    t.add_argument("--seeds", nargs="+", type=int, default=[0])
    t.add_argument("--methods", nargs="*", default=[], help=f"subset of {', '.join(METHODS)}")
    t.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    t.add_argument("--out", required=True)
    tb = sub.add_parser("table")
    tb.add_argument("--out", required=True, nargs="+", help="one or more JSON files written by `train`")
    tb.add_argument("--rounds", type=int, default=None, help="use the first ROUNDS rounds of every run")
    im = sub.add_parser("import")
    im.add_argument("--experiment", default="cafa_table5")
    im.add_argument("--runs", nargs="+", required=True, help="MLflow run names, e.g. FedProx-s0")
    im.add_argument("--window", type=int, default=10)
    im.add_argument("--store-dir", default="mlruns")
    im.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.cmd == "detection":
        detection(args)
    elif args.cmd == "train":
        train(args)
    elif args.cmd == "import":
        import_runs(args)
    else:
        tables({k: v for f in args.out for k, v in json.loads(Path(f).read_text()).items()}, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
