"""flplat's Dirichlet and Similarity partitions against FedArtML's ``dirichlet_method`` and
``percent_noniid_method`` (docs/results.md, "Partitions against FedArtML").

Both sides partition the same labels (a dataset's training pool) for each setting and each of ``--seeds``; the two
use different random streams, so the comparison is between the *distributions* over seeds, not identical draws:
per setting, the mean ± std over seeds of the client-size statistics (smallest, median, largest client, coefficient
of variation) and of the non-IID metrics (WPSI and FedArtML's HD, JSD, EMD:
:func:`flplat.metrics.noniid.noniid_summary`), with ``z`` = (flplat − FedArtML) / sqrt(s1²/n + s2²/n) and the
two-sample Kolmogorov–Smirnov p-value of all client sizes pooled over seeds. For Dirichlet it also replays
FedArtML's own random stream through flplat's ``dirichlet()`` (:class:`FedArtMLStream`) and counts the partitions
that come out identical: that checks the dealing and the redraw rule draw for draw.

Similarity(S) is compared with ``percent_noniid_method(pct_noniid = 100 (1 − S))``, FedArtML's closest protocol.
Clust-PSI-PFL takes Similarity from [29], not from FedArtML, and flplat follows the authors' code (SEED-NOTES.md);
the differences this prints are documented, not fixed.

Needs FedArtML (``pip install 'flplat[fedartml]'``; its ``__init__`` and its interactive plots are not loaded, so
``pip install --no-deps fedartml`` with pandas is enough)::

    python tools/investigations/compare_fedartml_partitions.py --dataset fmnist --clients 100 --seeds 10
    python tools/investigations/compare_fedartml_partitions.py --dataset fmnist --clients 10 --alphas "" \
        --s-values 1,0.5,0.1,0
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from flplat.data.registry import partition_config  # noqa: E402
from flplat.metrics.noniid import noniid_summary  # noqa: E402

METRICS = ("wpsi", "hellinger", "jsd", "emd")
SIZE_STATS = ("min", "median", "max", "cv")


def fedartml_splitter():
    """FedArtML's ``SplitAsFederatedData`` without running the package's ``__init__`` (it imports the interactive
    plots and with them ipywidgets); exits 2 with the install line when FedArtML is not installed."""
    spec = importlib.util.find_spec("fedartml")
    if spec is None or not spec.submodule_search_locations:
        print("FedArtML is not installed; install it with: pip install 'flplat[fedartml]'", file=sys.stderr)
        raise SystemExit(2)
    if "fedartml" not in sys.modules:
        pkg = types.ModuleType("fedartml")
        pkg.__path__ = list(spec.submodule_search_locations)
        sys.modules["fedartml"] = pkg
    from fedartml.fl_split_as_federated_data import SplitAsFederatedData

    return SplitAsFederatedData


def counts_of(parts, labels: np.ndarray, num_classes: int) -> np.ndarray:
    return np.stack([np.bincount(labels[np.asarray(p, dtype=np.int64)], minlength=num_classes) for p in parts])


def stats(counts: np.ndarray) -> dict[str, float]:
    sizes = counts.sum(axis=1)
    out = {"min": float(sizes.min()), "median": float(np.median(sizes)), "max": float(sizes.max()),
           "cv": float(sizes.std() / sizes.mean())}
    s = noniid_summary(counts)
    out.update({m: s[m] for m in METRICS})
    return out


def flplat_counts(labels, name: str, value: float, k: int, seed: int, c: int) -> np.ndarray:
    from flplat.data.partitions import partition

    # the redraw cap far above what these settings need: the rule compared is the paper's (redraw while a client
    # holds fewer than 10 samples), not flplat's safety cap
    keys = {"alpha": value, "min_samples": 10, "max_retries": 100_000} if name == "dirichlet" else {"similarity": value}
    cfg = partition_config(name=name, num_clients=k, **keys)
    return counts_of(partition(labels, cfg, np.random.default_rng(seed)), labels, c)


def fedartml_counts(split, labels, name: str, value: float, k: int, seed: int, c: int) -> np.ndarray:
    if name == "dirichlet":
        _, _, idx, _ = split.dirichlet_method(labels, k, alpha=value, random_state=seed)
    else:
        _, _, idx, _ = split.percent_noniid_method(labels, k, pct_noniid=100.0 * (1.0 - value), random_state=seed)
    return counts_of(idx, labels, c)


class FedArtMLStream:
    """The random stream of FedArtML's ``dirichlet_method`` behind flplat's ``rng`` interface: each class reseeds
    NumPy's global generator with ``random_state + 100 j`` (j counts classes over all redraws), shuffles the
    class's indices and draws the proportions. With it, :func:`flplat.data.partitions.dirichlet` must deal exactly
    FedArtML's partition when its dealing and its redraw rule are FedArtML's."""

    def __init__(self, seed: int):
        self.seed = seed

    def permutation(self, x):
        np.random.seed(self.seed)
        self.seed += 100
        out = np.array(x, copy=True)
        np.random.shuffle(out)
        return out

    def dirichlet(self, alpha):
        return np.random.dirichlet(alpha)


def same_draws(labels, split, value: float, k: int, seed: int) -> bool:
    """flplat's dirichlet() fed FedArtML's random stream gives FedArtML's partition (client by client)."""
    from flplat.data.partitions import dirichlet

    cfg = partition_config(name="dirichlet", num_clients=k, alpha=value, min_samples=10, max_retries=100_000)
    ours = dirichlet(labels, cfg, FedArtMLStream(seed)).clients
    _, _, idx, _ = split.dirichlet_method(labels, k, alpha=value, random_state=seed)
    return all(np.array_equal(a, np.sort(np.asarray(b, dtype=np.int64))) for a, b in zip(ours, idx))


def compare(labels, split, name: str, value: float, k: int, seeds: int, c: int) -> list[str]:
    from scipy.stats import ks_2samp

    ours, theirs, sz_ours, sz_theirs = [], [], [], []
    t0 = time.perf_counter()
    for s in range(seeds):
        a = flplat_counts(labels, name, value, k, s, c)
        b = fedartml_counts(split, labels, name, value, k, s, c)
        ours.append(stats(a))
        theirs.append(stats(b))
        sz_ours.append(a.sum(axis=1))
        sz_theirs.append(b.sum(axis=1))
    label = (f"Dirichlet α={value:g}" if name == "dirichlet" else f"Similarity S={value:g} vs percent_noniid "
             f"{100 * (1 - value):g}%")
    ks = ks_2samp(np.concatenate(sz_ours), np.concatenate(sz_theirs))
    same = ""
    if name == "dirichlet":
        n_same = sum(same_draws(labels, split, value, k, s) for s in range(seeds))
        same = f"; FedArtML's random stream through flplat's dirichlet(): {n_same} of {seeds} partitions identical"
    lines = [f"{label}, K={k}, {seeds} seeds ({time.perf_counter() - t0:.0f} s); client sizes pooled: KS p = "
             f"{ks.pvalue:.3g}{same}", "", "| statistic | flplat | FedArtML | z |", "|---|---|---|---|"]
    for key in (*SIZE_STATS, *METRICS):
        x = np.array([r[key] for r in ours])
        y = np.array([r[key] for r in theirs])
        se = np.sqrt(x.var(ddof=1) / len(x) + y.var(ddof=1) / len(y)) if seeds > 1 else 0.0
        z = (x.mean() - y.mean()) / se if se > 0 else (0.0 if x.mean() == y.mean() else float("inf"))
        name_ = {"min": "smallest client", "median": "median client", "max": "largest client",
                 "cv": "client size CV", "wpsi": "WPSI", "hellinger": "HD", "jsd": "JSD", "emd": "EMD"}[key]
        lines.append(f"| {name_} | {x.mean():.4g} ± {x.std():.2g} | {y.mean():.4g} ± {y.std():.2g} | {z:+.2f} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="fmnist", help="a flplat dataset whose training labels are partitioned")
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 on each side (default 10)")
    ap.add_argument("--alphas", default="50,1,0.3,0.1", help="Dirichlet α values ('' for none)")
    ap.add_argument("--s-values", default="1,0.5,0", help="Similarity S values ('' for none)")
    args = ap.parse_args(argv)
    split = fedartml_splitter()
    from flplat.api import derive_seed
    from flplat.data.datasets import load_dataset
    from flplat.experiment import load_config

    ds = load_dataset(load_config(None, [f"data.name={args.dataset}"]).data, derive_seed(0, "data"))
    labels = np.asarray(ds.y_train, dtype=np.int64)
    c = int(ds.num_classes)
    print(f"# flplat against FedArtML: {args.dataset}, {len(labels)} training labels, {c} classes, "
          f"K = {args.clients}\n")
    for name, text in (("dirichlet", args.alphas), ("similarity", args.s_values)):
        for v in [float(x) for x in text.split(",") if x.strip()]:
            print("\n".join(compare(labels, split, name, v, args.clients, args.seeds, c)) + "\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
