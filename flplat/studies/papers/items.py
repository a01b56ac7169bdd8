"""The five papers' numbered tables and figures with quantitative results (104 items), each with the
``flplat reproduce`` tables (and cells) that define it.

Counted as a reader counts them: one item per numbered table or figure that reports numbers or curves; items
without quantitative results are left out (Clust-PSI-PFL Figs. 1-2 and Tables I, II, V; CAFA Figs. 1, 3 and
Table I; DA-PFL Fig. 2; Flux Figs. 1-3 and 6-7, Tables 2, 3, 7, 9; PQFed Figs. 1-2 and Tables I, III). Flux's
appendix tables split each shift into levels 1-4 and 5-8; both halves are items, defined by the level cells of one
reproduce table. ``flplat reproduce --list`` prints this checklist with each item's status (wired or not), and a
test holds every named table and cell to the reproduce registry, so the count in README.md cannot drift from the
code."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Item:
    """One numbered table or figure: ``paper`` (a reproduce paper id), ``label`` as the paper numbers it,
    ``measures`` in a few words, ``tables`` = the reproduce tables defining it (empty: not wired), ``cells`` = the
    cells of those tables it covers when it is a part of a table (empty: all)."""

    paper: str
    label: str
    measures: str
    tables: tuple[str, ...] = ()
    cells: tuple[str, ...] = ()


def _levels(prefix: str, levels: range) -> tuple[str, ...]:
    return tuple(f"{prefix}_l{lv}" for lv in levels)


_SHIFTS = (("feature", "P(X)"), ("label", "P(Y)"), ("concept_yx", "P(Y|X)"), ("concept_xy", "P(X|Y)"))
_FLUX_DATASETS = (("MNIST", "", 10), ("FMNIST", "_fmnist", 20), ("CIFAR-10", "_cifar10", 30),
                  ("CIFAR-100", "_cifar100", 40))


def _flux_per_dataset() -> list[Item]:
    """Flux Tables 10-49: per dataset, the means over the four shifts (levels 1-4, 5-8), then each shift's two
    halves, known association and test phase of the same runs."""
    out = []
    for name, suffix, first in _FLUX_DATASETS:
        ka, tp = f"known_association{suffix}", f"test_phase{suffix}"
        for half, levels in enumerate((range(1, 5), range(5, 9))):
            out.append(Item("flux", f"Table {first + half}", f"{name}, mean of the 4 shifts, levels "
                            f"{levels[0]}-{levels[-1]}, KA and TP", (f"mean_by_level{suffix}",),
                            _levels("ka", levels) + _levels("tp", levels)))
        for i, (shift, text) in enumerate(_SHIFTS):
            for half, levels in enumerate((range(1, 5), range(5, 9))):
                out.append(Item("flux", f"Table {first + 2 + 2 * i + half}",
                                f"{name} {text}, levels {levels[0]}-{levels[-1]}, KA and TP", (ka, tp),
                                _levels(shift, levels)))
    return out


ITEMS: tuple[Item, ...] = (
    # --- Clust-PSI-PFL (8)
    Item("clust-psi-pfl", "Fig. 3", "WPSI, HD, JSD, EMD against alpha and S", ("fig3",)),
    Item("clust-psi-pfl", "Fig. 4", "importance of the 4 metrics for predicting alpha / S", ("fig4",)),
    Item("clust-psi-pfl", "Fig. 5", "silhouette against tau, K = 10/50/100", ("fig5", "fig5_fmnist")),
    Item("clust-psi-pfl", "Fig. 6", "tau chosen against K and the non-IID level", ("fig6", "fig6_fmnist")),
    Item("clust-psi-pfl", "Fig. 7", "global accuracy of the 13 methods against K, alpha, S",
         ("fig7", "fig7_fmnist")),
    Item("clust-psi-pfl", "Table III", "global accuracy, K = 100, 13 methods x 9 settings x 6 datasets",
         ("table3", "table3_acs_income", "table3_serengeti", "table3_cifar10", "table3_sent140",
          "table3_amazon_reviews")),
    Item("clust-psi-pfl", "Table IV", "AD +- SDAD of 5 methods, the same 6 datasets",
         ("table4", "table4_acs_income", "table4_serengeti", "table4_cifar10", "table4_sent140",
          "table4_amazon_reviews")),
    Item("clust-psi-pfl", "Fig. 8", "ECDF of local accuracy, K = 100", ("fig8", "fig8_fmnist")),
    # --- CAFA (8)
    Item("cafa", "Fig. 2", "class-proportion curves of IID and non-IID clients", ("fig2",)),
    Item("cafa", "Fig. 4", "silhouette against k", ("fig4",)),
    Item("cafa", "Fig. 5", "PCA of the client features before / after CBCC", ("fig5",)),
    Item("cafa", "Table II", "CBCC detection, 25% IID clients", ("table2",)),
    Item("cafa", "Table III", "CBCC detection, 50% IID clients", ("table3",)),
    Item("cafa", "Table IV", "mean accuracy per 30-round window, 150 rounds", ("table4",)),
    Item("cafa", "Table V", "best accuracy and CAFA's gain", ("table5",)),
    Item("cafa", "Fig. 6", "TWEMA-smoothed accuracy curves, 150 rounds", ("fig6",)),
    # --- DA-PFL (9)
    Item("dapfl", "Fig. 1", "toy example: aggregation weight against accuracy, FedAMP vs DA-PFL", ("fig1",)),
    Item("dapfl", "Fig. 3", "class x client heat map, alpha = 1 and 0.5", ("fig3",)),
    Item("dapfl", "Table I", "mean personalised accuracy, CIFAR-10, K = 20/100 x alpha = 1/0.5", ("table1",)),
    Item("dapfl", "Table II", "the same on CIFAR-100, first 20 classes", ("table2",)),
    Item("dapfl", "Table III", "the same on FEMNIST", ("table3_femnist", "table3_digits", "table3_fmnist")),
    Item("dapfl", "Table IV", "Many / Medium / Few / Avg class accuracy", ("table4_cifar100", "table4")),
    Item("dapfl", "Table V", "ablation V1 / V2 / full", ("table5",)),
    Item("dapfl", "Table VI", "rounds to a target accuracy", ("table6", "table6_cifar100_femnist")),
    Item("dapfl", "Fig. 4", "accuracy per round (the curves of Tables I-III)",
         ("table1", "table2", "table3_femnist", "table3_digits", "table3_fmnist")),
    # --- Flux (69)
    Item("flux", "Fig. 4", "accuracy against levels 1-8, mean over the 4 shifts, MNIST", ("mean_by_level",)),
    Item("flux", "Table 1", "mean over shifts and levels, KA and TP, 6 datasets", ("table1",)),
    Item("flux", "Fig. 5", "KA, TP and training time against K = 5/25/50/100, MNIST", ("fig5",)),
    Item("flux", "Table 4", "error between the descriptor distance and the true W2", ("descriptor_fidelity",)),
    Item("flux", "Table 5", "KA / TP against the DP budget epsilon", ("table5",)),
    Item("flux", "Table 6", "mean over shifts x levels with Flux-soft, the dynamic-drift setting",
         ("table6_drift", "table6_drift_cells")),
    Item("flux", "Table 8", "per-shift Flux against HACCS, FedAvg, FedDrift", ("table8",)),
    Item("flux", "Fig. 8", "accuracy against the clustering start round", ("fig8",)),
    Item("flux", "Fig. 9", "FedAvg accuracy and its derivative per round", ("fig9",)),
    Item("flux", "Fig. 10", "accuracy against the threshold T of Eq. 14", ("fig10",)),
    Item("flux", "Fig. 11", "2-D PCA of the descriptors", ("fig11",)),
    Item("flux", "Fig. 12", "accuracy against level per dataset",
         ("mean_by_level", "mean_by_level_fmnist", "mean_by_level_cifar10", "mean_by_level_cifar100")),
    *_flux_per_dataset(),
    Item("flux", "Table 50", "1,200 clients, participation 0.2, KA per shift", ("scalability",)),
    Item("flux", "Table 51", "KA, TP, time against K = 5/25/50/100, mean of the shifts", ("clients", "clients_time")),
    Item("flux", "Table 52", "per-shift KA / TP at K = 5", ("clients_k5",)),
    Item("flux", "Table 53", "per-shift KA / TP at K = 25", ("clients_k25",)),
    Item("flux", "Table 54", "per-shift KA / TP at K = 50", ("clients_k50",)),
    Item("flux", "Table 55", "per-shift KA / TP at K = 100", ("clients_k100",)),
    Item("flux", "Table 56", "mixed shifts P(X) + P(Y), levels 3-6", ("table56",)),
    Item("flux", "Table 57", "mixed shifts P(X|Y) + P(Y), levels 3-6", ("table57",)),
    Item("flux", "Table 58", "mixed shifts P(Y|X) + P(Y), levels 3-6", ("table58",)),
    Item("flux", "Table 59", "CheXpert macro ROC AUC, low / medium / high, KA and TP",
         ("chexpert_known_association", "chexpert_test_phase")),
    Item("flux", "Table 60", "Flux and FedAvg against participation 1.0-0.2", ("table60",)),
    Item("flux", "Table 61", "client data 4-100% x 4 levels", ("table61",)),
    Item("flux", "Table 62", "~1% data, 20 clients, 200 rounds, per shift", ("table62",)),
    Item("flux", "Table 63", "clustering algorithms (k-means, HDBSCAN, agglomerative, DBSCAN), MNIST",
         ("clustering_algorithms",)),
    Item("flux", "Table 64", "agglomerative against Flux, CIFAR-100", ("clustering_algorithms_cifar100",)),
    Item("flux", "Table 65", "descriptor-based against random test-time assignment", ("test_assignment",)),
    Item("flux", "Table 66", "descriptor parts x length", ("descriptor_parts",)),
    # --- PQFed (10)
    Item("pqfed", "Fig. 3", "EMD(T, client) against r and epsilon", ("fig3", "fig3_cifar10")),
    Item("pqfed", "Table II", "T's accuracy, Exps. 1-5", ("table2", "table2_cifar10")),
    Item("pqfed", "Fig. 4", "membership-inference power against epsilon", ("mia", "mia_cifar10")),
    Item("pqfed", "Fig. 5", "EMD threshold bands at 30-60% of the maximum", ("fig5", "fig5_cifar10")),
    Item("pqfed", "Table IV", "T's accuracy, Exps. 6-16, CIFAR-10", ("table4",)),
    Item("pqfed", "Table V", "T's accuracy, Exps. 6-16, MNIST", ("table5",)),
    Item("pqfed", "Table VI", "PQFed strict / lenient against IFCA", ("table6", "table6_cifar10")),
    Item("pqfed", "Table VII", "Algorithm 2 per stage and its stop stage, CIFAR-10", ("table7", "table7_stop")),
    Item("pqfed", "Table VIII", "Algorithm 2 per stage and its stop stage, MNIST", ("table8", "table8_stop")),
    Item("pqfed", "Fig. 6", "per-client membership-inference power against epsilon", ("fig6", "fig6_cifar10")),
)


def wired(item: Item, known: dict[str, set[str]]) -> bool:
    """Whether every table the item names exists (``known``: table id -> its cell ids) and holds its cells."""
    return bool(item.tables) and all(t in known and set(item.cells) <= known[t] for t in item.tables)


def coverage_lines(known_by_paper: dict[str, dict[str, set[str]]]) -> list[str]:
    """The checklist as ``flplat reproduce --list`` prints it: the count, then every item not wired."""
    done = [i for i in ITEMS if wired(i, known_by_paper.get(i.paper, {}))]
    lines = [f"numbered tables and figures with results: {len(ITEMS)}; wired in flplat reproduce: {len(done)}"]
    for p in dict.fromkeys(i.paper for i in ITEMS):
        mine = [i for i in ITEMS if i.paper == p]
        missing = [i.label for i in mine if i not in done]
        lines.append(f"  {p}: {len(mine) - len(missing)} of {len(mine)}"
                     + (f"; not wired: {', '.join(missing)}" if missing else ""))
    return lines


def item_lines(paper: str) -> list[str]:
    """One line per item of ``paper``: label, what it measures, the tables (and cells) that define it."""
    out = []
    for i in ITEMS:
        if i.paper == paper:
            where = ", ".join(i.tables) or "not wired"
            if i.cells:
                where += f" (cells {i.cells[0]} .. {i.cells[-1]})" if len(i.cells) > 2 else f" ({', '.join(i.cells)})"
            out.append(f"  {i.label}: {i.measures} -> {where}")
    return out
