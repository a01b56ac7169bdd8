"""Benchmark: the platform's sharded and vectorised FedAvg against a hand-written 2-process PyTorch FedAvg loop.

Sides (each one a fresh subprocess, timed end to end by this driver; sides alternate A B C, C B A, ... after
one untimed warm-up run of each, so this machine's speed drift hits them alike):

* ``reference`` — the benchmarks' hand-written FedAvg (``reference_fedavg.py``) over ``--procs`` worker processes
  (``torch.multiprocessing`` + gloo, one torch thread each): every worker loads the data and partition with the same
  flplat functions, the round's sampled clients are split greedily by data size, each worker trains its clients one
  after the other (global weights copied in, fresh Adam, ``randperm`` batches) and adds ``n_k · w_k`` to a flat
  buffer, one ``all_reduce`` sums the buffers, and the global model is the quotient; at the end every client's test
  split is scored (sharded, counts all-reduced) and rank 0 scores the global test set.
* ``sharded`` — ``flplat``'s FedAvg with ``fabric.devices=--procs`` on CPU (started as ``flplat run`` starts
  them, :func:`flplat.engine.launch.launch_early`; one torch thread each; the weighted mean is one all-reduce, see
  ``flplat/engine/sharding.py``).
* ``vectorized`` — ``federation.vectorize=true``; ``--vec-devices`` processes (default 1 with
  ``--procs`` threads: vectorised kernels use several threads well).
* ``vectorized2`` — ``federation.vectorize=true`` with ``fabric.devices=--procs``, one thread each (each process
  trains its shard of the round's clients as one stacked group), to compare with ``vectorized`` in the same run.

Both platform sides and the reference sample the same clients (same sampler and seed) and run the same local
epochs and batch sizes, with tracking off and evaluation only after the last round. Reported: end-to-end wall
time of the whole command (process start, imports, data, partition, training, evaluation) and the
steady-state seconds per round (rounds 2..T, as measured inside rank 0), each as the median over repeats, and
the per-repeat ratios platform / reference. Targets: sharded ≤ 1.1 × reference in both, vectorised
MLP ≥ 2 × faster than the reference.

    python tools/benchmarks/bench_sharded.py                                    # fmnist + mlp, K=100, q=0.5, E=1
    python tools/benchmarks/bench_sharded.py --epochs 5
    python tools/benchmarks/bench_sharded.py --model fmnist_cnn --rounds 3 --sides reference,sharded
    # the FMNIST MLP of bench_e2e / bench_vec_bound
    python tools/benchmarks/bench_sharded.py --hidden 200,200 --sides reference,vectorized,vectorized2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from benchlib import fedavg_overrides  # noqa: E402

SHARDED_TARGET = 1.1
VECTORIZED_TARGET = 2.0


def overrides(args, devices: int, threads: int, vectorize: bool) -> list[str]:
    extra = {"model.hidden": f"[{args.hidden}]"} if args.hidden else {}
    return fedavg_overrides(args, threads, **{"federation.vectorize": str(vectorize).lower(),
                                              "fabric.devices": devices, **extra})


# ------------------------------------------------------------------------------------------- platform worker


def platform_worker(args, out: str) -> None:
    from flplat.engine.launch import finish, launch_early
    from flplat.experiment import load_config

    vec = args.worker in ("vectorized", "vectorized2")
    devices = args.vec_devices if args.worker == "vectorized" else args.procs
    threads = max(1, args.procs // devices)
    cfg = load_config(None, overrides(args, devices, threads, vec))
    procs = launch_early(cfg.fabric)  # as `flplat run` does: the other processes start before the heavy imports
    from flplat.engine.sharding import is_main_process
    from flplat.experiment import run

    summary, _ = run(cfg, progress=False)
    finish(procs, 0)
    if is_main_process():
        h = summary.history
        Path(out).write_text(json.dumps({
            "round_s": [m["round_time_s"] for m in h], "acc": h[-1]["global_accuracy"],
            "participants": [m["num_participants"] for m in h]}))


# ------------------------------------------------------------------------------------------ reference worker


def _reference_rank(rank: int, world: int, port: int, args, out: str) -> None:
    """One process of the hand-written FedAvg (``reference_fedavg.py``); the data, partition and model come from the
    same flplat functions as the platform's (loading is not what is compared), the training loop is plain torch."""
    import numpy as np
    import reference_fedavg as ref
    import torch
    import torch.distributed as dist

    from flplat.api import derive_seed, sample_uniform
    from flplat.data.datasets import load_dataset
    from flplat.data.partitions import build_federation
    from flplat.experiment import load_config
    from flplat.models import build_model

    os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)  # a script that never imports lightning
    ref.join(rank, world, port)
    cfg = load_config(None, overrides(args, 1, 1, False))
    seed = args.seed
    torch.manual_seed(derive_seed(seed, "model"))  # any initialisation will do; both sides train the same amount
    d = build_federation(load_dataset(cfg.data, derive_seed(seed, "data")), cfg.partition,
                         derive_seed(seed, "partition"))
    model = build_model(cfg.model, d.input_shape, d.num_classes)
    rng = np.random.default_rng(derive_seed(seed, "server"))  # the platform's sampler and seed: the same clients
    selections = [[int(k) for k in sample_uniform(d.num_clients, args.fraction, rng)] for _ in range(args.rounds)]
    train = [torch.as_tensor(c.train, dtype=torch.long) for c in d.clients]
    test = [torch.as_tensor(c.test, dtype=torch.long) for c in d.clients]
    trained = ref.fedavg(model, d.x, d.y, train, selections, epochs=args.epochs, batch_size=args.batch_size,
                         lr=args.lr, rank=rank, world=world,
                         generator=lambda t, k: torch.Generator().manual_seed(derive_seed(seed, "train", t, k)))
    acc, _ = ref.evaluate(model, d.x, d.y, test, d.x_global_test, d.y_global_test, rank, world)
    total_steps = torch.tensor([trained.steps])
    dist.all_reduce(total_steps)
    if rank == 0:
        Path(out).write_text(json.dumps({"round_s": trained.round_s, "acc": acc, "steps": int(total_steps)}))
    dist.destroy_process_group()


def reference_worker(args, out: str) -> None:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_reference_rank, args=(args.procs, port, args, out), nprocs=args.procs, join=True)


# ---------------------------------------------------------------------------------------------------- driver


def run_side(side: str, argv: list[str], tmp: Path) -> dict:
    out = tmp / f"{side}.json"
    out.unlink(missing_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    for k in ("LOCAL_RANK", "WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, str(Path(__file__).resolve()), *argv, "--worker", side, "--out", str(out)],
                         cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode != 0 or not out.exists():
        raise SystemExit(f"{side} failed (exit {res.returncode}):\n{res.stderr[-3000:]}")
    r = json.loads(out.read_text())
    r["wall"] = wall
    r["steady"] = statistics.mean(r["round_s"][1:]) if len(r["round_s"]) > 1 else r["round_s"][0]
    return r


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--dataset", default="fmnist")
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--fraction", type=float, default=0.5)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--alpha", type=float, default=0.3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--procs", type=int, default=2, help="processes of the reference and the sharded side")
    ap.add_argument("--vec-devices", type=int, default=1, help="processes of the vectorised side")
    ap.add_argument("--hidden", default=None, help="model.hidden of the mlp, comma separated (default: the model's)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sides", default="reference,sharded,vectorized")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker == "reference":
        reference_worker(args, args.out)
        return 0
    if args.worker in ("sharded", "vectorized", "vectorized2"):
        platform_worker(args, args.out)
        return 0

    import tempfile

    import torch

    sides = args.sides.split(",")
    print(f"python {platform.python_version()}  torch {torch.__version__}  cpus={os.cpu_count()}  "
          f"{platform.machine()}")
    print(f"{args.dataset}/{args.model}: K={args.clients} q={args.fraction} E={args.epochs} T={args.rounds} "
          f"B={args.batch_size} alpha={args.alpha}  procs={args.procs}  vectorised side: {args.vec_devices} "
          f"process(es) x {max(1, args.procs // args.vec_devices)} thread(s)")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for side in sides:  # untimed warm-up (file cache, imports)
            run_side(side, argv, tmp)
        rows = []
        for i in range(args.repeats):
            order = sides if i % 2 == 0 else sides[::-1]
            rows.append({side: run_side(side, argv, tmp) for side in order})
            rows[-1]["load"] = os.getloadavg()[0]
            print(f"repeat {i + 1}: " + "  ".join(f"{s} {rows[-1][s]['wall']:.1f}s/{rows[-1][s]['steady']:.3f}s"
                                                  for s in order) + f"  load1 {rows[-1]['load']:.2f}", flush=True)
    ref = "reference" in sides
    print()
    print(f"{'side':>11} {'end-to-end s':>13} {'s/round (2..T)':>15} {'e2e ratio':>10} {'round ratio':>12} "
          f"{'accuracy':>9}")
    for side in sides:
        wall = statistics.median(r[side]["wall"] for r in rows)
        steady = statistics.median(r[side]["steady"] for r in rows)
        e2e = statistics.median(r[side]["wall"] / r["reference"]["wall"] for r in rows) if ref else float("nan")
        rr = statistics.median(r[side]["steady"] / r["reference"]["steady"] for r in rows) if ref else float("nan")
        print(f"{side:>11} {wall:>13.2f} {steady:>15.3f} {e2e:>10.3f} {rr:>12.3f} {rows[-1][side]['acc']:>9.4f}")
    if ref and "sharded" in sides:
        e2e = statistics.median(r["sharded"]["wall"] / r["reference"]["wall"] for r in rows)
        rr = statistics.median(r["sharded"]["steady"] / r["reference"]["steady"] for r in rows)
        ok = e2e <= SHARDED_TARGET and rr <= SHARDED_TARGET
        print(f"sharded / reference: end-to-end {e2e:.3f}, steady-state {rr:.3f} (target <= {SHARDED_TARGET}: "
              f"{'PASS' if ok else 'FAIL'})")
    for vside in ("vectorized", "vectorized2"):
        if ref and vside in sides:
            sp = statistics.median(r["reference"]["steady"] / r[vside]["steady"] for r in rows)
            sp_e2e = statistics.median(r["reference"]["wall"] / r[vside]["wall"] for r in rows)
            print(f"{vside} speed-up over the reference: steady-state {sp:.2f}x, end-to-end {sp_e2e:.2f}x "
                  f"(target >= {VECTORIZED_TARGET}: {'PASS' if sp >= VECTORIZED_TARGET else 'FAIL'})")
    if "vectorized" in sides and "vectorized2" in sides:
        sp = statistics.median(r["vectorized"]["steady"] / r["vectorized2"]["steady"] for r in rows)
        print(f"vectorised, {args.procs} processes x 1 thread against {args.vec_devices} process(es) x "
              f"{max(1, args.procs // args.vec_devices)} thread(s): {sp:.2f}x faster per round (median of the "
              "per-repeat ratios)")
    if max(r["load"] for r in rows) > (os.cpu_count() or 1) + 0.5:
        print(f"note: the 1-minute load average exceeded the {os.cpu_count()} CPUs (other processes): wall times "
              "are noisy")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
