"""The output of ``flplat reproduce`` per table: the verdict of one cell (:func:`verdict`: the paper's claim and
its spread, see :mod:`flplat.studies.reproduce`) and the markdown table of paper | ours | difference | verdict
(:func:`render_table`; a user's method added with ``--add-method`` has no paper value and its verdict says where
it stands against the table's reference, :func:`added_verdict`; a cell where the table's metric does not exist,
``Table.undefined``, is one row with the reason). A row with runs skipped for a reason (no run exists: e.g. an
infeasible partition) says so in its verdict and points to a numbered note under the table that gives the reason
per seed; so do rows with runs that failed or finished without the value (:data:`KINDS`). A cell that holds runs of
other code says how many ("(3, 1 from other code)"). A table with ``findings`` (claims about a whole figure, e.g.
Clust-PSI-PFL Fig. 3's "WPSI decreases with α and S") lists them with their verdict under the rows; they count in the
claims line. The header (:func:`table_header`) says which number a cell holds (:func:`value_note`, from the table's
metrics) and how many runs come from other code."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from typing import Any

from flplat.studies.reproduction.grid import Table, select
from flplat.studies.reproduction.store import FAILED, INCOMPLETE, NO_BUCKET, NO_CLUSTERS, NO_VALUE
from flplat.studies.reproduction.values import paper_value

# why a seed of a row has no value, by the prefix of its reason: the word the row and its note use
KINDS = ((FAILED, "failed"), (NO_CLUSTERS, NO_CLUSTERS[:-2]), (NO_VALUE, NO_VALUE[:-2]), (INCOMPLETE, "incomplete"),
         *((p, p[:-2]) for p in NO_BUCKET.values()), ("", "skipped"))


def _sign(x: float, tie: float) -> int:
    return 0 if abs(x) <= tie else (1 if x > 0 else -1)


def verdict(paper_mean: float | None, paper_std: float | None, ours: Sequence[float], paper_ref: float | None,
            ours_ref: Sequence[float] | None, *, is_reference: bool, tie: float, higher_is_better: bool = True,
            comparable: bool = True) -> str:
    """The verdict text of one cell (all numbers in the paper's unit; see the module docstring)."""
    parts = []
    if not ours:
        return "not run"
    mean = statistics.fmean(ours)
    if is_reference:
        parts.append("reference")
    elif paper_mean is not None and paper_ref is not None and ours_ref:
        sp = _sign(paper_mean - paper_ref, tie)
        so = _sign(mean - statistics.fmean(ours_ref), tie)
        word = {1: "above", -1: "below", 0: "tied with"}
        if not higher_is_better:
            word = {1: "above (worse)", -1: "below (better)", 0: "tied with"}
        parts.append(f"claim holds ({word[so]} ref.)" if sp == so else
                     f"claim fails (paper {word[sp]} ref., ours {word[so]})")
    if comparable and paper_mean is not None:
        so = statistics.pstdev(ours) if len(ours) > 1 else 0.0
        tol = 2 * math.sqrt((paper_std or 0.0) ** 2 + so ** 2)
        tol = tol if tol > 0 else tie
        parts.append("within spread" if abs(mean - paper_mean) <= tol else "outside spread")
    elif not comparable:
        parts.append("other dataset")
    return "; ".join(parts) if parts else "no paper value"


def added_verdict(ours: Sequence[float], ours_ref: Sequence[float] | None, *, tie: float,
                  higher_is_better: bool = True) -> str:
    """The verdict of a user's method (``--add-method``): where it stands against the table's reference in our
    runs, by the same tie rule as a paper's claim; the paper has no claim about it."""
    if not ours:
        return "not run"
    if not ours_ref:
        return "no paper value (added method)"
    so = _sign(statistics.fmean(ours) - statistics.fmean(ours_ref), tie)
    word = {1: "above", -1: "below", 0: "tied with"}
    if not higher_is_better:
        word = {1: "above (worse)", -1: "below (better)", 0: "tied with"}
    return f"ours {word[so]} ref.; no paper value (added method)"


def skip_note(skips: Sequence[tuple[int, str]]) -> str:
    """One note's text: the seeds skipped with their reason (seeds that share a reason together)."""
    by_reason: dict[str, list[int]] = {}
    for seed, reason in sorted(set(skips)):  # a pooled cell's members share their seeds: each seed once
        by_reason.setdefault(" ".join(reason.split()).replace("|", "\\|"), []).append(seed)
    return "; ".join(f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}: {reason}"
                     for reason, seeds in by_reason.items())


def _kind(reason: str) -> tuple[str, str]:
    """(the kind's word, the reason without its prefix)."""
    prefix, word = next((p, w) for p, w in KINDS if reason.startswith(p))
    return word, reason[len(prefix):]


def _without_value(v: str | None, skips: Sequence[tuple[int, str]], notes: dict[str, int]) -> str:
    """The verdict of a row with seeds without a value (``v``: its verdict from the seeds with one, None when no
    seed has one): per kind (skipped, failed, finished without a value) the seeds and the note giving the reasons
    (added to ``notes``)."""
    by_kind: dict[str, list[tuple[int, str]]] = {}
    for seed, reason in skips:
        word, text = _kind(reason)
        by_kind.setdefault(word, []).append((seed, text))
    parts = []
    for word, items in by_kind.items():
        n = notes.setdefault(f"{word}: {skip_note(items)}", len(notes) + 1)
        if v is None and len(by_kind) == 1:
            return f"not run: skipped, see note {n}" if word == "skipped" else f"{word}, see note {n}"
        seeds = ", ".join(str(s) for s, _ in sorted(items))
        parts.append(f"seed{'s' if len(items) > 1 else ''} {seeds} {word}, see note {n}")
    return "; ".join([v or "no value", *parts])


def render_table(table: Table, paper_vals: dict[str, Any], ours: dict[tuple[str, str], list[float]],
                 header: str, cells: Sequence[str] | None = None, methods: Sequence[str] | None = None,
                 skipped: dict[tuple[str, str], list[tuple[int, str]]] | None = None,
                 stale: dict[tuple[str, str], int] | None = None) -> str:
    """Markdown: one row per cell × method (of the selection): paper | ours mean ± std (n) | difference | verdict,
    then the notes on the seeds without a value (``skipped``: (cell, method) -> [(seed, reason)], the reason's
    prefix saying its kind: :data:`KINDS`; rows that share the same seeds and reasons share a note), then how many
    claims held and how many of our values were within the paper's spread. ``stale``: (cell, method) -> how many
    of its runs come from other code (said in its cell: "(n, k from other code)")."""
    f = table.scale_factor
    notes: dict[str, int] = {}
    lines = [f"### {table.title}", "", header, "",
             "| cell | method | paper | ours (mean ± std, n) | difference | verdict |", "|---|---|---|---|---|---|"]
    verdicts = []
    for c in select(table.cells, cells, "cells", "id"):
        ref_vals = [v * f for v in ours.get((c.id, table.reference), [])] if table.reference else None
        pref = paper_value(paper_vals, table.id, c.id, table.reference)[0] if table.reference else None
        comparable = (c.substitute or table.substitute) is None
        if c.id in table.undefined:
            lines.append(f"| {c.id} | every method | — | — | — | not defined here: {table.undefined[c.id]} |")
            continue
        for m in select(table.methods, methods, "methods", "name"):
            pm, ps, ptext = paper_value(paper_vals, table.id, c.id, m.name)
            vals = [v * f for v in ours.get((c.id, m.name), [])]
            if vals:
                mean = statistics.fmean(vals)
                sd = statistics.pstdev(vals) if len(vals) > 1 else 0.0
                k = (stale or {}).get((c.id, m.name), 0)
                otext = f"{mean:.4g} ± {sd:.2g} ({len(vals)}{f', {k} from other code' if k else ''})"
                diff = f"{mean - pm:+.3g}" if pm is not None and comparable else "—"
            else:
                otext, diff = "—", "—"
            if getattr(m, "added", False):  # a user's method: no paper value, its place against the reference
                ptext, diff = "not in the paper (added method)", "—"
                v = added_verdict(vals, ref_vals, tie=table.tie * f, higher_is_better=table.higher_is_better)
            else:
                v = verdict(pm, ps, vals, pref, ref_vals, is_reference=m.name == table.reference,
                            tie=table.tie * f, higher_is_better=table.higher_is_better, comparable=comparable)
            skips = (skipped or {}).get((c.id, m.name))
            if skips:
                v = _without_value(v if vals else None, skips, notes)
            lines.append(f"| {c.id} | {m.name} | {ptext} | {otext} | {diff} | {v} |")
            verdicts.append(v)
    if table.findings and ours:
        lines += ["", "| the paper's finding | verdict | ours |", "|---|---|---|"]
        for finding, holds, evidence in table.findings(ours):
            v = {True: "claim holds", False: "claim fails", None: "cannot be judged"}[holds]
            lines.append(f"| {finding} | {v} | {evidence} |")
            verdicts.append(v)
    count = {k: sum(k in v for v in verdicts) for k in ("claim holds", "claim fails", "within spread",
                                                          "outside spread")}
    if notes:
        lines += ["", "Runs without a value (skipped: no run exists; failed: the run ended with an error; finished: "
                      "the run finished without logging the value" +
                  ("; incomplete: some parts of the mean have no value" if table.kind == "derived" else "") +
                  "), the reason per seed:", ""]
        lines += [f"{n}. {text}" for text, n in notes.items()]
    lines += ["", f"Claims: {count['claim holds']} hold, {count['claim fails']} fail. Values: {count['within spread']} "
                  f"within the paper's spread, {count['outside spread']} outside."]
    return "\n".join(lines) + "\n"


def describe_metric(metric: str) -> str:
    """What a run metric of a table is, in words, from its name: ``X_lastN`` (the mean of X over the last N rounds),
    ``rounds_to_accP`` (C_acc), ``best_X``, ``NAME@STEP`` (a series at one step), else the run's last logged
    value of the metric."""
    name, _, step = metric.partition("@")
    if step == "sum":
        return f"the sum of {name} over the run's rounds ({metric})"
    if step:
        return f"{name} at step {step}"
    m = re.fullmatch(r"(.+)_last(\d+)", name)
    if m:
        return f"the mean of {m.group(1)} over the last {m.group(2)} rounds ({name})"
    m = re.fullmatch(r"rounds_to_acc([\d.]+)", name)
    if m:
        return (f"the first round at which the run's accuracy (metrics.accuracy_key) reached {m.group(1)} % "
                f"({name})")
    if name.startswith("best_"):
        return f"the best {name[5:]} over the run's rounds ({name})"
    return f"{name} at the end of the run (its last logged value)"


def value_note(table: Table, cells: Sequence[str] | None = None, methods: Sequence[str] | None = None,
               scale: str = "reduced") -> str:
    """The sentence of a table's header that says which number each cell holds, from the table's definition: its
    ``metric``, a cell's or a row's own (a row's wins, as for the runs), the unit (``scale_factor``) and the
    statistic over the seeds; for a derived table, the parts of each cell at ``scale`` (:func:`derived_note`)."""
    if table.kind == "derived":
        return derived_note(table, cells, scale)
    if table.kind == "analysis":
        return ("Each value is the row's number from the cell's analysis (no training). Ours is the mean ± std over "
                "the seeds (population std), their number in brackets.")
    cs = [c for c in select(table.cells, cells, "cells", "id") if c.id not in table.undefined]
    ms = select(table.methods, methods, "methods", "name")
    rows = {m.name: m.metric for m in ms if m.metric}
    by_cell = {c.id: c.metric or table.metric for c in cs}
    groups: dict[str, list[tuple[str, str]]] = {}  # metric without its step -> [(cell, step)]
    for cid, metric in by_cell.items():
        name, _, step = metric.partition("@")
        if step == "sum":  # a run-level number, not a series read at a step
            name, step = metric, ""
        groups.setdefault(name, []).append((cid, step))
    parts = []
    for name, members in groups.items():
        if any(step for _, step in members):  # a series read at each cell's step
            parts.append(f"{name} at the cell's step ({', '.join(f'{c}: {step}' for c, step in members)})")
        else:
            cids = "" if len(groups) == 1 else f"{', '.join(c for c, _ in members)}: "
            parts.append(cids + describe_metric(name))
    text = f"Each value is {parts[0]}" if len(parts) == 1 else "Each value is, per cell, " + "; ".join(parts)
    if rows:
        text += "; per row, " + "; ".join(f"{name}: {describe_metric(metric)}" for name, metric in rows.items())
    means: dict[str, list[str]] = {}  # the members of the per-seed pooled cells -> those cells
    for c in cs:
        if c.members and c.per_seed:
            means.setdefault(", ".join(p.id for p in c.parts(scale)), []).append(c.id)
    if means:
        text += ("; a pooled cell holds, per seed, the mean of that value over its members' runs (" +
                 "; ".join(f"{', '.join(cids)}: {ids}" for ids, cids in means.items()) + ")")
    unit = {1.0: "", 100.0: "; in percent (× 100)"}.get(table.scale_factor, f"; × {table.scale_factor:g}")
    pooled = any(c.members and not c.per_seed for c in cs)
    over = "the seeds" if not pooled else "the seeds and, in a pooled cell, its members"
    return (f"{text}{unit}. Ours is the mean ± std over {over} (population std) of the runs with a value, their "
            "number in brackets.")


def derived_note(table: Table, cells: Sequence[str] | None = None, scale: str = "reduced") -> str:
    """What a derived table's cell holds: per seed, the mean of its parts (listed per cell: a component table's
    cells, or "every cell" / "every cell with a value" when the part is all of them), each read with its table's
    metric; then the statistic over the seeds and what a seed with a part missing shows."""
    parts = table.parts_at(scale)
    tables: dict[str, Table] = {}
    described = []
    for c in select(table.cells, cells, "cells", "id"):
        by_table: dict[str, list[str]] = {}
        for tbl, cid in parts.get(c.id, []):
            tables[tbl.id] = tbl
            by_table.setdefault(tbl.id, []).append(cid)
        described.append(f"{c.id}: " + "; ".join(f"{tid} {_cells_text(tables[tid], cids)}"
                                                 for tid, cids in by_table.items()))
    metrics = "; ".join(f"{tid}: {describe_metric(tbl.metric)}" for tid, tbl in tables.items())
    unit = {1.0: "", 100.0: "; in percent (× 100)"}.get(table.scale_factor, f"; × {table.scale_factor:g}")
    return (f"Each value is, per seed, the mean of the cell's parts (cells of other tables, the same runs: "
            f"{' | '.join(described)}), each part read as its table reads it ({metrics}){unit}. Ours is the mean ± "
            "std over the seeds (population std) of these per-seed means, their number in brackets; a seed where "
            "some part has no value has no mean (incomplete: its note names the missing parts).")


def _cells_text(tbl: Table, cids: list[str]) -> str:
    """A part's cells of ``tbl`` in words: every cell, every cell with a value (the rest undefined), or the list."""
    defined = [c.id for c in tbl.cells if c.id not in tbl.undefined]
    if cids == [c.id for c in tbl.cells]:
        return f"(every cell, {len(cids)})"
    if cids == defined:
        return f"(every cell with a value, {len(cids)} of {len(tbl.cells)})"
    return ", ".join(cids)


def table_header(t: Table, values: dict, scale: str, note: str, sd: Sequence[int], cells, methods,
                 baseline_seeds: int | None, stale: tuple[int, ...] = (0, 0)) -> str:
    """The lines above a table: the paper's source, the scale's reductions, the seeds, substitutes and cell notes,
    which number each cell holds (:func:`value_note`), and how many of its runs come from other code (``stale``:
    (runs of other code, runs[, of those the runs imported from records without their config]))."""
    src = values.get("tables", {}).get(t.id, {}).get("source", "")
    subs = [t.substitute] if t.substitute else [f"{c.id}: {c.substitute}" for c in t.cells if c.substitute]
    seeds_note = ", ".join(map(str, sd))
    if t.kind == "train" and baseline_seeds is not None and baseline_seeds < len(sd):
        full = [m.name for m in t.methods if t.all_seeds(m.name)]
        seeds_note += (f" for {', '.join(full)}; {', '.join(map(str, sd[:baseline_seeds]))} for the other "
                       "methods (CPU time)")
    cell_notes = [f"{c.id}: {c.note}" for c in select(t.cells, cells, "cells", "id") if c.note]
    added = [f"{m.name} ({' '.join(m.overrides)})" for m in t.methods if m.added]
    n_stale, n_runs, n_no_config = (*stale, 0)[:3]
    no_config = (f", {n_no_config} of them imported from records without their config, matched to their job by "
                 "table, cell, method, seed and scale" if n_no_config else "")
    return (f"Paper: {src}. Scale `{scale}`: {note}. Seeds: {seeds_note}." +
            (f" The paper's dataset differs ({'; '.join(subs)}): only its claim is judged." if subs else "") +
            (f" Per cell: {'; '.join(cell_notes)}." if cell_notes else "") +
            (f" Added methods (not in the paper, no paper value): {'; '.join(added)}." if added else "") +
            f" {value_note(t, cells, methods, scale)}" +
            (f" Code: {n_stale} of {n_runs} runs come from other code than this command's{no_config} (their "
             "cells say how many; `--rerun-stale` trains them again)." if n_stale else ""))
