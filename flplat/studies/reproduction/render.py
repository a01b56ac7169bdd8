"""The output of ``flplat reproduce`` per table: the verdict of one cell (:func:`verdict`: the paper's claim and
its spread, see :mod:`flplat.studies.reproduce`) and the markdown table of paper | ours | difference | verdict
(:func:`render_table`; a user's method added with ``--add-method`` has no paper value and its verdict says where
it stands against the table's reference, :func:`added_verdict`; a cell where the table's metric does not exist,
``Table.undefined``, is one row with the reason). A row with runs skipped for a reason (no run exists: e.g. an
infeasible partition) says so in its verdict and points to a numbered note under the table that gives the reason
per seed. A table with ``findings`` (claims about a whole figure, e.g. Clust-PSI-PFL Fig. 3's "WPSI decreases with
α and S") lists them with their verdict under the rows; they count in the claims line."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from flplat.studies.reproduction.grid import Table, select
from flplat.studies.reproduction.store import FAILED
from flplat.studies.reproduction.values import paper_value


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
    for seed, reason in sorted(skips):
        by_reason.setdefault(" ".join(reason.split()).replace("|", "\\|"), []).append(seed)
    return "; ".join(f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}: {reason}"
                     for reason, seeds in by_reason.items())


def render_table(table: Table, paper_vals: dict[str, Any], ours: dict[tuple[str, str], list[float]],
                 header: str, cells: Sequence[str] | None = None, methods: Sequence[str] | None = None,
                 skipped: dict[tuple[str, str], list[tuple[int, str]]] | None = None) -> str:
    """Markdown: one row per cell × method (of the selection): paper | ours mean ± std (n) | difference | verdict,
    then the notes on skipped runs (``skipped``: (cell, method) -> [(seed, reason)]; rows that share the same
    seeds and reasons share a note), then how many claims held and how many of our values were within the paper's
    spread."""
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
                otext = f"{mean:.4g} ± {sd:.2g} ({len(vals)})"
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
                failed = all(r.startswith(FAILED) for _, r in skips)
                kind = "failed" if failed else "skipped"
                text = skip_note([(s, r[len(FAILED):] if failed else r) for s, r in skips])
                n = notes.setdefault(f"{kind}: {text}", len(notes) + 1)
                seeds = ", ".join(str(s) for s, _ in sorted(skips))
                v = ((f"not run: skipped, see note {n}" if not failed else f"failed, see note {n}") if not vals else
                     f"{v}; seed{'s' if len(skips) > 1 else ''} {seeds} {kind}, see note {n}")
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
        lines += ["", "Runs without a value (skipped: no run exists; failed: the run ended with an error), the reason "
                      "per seed:", ""]
        lines += [f"{n}. {text}" for text, n in notes.items()]
    lines += ["", f"Claims: {count['claim holds']} hold, {count['claim fails']} fail. Values: {count['within spread']} "
                  f"within the paper's spread, {count['outside spread']} outside."]
    return "\n".join(lines) + "\n"
