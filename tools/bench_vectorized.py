"""Benchmark: FedAvg rounds with the per-client loop against vectorised clients (``federation.vectorize``).

Both sides run in one process on the same prepared federation (same data, partition, initial weights, trainer):
``Orchestrator.run`` with a :class:`~flplat.engine.executor.LocalExecutor` without and with vectorisation, so the
same clients are sampled and they train the same batches. Timed per side: the rounds (client training +
aggregation) with the one evaluation after the last round excluded from the per-round figure, and separately the
executor's ``train`` calls. Sides alternate (A B, B A, ...) after an untimed warm-up of each, so this machine's
speed drift hits both alike; the verdict is the median of the per-repeat ratios loop / vectorised.

    python tools/bench_vectorized.py                               # digits + mlp, K=100, q=0.5, E=1, B=32
    python tools/bench_vectorized.py --dataset fmnist --rounds 3   # fmnist + mlp (files found automatically)
    python tools/bench_vectorized.py --dataset fmnist --model fmnist_cnn --rounds 2
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from flplat.engine.orchestrator import LocalExecutor, Orchestrator  # noqa: E402
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
        self.train_s = 0.0
        self.steps = 0

    def train(self, plans, round, groups=None):
        t0 = time.perf_counter()
        out = super().train(plans, round, groups)
        self.train_s += time.perf_counter() - t0
        self.steps += sum(r.num_steps for r in out)
        return out


def run_side(p: Prepared, rounds: int, seed: int, vectorize: bool, group: int) -> dict:
    ex = TimedExecutor(p.trainer, p.data, seed, vectorize, group)
    orch = Orchestrator(p.strategy, ex, p.data, rounds, rounds, seed, callbacks=[])
    t0 = time.perf_counter()
    summary = orch.run(p.init_weights)
    total = time.perf_counter() - t0
    round_s = [m["round_time_s"] for m in summary.history]
    return {"total": total, "train": ex.train_s / rounds, "steps": ex.steps,
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
    args = ap.parse_args(argv)

    cfg = load_config(None, [
        f"seed={args.seed}", f"data.name={args.dataset}", f"model.name={args.model}", "algorithm.name=fedavg",
        "partition.name=dirichlet", f"partition.num_clients={args.clients}", f"partition.alpha={args.alpha}",
        f"partition.min_samples={args.min_samples}", f"federation.client_fraction={args.fraction}",
        f"federation.local_epochs={args.epochs}", f"federation.batch_size={args.batch_size}",
        f"federation.optimizer.name={args.optimizer}", "fabric.accelerator=cpu", "fabric.precision=32-true",
        f"fabric.num_threads={args.threads}", "tracking.enabled=false",
    ])
    p = prepare(cfg)
    n = p.data.num_samples("train")
    print(f"python {platform.python_version()}  torch {torch.__version__}  threads={torch.get_num_threads()}  "
          f"cpus={os.cpu_count()}  {platform.machine()}")
    print(f"{args.dataset}/{args.model}: K={args.clients} q={args.fraction} E={args.epochs} B={args.batch_size} "
          f"{args.optimizer} alpha={args.alpha}  train samples/client min {n.min()} mean {n.mean():.0f} max {n.max()}  "
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
          f"{'loop train s':>12} {'vec train s':>11} {'ratio':>6} {'load1':>6}")
    for i, order, lo, ve, load in rows:
        print(f"{i:>6} {order:>5} {lo['round']:>12.3f} {ve['round']:>11.3f} {lo['round'] / ve['round']:>6.2f}   "
              f"{lo['train']:>12.3f} {ve['train']:>11.3f} {lo['train'] / ve['train']:>6.2f} {load:>6.2f}")
    r_round = statistics.median(r[2]["round"] / r[3]["round"] for r in rows)
    r_train = statistics.median(r[2]["train"] / r[3]["train"] for r in rows)
    print(f"median speed-up loop/vectorised: per round {r_round:.2f}x, client training only {r_train:.2f}x "
          f"(target >= {TARGET:.1f}x per round: {'PASS' if r_round >= TARGET else 'FAIL'})")
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
