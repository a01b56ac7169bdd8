"""Benchmark: flplat's vectorised clients against two hand-written bounds, per round, in one process.

Three sides train the same round's clients (the platform's partition, sampled clients and per-client batch orders:
``randperm`` from each client's ``derive_seed(seed, "train", round, client)``, as the executor seeds them), each
from the same start weights:

* ``flplat`` — the platform's executor with ``federation.vectorize=true`` (``LocalExecutor.train``: the round's
  clients as one stacked group, :mod:`flplat.engine.vectorized`);
* ``shared`` — the lower bound of the issue: **one** model (plain ``nn.Sequential``, ``torch.optim.Adam(fused=True)``)
  doing the same number of steps over the same samples: at step t one batch made of the rows every client still
  training draws at its step t. Same multiply-adds, but each layer is one large matmul and the optimizer updates
  one model;
* ``stacked`` — a hand-written **per-client-state bound**: the same G per-client models stacked as ``(G, in, out)``
  weights in plain torch (``baddbmm`` forward, autograd backward, one ``torch._fused_adam_`` — what
  ``torch.optim.Adam(fused=True)`` runs — over the stacked tensors of the clients still training), each step's
  batches padded to its widest one with per-sample loss weights, rows gathered with ``index_select``, the stacked
  buffers kept between rounds; no flplat code. Its results equal flplat's to float rounding
  (printed: ``max |w_flplat - w_stacked|``), so it does the same work; what separates it from ``shared`` is
  inherent to training G distinct models, what separates flplat from it is the platform's overhead.

Sides alternate (A B C, C B A, ...) after one untimed warm-up of each; per repeat each side trains ``--rounds``
rounds (different sampled clients), and the figure is seconds per round; the verdict is the median of the
per-repeat ratios. ``--profile`` adds a decomposition of one round of each side (``torch.profiler``, CPU time by
category: forward, backward, optimizer, loss and masking, batch assembly, stacking/unstacking, and the rest —
Python and dispatch between the ops).

    python tools/benchmarks/bench_vec_bound.py                         # the default setting, 1 thread, 3 repeats
    python tools/benchmarks/bench_vec_bound.py --profile               # plus the decomposition
    python tools/benchmarks/bench_vec_bound.py --threads 2 --repeats 5
    python tools/benchmarks/bench_vec_bound.py --baseline 42a9701   # adds flplat@REV: vectorized.py of a git revision

Setting: FMNIST, K = 100, Dirichlet α = 0.3, q = 0.5, batch 32, Adam 1e-3, MLP 784-200-200-10, E = 1,
tracking off.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

import flplat.engine.vectorized as vectorized  # noqa: E402
from flplat.api import ClientPlan, derive_seed, sample_uniform  # noqa: E402
from flplat.configure import load_config  # noqa: E402
from flplat.engine.executor import LocalExecutor  # noqa: E402
from flplat.experiment import prepare  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import fedavg_overrides  # noqa: E402
from reference_fedavg import batch_bounds  # noqa: E402

SIDES = ("flplat", "shared", "stacked")
KEPT: list[list[torch.Tensor]] = []  # the stacked side's parameter and Adam-moment buffers, reused between rounds
_LABEL = None  # torch.profiler.record_function while profiling, else None


def label(name: str):
    return _LABEL(name) if _LABEL is not None else contextlib.nullcontext()


# ------------------------------------------------------------------------------------------- the round's work


def client_batches(indices: np.ndarray, seed: int, epochs: int, bs: int) -> list[torch.Tensor]:
    """One client's batches (pool row indices), written out by hand: ``randperm`` per epoch from its seed, batches
    of ``bs``, a last single sample merged into the batch before it (the hand-written FedAvg's and the platform's
    :func:`batch_bounds`)."""
    idx, n = torch.as_tensor(indices, dtype=torch.long), len(indices)
    gen, out = torch.Generator().manual_seed(seed), []
    for _ in range(epochs):
        order = idx[torch.randperm(n, generator=gen)]
        out += [order[a:b] for a, b in batch_bounds(n, bs)]
    return out


def round_jobs(p, sel: np.ndarray, rnd: int, seed: int) -> list[tuple[int, np.ndarray, int]]:
    return [(int(k), p.data.indices(int(k), "train"), derive_seed(seed, "train", rnd, int(k))) for k in sel]


def run_flplat(ex: LocalExecutor, w0: torch.Tensor, sel: np.ndarray, rnd: int) -> list[torch.Tensor]:
    return [r.weights for r in ex.train([(int(k), ClientPlan(weights=w0)) for k in sel], rnd)]


def run_shared(layers0, x, y, jobs, args) -> None:
    """One model, the same steps over the same samples (step t: every client's t-th batch, concatenated)."""
    with label("batch assembly"):
        per = [client_batches(idx, s, args.epochs, args.batch_size) for _, idx, s in jobs]
        steps = [torch.cat([b[t] for b in per if t < len(b)]) for t in range(max(map(len, per)))]
    mods = []
    for w, b in layers0:
        lin = nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            lin.weight.copy_(w)
            lin.bias.copy_(b)
        mods += [lin, nn.ReLU()]
    net = nn.Sequential(*mods[:-1])
    opt = torch.optim.Adam(net.parameters(), lr=args.lr, fused=True)
    for rows in steps:
        with label("batch assembly"):
            xb, yb = x.index_select(0, rows), y.index_select(0, rows)
        with label("forward"):
            out = net(xb)
        with label("loss and masking"):
            loss = F.cross_entropy(out, yb)
        with label("backward"):
            opt.zero_grad(set_to_none=True)
            loss.backward()
        with label("optimizer"):
            opt.step()


def run_stacked(layers0, x, y, jobs, args) -> list[torch.Tensor]:
    """G per-client models stacked in plain torch; returns each client's flat weights (in ``jobs`` order)."""
    with label("batch assembly"):
        per = [client_batches(idx, s, args.epochs, args.batch_size) for _, idx, s in jobs]
        order = sorted(range(len(jobs)), key=lambda g: -len(per[g]))  # clients still training: a prefix
        per = [per[g] for g in order]
        G, T = len(per), len(per[0])
        W = max(len(b) for bs in per for b in bs)
        index = torch.zeros(T, G, W, dtype=torch.long)
        weight = torch.zeros(T, G, W)  # 1/len(batch) on real samples, 0 on padding
        for g, bs in enumerate(per):
            for t, b in enumerate(bs):
                index[t, g, :len(b)] = b
                weight[t, g, :len(b)] = 1.0 / len(b)
        live = [sum(len(bs) > t for bs in per) for t in range(T)]
        widths = [max(len(bs[t]) for bs in per[:g]) for t, g in enumerate(live)]  # padding only to the widest
    with label("stacking/unstacking"):  # buffers kept between rounds (as flplat keeps them): overwritten, zeroed
        shapes = [s for w, b in layers0 for s in ((w.shape[1], w.shape[0]), (1, b.shape[0]))]
        if len(KEPT) == 0 or KEPT[0][0].shape[0] < G:
            KEPT[:] = [[torch.empty(G, *s) for s in shapes] for _ in range(3)]
        params, exp_avg, exp_avg_sq = ([t[:G] for t in ts] for ts in KEPT)
        for (w, b), pw, pb in zip(layers0, params[0::2], params[1::2]):
            pw.copy_(w.t().expand_as(pw))
            pb.copy_(b.expand_as(pb))
        for t in exp_avg + exp_avg_sq:
            t.zero_()
    for t, g in enumerate(live):
        leaves = [q[:g].detach().requires_grad_() for q in params]
        with label("batch assembly"):
            sel = index[t, :g, :widths[t]].reshape(-1)
            h, yb = x.index_select(0, sel).view(g, widths[t], -1), y.index_select(0, sel)
        with label("forward"):
            for i in range(0, len(leaves), 2):
                h = torch.baddbmm(leaves[i + 1], h, leaves[i])
                if i + 2 < len(leaves):
                    h = torch.relu(h)
        with label("loss and masking"):
            ce = F.cross_entropy(h.flatten(0, 1), yb, reduction="none")
            loss = (ce * weight[t, :g, :widths[t]].flatten()).sum()
        with label("backward"):
            grads = torch.autograd.grad(loss, leaves)
        with label("optimizer"), torch.no_grad():
            torch._fused_adam_([q[:g] for q in params], list(grads), [s[:g] for s in exp_avg],
                               [s[:g] for s in exp_avg_sq], [], [torch.tensor(float(t + 1)) for _ in params],
                               amsgrad=False, lr=args.lr, beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8,
                               maximize=False)
    with label("stacking/unstacking"):
        flat = torch.cat([q.transpose(1, 2).reshape(G, -1) for q in params], dim=1)
        out = [None] * G
        for i, g in enumerate(order):
            out[g] = flat[i]
    return out


# ------------------------------------------------------------------------------------------- decomposition

CATEGORY_OPS = {  # top-level ops outside any label (flplat's own code) -> category
    "aten::index": "batch assembly", "aten::index_select": "batch assembly", "aten::randperm": "batch assembly",
    "aten::where": "batch assembly",
    "aten::cross_entropy_loss": "loss and masking", "aten::log_softmax": "loss and masking",
    "aten::nll_loss_nd": "loss and masking", "aten::mul": "loss and masking", "aten::div": "loss and masking",
    "aten::sum": "loss and masking", "aten::index_add": "loss and masking", "aten::add_": "loss and masking",
    "aten::stack": "stacking/unstacking", "aten::clone": "stacking/unstacking", "aten::to": "stacking/unstacking",
    "aten::copy_": "stacking/unstacking", "aten::zeros_like": "stacking/unstacking",
    "aten::reshape": "stacking/unstacking", "aten::contiguous": "stacking/unstacking",
    "aten::zeros": "stacking/unstacking", "aten::cat": "stacking/unstacking",
}
CATEGORIES = ("forward", "backward", "optimizer", "loss and masking", "batch assembly", "stacking/unstacking",
              "other ops")


@contextlib.contextmanager
def labelled_flplat():
    """Labels flplat's vectorised step phases for the profiler without changing what runs: the stacked forward
    (``StackedForward.with_stats``), ``torch.autograd.grad`` (the backward), ``FunctionalOptimizer.step`` and
    ``VectorizedTrainer._schedule``."""
    from flplat.maths.stacked import StackedForward

    rf = torch.profiler.record_function
    vt_cls, opt_cls, grad = vectorized.VectorizedTrainer, vectorized.FunctionalOptimizer, torch.autograd.grad
    orig_fwd, orig_step, orig_sched = StackedForward.with_stats, opt_cls.step, vt_cls._schedule

    def fwd(self, *a, **k):
        with rf("forward"):
            return orig_fwd(self, *a, **k)

    def step(self, *a, **k):
        with rf("optimizer"):
            return orig_step(self, *a, **k)

    def sched(self, *a):
        with rf("batch assembly"):
            return orig_sched(self, *a)

    def grad_(*a, **k):
        with rf("backward"):
            return grad(*a, **k)

    StackedForward.with_stats, opt_cls.step, vt_cls._schedule, torch.autograd.grad = fwd, step, sched, grad_
    try:
        yield
    finally:
        StackedForward.with_stats, opt_cls.step, vt_cls._schedule, torch.autograd.grad = (orig_fwd, orig_step,
                                                                                          orig_sched, grad)


def decompose(fn) -> tuple[dict[str, float], float, float]:
    """CPU self time (s) by category of one call of ``fn`` under the profiler, its wall time, and the CPU time of
    the same call unprofiled (the part of that outside every op: Python and dispatch between the ops)."""
    global _LABEL
    gc.collect()
    t0 = time.process_time()
    fn()
    plain = time.process_time() - t0
    _LABEL = torch.profiler.record_function
    try:
        with labelled_flplat(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            t0 = time.perf_counter()
            fn()
            wall = time.perf_counter() - t0
    finally:
        _LABEL = None
    cats = dict.fromkeys(CATEGORIES, 0.0)
    for ev in prof.events():
        if ev.name in CATEGORIES:  # a label: its own time is Python inside it, counted as "rest" below
            continue
        up, cat = ev.cpu_parent, None
        while up is not None:
            if up.name in CATEGORIES:
                cat = up.name
            up = up.cpu_parent
        if cat is None:
            top = ev
            while top.cpu_parent is not None:
                top = top.cpu_parent
            cat = CATEGORY_OPS.get(top.name, "other ops")
        cats[cat] += ev.self_cpu_time_total / 1e6
    return cats, wall, plain


def baseline_module(rev: str):
    """flplat/engine/vectorized.py as of git revision ``rev``, imported as a separate module."""
    import importlib.util
    import subprocess
    import tempfile

    root = Path(__file__).resolve().parents[2]
    src = subprocess.run(["git", "show", f"{rev}:flplat/engine/vectorized.py"], cwd=root, check=True,
                         capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp(prefix="vec-baseline-")) / "vectorized_baseline.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("vectorized_baseline", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------------------------------------- driver


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--dataset", default="fmnist", help="data.name (fmnist files are found automatically)")
    ap.add_argument("--hidden", default="200,200", help="MLP hidden widths, comma separated (model.hidden)")
    ap.add_argument("--clients", type=int, default=100, help="partition.num_clients (K)")
    ap.add_argument("--fraction", type=float, default=0.5, help="federation.client_fraction (q)")
    ap.add_argument("--alpha", type=float, default=0.3, help="partition.alpha (Dirichlet label skew)")
    ap.add_argument("--epochs", type=int, default=1, help="federation.local_epochs (E)")
    ap.add_argument("--batch-size", type=int, default=32, help="federation.batch_size")
    ap.add_argument("--lr", type=float, default=1e-3, help="federation.optimizer.lr (Adam)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (sampled client sets) per timed side and repeat")
    ap.add_argument("--repeats", type=int, default=3, help="timed repeats of the three sides")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--group", type=int, default=0, help="federation.vectorize_group (0: all clients of a round)")
    ap.add_argument("--profile", action="store_true", help="decompose one round of each side (torch.profiler)")
    ap.add_argument("--baseline", default=None, metavar="REV",
                    help="also time flplat/engine/vectorized.py as of git revision REV (side 'flplat@REV')")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    args.model = "mlp"

    cfg = load_config(None, fedavg_overrides(args, args.threads, **{
        "model.hidden": f"[{args.hidden}]", "federation.vectorize": "true",
        "federation.vectorize_group": args.group}))
    p = prepare(cfg)
    torch.set_num_threads(args.threads)
    tr = p.trainer
    x, y = tr.x.flatten(1), tr.y
    tr.layout.load(p.init_weights)
    flat_params = [q.detach().clone() for q in tr.params]
    layers0 = list(zip(flat_params[0::2], flat_params[1::2]))  # (weight (out, in), bias) per linear layer
    ex = LocalExecutor(tr, p.data, args.seed, vectorize=True, vectorize_group=args.group)
    rng = np.random.default_rng(derive_seed(args.seed, "server"))
    sels = [sample_uniform(p.data.num_clients, args.fraction, rng) for _ in range(args.rounds)]
    jobs = [round_jobs(p, s, r + 1, args.seed) for r, s in enumerate(sels)]
    steps = sum(len(client_batches(i, s, args.epochs, args.batch_size)) for js in jobs for _, i, s in js)

    sides = {
        "flplat": lambda r: run_flplat(ex, p.init_weights, sels[r], r + 1),
        "shared": lambda r: run_shared(layers0, x, y, jobs[r], args),
        "stacked": lambda r: run_stacked(layers0, x, y, jobs[r], args),
    }
    names = list(SIDES)
    if args.baseline:
        old = LocalExecutor(tr, p.data, args.seed)
        old.vectorized = baseline_module(args.baseline).VectorizedTrainer(tr, args.group)
        sides[f"flplat@{args.baseline}"] = lambda r: run_flplat(old, p.init_weights, sels[r], r + 1)
        names.append(f"flplat@{args.baseline}")
    print(f"python {platform.python_version()}  torch {torch.__version__}  threads={torch.get_num_threads()}  "
          f"cpus={os.cpu_count()}  {platform.machine()}")
    n = p.data.num_samples("train")
    print(f"{args.dataset} mlp [{args.hidden}]: K={args.clients} q={args.fraction} E={args.epochs} "
          f"B={args.batch_size} adam lr={args.lr} alpha={args.alpha}  train samples/client min {n.min()} mean "
          f"{n.mean():.0f} max {n.max()}  params={tr.layout.size}  rounds/side={args.rounds}  "
          f"client steps/side={steps}  group={args.group or 'all'}")

    a = run_flplat(ex, p.init_weights, sels[0], 1)  # warm-up (untimed), and the check that stacked does the same
    b = sides["stacked"](0)
    sides["shared"](0)
    for extra in names[len(SIDES):]:
        sides[extra](0)
    diff = max((u - v).abs().max().item() for u, v in zip(a, b))

    rows, faults, cpu = [], {s: [] for s in names}, {s: [] for s in names}
    for i in range(args.repeats):
        order = names if i % 2 == 0 else names[::-1]
        res = {}
        for s in order:
            gc.collect()
            u0, c0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.process_time(), time.perf_counter()
            for r in range(args.rounds):
                sides[s](r)
            res[s] = (time.perf_counter() - t0) / args.rounds
            cpu[s].append((time.process_time() - c0) / args.rounds)
            u1 = resource.getrusage(resource.RUSAGE_SELF)
            faults[s].append(((u1.ru_minflt - u0.ru_minflt) / args.rounds, (u1.ru_stime - u0.ru_stime) / args.rounds))
        rows.append((i + 1, res, os.getloadavg()[0]))

    print(f"\n{'repeat':>6} {'flplat s/rnd':>12} {'shared':>8} {'stacked':>8} {'flplat/shared':>13} "
          f"{'stacked/shared':>14} {'flplat/stacked':>14} {'load1':>6}")
    for i, r, load in rows:
        print(f"{i:>6} {r['flplat']:>12.3f} {r['shared']:>8.3f} {r['stacked']:>8.3f} "
              f"{r['flplat'] / r['shared']:>13.2f} {r['stacked'] / r['shared']:>14.2f} "
              f"{r['flplat'] / r['stacked']:>14.2f} {load:>6.2f}")
    med = {s: statistics.median(r[s] for _, r, _ in rows) for s in names}

    def ratio(a, b):
        return statistics.median(r[a] / r[b] for _, r, _ in rows)

    print(f"median s/round: flplat {med['flplat']:.3f}, shared-model bound {med['shared']:.3f}, per-client-state "
          f"bound {med['stacked']:.3f}")
    print(f"median ratios: flplat / shared {ratio('flplat', 'shared'):.2f}x, stacked / shared "
          f"{ratio('stacked', 'shared'):.2f}x, flplat / stacked {ratio('flplat', 'stacked'):.2f}x  "
          f"(load1 {min(r[2] for r in rows):.2f}-{max(r[2] for r in rows):.2f})")
    cpu_ratio = {(a, b): statistics.median(x / y for x, y in zip(cpu[a], cpu[b]))
                 for a, b in (("flplat", "shared"), ("stacked", "shared"), ("flplat", "stacked"))}
    print("CPU time (process) per round, median: " + ", ".join(f"{s} {statistics.median(cpu[s]):.3f}" for s in SIDES)
          + "; ratios " + ", ".join(f"{a} / {b} {r:.2f}x" for (a, b), r in cpu_ratio.items())
          + " (robust to other processes' load with --threads 1)")
    if args.baseline:
        b = names[-1]
        print(f"{b}: median {med[b]:.3f} s/round; flplat / {b}: wall "
              f"{statistics.median(r['flplat'] / r[b] for _, r, _ in rows):.3f}x, CPU time "
              f"{statistics.median(x / y for x, y in zip(cpu['flplat'], cpu[b])):.3f}x")
    print(f"max |w_flplat - w_stacked| = {diff:.2e} (same work: float rounding only)")
    print("minor page faults per round (fresh memory the kernel maps and zeroes) and the kernel's CPU time per round, "
          "medians: " + ", ".join(f"{s} {statistics.median(f for f, _ in faults[s]):.0f} / "
                                  f"{statistics.median(k for _, k in faults[s]):.3f} s" for s in names))

    if args.profile:
        print("\ndecomposition of one round (round 1): self time of the ops under torch.profiler by category, seconds "
              "and share of the profiled wall time; 'between ops' = profiled wall - all ops (Python, dispatch and the "
              "profiler's own overhead)")
        print(f"{'category':<22}" + "".join(f"{s:>18}" for s in SIDES))
        dec = {s: decompose(lambda s=s: sides[s](0)) for s in SIDES}
        for c in CATEGORIES:
            print(f"{c:<22}" + "".join(f"{dec[s][0][c]:>10.3f} {dec[s][0][c] / dec[s][1]:>6.1%}" for s in SIDES))
        print(f"{'between ops':<22}" + "".join(
            f"{max(dec[s][1] - sum(dec[s][0].values()), 0.0):>10.3f} "
            f"{max(dec[s][1] - sum(dec[s][0].values()), 0.0) / dec[s][1]:>6.1%}" for s in SIDES))
        print(f"{'wall (profiled)':<22}" + "".join(f"{dec[s][1]:>10.3f} {'':>6}" for s in SIDES))
        print(f"{'CPU (unprofiled)':<22}" + "".join(f"{dec[s][2]:>10.3f} {'':>6}" for s in SIDES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
