"""Score Flux's adaptive-DBSCAN rules on the planted MNIST shifts (docs/flux_clustering.md).

Runs each cell of ``configs/flux/table1/mnist_<cell>.yaml`` up to Flux's clustering step, keeps the clients' scaled
descriptors, their train sizes, the scaler and their true distribution ids (``--save DIR`` keeps them as .npz), then
clusters the same descriptors with the knee alone and with the noise guard and prints τ / ARI per cell and the number
of cells with ARI >= 0.9 per seed.

    python tools/investigations/flux_knee_rules.py --scale reduced --seeds 0,1,2
    python tools/investigations/flux_knee_rules.py --scale paper --seeds 0 --ratios 1.1,1.2,1.3

``--config FILE [--set KEY=VALUE ...]`` captures one run of any Flux config instead and also clusters parts of the
descriptor (the full descriptor, its label-free part d' = [μ_x, σ_x]) with the knee, the guard and K-means with the
true M — the 1,200-client analysis of docs/flux_clustering.md:

    python tools/investigations/flux_knee_rules.py --config configs/flux/scalability_1200.yaml \
        --set partition.train_copies=8 federation.optimizer.lr=0.03 --seeds 0
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

CELLS = ("feature_l2", "feature_l5", "feature_l8", "label_l2", "label_l5", "label_l8",
         "concept_xy_l2", "concept_xy_l5", "concept_xy_l8")
REDUCED = ["partition.samples_per_client=500", "federation.optimizer.lr=0.03"]


class _Stop(Exception):
    pass


def cell_config(cell: str, scale: str) -> tuple[str, list[str]]:
    """(config path, overrides) of a Table 1 MNIST cell at ``scale``."""
    here = Path(__file__).resolve().parents[2]  # the checkout
    return str(here / f"configs/flux/table1/mnist_{cell}.yaml"), (REDUCED if scale == "reduced" else [])


def capture(path: str, overrides: list[str], seed: int) -> dict[str, np.ndarray]:
    """The clustering round's scaled descriptors, train sizes, scaler (mins, maxs) and true ids of one Flux run."""
    import flplat.algorithms.flux as fx
    from flplat.experiment import load_config, prepare, run

    over = ["algorithm.name=flux", "fabric.num_threads=1", "tracking.enabled=false", f"seed={seed}"]
    cfg = load_config(path, over + list(overrides))
    true = prepare(cfg).data.meta["distribution"]
    out: dict[str, np.ndarray] = {}
    original = fx.Flux._cluster

    def grab(self, state, d, clients):
        mins, maxs = state.method.scaler
        out.update(d=d, n=self.info.num_samples[clients], mins=mins, maxs=maxs, true=true[clients],
                   num_classes=np.array(self.info.num_classes), l=np.array(self.cfg.pca_components),
                   round=np.array(state.round))
        raise _Stop

    fx.Flux._cluster = grab
    try:
        run(cfg, progress=False)
    except _Stop:
        pass
    finally:
        fx.Flux._cluster = original
    if not out:
        raise RuntimeError(f"{path} seed {seed}: the run ended before Flux clustered")
    return out


def parts(z: dict[str, np.ndarray]) -> None:
    """Print τ / ARI of the knee, the guard and K-means (true M) on the full descriptor and on its label-free part."""
    from sklearn.metrics import adjusted_rand_score

    from flplat.maths.clustering import adaptive_dbscan, kmeans
    from flplat.maths.flux_descriptors import DescriptorScaler, sampling_variance

    d, t, l = z["d"], z["true"], int(z["l"])  # noqa: E741
    m = len(np.unique(t))
    var = sampling_variance(d, DescriptorScaler(l, z["mins"], z["maxs"]), z["n"], int(z["num_classes"]))
    sizes = f"{int(z['n'].min())}–{int(z['n'].max())}"
    print(f"  {len(d)} clients at round {int(z['round'])}, M = {m}, train sizes {sizes}")
    for name, x in (("full descriptor", d), ("label-free part d'", d[:, :2 * l])):
        knee = adaptive_dbscan(x).labels
        row = [f"knee {knee.max() + 1}/{adjusted_rand_score(t, knee):.2f}"]
        if x is d:
            g = adaptive_dbscan(x, variance=var)
            row.append(f"guard {g.labels.max() + 1}/{adjusted_rand_score(t, g.labels):.2f} ({g.guard or 'knee'})")
        row.append(f"K-means(M) ARI {adjusted_rand_score(t, kmeans(x, m)[0]):.2f}")
        print(f"  {name}: " + ", ".join(row), flush=True)


def score(z: dict[str, np.ndarray], ratio: float, jump: float) -> tuple[tuple[int, float], tuple[int, float, str]]:
    from sklearn.metrics import adjusted_rand_score

    from flplat.maths.clustering import adaptive_dbscan
    from flplat.maths.flux_descriptors import DescriptorScaler, sampling_variance

    d, t = z["d"], z["true"]
    knee = adaptive_dbscan(d).labels
    var = sampling_variance(d, DescriptorScaler(int(z["l"]), z["mins"], z["maxs"]), z["n"], int(z["num_classes"]))
    res = adaptive_dbscan(d, variance=var, noise_ratio=ratio, noise_jump=jump)
    return ((int(knee.max()) + 1, adjusted_rand_score(t, knee)),
            (int(res.labels.max()) + 1, adjusted_rand_score(t, res.labels), res.guard))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", choices=("reduced", "paper"), default="reduced")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--ratios", default="1.2", help="knee_noise_ratio values to score")
    ap.add_argument("--jump", type=float, default=2.0, help="knee_noise_jump")
    ap.add_argument("--save", default="", help="keep each cell's captured descriptors in this directory (.npz)")
    ap.add_argument("--load", default="", help="score the .npz files of an earlier --save instead of running")
    ap.add_argument("--config", default="", help="capture one run of this Flux config instead of the Table 1 cells")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="overrides for --config")
    a = ap.parse_args(argv)
    if a.config:
        for seed in [int(s) for s in a.seeds.split(",")]:
            print(f"seed {seed}: {a.config} {' '.join(a.set)}")
            parts(capture(a.config, a.set, seed))
        return 0
    ratios = [float(r) for r in a.ratios.split(",")]
    for seed in [int(s) for s in a.seeds.split(",")]:
        ok = {"knee": 0, **{r: 0 for r in ratios}}
        print(f"seed {seed} ({a.scale}): cell, M, knee τ/ARI, " + ", ".join(f"guard {r} τ/ARI" for r in ratios))
        for cell in a.cells.split(","):
            name = f"{a.scale}_s{seed}_{cell}.npz"
            if a.load:
                z = dict(np.load(os.path.join(a.load, name)))
            else:
                z = capture(*cell_config(cell, a.scale), seed)
                if a.save:
                    os.makedirs(a.save, exist_ok=True)
                    np.savez(os.path.join(a.save, name), **z)
            row = [cell, str(len(np.unique(z["true"])))]
            for r in ratios:
                (kt, ka), (gt, ga, why) = score(z, r, a.jump)
                if r == ratios[0]:
                    row.append(f"{kt}/{ka:.2f}")
                    ok["knee"] += ka >= 0.9
                row.append(f"{gt}/{ga:.2f}{' (' + why + ')' if why else ''}")
                ok[r] += ga >= 0.9
            print("  " + "  ".join(row), flush=True)
        print("  cells with ARI >= 0.9: " + ", ".join(f"{k}: {v}" for k, v in ok.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
