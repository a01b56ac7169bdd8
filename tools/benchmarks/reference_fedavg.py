"""The benchmarks' one hand-written FedAvg: the plain PyTorch loop that ``bench_fedavg.py`` (same process),
``bench_e2e.py`` (whole scripts, 1 or 2 processes) and ``bench_sharded.py`` (N processes) time the platform against.

It imports torch only -- no flplat, no lightning -- so a reference process pays none of the platform's imports
(``bench_e2e.py``'s script imports nothing else; lightning's import would also change what every Adam step costs,
see ``bench_fedavg.py``). What the caller gives: the model (its current weights are the start), the pooled rows
``x``, ``y``, each client's training rows, and the clients sampled each round (the platform's sampler's choice, so
both sides train the same clients); optionally a per-(round, client) ``torch.Generator`` for the batch order (the
platform's seeds give its exact batches; ``None``: torch's global generator).

Per round: the sampled clients are split greedily by training-set size over the ``world`` processes (largest first,
each to the least loaded process; one process trains all of them). Each process trains its clients one after the
other from the round's global model: the global weights copied in, a fresh Adam, per local epoch a ``randperm`` of
the client's rows cut into :func:`batch_bounds` (the platform's batching: a trailing single sample joins the batch
before it), cross-entropy, one step per batch, the mean training loss tracked (the platform tracks it too). Each
adds ``n_k * w_k`` and ``n_k`` to one flat buffer; one ``all_reduce`` (gloo) sums the buffers of all processes and
the new global model is the quotient, the sample-weighted mean. The floating state is averaged (parameters and
floating buffers such as BatchNorm statistics); an integer buffer keeps the value training left.

Evaluation (:func:`evaluate`): every client's test rows scored in chunks of 1,024, the clients dealt round-robin
over the processes and the counts all-reduced (the platform's ``global_accuracy``, pooled over clients), and the
global test set on rank 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

CHUNK = 1024


def batch_bounds(n: int, batch_size: int) -> list[tuple[int, int]]:
    """Batch [start, end) ranges covering n samples; a trailing single-sample batch joins the previous one (the
    platform's rule, ``flplat.engine.client.batch_bounds``; tests/test_tools.py holds the two equal)."""
    cuts = list(range(0, n, batch_size)) + [n]
    if len(cuts) > 2 and cuts[-1] - cuts[-2] == 1:
        cuts.pop(-2)
    return list(zip(cuts, cuts[1:]))


def split_by_size(selected: Sequence[int], sizes: Sequence[int], world: int) -> list[list[int]]:
    """The round's clients per process: largest first, each to the process with the fewest samples so far."""
    loads, shards = [0] * world, [[] for _ in range(world)]
    for k in sorted(selected, key=lambda k: -sizes[k]):
        r = loads.index(min(loads))
        loads[r] += sizes[k]
        shards[r].append(k)
    return shards


def join(rank: int, world: int, port: int) -> None:
    """This process joins a ``world``-process gloo group on this machine (one torch thread, as each shard of the
    platform's ``fabric.devices=N`` on CPU)."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)


def _all_reduce(t: torch.Tensor, world: int) -> None:
    if world > 1:
        import torch.distributed as dist

        dist.all_reduce(t)


class FlatState:
    """A model's floating state (parameters, floating buffers) read and written as one flat vector, by copy."""

    def __init__(self, model: torch.nn.Module):
        self.tensors = [t for t in model.state_dict().values() if t.is_floating_point()]  # aliases of the model's
        self.numel = sum(t.numel() for t in self.tensors)

    def get(self) -> torch.Tensor:
        return torch.cat([t.reshape(-1) for t in self.tensors])

    @torch.no_grad()
    def set(self, flat: torch.Tensor) -> None:
        offset = 0
        for t in self.tensors:
            t.copy_(flat[offset:offset + t.numel()].view_as(t))
            offset += t.numel()


@dataclass
class Trained:
    steps: int = 0  # local steps of this process
    round_s: list[float] = field(default_factory=list)  # each round's wall time in this process
    loss: list[float] = field(default_factory=list)  # each round's mean training loss of this process's clients


def train_client(model, x, y, rows: torch.Tensor, epochs: int, batch_size: int, lr: float,
                 generator: torch.Generator | None) -> tuple[int, torch.Tensor]:
    """One client's local training from the model's current weights: (steps, summed loss)."""
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    xk, yk, n = x[rows], y[rows], len(rows)
    steps, loss_sum = 0, torch.zeros(())
    for _ in range(epochs):
        perm = torch.randperm(n, generator=generator)
        for a, b in batch_bounds(n, batch_size):
            sel = perm[a:b]
            loss = F.cross_entropy(model(xk[sel]), yk[sel])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_sum += loss.detach()
            steps += 1
    return steps, loss_sum


def fedavg(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, train: Sequence[torch.Tensor],
           selections: Sequence[Sequence[int]], *, epochs: int, batch_size: int, lr: float,
           generator: Callable[[int, int], torch.Generator | None] = lambda t, k: None, rank: int = 0, world: int = 1,
           after_round: Callable[[int], None] | None = None) -> Trained:
    """FedAvg rounds ``1..len(selections)`` from the model's weights (rank 0's, broadcast); the model holds the
    global model after each round. ``after_round(t)`` runs inside round t's timing (e.g. an evaluation)."""
    state = FlatState(model)
    flat = state.get()
    if world > 1:
        import torch.distributed as dist

        dist.broadcast(flat, 0)
    sizes = [len(rows) for rows in train]
    out = Trained()
    for t, selected in enumerate(selections, start=1):
        t0 = time.perf_counter()
        acc, loss_sum, steps = torch.zeros(state.numel + 1), torch.zeros(()), 0
        for k in split_by_size([int(k) for k in selected], sizes, world)[rank]:
            state.set(flat)
            s, ls = train_client(model, x, y, train[k], epochs, batch_size, lr, generator(t, k))
            steps, loss_sum = steps + s, loss_sum + ls
            acc[:-1] += sizes[k] * state.get()
            acc[-1] += sizes[k]
        _all_reduce(acc, world)
        flat = acc[:-1] / acc[-1]
        state.set(flat)
        out.steps += steps
        out.loss.append(float(loss_sum) / max(steps, 1))
        if after_round is not None:
            after_round(t)
        out.round_s.append(time.perf_counter() - t0)
    return out


@torch.no_grad()
def correct_count(model, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(correct, count) of ``model`` on the rows ``x``, ``y``, scored in chunks."""
    counts = torch.zeros(2)
    for a in range(0, len(y), CHUNK):
        counts[0] += (model(x[a:a + CHUNK]).argmax(1) == y[a:a + CHUNK]).sum()
        counts[1] += len(y[a:a + CHUNK])
    return counts


@torch.no_grad()
def evaluate(model, x: torch.Tensor, y: torch.Tensor, test: Sequence[torch.Tensor], x_global=None, y_global=None,
             rank: int = 0, world: int = 1) -> tuple[float, float]:
    """(accuracy pooled over every client's test rows, accuracy on the global test set or NaN); the clients dealt
    round-robin over the processes, the global set scored by rank 0 (its figure is rank 0's)."""
    model.eval()
    counts = torch.zeros(2)
    for k in range(rank, len(test), world):
        counts += correct_count(model, x[test[k]], y[test[k]])
    _all_reduce(counts, world)
    glob = float("nan")
    if rank == 0 and x_global is not None:
        g = correct_count(model, x_global, y_global)
        glob = float(g[0] / g[1])
    return float(counts[0] / counts[1].clamp(min=1)), glob
