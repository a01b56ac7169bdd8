"""Benchmark: whole ``flplat run`` processes against hand-written PyTorch FedAvg scripts, end to end.

What users feel is the whole command: process start, imports, data decoding, partition, training and
evaluation. This driver times whole processes, alternating the sides (A B C .., .. C B A, ...) after one untimed
warm-up run of each, and reports per side the median end-to-end wall time, the steady-state seconds per round
(rounds 2..T, measured inside the process), the peak RSS of the largest process (``wait4``'s ``ru_maxrss``) and
the median per-repeat ratios against the matching hand-written script.

Sides (``--sides``, default all):

* ``flplat1`` — ``python -m flplat.cli run`` with one process (torch's default threads, 2 here);
* ``flplat2`` — the same with ``fabric.devices=2 fabric.num_threads=1``;
* ``flplatvec`` — the same with ``federation.vectorize=true`` (one process);
* ``ref1`` — a hand-written 1-process script (``--worker ref``, below): it imports only numpy, torch and the
  benchmarks' hand-written FedAvg (``reference_fedavg.py``), decodes the four IDX files itself (gzip +
  ``np.frombuffer``), standardises them with the same constants, and runs FedAvg with a plain ``nn.Sequential`` MLP,
  fresh Adam per client, ``randperm`` batches, a sample-weighted mean, and evaluates every client's test split plus
  the global test set every ``eval_every`` rounds;
* ``ref2`` — the same script as two processes with one thread each: it starts its second process first thing
  (before importing torch, as ``torchrun`` would, so both import in parallel), the round's clients are split
  greedily by size, the weighted sums are all-reduced (gloo) in one flat buffer, client evaluation is sharded.

The script uses the platform's partition (client train/test indices) and its sampled clients, written once by
this driver into a small ``.npz`` before timing (a script's own Dirichlet partition of 60,000 labels takes
milliseconds; the platform's partition time stays inside the platform's figure), so both sides do the same
number of steps. Ratios: ``flplat1`` and ``flplatvec`` against ``ref1``; ``flplat2`` against ``ref2``.

    python tools/benchmarks/bench_e2e.py                                          # the default setting, 3 repeats
    python tools/benchmarks/bench_e2e.py --hidden 128,64                          # the 128-64 MLP
    python tools/benchmarks/bench_e2e.py --sides ref2,flplat2 --rounds 10         # the sharded steady state
    python tools/benchmarks/bench_e2e.py --sides flplat1,flplatvec --baseline /path/to/other/checkout   # before / after

``--baseline DIR`` also runs every flplat side with another checkout's ``flplat`` (``PYTHONPATH=DIR``, its
``configs/quickstart.yaml``) as ``<side>@base``, in the same alternation, and reports this checkout ÷ that one (the
median of the per-repeat ratios): a change's before/after on the same machine at the same moment.

Setting: FMNIST, K = 100, Dirichlet α = 0.3, q = 0.5, batch 32, Adam 1e-3, MLP 784-200-200-10, E = 1,
T = 3, tracking off, evaluation every round (the default ``federation.eval_every=1``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TARGETS = {"flplat1": ("ref1", 1.15), "flplat2": ("ref2", 1.15), "flplatvec": ("ref1", None)}
NORM = {"fmnist": (0.2860, 0.3530), "mnist": (0.1307, 0.3081)}
LAYOUT = {"fmnist": "FashionMNIST/raw", "mnist": "MNIST/raw"}


def flplat_overrides(args) -> list[str]:
    return [f"seed={args.seed}", f"data.name={args.dataset}", "partition.name=dirichlet",
            f"partition.num_clients={args.clients}", f"partition.alpha={args.alpha}", "algorithm.name=fedavg",
            "model.name=mlp", f"model.hidden=[{args.hidden}]", f"federation.rounds={args.rounds}",
            f"federation.client_fraction={args.fraction}", f"federation.local_epochs={args.epochs}",
            f"federation.batch_size={args.batch_size}", "federation.optimizer.name=adam",
            f"federation.optimizer.lr={args.lr}", f"federation.eval_every={args.eval_every}",
            "fabric.accelerator=cpu", "fabric.precision=32-true", "tracking.enabled=false",
            f"data.root={args.data_root}"]  # the reference's files: both sides read the same copy


SIDE_OVERRIDES = {"flplat1": [], "flplat2": ["fabric.devices=2", "fabric.num_threads=1"],
                  "flplatvec": ["federation.vectorize=true"]}


# ------------------------------------------------------------------------------------------- preparation


def write_plan(args, path: Path) -> None:
    """The platform's partition and sampled clients, for the hand-written script (untimed)."""
    benchlib.write_plan(flplat_overrides(args), args.seed, args.fraction, args.rounds, path, ROOT)


# --------------------------------------------------------------------------------------- hand-written script


def ref_worker(args) -> None:
    """A hand-written FedAvg script (``reference_fedavg.py``): no flplat import, IDX decoded here; ``--procs``
    processes (rank 0 starts the others before importing torch)."""
    rank, world = int(os.environ.get("REF_RANK", "0")), args.procs
    others = []
    if rank == 0 and world > 1:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["REF_PORT"] = str(s.getsockname()[1])
        others = [subprocess.Popen([sys.executable, *sys.argv], env={**os.environ, "REF_RANK": str(r)})
                  for r in range(1, world)]
    import gzip

    import numpy as np
    import reference_fedavg as ref
    import torch
    from torch import nn

    if world == 1 and args.threads:
        torch.set_num_threads(args.threads)
    if world > 1:
        ref.join(rank, world, int(os.environ["REF_PORT"]))

    def idx(name):
        root = Path(args.data_root) / LAYOUT[args.dataset]
        raw = gzip.open(root / f"{name}.gz").read() if (root / f"{name}.gz").exists() else (root / name).read_bytes()
        ndim = raw[3]
        dims = np.frombuffer(raw, ">u4", ndim, 4)
        return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)

    mean, std = NORM[args.dataset]
    x = torch.from_numpy((idx("train-images-idx3-ubyte").astype(np.float32) / 255 - mean) / std)
    y = torch.from_numpy(idx("train-labels-idx1-ubyte").astype(np.int64))
    xg = torch.from_numpy((idx("t10k-images-idx3-ubyte").astype(np.float32) / 255 - mean) / std)
    yg = torch.from_numpy(idx("t10k-labels-idx1-ubyte").astype(np.int64))
    plan = np.load(args.plan)
    selections = plan["selected"].tolist()
    train = [torch.from_numpy(plan[f"train{k}"]) for k in range(args.clients)]
    test = [torch.from_numpy(plan[f"test{k}"]) for k in range(args.clients)]
    widths = [784, *[int(h) for h in args.hidden.split(",")]]
    layers = [nn.Flatten(1)]
    for a, b in zip(widths, widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(widths[-1], 10))
    scores = {}

    def after_round(t: int) -> None:  # evaluation every eval_every rounds, inside the round's time
        if t % args.eval_every == 0 or t == args.rounds:
            scores["acc"], scores["global"] = ref.evaluate(model, x, y, test, xg, yg, rank, world)

    trained = ref.fedavg(model, x, y, train, selections, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                         rank=rank, world=world, after_round=after_round)  # batch order: torch's global generator
    if rank == 0:
        Path(args.out).write_text(json.dumps({"round_s": trained.round_s, "acc": scores["acc"],
                                              "global": scores["global"], "steps_rank0": trained.steps}))
    if world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
    for p in others:
        p.wait()


# ---------------------------------------------------------------------------------------------------- driver


def run_side(side: str, args, argv: list[str], tmp: Path) -> dict:
    out = tmp / f"{side}.json"
    out.unlink(missing_ok=True)
    side, _, base = side.partition("@")
    root = Path(args.baseline) if base else ROOT
    env = {**os.environ, "PYTHONPATH": str(root)}
    for k in ("LOCAL_RANK", "WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT", "REF_RANK", "OMP_NUM_THREADS"):
        env.pop(k, None)
    if side.startswith("ref"):
        procs = 2 if side == "ref2" else 1
        cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--worker", "ref", "--procs", str(procs),
               "--plan", str(tmp / "plan.npz"), "--out", str(out)]
    else:
        threads = [f"fabric.num_threads={args.threads}"] if args.threads and side != "flplat2" else []
        cmd = [sys.executable, "-m", "flplat.cli", "run", "configs/quickstart.yaml",
               *flplat_overrides(args), *threads, *SIDE_OVERRIDES[side]]
        env["COLUMNS"] = "200"
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 15)  # the side's whole process group (its second process too)
        stdout, stderr = p.communicate()
        raise SystemExit(f"{side} did not finish in {args.timeout} s:\n{stderr[-3000:]}") from None
    wall = time.perf_counter() - t0
    ru = getattr(p, "rusage", None)
    if p.returncode != 0:
        raise SystemExit(f"{side} failed (exit {p.returncode}):\n{stderr[-3000:]}")
    if side.startswith("ref"):
        r = json.loads(out.read_text())
    else:
        # "[round t/T] ... time=0.15s left=0" (flplat/experiment.py's progress line)
        r = {"round_s": [float(line.rsplit("time=", 1)[1].split("s", 1)[0]) for line in stderr.splitlines()
                         if line.startswith("[round ")], "acc": float(stdout.split("global_accuracy=")[1].split()[0])}
    r["wall"], r["rss_gb"] = wall, (ru.ru_maxrss / 1e6 if ru else float("nan"))
    r["steady"] = statistics.mean(r["round_s"][1:]) if len(r["round_s"]) > 1 else r["round_s"][0]
    return r


def _popen_wait4():
    return benchlib.popen_wait4()


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    benchlib.add_federation_args(ap, NORM, rounds=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baseline", default=None, metavar="DIR",
                    help="another checkout: its flplat sides run too, as <side>@base (before/after ratios)")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads of the 1-process sides (0: torch's default, one per core)")
    ap.add_argument("--sides", default="ref1,flplat1,ref2,flplat2,flplatvec")
    ap.add_argument("--timeout", type=int, default=900, help="seconds before a side's run is stopped")
    ap.add_argument("--data-root", default=str(ROOT.parent / "shared" / "data"),
                    help="the directory with MNIST/raw and FashionMNIST/raw (torchvision's layout); both sides read it")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--procs", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--plan", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker == "ref":
        ref_worker(args)
        return 0
    sides = args.sides.split(",")
    if args.baseline:
        sides += [f"{s}@base" for s in sides if s.startswith("flplat")]
    _popen_wait4()
    print(f"{args.dataset} mlp [{args.hidden}]: K={args.clients} q={args.fraction} E={args.epochs} T={args.rounds} "
          f"B={args.batch_size} alpha={args.alpha} eval_every={args.eval_every}  cpus={os.cpu_count()}  "
          f"1-process threads={args.threads or 'default'}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_plan(args, tmp / "plan.npz")
        for side in sides:  # untimed warm-up (file cache, .pyc, data cache)
            run_side(side, args, argv, tmp)
        rows = []
        for i in range(args.repeats):
            order = sides if i % 2 == 0 else sides[::-1]
            rows.append({side: run_side(side, args, argv, tmp) for side in order})
            rows[-1]["load"] = os.getloadavg()[0]
            print(f"repeat {i + 1}: " + "  ".join(f"{s} {rows[-1][s]['wall']:.2f}s/{rows[-1][s]['steady']:.3f}s/"
                                                  f"{rows[-1][s]['rss_gb']:.2f}GB" for s in order)
                  + f"  load1 {rows[-1]['load']:.2f}", flush=True)
    print()
    print(f"{'side':>10} {'e2e s':>7} {'s/round':>8} {'peak RSS GB':>12} {'vs':>5} {'e2e ratio':>10} "
          f"{'round ratio':>12} {'RSS ratio':>10} {'accuracy':>9}")
    for side in sides:
        med = {k: statistics.median(r[side][k] for r in rows) for k in ("wall", "steady", "rss_gb")}
        ref, target = TARGETS.get(side, (None, None))
        ratios = {k: statistics.median(r[side][k] / r[ref][k] for r in rows) if ref in sides else float("nan")
                  for k in ("wall", "steady", "rss_gb")}
        verdict = ""
        if target and ref in sides:
            verdict = f"  e2e target <= {target}: {'PASS' if ratios['wall'] <= target else 'FAIL'}"
        print(f"{side:>10} {med['wall']:>7.2f} {med['steady']:>8.3f} {med['rss_gb']:>12.2f} {ref or '':>5} "
              f"{ratios['wall']:>10.3f} {ratios['steady']:>12.3f} {ratios['rss_gb']:>10.3f} "
              f"{rows[-1][side]['acc']:>9.4f}{verdict}")
    for side in sides:
        if side.endswith("@base"):
            now = side.split("@")[0]
            after = {k: statistics.median(r[now][k] / r[side][k] for r in rows) for k in ("wall", "steady")}
            print(f"{now}: this checkout / {args.baseline}: e2e {after['wall']:.3f}, s/round {after['steady']:.3f} "
                  f"(medians of {len(rows)} per-repeat ratios)")
    loads = [r["load"] for r in rows]
    print(f"load1 during the repeats: {min(loads):.2f}-{max(loads):.2f}"
          + ("  (above 2.5: wall times are disturbed by other processes)" if max(loads) > 2.5 else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
