"""The numbers the papers report, as data: ``configs/papers/<paper>.yaml`` (one file per paper; see
:func:`load_paper_values`), read per cell and method (:func:`paper_value`) and checked against the paper's table
definitions (:func:`check_paper_values`, run by the tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from flplat.errors import ConfigError
from flplat.studies.reproduction.grid import REPO, paper_tables

VALUES_DIR = REPO / "configs" / "papers"
NOT_REPORTED = "not reported"


def load_paper_values(paper: str, root: Path | None = None) -> dict[str, Any]:
    """``configs/papers/<paper>.yaml``: ``{paper, seed, tables: {table id: {source, values: {cell: {method: V}}}}}``
    where V is a number (no spread given), ``[mean, std]``, or a string saying why there is no number
    (``not reported``, ``infeasible`` ...); a table's ``default`` (a reason string) stands for every cell it does not
    list (a figure without numbers)."""
    path = (root or VALUES_DIR) / f"{paper}.yaml"
    if not path.is_file():
        raise ConfigError(f"no paper values file {path}")
    # plain YAML (no interpolation): OmegaConf refuses a document of more than 10,000 nodes, and Flux's, with every
    # cell of App. F.1's 40 tables, has more
    with open(path) as fh:
        return yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}  # libyaml's where built


def paper_value(values: dict[str, Any], table: str, cell: str, method: str) -> tuple[float | None, float | None, str]:
    """(mean, std, text) of the paper's value; mean None with the reason in text when the paper gives none."""
    entry = values.get("tables", {}).get(table, {})
    v = (entry.get("values") or {}).get(cell, {}).get(method, entry.get("default", NOT_REPORTED))
    if isinstance(v, str):
        return None, None, v
    if isinstance(v, list):
        return float(v[0]), float(v[1]), f"{v[0]:g} ± {v[1]:g}"
    return float(v), None, f"{v:g}"


def check_paper_values(paper: str, root: Path | None = None) -> list[str]:
    """Problems in the paper's values file against its table definitions (empty when it is well formed): every
    (table, cell, method) of a definition has an entry (a number, [mean, std] or an explicit reason string)."""
    values = load_paper_values(paper, root)
    errs = []
    if values.get("paper") != paper:
        errs.append(f"{paper}: field 'paper' is {values.get('paper')!r}")
    tabs = values.get("tables") or {}
    for t in paper_tables(paper):
        entry = tabs.get(t.id)
        if entry is None:
            errs.append(f"{paper}: table {t.id} missing")
            continue
        if not entry.get("source"):
            errs.append(f"{paper}/{t.id}: no 'source' (the paper's table/figure id)")
        vals = entry.get("values") or {}
        for c in t.cells:
            for m in t.methods:
                v = (vals.get(c.id) or {}).get(m.name, entry.get("default"))
                ok = (isinstance(v, str) and v.strip()) or isinstance(v, (int, float)) and not isinstance(v, bool) \
                    or (isinstance(v, list) and len(v) == 2 and all(isinstance(x, (int, float)) for x in v))
                if not ok:
                    errs.append(f"{paper}/{t.id}: cell {c.id} method {m.name}: {v!r} is not a number, "
                                "[mean, std] or a reason")
    return errs
