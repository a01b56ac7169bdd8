"""Overhead of a Ray task (``flplat reproduce|sweep|tune --backend ray``) against the same run in this process.

    python tools/benchmarks/bench_ray.py   # a smoke-size run (DA-PFL's smoke cell, FedAvg)
    python tools/benchmarks/bench_ray.py --runs 5 --set federation.rounds=4

One process: the same run (same config, seed, one thread, a temporary MLflow store) ``--runs`` times in this process
(after one warm-up run: imports, data) and as many times as Ray tasks on a local Ray instance with one CPU (one task
at a time, each through :class:`flplat.studies.reproduction.execute.RayBackend`, as ``--backend ray`` runs them),
alternating. Prints the Ray instance's start-up, the first task (a cold worker: Python, torch and flplat imported), the
median seconds per run of each side, their difference (the overhead per run) and ratio. Both sides alternate in one
process, so the ratio holds better than absolute times on a loaded machine; every Ray task's metrics are checked
against the local run's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="timed runs per side (default 3)")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="overrides of the run")
    args = ap.parse_args(argv)
    try:
        import ray
    except ImportError:
        sys.exit('tools/benchmarks/bench_ray.py needs Ray: pip install -e ".[ray]"')
    from flplat.experiment import load_config
    from flplat.studies.papers import dapfl
    from flplat.studies.reproduction.execute import RayBackend, Task
    from flplat.studies.tuning import _sweep_run

    with tempfile.TemporaryDirectory() as store:
        def cfg(i: int):
            return load_config(str(REPO / "configs/dapfl/digits_k20_a0.5.yaml"),
                               [*dapfl.SCALES["smoke"], "algorithm.name=fedavg", "fabric.num_threads=1",
                                f"tracking.store_dir={store}", f"tracking.experiment=bench-ray-{i}", *args.set])

        _sweep_run(cfg(-1), False)  # warm-up: imports, data
        t0 = time.perf_counter()
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        start = time.perf_counter() - t0
        backend = RayBackend(n_jobs=1)

        def on_ray(i: int) -> tuple[float, dict]:
            t0 = time.perf_counter()
            [(_, res, err)] = list(backend.run([Task(_sweep_run, (cfg(i), False), f"bench {i}")]))
            if err is not None:
                raise err
            return time.perf_counter() - t0, res[0]

        local, remote = [], []
        with backend:
            first, _ = on_ray(100)  # a cold worker
            for i in range(args.runs):  # alternating, so that a change of the machine's load hits both sides
                t0 = time.perf_counter()
                metrics, _, _ = _sweep_run(cfg(i), False)
                local.append(time.perf_counter() - t0)
                secs, got = on_ray(101 + i)
                remote.append(secs)
                assert got["global_accuracy"] == metrics["global_accuracy"], "a Ray task gave other metrics"
        ray.shutdown()
    lo, re_ = statistics.median(local), statistics.median(remote)
    print(f"Ray instance start-up {start:.1f} s; first task (cold worker) {first:.1f} s")
    print(f"median per run: local {lo:.2f} s, Ray task {re_:.2f} s ({args.runs} runs each)")
    print(f"overhead per run {re_ - lo:+.2f} s; ratio Ray / local {re_ / lo:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
