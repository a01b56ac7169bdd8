"""Clust-PSI-PFL (seed 000): Table III (global test accuracy) and Table IV (AD; lower is better), K = 100, one block
per dataset of Table I (``table3`` / ``table4``: FMNIST; ``table3_<data>`` / ``table4_<data>``: ACSIncome, Serengeti,
CIFAR-10, Sent140, Amazon reviews, each with the paper's model of §IV-A-d,
tools/generators/make_paper_configs.py), every Table II method (the Table II best hyperparameters are the algorithms'
defaults), CL (centralised training) as the reference line of the paper's table.

Reduced scale (the CPU reduction of docs/results_earlier.md, Run B): the ``mlp`` (128-64) instead of the light
CNN (one CNN round took 86-145 s here), T = 20 rounds instead of 40, E = 5, evaluation every 5 rounds.

The Dirichlet α = 0.05 cell of Tables III/IV and Fig. 3 (at every scale) raises ``partition.max_retries`` from
flplat's safety cap of 100 redraws to 100,000. The paper reports values for this cell (Tables III/IV) and says
nothing about small clients (§IV-A-b: "Dirichlet [14] controls non-IID data with a single parameter α"); its
partition, FedArtML's [14] (as the authors' public code runs it), redraws everything without a cap while
the smallest client holds fewer than 10 samples. At K = 100, α = 0.05 on FMNIST's 60,000 training images about one
draw in 10,000 qualifies (20 of 200,000 simulated draws; 8.5 clients under 10 samples in the mean draw), so with
100 redraws every run of the cell was skipped as infeasible. 100,000 redraws is the paper's rule with a cap that
fails about once in e^10 (the partitions of seeds 0-4 took 5-25 s here); ``partition.min_samples`` stays the
authors' 10. The override changes only this cell's runs (their config hash); the header states it ("Per cell").
"""

from __future__ import annotations

from flplat.studies.papers import SMOKE
from flplat.studies.papers.clust_psi_pfl_noniid import (  # Fig. 3 and Fig. 4 (§III-C, no training)
    ALPHAS,
    MODELS,
    QUANTIFIERS,
    R2,
    REDRAWS_BY_ALPHA,
    S_VALUES,
    fig3_findings,
    fig4_findings,
    fig4_point,
    noniid_point,
    partition_params,
    plot_fig4,
)
from flplat.studies.reproduce import Cell, Method, Table, plot_cells

SETTINGS = ["dirichlet_50", "dirichlet_0.7", "dirichlet_0.3", "dirichlet_0.2", "dirichlet_0.09", "dirichlet_0.05",
            "similarity_1", "similarity_0.03", "similarity_0"]
# REDRAWS_BY_ALPHA: the authors' partition redraws without a cap until every client holds >= 10 samples (see the
# module docstring)
PAPER_REDRAWS = {f"dirichlet_{a:g}": n for a, n in REDRAWS_BY_ALPHA.items()}


def _cell(setting: str) -> Cell:
    cell = Cell(setting, f"configs/clust_psi_pfl/table3/fmnist_k100_{setting}.yaml")
    if setting in PAPER_REDRAWS:
        cell.overrides = [f"partition.max_retries={PAPER_REDRAWS[setting]}"]
        cell.note = _redraw_note(PAPER_REDRAWS[setting])
    return cell


def _redraw_note(n: int) -> str:
    return (f"partition.max_retries={n}, the paper's partition: it redraws without a cap until every client holds "
            "at least 10 samples (about 1 draw in 10,000 does at K = 100, α = 0.05)")


CELLS = [_cell(s) for s in SETTINGS]
# Table II's d = 8 is below m = 50 at K = 100, q = 0.5, which Power-of-Choice (m <= d <= K) does not allow; the
# authors' code trains the highest-loss of its d candidates, so PoC trains d clients here (small_d=train_d)
EXTRA = {"poc": ["algorithm.small_d=train_d"]}
METHODS = [Method(n, [f"algorithm.name={a}", *EXTRA.get(a, [])]) for n, a in (
    ("CL", "centralized"), ("FedAvg", "fedavg"), ("FedProx", "fedprox"), ("FedAvgM", "fedavgm"),
    ("FedAdagrad", "fedadagrad"), ("FedYogi", "fedyogi"), ("FedAdam", "fedadam"), ("PoC", "poc"),
    ("HACCS", "haccs"), ("FedCLS", "fedcls"), ("CFL", "cfl"), ("FedSoft", "fedsoft"),
    ("Clust-PSI-PFL", "clust_psi_pfl"))]
TABLE4_METHODS = [m for m in METHODS if m.name in ("FedAvg", "FedAvgM", "HACCS", "CFL", "Clust-PSI-PFL")]
CLUST = [m for m in METHODS if m.name == "Clust-PSI-PFL"]
# smoke: 10 clients (100 clients of a 600-sample pool are infeasible for the Dirichlet cells)
SCALES = {"smoke": [*SMOKE, "partition.num_clients=10", "partition_defaults.dirichlet.min_samples=5"],
          "reduced": ["model.name=mlp", "federation.rounds=20", "federation.local_epochs=5",
                      "federation.eval_every=5"]}
NOTES = {"smoke": "CI size: 600 training images, 10 clients, 2 rounds of 1 epoch, the MLP",
         "reduced": "the MLP (128-64) instead of the light CNN, T = 20 rounds instead of 40 (E = 5, q = 0.5 as the "
                    "paper), evaluation every 5 rounds"}

TABLES = [
    Table("table3", "Clust-PSI-PFL Table III: global test accuracy, FMNIST, K = 100", CELLS, METHODS,
          metric="global_accuracy", scales=SCALES, notes=NOTES, seeds=[0, 1, 2, 3, 4], tie=0.005),
    Table("table4", "Clust-PSI-PFL Table IV: AD (distance of the local accuracies from 1; lower is better), FMNIST, "
          "K = 100", CELLS, TABLE4_METHODS, metric="ad", higher_is_better=False, scales=SCALES, notes=NOTES,
          seeds=[0, 1, 2, 3, 4], tie=0.005),
]

# ------------------------------------------------------------------------ the other datasets' blocks of Tables III-IV
# dataset -> (the paper's name, the paper's model, the reduced scale's overrides, their note). The smoke scale runs
# the MLP on the tabular and image sets and the paper's (small) text model on token ids, which the MLP cannot take.
TEXT_SMOKE = {"sent140": "sent140_lstm", "amazon_reviews": "amazon_dnn"}
R = ["federation.rounds=20", "federation.local_epochs=5", "federation.eval_every=5"]
RNOTE = "T = 20 rounds instead of 40 (E = 5, q = 0.5 as the paper), evaluation every 5 rounds"
DATASETS = {
    "acs_income": ("ACSIncome", "logreg", ["data.max_train_samples=200000", *R],
                   f"200,000 of the 1,664,500 people (80/20 per client as the paper), {RNOTE}; the paper's logistic "
                   "regression"),
    "serengeti": ("Serengeti", "mlp3x500", ["data.max_train_samples=50000", *R],
                  f"50,000 of the 286,586 capture events, {RNOTE}; the paper's MLP (3 x 500)"),
    "cifar10": ("CIFAR-10", "cifar_cnn", ["model.name=mlp", *R],
                f"the MLP (128-64) instead of the three-block CNN (as FMNIST's reduced scale), {RNOTE}"),
    "sent140": ("Sent140", "sent140_lstm", ["data.max_train_samples=100000", *R],
                f"100,000 of the 1,600,000 tweets, {RNOTE}; the paper's embedding + LSTM"),
    "amazon_reviews": ("Amazon reviews", "amazon_dnn", R, f"{RNOTE}; the paper's embedding DNN"),
}


# Tables III/IV's "—" ("denotes infeasible partitions"): these cells run with flplat's default cap of 100 redraws
# (not the α = 0.05 cell's 100,000, which would only delay the same verdict), a run that cannot be partitioned is
# skipped with the reason
PAPER_INFEASIBLE = {"acs_income": {"dirichlet_0.2", "dirichlet_0.09", "dirichlet_0.05"},
                    "sent140": {"dirichlet_0.2", "dirichlet_0.09", "dirichlet_0.05"},
                    "amazon_reviews": {"dirichlet_0.05"}}


def _data_cell(dataset: str, setting: str, k: int = 100, prefix: str = "") -> Cell:
    cell = Cell(prefix + setting, f"configs/clust_psi_pfl/table3/{dataset}_k{k}_{setting}.yaml")
    if setting in PAPER_INFEASIBLE.get(dataset, ()):
        cell.note = "infeasible in the paper ('—'); flplat's partition with its default 100 redraws"
    elif setting in PAPER_REDRAWS:
        cell.overrides = [f"partition.max_retries={PAPER_REDRAWS[setting]}"]
        cell.note = _redraw_note(PAPER_REDRAWS[setting])
    return cell


def _data_scales(dataset: str) -> tuple[dict[str, list[str]], dict[str, str]]:
    model = TEXT_SMOKE.get(dataset)
    smoke = [*SMOKE, "partition.num_clients=10", "partition_defaults.dirichlet.min_samples=5",
             *([f"model.name={model}", "data.max_length=12"] if model else [])]
    _, _, reduced, note = DATASETS[dataset]
    return ({"smoke": smoke, "reduced": reduced},
            {"smoke": "CI size: 600 training samples, 10 clients, 2 rounds of 1 epoch, " +
                      (f"the paper's {model} on 12 tokens" if model else "the MLP"),
             "reduced": note, "paper": "the paper's setting (the ready configs as they are: T = 40, the paper's "
                                       "model, every sample)"})


for _d, (_name, _model, _, _) in DATASETS.items():
    _sc, _nt = _data_scales(_d)
    _cells = [_data_cell(_d, s) for s in SETTINGS]
    TABLES += [
        Table(f"table3_{_d}", f"Clust-PSI-PFL Table III: global test accuracy, {_name}, K = 100 ({_model})", _cells,
              METHODS, metric="global_accuracy", scales=_sc, notes=_nt, seeds=[0, 1, 2, 3, 4], tie=0.005),
        Table(f"table4_{_d}", f"Clust-PSI-PFL Table IV: AD (lower is better), {_name}, K = 100 ({_model})", _cells,
              TABLE4_METHODS, metric="ad", higher_is_better=False, scales=_sc, notes=_nt, seeds=[0, 1, 2, 3, 4],
              tie=0.005),
    ]

# ---------------------------------------------------------------------------------------------- Fig. 3 and Fig. 5
def _fig3(ctx):
    import statistics

    from flplat.tracking.reports import plot_noniid_curves

    curves = {"dirichlet": [], "similarity": []}
    for c in FIG3_CELLS:
        if (c.id, "WPSI") not in ctx.ours:
            continue
        kind = c.params["name"]
        key = "alpha" if kind == "dirichlet" else "similarity"
        curves[kind].append({key: c.params[key], **{QUANTIFIERS[q]: statistics.fmean(ctx.ours[(c.id, q)])
                                                    for q in QUANTIFIERS}})
    plot_noniid_curves(curves, ctx.path)


def _fig5(ctx):
    """Fig. 5: the silhouette against the number of clusters of the Clust-PSI-PFL runs (first seed of each cell)."""
    from flplat.tracking.reports import plot_silhouette_curves

    curves = {}
    for (cell, method), ids in ctx.runs.items():
        if method == "Clust-PSI-PFL" and ids:
            pts = ctx.history(ids[0], "silhouette_by_k")
            if pts:
                curves[cell.replace("_", " α=" if cell.startswith("dirichlet") else " S=", 1)] = pts
    if curves:
        plot_silhouette_curves(curves, ctx.path)


FIG3_CELLS = ([Cell(f"alpha={a:g}", params=partition_params("dirichlet", a), note=_redraw_note(REDRAWS_BY_ALPHA[a]))
               if a in REDRAWS_BY_ALPHA else Cell(f"alpha={a:g}", params=partition_params("dirichlet", a))
               for a in ALPHAS] +
              [Cell(f"S={s:g}", params=partition_params("similarity", s)) for s in S_VALUES])
TABLES[0].figure = _fig5
TABLES.append(Table("fig3", "Clust-PSI-PFL Fig. 3: WPSI, HD, JSD and EMD against Dirichlet α and Similarity S",
                    FIG3_CELLS, [Method(q) for q in QUANTIFIERS], kind="analysis", analyze=noniid_point,
                    reference=None, seeds=[0, 1, 2, 3, 4], figure=_fig3, findings=fig3_findings,
                    datasets=["fmnist", "digits (smoke)"],
                    notes={"smoke": "digits, 10 clients; HD, JSD, EMD: FedArtML's multi-client definitions",
                           "reduced": "FMNIST, K = 100 (the paper's setting); HD, JSD, EMD: FedArtML's multi-client "
                                      "definitions (the paper's [14])",
                           "paper": "FMNIST, K = 100; HD, JSD, EMD: FedArtML's multi-client definitions"}))
_FIG4_NOTE = ("features: WPSI, HD, JSD, EMD of every partition (11 α or 11 S × {k} × partition seeds {seeds}, "
              "{data}); target log10 α or S; a seed = one 75/25 train/test split and model seed. Models from "
              "scikit-learn: GBT = GradientBoostingRegressor in place of LightGBM, SVM = SVR, MLP = MLPRegressor "
              "(lbfgs), tree = DecisionTreeRegressor, defaults otherwise. Importances: GBT and tree their own "
              "(impurity, summing to 1); SVM and MLP have none: permutation importance on the held-out split "
              "(mean drop of R² over 10 shuffles)")
TABLES.append(Table(
    "fig4", "Clust-PSI-PFL Fig. 4: feature importances of WPSI, HD, JSD and EMD for predicting α and S",
    [Cell(f"{p}/{m}", params={"protocol": p, "model": m}) for p in ("dirichlet", "similarity") for m in MODELS],
    [Method(q) for q in (*QUANTIFIERS, R2)], kind="analysis", analyze=fig4_point, reference=None,
    seeds=[0, 1, 2, 3, 4], figure=plot_fig4, findings=fig4_findings, datasets=["fmnist", "digits (smoke)"],
    notes={"smoke": _FIG4_NOTE.format(k="K = 10", seeds="0-2", data="digits"),
           "reduced": _FIG4_NOTE.format(k="K = 10, 50, 100", seeds="0-4",
                                        data="FMNIST, the one of the paper's six datasets here"),
           "paper": _FIG4_NOTE.format(k="K = 10, 50, 100", seeds="0-4",
                                      data="FMNIST, the one of the paper's six datasets here")}))

# ------------------------------------------------------------------------------------ Figs. 5-8 (ACSIncome, §IV-B)
# The paper's Figs. 5-8 are on ACSIncome (K = 10 / 50 / 100, the nine settings). ``fig5`` .. ``fig8`` run them there;
# ``fig5_fmnist`` .. ``fig8_fmnist`` the same cells on FMNIST (configs/clust_psi_pfl/table3/fmnist_k*), which stands
# in for ACSIncome where its files are missing: only the figures' claims are judged there (the paper's numbers are
# ACSIncome's). Their K = 100 cells are Table III's, so at one scale they share Table III's runs.
FIG_K = (10, 50, 100)


def _fig_cells(dataset: str) -> list[Cell]:
    return [_data_cell(dataset, s, k, prefix=f"k{k}_") for k in FIG_K for s in SETTINGS]


def _fig5_acs(ctx):
    """Fig. 5: the silhouette against τ of the Clust-PSI-PFL runs (first seed of each cell: K and setting)."""
    from flplat.tracking.reports import plot_silhouette_curves

    curves = {cell: pts for (cell, _), ids in ctx.runs.items() if ids
              for pts in [ctx.history(ids[0], "silhouette_by_k")] if pts}
    if curves:
        plot_silhouette_curves(curves, ctx.path)


def _fig8(ctx, data: str = "ACSIncome"):
    """Fig. 8: the ECDF of the clients' local test accuracies (first seed's run), one panel per setting, K = 100."""
    import csv
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from flplat.metrics.evaluation import ecdf
    from flplat.studies.reproduction.figures import method_colour

    cells = list(dict.fromkeys(c for c, _ in ctx.runs))
    if not cells:
        return
    methods = list(dict.fromkeys(m for _, m in ctx.runs))
    colour = {m: method_colour(i, len(methods)) for i, m in enumerate(methods)}  # 13: matplotlib's cycle has 10
    cols = min(3, len(cells))
    rows = (len(cells) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(max(7.0, 5 * cols), 3.6 * rows + 0.4), squeeze=False)
    drawn = False
    for ax, c in zip(axes.flat, cells):
        for (cc, m), ids in ctx.runs.items():
            text = ctx.artifact(ids[0], "clients/final_client_metrics.csv") if cc == c and ids else None
            if text is None:  # another cell, or a run without the table (tracking of an older version)
                continue
            acc = np.array([float(r["accuracy"]) for r in csv.DictReader(io.StringIO(text)) if r.get("accuracy")])
            acc = acc[np.isfinite(acc)]
            if acc.size:
                x, f = ecdf(acc)
                ax.step(x, f, where="post", label=m, lw=1.1, color=colour[m])
                drawn = True
        ax.set(title=c, xlabel="local test accuracy", ylabel="ECDF", xlim=(0, 1))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(cells):]:
        ax.set_visible(False)
    if drawn:
        fig.suptitle(f"Clust-PSI-PFL Fig. 8: local accuracy ECDF, {data}, K = 100 (scale {ctx.scale})")
        fig.tight_layout()
        fig.savefig(ctx.path, dpi=110)
    plt.close(fig)


def _fig_tables(dataset: str, name: str, scales: dict[str, list[str]], notes: dict[str, str],
                stand_in: str | None = None) -> list[Table]:
    """Figs. 5-8 on ``dataset``'s cells: ACSIncome (the paper's; ids ``fig5`` .. ``fig8``) or, with ``stand_in`` (what
    replaces ACSIncome and its model, said in every header), a stand-in (ids ``fig5_<dataset>`` ..)."""
    cells = _fig_cells(dataset)
    fig5_cells = [c for c in cells if c.id.endswith(("_dirichlet_0.3", "_similarity_0"))]
    fig8_cells = [c for c in cells if c.id.startswith("k100_")]
    notes = {**notes, "smoke": notes["smoke"] + " (every K runs 10 clients: the K cells share their runs)"}
    suffix, on = ("", name) if stand_in is None else (f"_{dataset}", f"{name} in place of ACSIncome")
    fig = dict(scales=scales, notes=notes, seeds=[0, 1, 2, 3, 4], substitute=stand_in)
    return [
        Table(f"fig5{suffix}", "Clust-PSI-PFL Fig. 5: silhouette against the number of clusters τ (the chosen τ as the "
              f"number), {on}, Dirichlet α = 0.3 and Similarity S = 0, K = 10 / 50 / 100", fig5_cells, CLUST,
              metric="tau", reference=None, tie=0.5, figure=_fig5_acs, **fig),
        Table(f"fig6{suffix}", f"Clust-PSI-PFL Fig. 6: the number of clusters τ chosen, {on}, K = 10 / 50 / 100", cells,
              CLUST, metric="tau", reference=None, tie=0.5, figure=lambda ctx: plot_cells(
                  ctx.ours, f"Clust-PSI-PFL Fig. 6: τ, {name} (scale {ctx.scale})", "τ", ctx.path), **fig),
        Table(f"fig7{suffix}", f"Clust-PSI-PFL Fig. 7: global test accuracy of every method, {on}, K = 10 / 50 / 100",
              cells, METHODS, metric="global_accuracy", tie=0.005, figure=lambda ctx: plot_cells(
                  ctx.ours, f"Clust-PSI-PFL Fig. 7: global test accuracy, {name} (scale {ctx.scale})", "accuracy",
                  ctx.path), **fig),
        Table(f"fig8{suffix}", "Clust-PSI-PFL Fig. 8: local test accuracy ECDF (AD as its number; lower is better), "
              f"{on}, K = 100", fig8_cells, METHODS, metric="ad", higher_is_better=False, tie=0.005,
              figure=lambda ctx: _fig8(ctx, name), **fig),
    ]


TABLES += _fig_tables("acs_income", "ACSIncome", *_data_scales("acs_income"))
TABLES += _fig_tables("fmnist", "FMNIST", SCALES, NOTES, stand_in="FMNIST (Table III's configs: the light CNN, the MLP "
                      "at smoke and reduced) in place of ACSIncome with its logistic regression")
