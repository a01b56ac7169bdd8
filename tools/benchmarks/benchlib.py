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
