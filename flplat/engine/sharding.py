"""Sharded client execution: a round's clients split over Fabric processes (CPU/gloo or GPU/NCCL).

Every process runs the same program (SPMD): the same data, partition, model initialisation, strategy and
server RNG, so all processes select and plan the same clients. Each process trains only its share of the
round's clients (balanced by data size with a longest-processing-time-first assignment), then the results are
combined with collectives: where the strategy only needs per-group sample-weighted means
(:meth:`~flplat.protocol.strategy.Strategy.mean_groups`: FedAvg, FedProx, FedOpt, Clust-PSI-PFL) one all-reduce of
a flattened buffer of weighted sums; otherwise an all-gather of every model as one padded ``(ranks, m, P)``
tensor. The small metadata travels as objects, and every process aggregates the identical, identically ordered
result list. The strategy therefore runs unchanged
and gives the same result as in one process, up to the floating-point effects of different thread counts.
Client evaluation is sharded and gathered the same way. Client models are never wrapped in DDP.

Launch: ``fabric.devices=N`` (and ``fabric.num_nodes``) on one machine — Fabric re-executes the command in
N−1 child processes — or under ``torchrun`` / SLURM, whose environment Fabric detects. Only the process of
global rank 0 tracks to MLflow and shows progress.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np
import torch
import torch.distributed as dist

from flplat.engine.batched_eval import EvalColumns
from flplat.engine.executor import LocalExecutor, request_clients, subset
from flplat.protocol.strategy import ClientPlan, ClientResult, EvalResult


def balance(sizes: Sequence[int], ranks: int) -> list[list[int]]:
    """Positions of ``sizes`` per rank, greedily balancing the total size (LPT); deterministic."""
    heap = [(0, r) for r in range(ranks)]
    out: list[list[int]] = [[] for _ in range(ranks)]
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        load, r = heapq.heappop(heap)
        out[r].append(i)
        heapq.heappush(heap, (load + int(sizes[i]), r))
    return [sorted(o) for o in out]


class ShardedExecutor:
    """The client work of an initialised Fabric's processes: each process runs its share through ``local`` (the
    :class:`LocalExecutor` of this process: training, vectorised groups, batched scoring, ``compute``), and the
    shares are combined with collectives. It has the executor's methods (the orchestrator's and the strategies'
    :class:`~flplat.protocol.strategy.FederationOps`) and no other way in: what one process does is the local
    executor's, unchanged."""

    def __init__(self, local: LocalExecutor):
        self.local = local

    @property
    def trainer(self):
        return self.local.trainer

    @property
    def data(self):
        return self.local.data

    @property
    def fabric(self):
        return self.local.trainer.fabric

    def data_changed(self) -> None:
        """Every process switches its own copy of the data (SPMD): each drops its row caches."""
        self.local.data_changed()

    def _gather_objects(self, obj):
        out = [None] * self.fabric.world_size
        dist.all_gather_object(out, obj)
        return out

    def train(self, plans: Sequence[tuple[int, ClientPlan]], round: int,
              groups: Sequence[int] | None = None) -> list[ClientResult]:
        fab = self.fabric
        sizes = [len(p.indices) if p.indices is not None else len(self.data.indices(c, "train")) for c, p in plans]
        mine = balance(sizes, fab.world_size)[fab.global_rank]
        local = self.local.train([plans[i] for i in mine], round)
        meta = [(i, r.client, r.num_samples, r.train_loss, r.num_steps, r.extra, r.extra_bytes_up, r.loss_scale)
                for i, r in zip(mine, local)]
        metas = self._gather_objects(meta)
        if groups is not None:
            weights = self._reduce_means(local, [groups[i] for i in mine], groups)
            pick = {i: weights[groups[i]] for i in range(len(plans))}
        else:
            gathered = self._gather_weights(local, max(len(m) for m in metas))
            pick = {i: gathered[rank][j] for rank, m in enumerate(metas) for j, (i, *_) in enumerate(m)}
        results: list[ClientResult | None] = [None] * len(plans)
        for m in metas:
            for i, client, n, loss, steps, extra, up, scale in m:
                results[i] = ClientResult(client, pick[i], n, loss, steps, extra, up, scale)
        self.local.next_loss_scale(results)  # every process: the same scale, from every process's clients
        return results

    def _gather_weights(self, local: list[ClientResult], width: int) -> list[torch.Tensor]:
        """Every process's trained models: one all-gather of a padded ``(width, P)`` tensor per rank."""
        buf = torch.zeros(width, self.trainer.layout.size, device=self.fabric.device)
        for j, r in enumerate(local):
            buf[j] = r.weights
        gathered = [torch.empty_like(buf) for _ in range(self.fabric.world_size)]
        dist.all_gather(gathered, buf)  # on the process group Fabric initialised
        return gathered

    def _reduce_means(self, local: list[ClientResult], my_groups: Sequence[int], groups: Sequence[int]):
        """Per-group sample-weighted mean models with ONE all-reduce of a flattened ``(G, P + 1)`` buffer of
        weighted sums and sample counts (the traffic of G models, whatever the number of clients)."""
        size = self.trainer.layout.size
        buf = torch.zeros(max(groups) + 1, size + 1, device=self.fabric.device)
        for r, g in zip(local, my_groups):
            buf[g, :size].add_(r.weights.to(buf), alpha=float(r.num_samples))
            buf[g, size] += float(r.num_samples)
        dist.all_reduce(buf)
        return buf[:, :size] / buf[:, size:].clamp_min(1e-12)

    def _scatter_gather(self, requests, split: str, run) -> list:
        """Run ``run(my_requests)`` on this process's balanced share of ``requests``; every process gets all."""
        clients = getattr(requests, "clients", None) or [c for c, _ in requests]  # LazyRequests: no weights read
        sizes = [len(self.data.indices(c, split)) for c in clients]
        mine = balance(sizes, self.fabric.world_size)[self.fabric.global_rank]
        out: list = [None] * len(requests)
        for part in self._gather_objects(list(zip(mine, run([requests[i] for i in mine])))):
            for i, r in part:
                out[i] = r
        return out

    def evaluate(self, requests: Sequence[tuple[int, torch.Tensor]], split: str = "val") -> list[EvalResult]:
        return self._scatter_gather(requests, split, lambda mine: self.local.evaluate(mine, split))

    def _share(self, sizes: np.ndarray) -> np.ndarray:
        """Positions of this process's share of evaluation work: consecutive items cut where the running total of
        ``sizes`` (rows) crosses each process's equal share (vectorised; evaluation needs no finer balance)."""
        world, rank = self.fabric.world_size, self.fabric.global_rank
        total = np.cumsum(sizes)
        mid = (total - np.asarray(sizes) / 2) * world / max(float(total[-1]) if len(total) else 0.0, 1.0)
        return np.flatnonzero(np.minimum(mid.astype(np.int64), world - 1) == rank)

    def evaluate_groups(self, groups, split: str = "test"):
        """Batched evaluation of shared models: the groups' clients split over the processes by test rows (one
        object gather for all groups)."""
        clients = [np.asarray(c, dtype=np.int64).reshape(-1) for _, c in groups]
        every = np.concatenate(clients) if clients else np.zeros(0, dtype=np.int64)
        group = np.repeat(np.arange(len(groups)), [len(c) for c in clients])
        mine = self._share(self.local.split_rows(split).sizes[every])
        sub = [(w, every[mine[group[mine] == g]]) for g, (w, _) in enumerate(groups)]
        local = self.local.evaluate_groups(sub, split)
        return EvalColumns.concat(self._gather_objects(local))  # one object per process, not per client

    def evaluate_columns(self, requests, split: str = "test"):
        """Personal models: this process scores its share of the requests (vmap groups where the model allows);
        one object gather; rows in request order."""
        mine = self._share(self.local.split_rows(split).sizes[request_clients(requests)])
        local = self.local.evaluate_columns(subset(requests, mine), split)
        parts = self._gather_objects((mine, local))
        cols = EvalColumns.concat([p for _, p in parts], self.trainer.num_outputs)
        return cols.take(np.argsort(np.concatenate([q for q, _ in parts]), kind="stable"))

    def evaluate_global(self, weights: torch.Tensor) -> EvalResult | None:
        """The pooled global test set scored in equal row shares per process, the counts summed with one
        all-reduce (instead of every process scoring all of it)."""
        if self.data.x_global_test is None:
            return None
        n, world, rank = len(self.data.y_global_test), self.fabric.world_size, self.fabric.global_rank
        a, b = rank * n // world, (rank + 1) * n // world
        r = self.trainer.evaluate_tensors(weights, self.data.x_global_test[a:b], self.data.y_global_test[a:b])
        c = len(r.class_total)
        buf = torch.tensor([r.loss_sum, r.correct, r.num_samples, *r.class_correct, *r.class_total],
                           dtype=torch.float64, device=self.fabric.device)
        dist.all_reduce(buf)
        buf = buf.cpu()
        counts = [int(v) for v in buf[1:].round().tolist()]
        return EvalResult(-1, float(buf[0]), counts[0], counts[1], tuple(counts[2:2 + c]), tuple(counts[2 + c:]))

    def compute(self, requests, fn, split: str = "train", seed: int = 0) -> list:
        return self._scatter_gather(requests, split, lambda mine: self.local.compute(mine, fn, split, seed))


def loopback_rendezvous() -> bool:
    """For a one-node run started by :func:`flplat.engine.launch.launch_early` (``FLPLAT_RDZV_FILE`` set): make
    torch's ``env://`` rendezvous use a ``FileStore`` at that private path instead of a TCP store (which listens
    on all interfaces), and bind gloo's connections to the loopback interface. Multi-node runs (torchrun, SLURM)
    are untouched. Returns whether it applied."""
    import os
    import socket
    from urllib.parse import urlparse

    from flplat.engine.launch import RDZV_ENV

    path = os.environ.get(RDZV_ENV)
    if not path:
        return False
    import importlib

    from torch.distributed import FileStore

    rdzv = importlib.import_module("torch.distributed.rendezvous")  # the module (the package exports a function)

    def handler(url: str, **kwargs):
        q = dict(kv.split("=", 1) for kv in urlparse(url).query.split("&") if "=" in kv)
        rank = int(q.get("rank", os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))))
        world = int(q["world_size"] if "world_size" in q else os.environ["WORLD_SIZE"])
        yield FileStore(path, world), rank, world
        raise RuntimeError("flplat's file rendezvous cannot re-rendezvous")

    rdzv._rendezvous_handlers["env"] = handler
    if "GLOO_SOCKET_IFNAME" not in os.environ:
        loop = next((name for _, name in socket.if_nameindex() if name.startswith("lo")), None)
        if loop:
            os.environ["GLOO_SOCKET_IFNAME"] = loop
    return True


_CLOSE_REGISTERED = False


def close_process_group_at_exit() -> None:
    """Destroy the process group in an ``atexit`` handler, while the interpreter is whole. Left to the
    interpreter's teardown, gloo's process group is destructed with its threads still attached, which aborted a
    rank of a two-node torchrun run after its work was done ("terminate called without an active exception",
    SIGABRT; the other node then waited 300 s on torchrun's exit barrier). One handler per process; it runs on a
    normal exit and in :func:`flplat.cli.exit_now`."""
    global _CLOSE_REGISTERED
    if _CLOSE_REGISTERED:
        return
    import atexit

    def close():
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()

    atexit.register(close)
    _CLOSE_REGISTERED = True


def is_main_process() -> bool:
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def default_threads(world_size: int) -> int:
    """Threads per process when ``fabric.num_threads`` is 0: the cores this process may use (its CPU affinity: a
    SLURM task's ``--cpus-per-task``, ``taskset``; not the machine's count) shared by the processes."""
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(world_size, 1))


def make_executor(trainer, data, seed: int, vectorize: bool = False, vectorize_group: int = 0,
                  eval_group_size: int = 0, vectorize_keep_mib: int | None = None) -> LocalExecutor | ShardedExecutor:
    local = LocalExecutor(trainer, data, seed, vectorize, vectorize_group, eval_group_size, vectorize_keep_mib)
    return ShardedExecutor(local) if trainer.fabric.world_size > 1 else local

