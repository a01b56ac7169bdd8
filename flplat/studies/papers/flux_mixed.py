"""Flux (seed 003): the items that need partitions beyond ``shift``, each its own ``flplat reproduce flux`` item.

* ``table56`` / ``table57`` / ``table58`` (App. F.3): mixed shifts on MNIST, P(X) + P(Y), P(X|Y) + P(Y) and P(Y|X) +
  P(Y), levels 3-6, known association (cells ``lN_known``) and test phase (``lN_test``) of the same runs, from
  configs/flux/mixed/ (``partition.name=mixed_shift``: each client draws one distribution of each shift at the
  level's Table 9 setting, its id the pair; :mod:`flplat.data.mixed_shift_partition`). P(Y|X) + P(Y) has a test
  phase (Table 58 reports one: the class set is visible without labels).
* ``table6_drift`` (App. D.3, Table 6): D.3's dynamic setting, "two distribution drifts during training and one
  during testing", over the four shifts at three levels (3, 5, 7: the P(X) banks of the authors' dynamic generator;
  D.3 names none), from configs/flux/drift/ (``partition.name=drift``: two training stages, the second from round 5,
  and drifted test clients; :mod:`flplat.data.drift_partition`). Table 6's one column is the accuracy on the
  drifted test data: our ``test_phase_accuracy`` on the unseen clients that hold each training client's test data
  under a distribution it never trained on (cell ``dynamic``, the mean over the shifts and levels, P(Y|X) included
  as the paper's mean). ``dynamic_known`` (not in the paper) is the known association after the drift, each client
  on its own last-stage test split. Its Flux rows are D.3's dynamic variant: re-clustering every round
  (``algorithm.recluster_every=1``, warm-started from the nearest previous centroid), which includes the change round
  without being told it; "Flux (one-shot)" (not in the paper) clusters once. The per-(shift, level) values are the
  train table ``table6_drift_cells``; the paper gives none of them. D.3 cites Table 6's one column both for Flux-soft
  ("averaged results on MNIST, covering all four types of distribution shifts and three levels") and for the
  dynamic setting; its numbers are not the static tables' (FedAvg 71.9 against 79.9, the mean of Tables 12-19 at
  levels 2, 5, 8), so we compare it with the dynamic setting's runs.
"""

from __future__ import annotations

from collections.abc import Callable

from flplat.studies.papers.flux import GUARD, GUARDED, METHODS, PFEDME_PAPER, SCALES, SHIFTS
from flplat.studies.reproduce import Cell, Method, Table

KA, TP = "known_association_accuracy", "test_phase_accuracy"
KINDS = (("known", KA), ("test", TP))
BY = {m.name: m for m in METHODS}
COMMON = dict(seeds=[0, 1, 2], scale_factor=100.0, tie=0.005)

# ---------------------------------------------------------------------------------------- App. F.3: Tables 56-58
MIX_LEVELS = (3, 4, 5, 6)
MIXES = {"table56": (56, "feature+label", "P(X) + P(Y)"), "table57": (57, "concept_xy+label", "P(X|Y) + P(Y)"),
         "table58": (58, "concept_yx+label", "P(Y|X) + P(Y)")}
MIX_NOTES = {
    "smoke": "CI size: 30 samples per client, 2 rounds of 1 epoch, the MLP",
    "reduced": "500 samples per client instead of the whole pool dealt evenly (about 3,000), SGD lr 0.03 instead of "
               "0.005 (as the reduced Table 1 cells); LeNet-5, 10 clients, 10 rounds, E = 2 as the paper. Each client "
               "draws one distribution of each shift at the level (F.3 gives no more; mixed_shift_partition.py). "
               + GUARD,
    "paper": "the paper's setting as we read it (configs/flux/mixed/: each client draws one distribution of each "
             "shift at the level's Table 9 setting, its id the pair). " + GUARD}


def mixed_config(mix: str, level: int) -> str:
    return f"configs/flux/mixed/mnist_{mix.replace('+', '_')}_l{level}.yaml"


def _mixed(tid: str, number: int, mix: str, name: str) -> Table:
    cells = [Cell(f"l{lv}_{kind}", mixed_config(mix, lv), metric=metric) for lv in MIX_LEVELS for kind, metric in KINDS]
    return Table(tid, f"Flux App. F.3 / Table {number} (MNIST): mixture of {name}, known association (lN_known) and "
                 "test phase (lN_test) at levels 3-6", cells, METHODS, metric=KA, scales=SCALES, notes=MIX_NOTES,
                 focus=["Flux", GUARDED, "Flux-prior"], **COMMON)


TABLES = [_mixed(tid, *spec) for tid, spec in MIXES.items()]

# ------------------------------------------------------------------------------ App. D.3: Table 6, dynamic setting
DRIFT_LEVELS = (3, 5, 7)
REDUCED_LEVELS = (5,)  # the reduced grid: level 5 of each shift (52 runs, about 15 min on one core)
ONE_SHOT = "Flux (one-shot)"
DRIFT_METHODS = [
    *(BY[n] for n in ("FedAvg", "IFCA", "FedRC", "FedEM", "FeSEM", "FedDrift", "CFL", "pFedMe", PFEDME_PAPER, "APFL",
                      "ATP")),
    Method("Flux-soft", ["algorithm.name=flux_soft", "algorithm.recluster_every=1"]),
    Method("Flux", ["algorithm.name=flux", "algorithm.recluster_every=1"]),
    Method(ONE_SHOT, ["algorithm.name=flux", "algorithm.recluster_every=0"])]
FLUX_ROWS = ("Flux-soft", "Flux", ONE_SHOT)  # the others are the baselines of D.3's claims


def drift_config(shift: str, level: int) -> str:
    return f"configs/flux/drift/mnist_{shift}_l{level}.yaml"


DRIFT_SCALES = {"smoke": [*SCALES["smoke"], "partition.change_rounds=[2]"], "reduced": list(SCALES["reduced"])}
DRIFT_NOTES = {
    "smoke": "CI size: 30 samples per client, 2 rounds of 1 epoch, the MLP, the change at round 2 (Flux's clustering "
             "does not start in 2 rounds); level 5 of each shift only",
    "reduced": "500 samples per client instead of the whole pool dealt evenly (about 3,000), SGD lr 0.03 instead of "
               "0.005, and level 5 of each shift only (4 of the 12 cells, so that the grid runs in about 15 min on "
               "one core); LeNet-5, 10 clients, 10 rounds, E = 2, the change at round 5, one drifted test client per "
               "training client",
    "paper": "the paper's setting as we read it (configs/flux/drift/: two training distributions, the second from "
             "round 5, and a third at test time; levels 3, 5, 7, D.3 names none)"}
CELL_NOTES = {**DRIFT_NOTES, "smoke": DRIFT_NOTES["smoke"].replace("; level 5 of each shift only", ""),
              "reduced": DRIFT_NOTES["reduced"].replace(", and level 5 of each shift only (4 of the 12 cells, so "
                                                        "that the grid runs in about 15 min on one core)", "")}
CELLS = [Cell(f"{s}_l{lv}_{kind}", drift_config(s, lv), metric=metric)
         for s in SHIFTS for lv in DRIFT_LEVELS for kind, metric in KINDS]
DRIFT_CELLS = Table(
    "table6_drift_cells", "Flux App. D.3 / Table 6's dynamic setting per shift and level (MNIST): the drifted test "
    "clients' accuracy (_test) and the known association after the drift (_known)", CELLS, DRIFT_METHODS, metric=TP,
    scales=DRIFT_SCALES, notes=CELL_NOTES, focus=["Flux-soft", "Flux"], **COMMON)


def _parts(kind: str, levels) -> list[tuple[Table, str]]:
    return [(DRIFT_CELLS, f"{s}_l{lv}_{kind}") for s in SHIFTS for lv in levels]


def _mean(ours, cell: str, method: str) -> float | None:
    v = ours.get((cell, method))
    return sum(v) / len(v) if v else None


def drift_findings(ours) -> list[tuple[str, bool | None, str]]:
    """D.3's claims on Table 6: Flux above every baseline ("by over 14 percentage points"), Flux-soft above every
    baseline ("nearly 11" over the best, CFL) and approaching hard Flux."""
    base = {m.name: _mean(ours, "dynamic", m.name) for m in DRIFT_METHODS if m.name not in FLUX_ROWS}
    base = {k: v for k, v in base.items() if v is not None}
    best = max(base.items(), key=lambda kv: kv[1]) if base else None
    out = []
    for name, claim in (("Flux", "Flux is above every baseline (Table 6: by 14.0 points, over CFL)"),
                        ("Flux-soft", "Flux-soft is above every baseline (Table 6: by 11.0 points, over CFL)")):
        v = _mean(ours, "dynamic", name)
        ok = None if v is None or best is None else v > best[1]
        out.append((claim, ok, f"{name} {100 * v:.1f}, best baseline {best[0]} {100 * best[1]:.1f}"
                    if ok is not None else "no value"))
    soft, hard = _mean(ours, "dynamic", "Flux-soft"), _mean(ours, "dynamic", "Flux")
    out.append(("Flux-soft approaches hard Flux: within 5 points below it or above (Table 6: 86.5 against 89.5)",
                None if soft is None or hard is None else soft >= hard - 0.05,
                f"Flux-soft {100 * soft:.1f}, Flux {100 * hard:.1f}" if soft is not None and hard is not None
                else "no value"))
    return out


def _derived(parts: Callable[[str], list[tuple[Table, str]]]) -> dict[str, list[tuple[Table, str]]]:
    return {"dynamic": parts("test"), "dynamic_known": parts("known")}


TABLES += [DRIFT_CELLS, Table(
    "table6_drift", "Flux App. D.3 / Table 6 (MNIST), dynamic setting: accuracy on the drifted test clients (dynamic) "
    "and the known association after the drift (dynamic_known, not in the paper), the mean over the shifts and "
    "levels", [Cell("dynamic"), Cell("dynamic_known")], DRIFT_METHODS, metric=TP, kind="derived",
    parts=_derived(lambda k: _parts(k, DRIFT_LEVELS)),
    scale_parts={sc: _derived(lambda k: _parts(k, REDUCED_LEVELS)) for sc in ("smoke", "reduced")},
    notes=DRIFT_NOTES, focus=["Flux-soft", "Flux"], findings=drift_findings, **COMMON)]
