"""Benchmark: Clust-PSI-PFL's silhouette search for the number of clusters at K = 100, 1,000 and 5,000 clients.

Descriptors are those the algorithm builds: label counts of K clients (200 samples each, C = 10 classes,
Dirichlet(alpha) label skew) -> [PSI_i, PSI_i,1..C] (C + 1 = 11 features) -> StandardScaler. Timed: only
:func:`flplat.maths.clustering.silhouette_kmeans` with the algorithm's default config (``max_clusters`` = no cap,
i.e. the paper's j = 2..K-1, ``silhouette_sample``, ``n_init``, ``search_jobs``), median over ``--repeats`` runs
after one untimed warm-up (``--repeats 0``: a single timed run, no warm-up). ``cpu_s`` is the process CPU time of
the median run (with ``--jobs 1`` the search is single-threaded, so on a loaded machine it is the figure to
compare; ``median_s`` is wall time).

    python tools/benchmarks/bench_clustering.py --clients 100 1000                      # the default: full scan
    python tools/benchmarks/bench_clustering.py --clients 100 1000 --n-init 1           # one K-means++ start per j
    python tools/benchmarks/bench_clustering.py --clients 100 1000 5000 --max-clusters 20   # the opt-in cap
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.preprocessing import StandardScaler

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

from flplat.algorithms.clust_psi_pfl import ClustPSIPFL, psi_descriptors  # noqa: E402
from flplat.maths.clustering import silhouette_kmeans  # noqa: E402


def descriptors(K: int, C: int, alpha: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    counts = np.stack([rng.multinomial(200, rng.dirichlet(np.full(C, alpha))) for _ in range(K)])
    return StandardScaler().fit_transform(psi_descriptors(counts, ClustPSIPFL.Config().eps))


def main() -> None:
    d = ClustPSIPFL.Config()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[100, 1000, 5000])
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--alpha", type=float, default=0.3)
    ap.add_argument("--max-clusters", type=int, default=d.max_clusters or 0, help="0: no cap, K - 1 (the paper)")
    ap.add_argument("--sample", type=int, default=d.silhouette_sample, help="0: every client")
    ap.add_argument("--n-init", type=int, default=d.n_init)
    ap.add_argument("--jobs", type=int, default=d.search_jobs, help="processes for the K-means fits")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    k_max, sample = a.max_clusters or None, a.sample or None
    print(f"max_clusters={k_max} silhouette_sample={sample} n_init={a.n_init} jobs={a.jobs} C+1={a.classes + 1} "
          f"alpha={a.alpha} repeats={a.repeats}")
    print(f"{'K':>6} {'median_s':>9} {'min_s':>7} {'cpu_s':>8} {'tau':>4} {'silhouette':>10} candidates")
    for K in a.clients:
        X = descriptors(K, a.classes, a.alpha, a.seed)
        times, cpus = [], []
        for r in range(a.repeats + 1 if a.repeats else 1):
            t0, c0 = time.perf_counter(), time.process_time()
            res = silhouette_kmeans(X, k_max=k_max, n_init=a.n_init, subsample=sample,
                                    rng=np.random.default_rng(a.seed), jobs=a.jobs)
            if r or not a.repeats:  # the first run is the warm-up
                times.append(time.perf_counter() - t0)
                cpus.append(time.process_time() - c0)
        js = sorted(res.scores)
        span = f"{js[0]}..{js[-1]}" if js else "-"
        cpu = cpus[times.index(sorted(times)[(len(times) - 1) // 2])]
        print(f"{K:>6} {statistics.median(times):>9.3f} {min(times):>7.3f} {cpu:>8.3f} {res.k:>4} "
              f"{res.silhouette:>10.4f} {span}", flush=True)


if __name__ == "__main__":
    main()
