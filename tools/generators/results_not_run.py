"""Write docs/results.md's "Not run here" list: every table `flplat reproduce` defines that has no block on the page,
with the datasets it needs and whether they were on the machine that rendered the page.

    python tools/generators/results_not_run.py                      # rewrite the list in docs/results.md
    python tools/generators/results_not_run.py --check              # exit 1 when the list is out of date
    python tools/generators/results_not_run.py --here digits,mnist,fmnist,synthetic

The list sits between ``<!-- not-run-here:start -->`` and ``<!-- not-run-here:end -->``; a table counts as run when
the page has a ``<!-- flplat reproduce PAPER TABLE SCALE -->`` block for it at any scale. tests/test_tools.py holds
the committed list to the registry, so a table added without a block or a block added without updating the list
fails the suite."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
START, END = "<!-- not-run-here:start -->", "<!-- not-run-here:end -->"
#: datasets on the machine that renders docs/results.md (digits and synthetic ship with the code)
HERE = ("digits", "synthetic", "mnist", "fmnist")
NAMES = {"digits": "digits", "synthetic": "synthetic", "mnist": "MNIST", "fmnist": "Fashion-MNIST",
         "cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "femnist": "FEMNIST", "acs_income": "ACSIncome",
         "serengeti": "Serengeti", "sent140": "Sent140", "amazon_reviews": "Amazon reviews",
         "chexpert": "CheXpert", "office_home": "Office-Home"}


def blocks(md: str) -> set[tuple[str, str]]:
    """(paper, table) of every reproduce block on the page."""
    return {(m[1], m[2]) for m in re.finditer(r"<!-- flplat reproduce (\S+) (\S+) \S+ -->", md)}


def without_block(md: str) -> list[tuple[str, str, list[str]]]:
    """(paper, table, datasets) of every defined table with no block on ``md``, in --list order."""
    from flplat.studies.reproduce import PAPERS
    from flplat.studies.reproduction.grid import paper_tables

    have = blocks(md)
    return [(p, t.id, list(t.data_names())) for p in PAPERS for t in paper_tables(p) if (p, t.id) not in have]


def section(md: str, here: tuple[str, ...] = HERE) -> str:
    """The list's text: tables whose data was not here, then tables whose data was here but that have not run."""
    absent: dict[str, list[str]] = {}
    waiting: list[str] = []
    for paper, table, data in without_block(md):
        missing = [d for d in data if d not in here]
        if missing:
            absent.setdefault(", ".join(NAMES.get(d, d) for d in missing), []).append(f"`{paper} {table}`")
        else:
            waiting.append(f"`{paper} {table}`")
    n = sum(map(len, absent.values())) + len(waiting)
    lines = [START, f"The {n} tables of flplat reproduce with no block on this page (rendered on a machine with "
             f"{', '.join(NAMES.get(d, d) for d in here)}):", ""]
    for names, tables in sorted(absent.items()):
        lines.append(f"- needs {names} (not on that machine): {', '.join(tables)}")
    if waiting:
        lines.append(f"- data there, not run yet: {', '.join(waiting)}")
    return "\n".join([*lines, END])


def item_counts(md: str, here: tuple[str, ...] = HERE) -> dict[str, int]:
    """The papers' numbered items (flplat.studies.papers.items) by what the page holds: ``items``, ``wired``,
    ``with_block`` (some table of the item has a block), ``needs_data`` (no block, and each of its tables needs a
    dataset not ``here``), ``not_yet`` (no block, data here)."""
    from flplat.studies.papers.items import ITEMS, wired
    from flplat.studies.reproduction.grid import paper_tables

    tables = {p: {t.id: t for t in paper_tables(p)} for p in dict.fromkeys(i.paper for i in ITEMS)}
    known = {p: {tid: {c.id for c in t.cells} for tid, t in ts.items()} for p, ts in tables.items()}
    have = blocks(md)
    out = {"items": len(ITEMS), "wired": 0, "with_block": 0, "needs_data": 0, "not_yet": 0}
    for i in ITEMS:
        if not wired(i, known[i.paper]):
            continue
        out["wired"] += 1
        if any((i.paper, t) in have for t in i.tables):
            out["with_block"] += 1
        elif all(any(d not in here for d in tables[i.paper][t].data_names()) for t in i.tables):
            out["needs_data"] += 1
        else:
            out["not_yet"] += 1
    return out


def listed(md: str) -> set[tuple[str, str]]:
    """(paper, table) named in the page's current list."""
    body = md.split(START, 1)[1].split(END, 1)[0] if START in md else ""
    return {(m[1], m[2]) for m in re.finditer(r"`([a-z-]+) (\w+)`", body)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=REPO / "docs" / "results.md")
    ap.add_argument("--here", default=",".join(HERE), help="datasets on this machine (comma-separated)")
    ap.add_argument("--check", action="store_true", help="exit 1 when the page's list is out of date")
    args = ap.parse_args(argv)
    md = args.results.read_text()
    if START not in md or END not in md:
        print(f"{args.results}: no {START} ... {END} markers", file=sys.stderr)
        return 2
    new = section(md, tuple(args.here.split(",")))
    old = START + md.split(START, 1)[1].split(END, 1)[0] + END
    if args.check:
        if old != new:
            print(f"{args.results}: the 'Not run here' list is out of date: python tools/generators/results_not_run.py",
                  file=sys.stderr)
            return 1
        return 0
    args.results.write_text(md.replace(old, new))
    print(f"{args.results}: {len(without_block(md))} tables without a block listed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
