"""Benchmark: the platform's FedAvg against a minimal hand-written PyTorch FedAvg loop doing the same work.

Both sides train on the same pooled tensors and client index splits (from ``flplat.experiment.prepare``), start
from the same initial weights, sample the same clients each round, and run the same local epochs of Adam (fresh
per client) over the same mini-batches (same ``randperm`` seeds, same batch bounds), then average the client
models weighted by their training-set sizes. Both evaluate once, after the last round, on every client's test
split (and on the pooled global test set when the dataset has one).

Timed: the federated training plus that final evaluation -- ``Orchestrator.run`` (tracking off, no callbacks)
against the benchmarks' hand-written FedAvg (``reference_fedavg.py``, shared with ``bench_e2e.py`` and
``bench_sharded.py``). Data loading, partitioning and model construction are done once, untimed.
The two sides alternate (A B, B A, A B, ...) after one untimed warm-up each, so the machine's speed drift and
concurrent load hit both alike; the verdict is the median of the per-repeat ratios platform / reference (wall
clock); the ratio of process CPU times is printed too, as it is far less sensitive to other processes.

The reference runs in the environment a script that never imports lightning would see: lightning's import sets
``PYTORCH_NVML_BASED_CUDA_CHECK=1`` for the whole process, which makes every Adam step query NVML (see
docs/performance.md); ``--shared-env`` keeps it for the reference too, isolating the training loop's own overhead.

    python tools/benchmarks/bench_fedavg.py                                  # digits + mlp, the quickstart federation
    python tools/benchmarks/bench_fedavg.py --dataset fmnist --model mlp --clients 100 --fraction 0.5 \
        --epochs 1 --rounds 5
    python tools/benchmarks/bench_fedavg.py --dataset fmnist --model fmnist_cnn --clients 100 --epochs 1 \
        --rounds 1 --repeats 3
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

# Importing lightning (which flplat does) sets PYTORCH_NVML_BASED_CUDA_CHECK=1 for the whole process; with it, every
# Adam/AdamW step of torch >= 2.8 asks NVML for the CUDA device count (a dlopen per step when CUDA is not
# initialised). A hand-written script that never imports lightning does not pay that, so by default the reference
# runs with the variable as it was before the import (see --shared-env and docs/performance.md).
NVML_VAR = "PYTORCH_NVML_BASED_CUDA_CHECK"
NVML_BEFORE = os.environ.get(NVML_VAR)

import reference_fedavg as ref  # noqa: E402
from benchlib import fedavg_overrides  # noqa: E402

from flplat.api import derive_seed, sample_uniform  # noqa: E402
from flplat.engine.executor import LocalExecutor  # noqa: E402
from flplat.engine.orchestrator import Orchestrator  # noqa: E402
from flplat.experiment import (  # noqa: E402
    Prepared,
    load_config,  # noqa: E402
    prepare,
)
from flplat.models import build_model  # noqa: E402

TARGET = 1.15


# ------------------------------------------------------------------------------------------ the platform side


class RecordingExecutor(LocalExecutor):
    """The platform's executor, also recording which clients trained each round and how many steps they took."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.selected: list[list[int]] = []
        self.steps = 0

    def train(self, plans, round, groups=None):
        self.selected.append([k for k, _ in plans])
        out = super().train(plans, round, groups)
        self.steps += sum(r.num_steps for r in out)
        return out


def run_platform(p: Prepared, rounds: int, seed: int):
    ex = RecordingExecutor(p.trainer, p.data, seed)
    orch = Orchestrator(p.strategy, ex, p.data, rounds, rounds, seed, callbacks=[])
    t0, c0 = time.perf_counter(), time.process_time()
    summary = orch.run(p.init_weights)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    m = summary.metrics
    return dt, {"cpu": cpu, "acc": m["global_accuracy"], "global_test_acc": m.get("global_test_accuracy", float("nan")),
                "steps": ex.steps, "selected": ex.selected}


# ----------------------------------------------------------------------------------------- the reference side


@contextlib.contextmanager
def env_var(name: str, value: str | None):
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def run_reference(p: Prepared, model, init_sd, selections, seed: int, shared_env: bool = False):
    with env_var(NVML_VAR, os.environ.get(NVML_VAR) if shared_env else NVML_BEFORE):
        return _run_reference(p, model, init_sd, selections, seed)


def _run_reference(p: Prepared, model, init_sd, selections, seed: int):
    f = p.cfg.federation
    d = p.data
    t0, c0 = time.perf_counter(), time.process_time()
    model.load_state_dict(init_sd)
    train = [torch.as_tensor(c.train, dtype=torch.long) for c in d.clients]
    test = [torch.as_tensor(c.test, dtype=torch.long) for c in d.clients]
    trained = ref.fedavg(model, d.x, d.y, train, selections, epochs=int(f.local_epochs),
                         batch_size=int(f.batch_size), lr=float(f.optimizer.lr),
                         # the platform's batch order: each (round, client)'s own seed, as its executor draws it
                         generator=lambda t, k: torch.Generator().manual_seed(derive_seed(seed, "train", t, k)))
    acc, gacc = ref.evaluate(model, d.x, d.y, test, d.x_global_test, d.y_global_test)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    return dt, {"cpu": cpu, "acc": acc, "global_test_acc": gacc, "steps": trained.steps}


# ---------------------------------------------------------------------------------------------------- driver


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--dataset", default="digits", help="data.name (digits, fmnist, mnist, synthetic, ...)")
    ap.add_argument("--model", default="mlp", help="model.name (mlp, fmnist_cnn, ...)")
    ap.add_argument("--clients", type=int, default=10, help="partition.num_clients (K)")
    ap.add_argument("--fraction", type=float, default=0.5, help="federation.client_fraction (q)")
    ap.add_argument("--epochs", type=int, default=5, help="federation.local_epochs (E)")
    ap.add_argument("--rounds", type=int, default=20, help="federation.rounds (T)")
    ap.add_argument("--repeats", type=int, default=5, help="timed platform/reference pairs")
    ap.add_argument("--alpha", type=float, default=0.3, help="partition.alpha (Dirichlet label skew)")
    ap.add_argument("--batch-size", type=int, default=32, help="federation.batch_size")
    ap.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads for both sides (0: torch's default, one per core)")
    ap.add_argument("--shared-env", action="store_true",
                    help=f"run the reference with lightning's {NVML_VAR}=1 too (isolates the training loop's own "
                         "overhead); default: the environment a script that never imports lightning sees")
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed one-round warm-up of each side")
    args = ap.parse_args(argv)

    overrides = fedavg_overrides(args, args.threads)
    cfg = load_config(None, overrides)
    t0 = time.perf_counter()
    p = prepare(cfg)  # sets torch's thread count when --threads > 0
    prep_s = time.perf_counter() - t0
    d = p.data
    init_sd = {k: v.detach().clone() for k, v in p.trainer.net.state_dict().items()}  # before any training

    # the reference model: same architecture, same initial weights
    ref_model = build_model(cfg.model, d.input_shape, d.num_classes)
    ref_model.load_state_dict(init_sd)
    n_params = sum(t.numel() for t in ref_model.parameters())

    # the same clients per round: the platform's sampling (FedAvg's init_state draws nothing from the rng)
    rng = np.random.default_rng(derive_seed(args.seed, "server"))
    selections = [[int(k) for k in sample_uniform(d.num_clients, args.fraction, rng)] for _ in range(args.rounds)]

    print(f"python {platform.python_version()}  torch {torch.__version__}  threads={torch.get_num_threads()}  "
          f"cpus={os.cpu_count()}  {platform.machine()}")
    print(f"{args.dataset}/{args.model}: K={d.num_clients} q={args.fraction} E={args.epochs} T={args.rounds} "
          f"B={args.batch_size} alpha={args.alpha}  train samples={int(d.num_samples('train').sum())}  "
          f"params={n_params}  clients/round={len(selections[0])}  (prepare {prep_s:.1f}s, untimed)")
    env_desc = "shared (lightning's" if args.shared_env else "standalone (as before importing lightning:"
    print(f"reference environment: {env_desc} {NVML_VAR}="
          f"{os.environ.get(NVML_VAR) if args.shared_env else NVML_BEFORE})")

    if not args.no_warmup:  # lazy initialisation (allocator, kernels, Fabric wrappers) on both sides, untimed
        run_platform(p, 1, args.seed)
        run_reference(p, ref_model, init_sd, selections[:1], args.seed, args.shared_env)

    rows = []
    for i in range(args.repeats):
        order = ("platform", "reference") if i % 2 == 0 else ("reference", "platform")
        res = {}
        for side in order:
            gc.collect()
            if side == "platform":
                res[side] = run_platform(p, args.rounds, args.seed)
            else:
                res[side] = run_reference(p, ref_model, init_sd, selections, args.seed, args.shared_env)
        (tp, mp), (tr, mr) = res["platform"], res["reference"]
        if mp["selected"] != selections:
            raise SystemExit("the platform sampled different clients than the reference; the comparison is void")
        if mp["steps"] != mr["steps"]:
            raise SystemExit(f"step counts differ: platform {mp['steps']}, reference {mr['steps']}")
        rows.append((i + 1, "->".join(s[0] for s in order), tp, tr, tp / tr, mp, mr, os.getloadavg()[0]))

    print()
    print(f"{'repeat':>6} {'order':>6} {'platform s':>11} {'reference s':>12} {'ratio':>7}   "
          f"{'cpu plat s':>10} {'cpu ref s':>10} {'cpu ratio':>9} {'load1':>6}")
    for i, order, tp, tr, ratio, mp, mr, load in rows:
        print(f"{i:>6} {order:>6} {tp:>11.3f} {tr:>12.3f} {ratio:>7.3f}   "
              f"{mp['cpu']:>10.3f} {mr['cpu']:>10.3f} {mp['cpu'] / mr['cpu']:>9.3f} {load:>6.2f}")
    ratios = [r[4] for r in rows]
    med = statistics.median(ratios)
    cpu_med = statistics.median(r[5]["cpu"] / r[6]["cpu"] for r in rows)
    print(f"median ratio platform/reference (wall): {med:.3f}  (min {min(ratios):.3f}, max {max(ratios):.3f}; "
          f"target <= {TARGET:.2f}: {'PASS' if med <= TARGET else 'FAIL'})")
    print(f"median ratio platform/reference (process CPU time): {cpu_med:.3f}")
    mp, mr = rows[-1][5], rows[-1][6]
    print(f"local steps per run: platform {mp['steps']}, reference {mr['steps']}")
    print(f"final accuracy (pooled client test splits): platform {mp['acc']:.4f}, reference {mr['acc']:.4f}")
    if not np.isnan(mp["global_test_acc"]):
        print(f"final accuracy (global test set):          platform {mp['global_test_acc']:.4f}, "
              f"reference {mr['global_test_acc']:.4f}")
    if max(r[7] for r in rows) > (os.cpu_count() or 1):
        print(f"note: the 1-minute load average exceeded the {os.cpu_count()} CPUs during the run (other processes): "
              "wall times are noisy (with several torch threads, erratic); the CPU-time ratio is the steadier one")
    if abs(mp["acc"] - mr["acc"]) > 0.02:
        print("WARNING: final accuracies differ by more than 2 points", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
