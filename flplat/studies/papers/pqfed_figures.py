"""PQFed (seed 004): the analyses behind Figs. 3-6, none of which trains (the tables are in
:mod:`flplat.studies.papers.pqfed`).

Every figure starts from one repetition's federation projected on the public PCA (:func:`features`: the target T
and one client per dissimilarity rate r, 400 images per source as the paper, 30 at ``smoke``), and follows
``PQFed.similarity`` without the training: Laplace LDP at the cell's ε on every client's features (a generator seeded
by the repetition), K-means (15 clusters) over the pooled noisy features, EMD of each client's cluster histogram to
T's (:func:`emd_by_rate`).

* Fig. 3: the EMD against r = 0.1..1.0 (:func:`emd_by_rate`, read by ``pqfed.emd_curve``).
* Fig. 5 ("EMD threshold bands (30-60% max)"): the clients at r = 0, 0.1, .., 1.0 of §V-E, their EMD at ε = 10 (the
  paper's green line) and without noise (ε = ∞, red), cut by the strict (30 % of the largest EMD) and lenient
  (60 %) thresholds into three bands (:func:`flplat.maths.pqfed.emd_bands`; the same thresholds as the ``pqfed``
  algorithm's ``strict_ratio`` / ``lenient_ratio``). The paper's numbers are the largest r each selection keeps
  (§V-E): at ε = 10 "the target client T collaborates only with clients whose dissimilarity level falls within the
  30% threshold in the strict case. In the lenient case, clients with dissimilarity levels up to 60% are included"
  on both datasets; without noise the strict / lenient selection keeps r up to 0.2 / 0.5 on MNIST and 0.3 / 0.7 on
  CIFAR-10. The ground cost is the raw centroid distance (the algorithm's default); the bands compare EMDs with a
  fraction of their maximum, so the normalised cost gives the same bands.
* Fig. 4 and Fig. 6: the membership-inference attack of §V-D on every client's clean PCA features at the cell's ε
  (:func:`mia_by_client`): Fig. 4 (``pqfed.mia``) averages over the clients, Fig. 6 ("membership inference power
  across individual clients under different ε values") gives each client's power. §VI-E: "the membership
  inference power across individual clients remains consistently close, with minimal deviation, especially at
  stronger privacy settings (ε ≤ 10)"; :func:`fig6_findings` judges it as: at every ε ≤ 10 the clients' powers lie
  within ``CLOSE`` (0.1) of one another (our reading of "consistently close").
"""

from __future__ import annotations

import functools
import math
import statistics

import numpy as np

RATES = [round(0.1 * i, 1) for i in range(11)]  # the paper's dissimilarity rates 0, 10, ..., 100 %
FIG3_RATES = tuple(RATES[1:])  # Figs. 3, 4 and 6: T and the clients at r = 0.1 .. 1.0
BAND_RATIOS = (0.3, 0.6)  # strict / lenient thresholds, fractions of the largest EMD (§IV-C)
BAND_ROWS = ("strict: largest r", "lenient: largest r", "strict: clients", "lenient: clients")
FIG5_ROWS = (*BAND_ROWS, *(f"r={r:g}" for r in RATES))
CLIENT_ROWS = ("T", *(f"r={r:g}" for r in FIG3_RATES))
FIG6_ROWS = (*CLIENT_ROWS, "mean", "max − min")
SMOKE_PER_SOURCE = 30  # CI size; the tests' small MNIST (6,000 images) holds the 12 clients of Fig. 5 at 30
CLOSE = 0.1  # Fig. 6: "consistently close" read as all clients' powers within 0.1 of one another


@functools.lru_cache(maxsize=4)
def features(seed: int, scale: str, data: str = "mnist", rates: tuple[float, ...] = FIG3_RATES):
    """One repetition's federation (seed = repetition): T plus one client per rate in ``rates``, projected on the
    public PCA: (clients' features, lo, hi of the public projection)."""
    from flplat.data.datasets import load_dataset
    from flplat.data.partitions import build_federation
    from flplat.experiment import load_config
    from flplat.maths import pqfed as pm

    per_source = {"smoke": SMOKE_PER_SOURCE, "reduced": 400, "paper": 400}[scale]
    cfg = load_config(None, [f"data.name={data}", "partition.name=pqfed", f"partition.num_clients={1 + len(rates)}",
                             f"partition.rates={list(rates)}", "partition.train_fraction=1.0",
                             "partition.test_fraction=0.0", f"partition.samples_per_source={per_source}",
                             "partition.pca_components=50", "tracking.enabled=false"])
    fed = build_federation(load_dataset(cfg.data, 0), cfg.partition, seed)
    pub = fed.x_global_test[fed.public_indices].numpy()
    mean, comps = pm.fit_public_pca(pub, 50)
    lo, hi = pm.feature_range(pm.project(pub, mean, comps))
    feats = [pm.project(fed.x[fed.indices(k, "train")].numpy(), mean, comps) for k in range(fed.num_clients)]
    return feats, lo, hi


def emd_by_rate(seed: int, scale: str, data: str, epsilon: float, ground_cost: str,
                rates: tuple[float, ...] = FIG3_RATES) -> np.ndarray:
    """EMD of every client (T first, 0) to T after LDP at ``epsilon`` (see the module docstring)."""
    from flplat.maths import pqfed as pm

    feats, lo, hi = features(seed, scale, data, rates)
    rng = np.random.default_rng([seed, 1])
    noisy = [pm.laplace_ldp(f, epsilon, rng, lo, hi) for f in feats]
    centers, hists = pm.kmeans_histograms(noisy, 15, seed=seed)
    return pm.emd_to_target(hists, 0, centers, ground_cost)


# ----------------------------------------------------------------------------------------------------- Fig. 5
def band_summary(emd: np.ndarray, rates: list[float], ratios: tuple[float, float] = BAND_RATIOS) -> dict[str, float]:
    """The strict / lenient selections of the clients at ``rates`` (``emd[0]`` is T): the largest r each keeps
    (left out when it keeps nobody) and how many clients."""
    from flplat.maths.pqfed import emd_bands

    bands = emd_bands(emd, 0, ratios)[1:]
    out: dict[str, float] = {}
    for name, top in (("strict", 0), ("lenient", 1)):
        kept = [r for r, b in zip(rates, bands) if b <= top]
        out[f"{name}: clients"] = float(len(kept))
        if kept:
            out[f"{name}: largest r"] = float(max(kept))
    return out


def band_point(cell, seed: int, scale: str) -> dict[str, float]:
    """Fig. 5, one repetition at the cell's ε: the bands' largest r and sizes, and the EMD at every r."""
    emd = emd_by_rate(seed, scale, cell.params.get("data", "mnist"), cell.params["epsilon"], "euclidean",
                      tuple(RATES))
    return {**band_summary(emd, RATES), **{f"r={r:g}": float(v) for r, v in zip(RATES, emd[1:])}}


def plot_bands(ctx, data: str = "MNIST") -> None:
    """Fig. 5: per ε, the mean EMD against r with the strict (≤ 30 % of the largest) and lenient (≤ 60 %) bands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [c for c in dict.fromkeys(c for c, _ in ctx.ours) if ctx.ours.get((c, "r=0"))]
    if not cells:
        return
    fig, axes = plt.subplots(1, len(cells), figsize=(5.5 * len(cells), 4), squeeze=False)
    for ax, c in zip(axes[0], cells):
        rs = [r for r in RATES if ctx.ours.get((c, f"r={r:g}"))]
        emd = np.array([statistics.fmean(ctx.ours[(c, f"r={r:g}")]) for r in rs])
        top = emd[1:].max() if len(emd) > 1 else emd.max()
        lo, hi = (f * top for f in BAND_RATIOS)
        ax.axhspan(0, lo, color="tab:green", alpha=0.12, label="strict (≤ 30 % of max)")
        ax.axhspan(lo, hi, color="gold", alpha=0.15, label="lenient (30-60 %)")
        ax.axhspan(hi, top * 1.05, color="tab:red", alpha=0.08, label="excluded (> 60 %)")
        color = "tab:red" if c == "epsinf" else "tab:green"
        ax.plot(rs, emd, "o-", color=color, label="EMD to T (mean over repetitions)")
        eps = c.replace("eps", "")
        ax.set(title=f"ε = {'∞' if eps == 'inf' else eps}", xlabel="dissimilarity rate r", ylabel="EMD to T")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"PQFed Fig. 5: EMD threshold bands ({data}, scale {ctx.scale})")
    fig.tight_layout()
    fig.savefig(ctx.path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------- Figs. 4 and 6
@functools.lru_cache(maxsize=16)
def mia_by_client(seed: int, scale: str, data: str, epsilon: float) -> tuple[dict[str, float], ...]:
    """§V-D's membership-inference attack on every client's clean PCA features (T first) at ``epsilon``: 50 trials
    of 200 members each (5 and 40 at smoke), one generator seeded by the repetition for all clients in turn."""
    from flplat.maths import pqfed as pm

    feats, _, _ = features(seed, scale, data, FIG3_RATES)
    rng = np.random.default_rng([seed, 2])
    n, trials = (40, 5) if scale == "smoke" else (200, 50)
    return tuple(pm.membership_inference(f, epsilon, rng, n=n, trials=trials) for f in feats)


def client_powers(cell, seed: int, scale: str) -> dict[str, float]:
    """Fig. 6, one federation at the cell's ε: each client's attack power, their mean (Fig. 4's power) and spread."""
    power = [r["power"] for r in mia_by_client(seed, scale, cell.params.get("data", "mnist"), cell.params["epsilon"])]
    return {**dict(zip(CLIENT_ROWS, power)), "mean": float(np.mean(power)), "max − min": max(power) - min(power)}


def fig6_findings(ours: dict[tuple[str, str], list[float]]) -> list[tuple[str, bool | None, str]]:
    """§VI-E: the clients' powers are "consistently close ... especially at stronger privacy settings (ε ≤ 10)":
    holds when at every ε ≤ 10 the spread (max − min over the clients, mean over seeds) is at most ``CLOSE``."""
    spread = {c: statistics.fmean(v) for (c, r), v in ours.items() if r == "max − min" and v}
    strong = {c: s for c, s in spread.items() if float(c[3:]) <= 10}
    if not strong:
        return [("the clients' powers stay close at ε ≤ 10", None, "no cell with ε ≤ 10")]
    return [(f"the clients' membership-inference powers stay close at ε ≤ 10 (within {CLOSE:g})",
             all(s <= CLOSE for s in strong.values()),
             "max − min over the clients: " + ", ".join(f"ε = {c[3:].replace('inf', '∞')}: {s:.3f}"
                                                        for c, s in spread.items()))]


def plot_client_powers(ctx, data: str = "MNIST") -> None:
    """Fig. 6: each client's attack power against ε (ε = ∞ drawn one decade past the largest finite ε)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = list(dict.fromkeys(c for c, _ in ctx.ours))
    eps = [float(c[3:]) for c in cells]
    finite = [e for e in eps if math.isfinite(e)]
    x = [e if math.isfinite(e) else max(finite, default=1.0) * 10 for e in eps]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, row in enumerate(CLIENT_ROWS):
        pts = [(xi, statistics.fmean(ctx.ours[(c, row)])) for xi, c in zip(x, cells) if ctx.ours.get((c, row))]
        if pts:
            ax.plot(*zip(*pts), "o-", ms=3, lw=1, color=plt.cm.viridis(i / len(CLIENT_ROWS)), label=row)
    ax.set(xscale="log", xlabel="privacy budget ε", ylabel="membership-inference power", xticks=x,
           xticklabels=[f"{e:g}" if math.isfinite(e) else "∞" for e in eps], ylim=(0, 1.05))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, ncol=2, title="client", title_fontsize=7)
    fig.suptitle(f"PQFed Fig. 6: membership-inference power per client ({data}, scale {ctx.scale})")
    fig.tight_layout()
    fig.savefig(ctx.path, dpi=110)
    plt.close(fig)
