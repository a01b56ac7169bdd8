"""Benchmark: FedAvg rounds with the per-client loop against vectorised clients (``federation.vectorize``).

Both sides run in one process on the same prepared federation (same data, partition, initial weights, trainer):
``Orchestrator.run`` with a :class:`~flplat.engine.executor.LocalExecutor` without and with vectorisation, so the
same clients are sampled and they train the same batches. Timed per side: the rounds (client training +
aggregation) with the one evaluation after the last round excluded from the per-round figure, and separately the
executor's ``train`` calls, in wall time and in this process's CPU time (with ``--threads 1`` the CPU time is the
steadier figure on a machine other jobs share). Sides alternate (A B, B A, ...) after an untimed warm-up of each,
so this machine's speed drift hits both alike; the verdict is the median of the per-repeat ratios loop / vectorised.

    python tools/benchmarks/bench_vectorized.py                               # digits + mlp, K=100, q=0.5, E=1, B=32
    python tools/benchmarks/bench_vectorized.py --dataset fmnist --rounds 3   # fmnist + mlp (files found automatically)
    python tools/benchmarks/bench_vectorized.py --dataset fmnist --model fmnist_cnn --rounds 2

A paper's setting: ``--config`` starts from a config file (its data, partition, model and training; FedAvg, CPU,
32-bit, tracking off), ``--set KEY=VALUE`` changes keys of it, and ``--images C,H,W --samples N`` replaces its data
by N random images of that shape in ``--classes`` classes (an ``npz`` file written to a temporary folder: timing
needs the shapes, not the pictures):

    # LeNet-5, Flux MNIST
    python tools/benchmarks/bench_vectorized.py --config configs/flux/table1/mnist_label_l4.yaml --rounds 1
    python tools/benchmarks/bench_vectorized.py --config configs/flux/table1/cifar100_label_l4.yaml --images 3,32,32 \
        --classes 100 --samples 2140 --set partition.name=iid --set partition.num_unseen_clients=0 --rounds 1  # ResNet9
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

from flplat.engine.executor import LocalExecutor  # noqa: E402
from flplat.engine.orchestrator import Orchestrator  # noqa: E402
from flplat.experiment import (  # noqa: E402
    Prepared,
    load_config,  # noqa: E402
    prepare,
)

TARGET = 2.0


class TimedExecutor(LocalExecutor):
    """The platform's executor, also timing its ``train`` calls and counting local steps."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.train_s = self.train_cpu = 0.0
        self.steps = 0

    def train(self, plans, round, groups=None):
        t0, c0 = time.perf_counter(), time.process_time()
        out = super().train(plans, round, groups)
        self.train_s += time.perf_counter() - t0
        self.train_cpu += time.process_time() - c0
        self.steps += sum(r.num_steps for r in out)
        return out


def run_side(p: Prepared, rounds: int, seed: int, vectorize: bool, group: int) -> dict:
    ex = TimedExecutor(p.trainer, p.data, seed, vectorize, group)
    orch = Orchestrator(p.strategy, ex, p.data, rounds, rounds, seed, callbacks=[])
    t0 = time.perf_counter()
    summary = orch.run(p.init_weights)
    total = time.perf_counter() - t0
    round_s = [m["round_time_s"] for m in summary.history]
    return {"total": total, "train": ex.train_s / rounds, "cpu": ex.train_cpu / rounds, "steps": ex.steps,
            "round": statistics.mean(round_s[:-1]) if rounds > 1 else round_s[0],  # the last round also evaluates
            "acc": summary.metrics["global_accuracy"], "weights": summary.state.weights}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--dataset", default="digits", help="data.name (digits, fmnist, ...)")
    ap.add_argument("--model", default="mlp", help="model.name")
    ap.add_argument("--clients", type=int, default=100, help="partition.num_clients (K)")
    ap.add_argument("--fraction", type=float, default=0.5, help="federation.client_fraction (q)")
    ap.add_argument("--epochs", type=int, default=1, help="federation.local_epochs (E)")
    ap.add_argument("--rounds", type=int, default=5, help="federation.rounds per timed run")
    ap.add_argument("--repeats", type=int, default=3, help="timed loop/vectorised pairs")
    ap.add_argument("--alpha", type=float, default=0.3, help="partition.alpha (Dirichlet label skew)")
    ap.add_argument("--min-samples", type=int, default=5,
                    help="partition.min_samples (digits has 1,797 samples: 10 per client is infeasible at K=100)")
    ap.add_argument("--batch-size", type=int, default=32, help="federation.batch_size")
    ap.add_argument("--optimizer", default="adam", help="federation.optimizer.name")
    ap.add_argument("--group", type=int, default=0, help="federation.vectorize_group (0: all clients of a round)")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config", default=None, help="start from this config file (the flags above are then ignored, "
                                                    "except --threads, --group, --rounds, --repeats, --seed)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override (repeatable)")
    ap.add_argument("--images", default=None, metavar="C,H,W", help="random images of this shape as the data")
    ap.add_argument("--samples", type=int, default=2000, help="with --images: how many")
    ap.add_argument("--classes", type=int, default=10, help="with --images: how many classes")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        return run_bench(args, load_config(args.config, overrides(args, tmp)))


def random_images(shape: str, n: int, classes: int, path: Path, seed: int) -> list[str]:
    """An npz of ``n`` random images of ``shape`` (uint8, balanced classes) and the overrides that load it."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=(n, *(int(d) for d in shape.split(","))), dtype=np.uint8)
    np.savez(path, x=x, y=np.arange(n) % classes)
    return ["data.name=npz", f"data.path={path}"]


def overrides(args, tmp: str) -> list[str]:
    data = random_images(args.images, args.samples, args.classes, Path(tmp) / "images.npz", args.seed) \
        if args.images else []
    common = [f"seed={args.seed}", "algorithm.name=fedavg", "fabric.accelerator=cpu", "fabric.precision=32-true",
              f"fabric.num_threads={args.threads}", "tracking.enabled=false"]
    if args.config:
        return [*common, *data, *args.set]
    return [*common, *(data or [f"data.name={args.dataset}"]), f"model.name={args.model}",
            "partition.name=dirichlet", f"partition.num_clients={args.clients}", f"partition.alpha={args.alpha}",
            f"partition.min_samples={args.min_samples}", f"federation.client_fraction={args.fraction}",
            f"federation.local_epochs={args.epochs}", f"federation.batch_size={args.batch_size}",
            f"federation.optimizer.name={args.optimizer}", *args.set]


def run_bench(args, cfg) -> int:
    p = prepare(cfg)
    n = p.data.num_samples("train")
    f = cfg.federation
    print(f"python {platform.python_version()}  torch {torch.__version__}  threads={torch.get_num_threads()}  "
          f"cpus={os.cpu_count()}  {platform.machine()}")
    print(f"{cfg.data.name}{args.images and f' {args.images}' or ''}/{cfg.model.name}: K={cfg.partition.num_clients} "
          f"q={f.client_fraction} E={f.local_epochs} B={f.batch_size} {f.optimizer.name} lr={f.optimizer.lr}  "
          f"partition {cfg.partition.name}  train samples/client min {n.min()} mean {n.mean():.0f} max {n.max()}  "
          f"params={p.trainer.layout.size}  rounds/run={args.rounds}  group={args.group or 'all'}")

    run_side(p, 1, args.seed, False, args.group)  # warm-up, untimed
    run_side(p, 1, args.seed, True, args.group)
    rows = []
    for i in range(args.repeats):
        order = (False, True) if i % 2 == 0 else (True, False)
        res = {}
        for vec in order:
            gc.collect()
            res[vec] = run_side(p, args.rounds, args.seed, vec, args.group)
        loop, vec = res[False], res[True]
        if loop["steps"] != vec["steps"]:
            raise SystemExit(f"step counts differ: loop {loop['steps']}, vectorised {vec['steps']}")
        rows.append((i + 1, "L->V" if order[0] is False else "V->L", loop, vec, os.getloadavg()[0]))

    print(f"\n{'repeat':>6} {'order':>5} {'loop s/round':>12} {'vec s/round':>11} {'ratio':>6}   "
          f"{'loop train s':>12} {'vec train s':>11} {'ratio':>6}   {'loop CPU s':>10} {'vec CPU s':>9} {'ratio':>6} "
          f"{'load1':>6}")
    for i, order, lo, ve, load in rows:
        print(f"{i:>6} {order:>5} {lo['round']:>12.3f} {ve['round']:>11.3f} {lo['round'] / ve['round']:>6.2f}   "
              f"{lo['train']:>12.3f} {ve['train']:>11.3f} {lo['train'] / ve['train']:>6.2f}   "
              f"{lo['cpu']:>10.3f} {ve['cpu']:>9.3f} {lo['cpu'] / ve['cpu']:>6.2f} {load:>6.2f}")
    r_round = statistics.median(r[2]["round"] / r[3]["round"] for r in rows)
    r_train = statistics.median(r[2]["train"] / r[3]["train"] for r in rows)
    r_cpu = statistics.median(r[2]["cpu"] / r[3]["cpu"] for r in rows)
    print(f"median speed-up loop/vectorised: per round {r_round:.2f}x, client training only {r_train:.2f}x "
          f"(CPU time {r_cpu:.2f}x) (target >= {TARGET:.1f}x per round: {'PASS' if r_round >= TARGET else 'FAIL'})")
    med = {side: {k: statistics.median(r[j][k] for r in rows) for k in ("round", "train", "cpu")}
           for side, j in (("loop", 2), ("vectorised", 3))}
    print("medians, s per round: " + ", ".join(f"{side} {m['round']:.3f} (training {m['train']:.3f}, CPU "
                                               f"{m['cpu']:.3f})" for side, m in med.items()))
    lo, ve = rows[-1][2], rows[-1][3]
    diff = (lo["weights"] - ve["weights"]).abs().max().item()
    print(f"local steps per run: {lo['steps']}  final accuracy: loop {lo['acc']:.4f}, vectorised {ve['acc']:.4f}  "
          f"max |w_loop - w_vec| = {diff:.2e}")
    if max(r[4] for r in rows) > (os.cpu_count() or 1):
        hint = "" if torch.get_num_threads() == 1 else " (multi-threaded ones badly so: compare with --threads 1)"
        print(f"note: the 1-minute load average exceeded the {os.cpu_count()} CPUs (other processes); wall times are "
              f"erratic{hint}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
