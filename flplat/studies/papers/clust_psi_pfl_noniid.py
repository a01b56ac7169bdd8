"""Clust-PSI-PFL §III-C, "PSI vs. Alternative Non-IID Metrics": Fig. 3 and Fig. 4 (no training).

* Fig. 3 -- WPSI (Eq. 3) against the Dirichlet α and the Similarity S, with HD, JSD and EMD on the secondary axis.
  HD, JSD and EMD are FedArtML's multi-client definitions (the paper's [14];
  :func:`flplat.metrics.noniid.federation_hellinger` and siblings). The paper's three findings are judged on our
  values (:func:`fig3_findings`): "(i) WPSI decreases with increasing α and S ... following a pronounced decay under
  both protocols; (ii) JSD and HD vary more smoothly and approximately linearly with WPSI across both schemes; and
  (iii) EMD is less reliable as a non-IID quantifier due to non-monotonic behavior in some settings".
* Fig. 4 -- "Using the computed metrics as features, we trained LightGBM, Support Vector Machine (SVM), Multilayer
  Perceptron (MLP), and a Regression Tree to predict the Dirichlet parameter α and the Similarity parameter S.
  Feature-importance scores from these models (Fig. 4) consistently ranked WPSI highest" (Highlight 1). Ours
  (:func:`fig4_point`): the four metrics of every partition of ``FIG4_DATA`` (α or S × number of clients × partition
  seed) as features; the target log10 α (α's grid is logarithmic, 0.05 to 50) or S; scikit-learn's
  ``GradientBoostingRegressor`` in place of LightGBM (not a dependency), ``SVR`` and ``MLPRegressor`` (both on
  standardised features) and ``DecisionTreeRegressor``, each with its defaults except the MLP's solver (``lbfgs``,
  ``max_iter=5000``: 120-170 points). Each seed of the table is one 75/25 train/test split and model seed.
  Importances: the gradient-boosted and the regression tree's own (impurity decrease on the training split,
  summing to 1; LightGBM's default counts splits instead); SVM and MLP have none, so theirs are permutation
  importances on the held-out split (the mean drop of R² over 10 shuffles of a feature). The table also gives each
  model's held-out R², without which an importance means little.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

ALPHAS = (50, 5, 1, 0.7, 0.5, 0.3, 0.2, 0.1, 0.09, 0.07, 0.05)
S_VALUES = (1, 0.9, 0.7, 0.5, 0.3, 0.2, 0.1, 0.07, 0.05, 0.03, 0)
QUANTIFIERS = {"WPSI": "wpsi", "HD": "hellinger", "JSD": "jsd", "EMD": "emd"}
# the authors' partition redraws without a cap until every client holds >= 10 samples (clust_psi_pfl.py)
REDRAWS_BY_ALPHA = {0.05: 100_000}
FIG3_DATA = {"smoke": ("digits", 10), "reduced": ("fmnist", 100), "paper": ("fmnist", 100)}
# Fig. 4's features: (dataset, numbers of clients, partition seeds) per scale. The paper pools six datasets and
# K = 10, 50, 100; the one of them here is FMNIST.
FIG4_DATA = {"smoke": ("digits", (10,), (0, 1, 2)), "reduced": ("fmnist", (10, 50, 100), (0, 1, 2, 3, 4)),
             "paper": ("fmnist", (10, 50, 100), (0, 1, 2, 3, 4))}
MODELS = ("GBT", "SVM", "MLP", "tree")
IMPORTANCE = {"GBT": "impurity", "SVM": "permutation", "MLP": "permutation", "tree": "impurity"}
R2 = "R2 (held-out)"
# a curve turns where two neighbouring means differ by more than this many standard errors of their difference
TURN_SE = 2.0
LINEAR_R = 0.95  # (ii): "approximately linearly" read as Pearson r >= 0.95 (R² >= 0.9) between the means
DECAY_RHO = -0.9  # (i): Spearman rank correlation of the parameter and the mean WPSI at most this

_DATASETS: dict = {}
_POINTS: dict = {}


def partition_params(name: str, value: float) -> dict:
    """A cell's partition parameters (the α = 0.05 cell with the paper's redraws)."""
    if name == "dirichlet":
        extra = {"max_retries": REDRAWS_BY_ALPHA[value]} if value in REDRAWS_BY_ALPHA else {}
        return {"name": "dirichlet", "alpha": value, **extra}
    return {"name": "similarity", "similarity": value}


def partition_metrics(dataset: str, k: int, params: dict, seed: int) -> dict[str, float]:
    """:func:`~flplat.metrics.noniid.noniid_summary` of one partition (remembered for the process: Fig. 3 and Fig. 4
    share partitions). An infeasible partition raises :class:`~flplat.data.partitions.InfeasiblePartitionError`."""
    key = (dataset, k, tuple(sorted(params.items())), seed)
    if key not in _POINTS:
        from flplat.data.datasets import load_dataset
        from flplat.data.partitions import build_federation
        from flplat.experiment import load_config
        from flplat.metrics.noniid import noniid_summary
        from flplat.protocol.seeding import derive_seed

        if dataset not in _DATASETS:
            _DATASETS[dataset] = load_dataset(load_config(None, [f"data.name={dataset}"]).data, derive_seed(0, "data"))
        fed = build_federation(_DATASETS[dataset], {"num_clients": k, **params}, seed)
        _POINTS[key] = noniid_summary(fed.label_counts("all"))
    return _POINTS[key]


def noniid_point(cell, seed: int, scale: str) -> dict[str, float]:
    """Fig. 3: WPSI, HD, JSD and EMD of one partition (no training). An infeasible partition raises
    :class:`~flplat.data.partitions.InfeasiblePartitionError`: the table shows the point as skipped, with the reason."""
    name, k = FIG3_DATA[scale]
    s = partition_metrics(name, k, cell.params, seed)
    return {q: float(s[key]) for q, key in QUANTIFIERS.items()}


# ------------------------------------------------------------------------------------------- Fig. 3's findings
def curve(ours: dict[tuple[str, str], list[float]], prefix: str, row: str):
    """(parameter values ascending, means, standard errors) of ``row`` over the cells ``<prefix>=<value>``."""
    pts = sorted((float(c.split("=", 1)[1]), v) for (c, r), v in ours.items()
                 if r == row and c.startswith(prefix + "=") and v)
    x = [p for p, _ in pts]
    means = [statistics.fmean(v) for _, v in pts]
    ses = [statistics.stdev(v) / math.sqrt(len(v)) if len(v) > 1 else 0.0 for _, v in pts]
    return x, means, ses


def turns(means: Sequence[float], ses: Sequence[float], k: float = TURN_SE) -> tuple[int, int]:
    """(rises, falls) between neighbouring points larger than ``k`` standard errors of their difference."""
    rises = falls = 0
    for a, b, sa, sb in zip(means, means[1:], ses, ses[1:]):
        tol = k * math.sqrt(sa * sa + sb * sb)
        rises += b - a > tol
        falls += a - b > tol
    return rises, falls


FIG3_PROTOCOLS = (("alpha", "Dirichlet α"), ("S", "Similarity S"))
FINDING_III = "(iii) EMD is non-monotonic in some settings (possibly equal values at distinct non-IID levels)"


def fig3_findings(ours: dict[tuple[str, str], list[float]]) -> list[tuple[str, bool | None, str]]:
    """The paper's findings (i)-(iii) on Fig. 3, judged on the means over seeds of each protocol's cells:

    (i) holds when Spearman's ρ between the parameter and the mean WPSI is at most ``DECAY_RHO`` under both
    protocols; (ii) when Pearson's r between the mean WPSI and the mean HD, and the mean JSD, is at least
    ``LINEAR_R`` under both; (iii) when EMD's curve is non-monotonic under at least one protocol: it both rises and
    falls between neighbouring cells by more than ``TURN_SE`` standard errors (HD's and JSD's turns are given
    beside it for contrast)."""
    return [_finding_wpsi_decay(ours), _finding_linear(ours), _finding_emd_turns(ours)]


def _finding_wpsi_decay(ours) -> tuple[str, bool | None, str]:
    """(i): Spearman's ρ between the parameter and the mean WPSI, per protocol."""
    from scipy.stats import spearmanr

    rhos, ev = [], []
    for prefix, label in FIG3_PROTOCOLS:
        x, m, _ = curve(ours, prefix, "WPSI")
        if len(x) < 3:
            rhos.append(None)
            continue
        rho = float(spearmanr(x, m).statistic)
        rhos.append(rho)
        ev.append(f"{label}: Spearman ρ = {rho:+.3f}, WPSI {m[0]:.3g} at {x[0]:g} → {m[-1]:.3g} at {x[-1]:g}")
    return ("(i) WPSI decreases as α and S grow, a pronounced decay under both protocols",
            None if None in rhos else all(r <= DECAY_RHO for r in rhos),
            "; ".join(ev) + f" (holds: ρ ≤ {DECAY_RHO} under both)")


def _finding_linear(ours) -> tuple[str, bool | None, str]:
    """(ii): Pearson's r between the mean WPSI and the mean HD, and the mean JSD, per protocol."""
    from scipy.stats import pearsonr

    rs, ev = [], []
    for prefix, label in FIG3_PROTOCOLS:
        _, w, _ = curve(ours, prefix, "WPSI")
        for q in ("HD", "JSD"):
            _, m, _ = curve(ours, prefix, q)
            if len(w) < 3 or len(m) != len(w):
                rs.append(None)
                continue
            r = float(pearsonr(w, m).statistic)
            rs.append(r)
            ev.append(f"{label} {q}: r = {r:.3f}")
    return ("(ii) HD and JSD vary smoothly and approximately linearly with WPSI under both protocols",
            None if None in rs or not rs else all(r >= LINEAR_R for r in rs),
            "Pearson r between the means: " + ", ".join(ev) + f" (holds: r ≥ {LINEAR_R} for all four)")


def _finding_emd_turns(ours) -> tuple[str, bool | None, str]:
    """(iii): EMD's turns (rises and falls beyond ``TURN_SE`` standard errors) per protocol; HD's and JSD's for
    contrast. Needs at least 2 seeds per cell."""
    if min((len(v) for (_, r), v in ours.items() if r == "EMD"), default=0) < 2:
        return FINDING_III, None, "needs at least 2 seeds per cell (a turn is measured in standard errors)"
    nonmono, ev = [], []
    for prefix, label in FIG3_PROTOCOLS:
        parts = []
        for q in ("EMD", "HD", "JSD"):
            x, m, se = curve(ours, prefix, q)
            if len(x) < 3:
                continue
            up, down = turns(m, se)
            if q == "EMD":
                nonmono.append(up > 0 and down > 0)
                parts.append(_emd_turn_note(x, m, up, down))
            else:
                parts.append(f"{q} {'non-monotonic' if up and down else 'monotonic'}")
        if parts:
            ev.append(f"{label}: " + ", ".join(parts))
    return (FINDING_III, any(nonmono) if nonmono else None,
            "; ".join(ev) + f" (a turn: neighbouring means more than {TURN_SE:g} standard errors apart)")


def _emd_turn_note(x, m, up: int, down: int) -> str:
    if not (up and down):
        return f"EMD monotonic ({up} rises, {down} falls)"
    top = max(range(len(m)), key=m.__getitem__)
    return (f"EMD rises {up}× and falls {down}× (peak {m[top]:.3f} at {x[top]:g}, {m[0]:.3f} at {x[0]:g}, "
            f"{m[-1]:.3f} at {x[-1]:g})")


# ----------------------------------------------------------------------------------------------------- Fig. 4
_FEATURES: dict = {}


def fig4_features(scale: str, protocol: str):
    """(X (n, 4) in the order of ``QUANTIFIERS``, y (n,)) of every feasible partition of ``FIG4_DATA[scale]`` under
    ``protocol`` (``dirichlet``: y = log10 α; ``similarity``: y = S); infeasible partitions are left out."""
    key = (scale, protocol)
    if key not in _FEATURES:
        import numpy as np

        from flplat.data.splits import InfeasiblePartitionError

        dataset, ks, seeds = FIG4_DATA[scale]
        values = ALPHAS if protocol == "dirichlet" else S_VALUES
        rows, ys = [], []
        for v in values:
            for k in ks:
                for s in seeds:
                    try:
                        m = partition_metrics(dataset, k, partition_params(protocol, v), s)
                    except InfeasiblePartitionError:
                        continue
                    rows.append([m[q] for q in QUANTIFIERS.values()])
                    ys.append(math.log10(v) if protocol == "dirichlet" else v)
        _FEATURES[key] = (np.array(rows), np.array(ys))
    return _FEATURES[key]


def make_model(name: str, seed: int):
    """The paper's four models from scikit-learn (a gradient-boosted tree in place of LightGBM)."""
    from sklearn.ensemble import GradientBoostingRegressor
    from sklearn.neural_network import MLPRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVR
    from sklearn.tree import DecisionTreeRegressor

    if name == "GBT":
        return GradientBoostingRegressor(random_state=seed)
    if name == "SVM":
        return make_pipeline(StandardScaler(), SVR())
    if name == "MLP":
        return make_pipeline(StandardScaler(), MLPRegressor(solver="lbfgs", max_iter=5000, random_state=seed))
    if name == "tree":
        return DecisionTreeRegressor(random_state=seed)
    raise ValueError(f"model {name!r} is unknown; allowed: {', '.join(MODELS)}")


def feature_importances(model_name: str, x, y, seed: int) -> dict[str, float]:
    """One split and fit: each feature's importance (``IMPORTANCE[model_name]``) and the held-out R²."""
    from sklearn.inspection import permutation_importance
    from sklearn.model_selection import train_test_split

    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.25, random_state=seed)
    model = make_model(model_name, seed).fit(xtr, ytr)
    if IMPORTANCE[model_name] == "impurity":
        imp = model.feature_importances_
    else:
        imp = permutation_importance(model, xte, yte, n_repeats=10, random_state=seed).importances_mean
    return {**{q: float(v) for q, v in zip(QUANTIFIERS, imp)}, R2: float(model.score(xte, yte))}


def fig4_point(cell, seed: int, scale: str) -> dict[str, float]:
    """Fig. 4, one (protocol, model) cell and seed: the four metrics' importances and the held-out R²."""
    x, y = fig4_features(scale, cell.params["protocol"])
    return feature_importances(cell.params["model"], x, y, seed)


def fig4_findings(ours: dict[tuple[str, str], list[float]]) -> list[tuple[str, bool | None, str]]:
    """Highlight 1, per (protocol, model) cell and over all: WPSI's mean importance over seeds is the largest."""
    cells = list(dict.fromkeys(c for c, _ in ours))
    out, firsts = [], []
    for c in cells:
        mean = {q: statistics.fmean(ours[(c, q)]) for q in QUANTIFIERS if ours.get((c, q))}
        if len(mean) < len(QUANTIFIERS):
            continue
        order = sorted(mean, key=mean.get, reverse=True)
        firsts.append(order[0] == "WPSI")
        r2 = ours.get((c, R2))
        out.append((f"WPSI ranked first: {c} ({IMPORTANCE[c.split('/')[1]]})", order[0] == "WPSI",
                    " > ".join(f"{q} {mean[q]:.3g}" for q in order) +
                    (f"; held-out R² {statistics.fmean(r2):.3f}" if r2 else "")))
    out.append(("Highlight 1: WPSI ranked first by every model under both protocols",
                all(firsts) if firsts else None, f"WPSI first in {sum(firsts)} of {len(firsts)} (protocol, model)"))
    return out


def plot_fig4(ctx) -> None:
    """Fig. 4's layout: one row per protocol (Dirichlet top, Similarity bottom), one panel per model, the four
    metrics' mean importances (± std over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(MODELS), figsize=(3.2 * len(MODELS), 6), squeeze=False)
    for row, (protocol, label) in enumerate((("dirichlet", "Dirichlet α"), ("similarity", "Similarity S"))):
        for col, model in enumerate(MODELS):
            ax = axes[row][col]
            c = f"{protocol}/{model}"
            vals = [ctx.ours.get((c, q), []) for q in QUANTIFIERS]
            if not all(vals):
                ax.set_visible(False)
                continue
            ax.bar(list(QUANTIFIERS), [statistics.fmean(v) for v in vals],
                   yerr=[statistics.pstdev(v) if len(v) > 1 else 0 for v in vals],
                   color=["purple", "tab:blue", "tab:orange", "tab:green"])
            r2 = ctx.ours.get((c, R2))
            ax.set_title(f"{label}: {model}" + (f" (R² {statistics.fmean(r2):.2f})" if r2 else ""), fontsize=9)
            ax.set_ylabel(f"{IMPORTANCE[model]} importance", fontsize=8)
            ax.grid(alpha=0.3, axis="y")
    fig.suptitle(f"Feature importances for predicting α (top) and S (bottom) (scale {ctx.scale})")
    fig.tight_layout()
    fig.savefig(ctx.path, dpi=110)
    plt.close(fig)
