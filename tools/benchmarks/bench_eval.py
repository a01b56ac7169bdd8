"""Benchmark: evaluating every client of a round against one forward pass over all their test rows.

For each K (``--clients``, default 1,200 and 10,000; FMNIST, IID partition, the issue's MLP 784-200-200-10) and
each method (FedAvg; IFCA with ``--clusters`` clusters and every client assigned to a random cluster, so every
cluster model is scored; Ditto with a personal model per client — every client's store row written with its own
perturbed copy, so every client is scored with its own model; the store is float16 above 2,000 clients
(``--personal-dtype``): 10,000 copies of the MLP are 4 GB), one process builds the federation once and then
times, alternating within each repeat:

* ``lower bound`` — a hand-written pass: one model scores all the rows the evaluation scores (every client's test
  rows, plus the global test set for a method with a global model, as FedAvg), pre-gathered into one tensor, in
  chunks of ``federation.eval_batch_size``: forward, argmax, hit count;
* ``lower bound + gather`` — the same, but gathering the clients' rows from the pooled tensor per chunk
  (``x[test_rows[a:b]]``), as a script that keeps the pooled data would;
* ``batched`` — the orchestrator's ``evaluate()`` with ``federation.batched_eval=true`` (what every round runs);
* ``per client`` — the same with ``federation.batched_eval=false`` (scoring clients one by one, as before);
* for Ditto also ``read models`` — reading every client's model from the store and stacking them in the
  evaluation's groups, without any forward pass: memory traffic that any evaluation of K personal models pays.

Reported: medians over ``--repeats`` of seconds per evaluation and the ratios to the lower bound (target
batched ≤ 1.5×), and that the two evaluations give the same per-client counts.

    python tools/benchmarks/bench_eval.py                                  # K = 1,200 and 10,000, FedAvg, IFCA, Ditto
    python tools/benchmarks/bench_eval.py --clients 1200 --repeats 5
    python tools/benchmarks/bench_eval.py --clients 10000 --methods ditto --personal-dtype float16
    python tools/benchmarks/bench_eval.py --clients 40 --repeats 1 --data-root DIR   # FMNIST from DIR (data.root)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
TARGET = 1.5


def lower_bound(tr, x_all, y_all, weights) -> int:
    """One model over the pre-gathered rows: forward, argmax, hits."""
    import torch

    tr.layout.load(weights)
    tr.net.eval()
    hits = 0
    with torch.no_grad():
        for a in range(0, len(y_all), tr.eval_batch_size):
            hits += int((tr.net(x_all[a:a + tr.eval_batch_size]).argmax(1) == y_all[a:a + tr.eval_batch_size]).sum())
    return hits


def lower_bound_gather(tr, rows, weights, x_glob, y_glob) -> int:
    """The same, gathering the clients' rows from the pooled tensor chunk by chunk (as a script indexing
    ``x[test_rows]`` would), plus the global test set when given."""
    import torch

    tr.layout.load(weights)
    tr.net.eval()
    hits, bs = 0, tr.eval_batch_size
    with torch.no_grad():
        for a in range(0, len(rows), bs):
            sel = rows[a:a + bs]
            hits += int((tr.net(tr.x[sel]).argmax(1) == tr.y[sel]).sum())
        if x_glob is not None:
            for a in range(0, len(y_glob), bs):
                hits += int((tr.net(x_glob[a:a + bs]).argmax(1) == y_glob[a:a + bs]).sum())
    return hits


def read_models(orch, ex) -> None:
    """Every client's evaluation model read and stacked in the evaluation's group sizes (no forward pass)."""
    import torch

    k = orch.data.num_clients
    most = min(ex._scorer.max_models() if ex._scorer is not None else k, k)
    buf = torch.empty(most, orch.state.weights.numel())  # reused, as the evaluation's stacking buffer
    for a in range(0, k, most):
        b = min(a + most, k)
        torch.stack([orch.strategy.eval_weights(orch.state, c) for c in range(a, b)], out=buf[:b - a])


def evaluate(orch, batched: bool) -> dict:
    orch.evaluator.batched = batched
    return orch.evaluator.evaluate(orch.state)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", default="1200,10000")
    ap.add_argument("--methods", default="fedavg,ifca,ditto")
    ap.add_argument("--personal-dtype", default="auto",
                    help="federation.client_state_dtype for Ditto (auto: float32 up to 2,000 clients, else float16)")
    ap.add_argument("--clusters", type=int, default=4)
    ap.add_argument("--hidden", default="200,200")
    ap.add_argument("--data-root", default=None,
                    help="data.root: the directory holding the FMNIST files (default: the documented lookup)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-per-client-above", type=int, default=20000,
                    help="do not time the per-client path above this many clients")
    args = ap.parse_args(argv)

    import numpy as np
    import torch

    from flplat.api import derive_seed
    from flplat.engine.orchestrator import Orchestrator
    from flplat.engine.sharding import make_executor
    from flplat.experiment import load_config, prepare

    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}  threads={args.threads}  cpus={os.cpu_count()}  mlp [{args.hidden}]")
    print(f"{'K':>6} {'method':>7} {'test rows':>9} {'lower bound s':>14} {'lb+gather s':>12} {'batched s':>10} "
          f"{'per-client s':>13} {'batched/lb':>11} {'batched/lb+g':>13} {'per-client/lb':>14} {'counts equal':>13}"
          "  load1")
    for k in (int(v) for v in args.clients.split(",")):
        for method in args.methods.split(","):
            over = ["data.name=fmnist", "partition.name=iid", f"partition.num_clients={k}", "model.name=mlp",
                    f"model.hidden=[{args.hidden}]", f"algorithm.name={method}", "tracking.enabled=false",
                    "fabric.accelerator=cpu", f"fabric.num_threads={args.threads}"]
            if args.data_root:
                over.append(f"data.root={args.data_root}")
            if method == "ifca":
                over.append(f"algorithm.num_clusters={args.clusters}")
            if method == "ditto":
                dtype = args.personal_dtype if args.personal_dtype != "auto" else "float32" if k <= 2000 else "float16"
                over.append(f"federation.client_state_dtype={dtype}")
            cfg = load_config(None, over)
            p = prepare(cfg)
            ex = make_executor(p.trainer, p.data, 0)
            orch = Orchestrator(p.strategy, ex, p.data, 1, 1, 0, [])
            from flplat.api import ServerState

            g = torch.Generator().manual_seed(1)
            if method == "ifca":  # a trained-looking state without training: perturbed cluster models, random clusters
                clusters = p.init_weights + 0.01 * torch.randn(args.clusters, p.init_weights.numel(), generator=g)
                rng = np.random.default_rng(derive_seed(0, "bench"))
                orch.state = ServerState(weights=p.init_weights.clone(), clusters=clusters,
                                         assignment=rng.integers(0, args.clusters, size=k))
            elif method == "ditto":  # every client holds its own (perturbed) personal model
                orch.state = p.strategy.init_state(p.init_weights, np.random.default_rng(0), ex)
                noise = torch.empty(p.init_weights.numel())
                for c in range(k):
                    orch.state.personal.set(c, p.init_weights + 0.01 * noise.normal_(generator=g))
            else:
                orch.state = ServerState(weights=p.init_weights.clone())
            tr = p.trainer
            rows = torch.as_tensor(np.concatenate([c.test for c in p.data.clients]), dtype=torch.long)
            x_all, y_all = tr.x[rows], tr.y[rows]  # the rows scored: every client's test rows, ...
            glob = p.strategy.global_weights(orch.state) is not None
            x_glob, y_glob = (p.data.x_global_test, p.data.y_global_test) if glob else (None, None)
            if glob:  # ... and the global test set's
                x_all = torch.cat([x_all, p.data.x_global_test])
                y_all = torch.cat([y_all, p.data.y_global_test])

            per_client_too = k <= args.skip_per_client_above
            one = orch.state.weights
            lower_bound(tr, x_all, y_all, one), evaluate(orch, True)  # warm-up
            times = {"lb": [], "lbg": [], "b": [], "p": [], "read": []}
            equal = True
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                lower_bound(tr, x_all, y_all, one)
                times["lb"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                lower_bound_gather(tr, rows, one, x_glob, y_glob)
                times["lbg"].append(time.perf_counter() - t0)
                if method == "ditto":
                    t0 = time.perf_counter()
                    read_models(orch, ex)
                    times["read"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                evaluate(orch, True)
                tb = dict(orch.client_table)
                times["b"].append(time.perf_counter() - t0)
                if per_client_too:
                    t0 = time.perf_counter()
                    evaluate(orch, False)
                    times["p"].append(time.perf_counter() - t0)
                    equal &= all(np.array_equal(tb[c], orch.client_table[c]) for c in ("num_test", "correct"))
            med = {key: statistics.median(v) if v else float("nan") for key, v in times.items()}
            print(f"{k:>6} {method:>7} {len(y_all):>9} {med['lb']:>14.4f} {med['lbg']:>12.4f} {med['b']:>10.4f} "
                  f"{med['p']:>13.4f} {med['b'] / med['lb']:>11.2f} {med['b'] / med['lbg']:>13.2f} "
                  f"{med['p'] / med['lb']:>14.2f} "
                  f"{str(equal) if per_client_too else '-':>13}  {os.getloadavg()[0]:.2f}", flush=True)
            verdict = "PASS" if med["b"] / med["lb"] <= TARGET else "FAIL"
            print(f"{'':>6} batched / lower bound {med['b'] / med['lb']:.2f} (target <= {TARGET}: {verdict})")
            if times["read"]:
                print(f"{'':>6} reading the {k} personal models alone: {med['read']:.4f} s; batched / (lower bound + "
                      f"read) {med['b'] / (med['lb'] + med['read']):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
