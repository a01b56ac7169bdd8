"""Measure the memory of per-client personalised state at scale (10,000 clients' state of the FMNIST CNN).

Runs one experiment in this process with an algorithm that keeps a personal model per client in a
:class:`flplat.api.ClientStore` (``local`` by default: every client keeps its own model), and samples
``/proc/self/status`` every 0.1 s: anonymous resident memory (``RssAnon``: the process's own heap: data,
model, optimizer, the store when it is in RAM) and file-backed resident memory (``RssFile``: pages of the
memory-mapped store file, which the kernel can drop at any time) and the peak of both (``VmHWM``). Also reports
the store file's size on disk (allocated blocks: rows never written take no space).

    python tools/benchmarks/bench_state.py   # 10,000 clients, fmnist_cnn, float16 on disk
    python tools/benchmarks/bench_state.py --clients 1000 --state-dir ''        # in RAM
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing


def status_kb() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
                out[key] = int(rest.split()[0])
    return out


class Sampler(threading.Thread):
    def __init__(self, every: float = 0.1):
        super().__init__(daemon=True)
        self.every, self.peak, self.stop = every, {}, threading.Event()

    def run(self):
        while not self.stop.is_set():
            for k, v in status_kb().items():
                self.peak[k] = max(self.peak.get(k, 0), v)
            time.sleep(self.every)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--clients", type=int, default=10_000)
    ap.add_argument("--dataset", default="fmnist")
    ap.add_argument("--model", default="fmnist_cnn")
    ap.add_argument("--algorithm", default="local", help="an algorithm with per-client state (local, ditto, ...)")
    ap.add_argument("--fraction", type=float, default=1.0, help="federation.client_fraction")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--dtype", default="float16", help="federation.client_state_dtype")
    ap.add_argument("--state-dir", default=None,
                    help="federation.client_state_dir (default: a temporary directory; '' keeps the state in RAM)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)

    from flplat.experiment import load_config, run

    tmp = None
    state_dir = args.state_dir
    if state_dir is None:
        tmp = tempfile.TemporaryDirectory(dir=os.environ.get("FLPLAT_STATE_TMP"))
        state_dir = tmp.name
    ov = [f"data.name={args.dataset}", f"model.name={args.model}", f"algorithm.name={args.algorithm}",
          "partition.name=iid", f"partition.num_clients={args.clients}", "partition.min_samples=1",
          f"federation.client_fraction={args.fraction}", f"federation.rounds={args.rounds}",
          f"federation.eval_every={args.rounds}", "federation.local_epochs=1",
          f"federation.client_state_dtype={args.dtype}", f"fabric.num_threads={args.threads}",
          "tracking.enabled=false"]
    if state_dir:
        ov.append(f"federation.client_state_dir={state_dir}")
    cfg = load_config(None, ov)
    before = status_kb()
    sampler = Sampler()
    sampler.start()
    t0 = time.perf_counter()
    summary, _ = run(cfg, progress=False)
    wall = time.perf_counter() - t0
    sampler.stop.set()
    sampler.join()
    size = summary.state.personal.size if summary.state.personal is not None else 0
    files = list(Path(state_dir).glob("*.bin")) if state_dir else []
    allocated = sum(f.stat().st_blocks * 512 for f in files)
    logical = sum(f.stat().st_size for f in files)
    gb = 1 / 2**20
    print(f"{args.algorithm} {args.dataset}/{args.model}: K={args.clients} P={size} q={args.fraction} "
          f"T={args.rounds} state dtype={args.dtype} store={'disk ' + state_dir if state_dir else 'RAM'}")
    print(f"wall {wall:.1f} s ({wall / args.rounds:.1f} s/round incl. the final evaluation of all clients); "
          f"global accuracy {summary.metrics['global_accuracy']:.4f}")
    print(f"RSS before the run: {before['VmRSS'] * gb:.2f} GB;  peak RssAnon {sampler.peak['RssAnon'] * gb:.2f} GB, "
          f"peak RssFile {sampler.peak['RssFile'] * gb:.2f} GB (reclaimable pages of the mapped store), "
          f"VmHWM {sampler.peak['VmHWM'] * gb:.2f} GB")
    if files:
        print(f"store files: {logical / 2**30:.2f} GB logical, {allocated / 2**30:.2f} GB allocated on disk")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
