"""PQFed Fig. 3 (EMD against the dissimilarity rate r for several LDP budgets ε) and §V-D / Fig. 4 (membership-
inference power and advantage against ε), on MNIST with the ``pqfed`` partition.

Fig. 3: per repetition, the pqfed partition (seed = repetition) builds the target and 10 clients at r = 0.1..1.0;
every client projects its data with the public PCA, adds Laplace noise (flplat.maths.pqfed.laplace_ldp, range from
the public sample), the server runs K-means on the pooled noisy features and computes each client's EMD to the
target, with both the raw and the max-normalised centroid distances as ground cost. This is exactly
``PQFed.similarity`` without the training. Means over repetitions are written as CSV and plotted.

MIA: the attack of §V-D (flplat.maths.pqfed.membership_inference) on every client's clean PCA features, averaged
over clients, for each ε.

    python tools/pqfed_privacy.py --repeats 10 --out docs/results/pqfed
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flplat.data.datasets import load_dataset  # noqa: E402
from flplat.data.partitions import build_federation  # noqa: E402
from flplat.experiment import load_config  # noqa: E402
from flplat.maths import pqfed as pm  # noqa: E402

RATES = [round(0.1 * i, 1) for i in range(1, 11)]


def client_features(data, n_components: int):
    """Public PCA (fitted on the partition's public sample) and every client's projected train split."""
    pub = data.x_global_test[data.public_indices].numpy()
    mean, comps = pm.fit_public_pca(pub, n_components)
    zpub = pm.project(pub, mean, comps)
    feats = [pm.project(data.x[data.indices(k, "train")].numpy(), mean, comps) for k in range(data.num_clients)]
    return zpub, feats


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--eps", type=float, nargs="+", default=[0.1, 1.0, 10.0, math.inf])
    ap.add_argument("--mia-eps", type=float, nargs="+", default=[0.1, 1.0, 10.0, 100.0, 1000.0, math.inf])
    ap.add_argument("--mia-trials", type=int, default=50)
    ap.add_argument("--mia-n", type=int, default=200)
    ap.add_argument("--clusters", type=int, default=15)
    ap.add_argument("--components", type=int, default=50)
    ap.add_argument("--samples-per-source", type=int, default=400)
    ap.add_argument("--out", default="docs/results/pqfed")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = load_config(None, ["data.name=mnist", "partition.name=pqfed", f"partition.num_clients={1 + len(RATES)}",
                             f"partition.pqfed_rates={RATES}", "partition.train_fraction=1.0",
                             "partition.test_fraction=0.0",
                             f"partition.pqfed_samples_per_source={a.samples_per_source}",
                             f"partition.pqfed_pca_components={a.components}", "tracking.enabled=false"])
    ds = load_dataset(cfg.data, 0)
    emd = {(e, g): [] for e in a.eps for g in pm.GROUND_COSTS}
    mia = {e: [] for e in a.mia_eps}
    for rep in range(a.repeats):
        data = build_federation(ds, cfg.partition, rep)
        zpub, feats = client_features(data, a.components)
        lo, hi = pm.feature_range(zpub)
        for e in a.eps:
            rng = np.random.default_rng([rep, 1])
            noisy = [pm.laplace_ldp(f, e, rng, lo, hi) for f in feats]
            centers, hists = pm.kmeans_histograms(noisy, a.clusters, seed=rep)
            for g in pm.GROUND_COSTS:
                emd[(e, g)].append(pm.emd_to_target(hists, 0, centers, g)[1:])
        if rep == 0:  # the attack on the first repetition's clients (50 trials each)
            for e in a.mia_eps:
                rng = np.random.default_rng([rep, 2])
                mia[e] = [pm.membership_inference(f, e, rng, n=a.mia_n, trials=a.mia_trials) for f in feats]
        print(f"repetition {rep + 1}/{a.repeats} done", flush=True)

    lines = ["ground_cost,epsilon," + ",".join(f"r={r}" for r in RATES)]
    for (e, g), rows in emd.items():
        lines.append(f"{g},{e}," + ",".join(f"{v:.4f}" for v in np.mean(rows, axis=0)))
    (out / "fig3_mnist.csv").write_text("\n".join(lines) + "\n")
    mlines = ["epsilon,power,fpr,advantage,advantage_min_client,advantage_max_client"]
    for e, res in mia.items():
        adv = [r["advantage"] for r in res]
        mlines.append(f"{e},{np.mean([r['power'] for r in res]):.4f},{np.mean([r['fpr'] for r in res]):.4f},"
                      f"{np.mean(adv):.4f},{np.min(adv):.4f},{np.max(adv):.4f}")
    (out / "mia_mnist.csv").write_text("\n".join(mlines) + "\n")
    print("\n".join(lines + [""] + mlines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, g in zip(axes, pm.GROUND_COSTS):
        for e in a.eps:
            ax.plot(RATES, np.mean(emd[(e, g)], axis=0), marker="o", label=f"ε = {e:g}")
        ax.set_xlabel("dissimilarity rate r")
        ax.set_ylabel("EMD to the target")
        ax.set_title(f"MNIST, ground cost: {g}")
        ax.legend()
    fig.suptitle(f"PQFed Fig. 3 (mean of {a.repeats} repetitions)")
    fig.tight_layout()
    fig.savefig(out / "fig3_mnist.png", dpi=120)


if __name__ == "__main__":
    main()
