"""Shared pieces of the benchmark scripts in tools/ (kept free of heavy imports: a driver that imports it does not
import torch or lightning)."""

from __future__ import annotations


def fedavg_overrides(args, threads: int, **extra) -> list[str]:
    """Config overrides of the benchmarked federation: FedAvg, Dirichlet(α) partition, Adam, fp32 on CPU, tracking
    off, evaluation only after the last round; ``extra`` adds or replaces keys (e.g. ``{"fabric.devices": 2}``)."""
    over = {
        "seed": args.seed, "data.name": args.dataset, "model.name": args.model, "algorithm.name": "fedavg",
        "partition.name": "dirichlet", "partition.num_clients": args.clients, "partition.alpha": args.alpha,
        "federation.rounds": args.rounds, "federation.eval_every": args.rounds,
        "federation.client_fraction": args.fraction, "federation.local_epochs": args.epochs,
        "federation.batch_size": args.batch_size, "federation.optimizer.name": "adam",
        "federation.optimizer.lr": args.lr, "fabric.accelerator": "cpu", "fabric.precision": "32-true",
        "fabric.num_threads": threads, "tracking.enabled": "false",
    }
    over.update(extra)
    return [f"{k}={v}" for k, v in over.items()]


def write_plan(overrides: list[str], seed: int, fraction: float, rounds: int, path, root) -> None:
    """The platform's partition (each client's train / test indices) and its sampled clients per round, saved to
    ``path`` (npz: ``selected``, ``train<k>``, ``test<k>``) for a script that must not import flplat (untimed).
    ``root``: the checkout, put on ``sys.path``."""
    import sys

    import numpy as np

    sys.path.insert(0, str(root))
    from flplat.api import derive_seed, sample_uniform
    from flplat.data.datasets import load_dataset
    from flplat.data.partitions import build_federation
    from flplat.experiment import load_config

    cfg = load_config(None, overrides)
    d = build_federation(load_dataset(cfg.data, derive_seed(seed, "data")), cfg.partition,
                         derive_seed(seed, "partition"))
    rng = np.random.default_rng(derive_seed(seed, "server"))
    sel = np.stack([sample_uniform(d.num_clients, fraction, rng) for _ in range(rounds)])
    arrays = {"selected": sel}
    for k, c in enumerate(d.clients):
        arrays[f"train{k}"], arrays[f"test{k}"] = c.train, c.test
    np.savez(path, **arrays)


def popen_wait4():
    """Make ``subprocess.Popen`` reap its children with ``wait4`` (it uses ``waitpid``), keeping their rusage (the
    CPU time) in ``Popen.rusage``; returns the method it replaced."""
    import os
    import subprocess

    orig = subprocess.Popen._try_wait

    def _try_wait(self, wait_flags):
        pid, sts, ru = os.wait4(self.pid, wait_flags)
        if pid == self.pid:
            self.rusage = ru
        return pid, sts

    subprocess.Popen._try_wait = _try_wait
    return orig


def add_federation_args(ap, datasets, rounds: int) -> None:
    """The benchmarked federation's options, shared by the whole-process benchmarks (bench_e2e, bench_pfl):
    dataset, MLP widths, K, q, Dirichlet alpha, E, T, evaluation interval, B, learning rate, seed."""
    ap.add_argument("--dataset", default="fmnist", choices=sorted(datasets))
    ap.add_argument("--hidden", default="200,200", help="MLP hidden widths, comma separated")
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--fraction", type=float, default=0.5)
    ap.add_argument("--alpha", type=float, default=0.3)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--eval-every", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
