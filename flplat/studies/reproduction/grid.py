"""The table model of ``flplat reproduce``: a paper's table is cells × methods × seeds (see
:mod:`flplat.studies.reproduce`), and :func:`plan` turns a train table into jobs, one validated config each,
identified by the hash of its resolved config (:func:`flplat.config_io.config_key`)."""

from __future__ import annotations

import functools
import importlib
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from flplat.config_io import config_key, loggable
from flplat.errors import ConfigError
from flplat.tracking.provenance import CodeIdentity, code_identity

PAPERS = ("clust-psi-pfl", "cafa", "dapfl", "flux", "pqfed")
SCALES = ("smoke", "reduced", "paper")
REPO = Path(__file__).resolve().parents[3]


@dataclass
class Method:
    """One row of a table: a name as in the paper's table and the config overrides that select it; ``{name}`` in an
    override is filled from the cell's ``params`` (e.g. IFCA's k, which DA-PFL sets per number of clients)."""

    name: str
    overrides: list[str] = field(default_factory=list)
    metric: str | None = None  # this row's run metric when it is not the table's (PQFed's IFCA: global_accuracy)
    config: str | None = None  # this row's ready config when it is not the cell's (PQFed's IFCA: the baseline one)
    added: bool = False  # a user's method (``--add-method``): not in the paper, no paper value


@dataclass
class Cell:
    """One column of a table: a ready config (relative to the repository) plus overrides, or, for an analysis
    table, just its parameters in ``params``."""

    id: str
    config: str | None = None
    overrides: list[str] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    substitute: str | None = None  # this cell runs another dataset than the paper's (see Table.substitute)
    metric: str | None = None  # this column's run metric when it is not the table's; ``NAME@STEP``: the value of the
    #                            metric NAME logged at step STEP (a series, e.g. CAFA's windowed accuracy)
    note: str | None = None  # what this cell sets beyond its ready config and why, stated in the table's header
    # a pooled cell (a paper's mean over shifts and levels, e.g. Flux Tables 8, 51 and 63): one run per member (each a
    # Cell: its config, else this cell's; this cell's overrides, then its own) and seed, the cell's value over all of
    # them; with ``per_seed`` the value of a seed is the mean of its members' values (the std is over the seeds, as a
    # paper's mean over shifts ± its std over seeds), and a seed where a member has no value has none, with that
    # member's reason, never a mean of the members that are there
    members: list[Cell] = field(default_factory=list)
    scales: tuple[str, ...] = ()  # a member: the scales it runs at (empty: every scale), e.g. fewer levels at reduced
    per_seed: bool = False

    def parts(self, scale: str) -> list[Cell]:
        """What runs for this cell at ``scale``: its members there, or the cell itself when it pools nothing."""
        return [m for m in self.members if not m.scales or scale in m.scales] if self.members else [self]


@dataclass
class FigureContext:
    """What a table's figure is drawn from: our values, the runs behind them (train tables) and where to write."""

    ours: dict[tuple[str, str], list[float]]
    scale: str
    path: str
    client: Any = None  # an MlflowClient on the store
    runs: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # (cell, method) -> run ids
    seeds: list[int] = field(default_factory=list)  # the seeds the table ran (an analysis figure draws the first)
    jobs: list[Job] = field(default_factory=list)  # a train table's runs as planned (their configs: --set included)
    paper: dict[tuple[str, str], float] = field(default_factory=dict)  # (cell, method) -> the paper's mean
    # what the figure read of each run (run id -> metric histories, artifact paths): the run records (``--out``)
    # carry exactly these, so the figure can be drawn again from records imported elsewhere
    read: dict[str, set[str]] = field(default_factory=dict)
    read_artifacts: dict[str, set[str]] = field(default_factory=dict)

    def history(self, run_id: str, metric: str) -> list[tuple[int, float]]:
        """The per-round values (step, value) a run logged of ``metric``."""
        self.read.setdefault(run_id, set()).add(metric)
        return sorted((m.step, m.value) for m in self.client.get_metric_history(run_id, metric))

    def artifact(self, run_id: str, path: str) -> str | None:
        """The text of a run's artifact ``path`` (e.g. ``clients/final_client_metrics.csv``), None when the run has
        none (a run of an older flplat)."""
        import tempfile

        self.read_artifacts.setdefault(run_id, set()).add(path)
        with tempfile.TemporaryDirectory() as tmp:
            try:
                return Path(self.client.download_artifacts(run_id, path, tmp)).read_text()
            except Exception:  # noqa: BLE001 - MLflow raises several kinds for an absent artifact
                return None


@dataclass
class Table:
    """A paper's table or figure reproduced as a grid (see :mod:`flplat.studies.reproduce`)."""

    id: str
    title: str
    cells: list[Cell]
    methods: list[Method]
    metric: str = "global_accuracy"  # a run metric (train tables)
    kind: str = "train"  # train | analysis | derived (means over other tables' cells: ``parts``)
    reference: str | None = "FedAvg"  # the method every claim is measured against (None: no claim part)
    higher_is_better: bool = True
    scale_factor: float = 1.0  # ours × scale_factor is in the paper's unit (100 for percent)
    tie: float = 0.005  # in our unit: gaps within this count as ties; the tolerance when no std is known
    substitute: str | None = None  # the paper ran another dataset: values are not comparable, only the claim
    scales: dict[str, list[str]] = field(default_factory=dict)  # smoke / reduced overrides for every run
    notes: dict[str, str] = field(default_factory=dict)  # per scale: the reductions, stated in the header
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # the paper's seeds at scale paper
    analyze: Callable[[Cell, int, str], dict[str, float]] | None = None  # analysis: (cell, seed, scale) -> rows
    figure: Callable[[FigureContext], None] | None = None  # writes a PNG to ctx.path
    focus: list[str] | None = None  # the methods the paper's claim is about (default: the table's last method)
    # cells where the table's metric does not exist (cell id -> why, quoting the paper): nothing is run for them and
    # the table gives one row with the reason instead of a "not run" row per method
    undefined: dict[str, str] = field(default_factory=dict)
    # the paper's findings about the whole table or figure, judged on our values (cell, row) -> values over seeds:
    # [(finding, holds (True / False; None: cannot be judged), what ours show)], rendered under the rows
    findings: Callable[[dict[tuple[str, str], list[float]]], list[tuple[str, bool | None, str]]] | None = None
    # the datasets where the cells' ready configs do not say them (analysis tables, cells waiting with a reason):
    # ``flplat reproduce --list`` shows them beside the configs' data.name
    datasets: list[str] = field(default_factory=list)
    # a derived table (kind "derived", :mod:`flplat.studies.reproduction.derived`): per cell, the (train table, cell)
    # pairs whose values it averages, per seed and method (the same runs: nothing of its own is trained)
    parts: dict[str, list[tuple[Table, str]]] = field(default_factory=dict)
    # per scale, parts that replace ``parts`` there (e.g. fewer components at smoke; the scale's note says so)
    scale_parts: dict[str, dict[str, list[tuple[Table, str]]]] = field(default_factory=dict)

    def data_names(self) -> list[str]:
        """The datasets this table runs: its ``datasets``, the ``data.name`` of every ready config it names and, for a
        derived table, its component tables' datasets."""
        names = list(self.datasets)
        configs = [*(c.config for c in self.cells), *(p.config for c in self.cells for p in c.members)]
        for path in dict.fromkeys([*configs, *(m.config for m in self.methods)]):
            if path:
                names.append(_config_data_name(path))
        for tbl in {tbl.id: tbl for part in self.parts.values() for tbl, _ in part}.values():
            names += tbl.data_names()
        return list(dict.fromkeys(names))

    def parts_at(self, scale: str) -> dict[str, list[tuple[Table, str]]]:
        """A derived table's parts at ``scale``: ``scale_parts[scale]`` where given, else ``parts``."""
        return self.scale_parts.get(scale, self.parts)

    def all_seeds(self, method: str) -> bool:
        """Whether ``method`` runs every seed under ``--baseline-seeds`` (the reference and the focus methods)."""
        return method == self.reference or method in (self.focus or [self.methods[-1].name])


# a row label: text with a letter or digit, spaces and signs as the papers' own rows ("Flux + noise guard", "Flux (d'
# only)"), without "=" (it ends the label), "," (--methods splits at it), "|" (a markdown cell), ":", "#", "$" (the
# label is in the run's tracking.run_name override, where they would be YAML or an interpolation) or control chars
_NOT_IN_LABEL = r"=,|:#$\x00-\x1f\x7f"
ADDED_LABEL = re.compile(rf"[^{_NOT_IN_LABEL}]*[A-Za-z0-9][^{_NOT_IN_LABEL}]*")


def parse_added_method(spec: str) -> Method:
    """A user's method from ``--add-method "NAME=key=value,key=value,..."``: the row label NAME and its config
    overrides, split at the commas that start a new ``key=`` (so ``model.hidden=[16,16]`` stays one value). The
    algorithm is ``algorithm.name`` of the overrides; without one, NAME itself must be a registered algorithm
    (``--add-method fedprox`` or ``"fedprox=algorithm.mu=0.1"``)."""
    from flplat.algorithms import ALGORITHMS
    from flplat.plugins import load_plugins

    load_plugins()  # NAME may be an installed plugin's algorithm (entry points, $FLPLAT_PLUGINS)
    label, _, rest = spec.partition("=")
    label = label.strip()
    if not ADDED_LABEL.fullmatch(label):
        raise ConfigError(f"--add-method={spec!r}: the row label {label!r} must have a letter or digit and none of "
                          "',|:#$' (spaces and other signs are fine); allowed: NAME=key=value,... e.g. "
                          "\"My algo + guard=algorithm.name=myalgo,algorithm.mu=0.1\"")
    overrides = [o.strip() for o in re.split(r",(?=\s*[A-Za-z_][\w.]*=)", rest) if o.strip()] if rest.strip() else []
    for o in overrides:
        if not re.fullmatch(r"[A-Za-z_][\w.]*=.*", o):
            raise ConfigError(f"--add-method={spec!r}: {o!r} is not key=value; allowed: NAME=key=value,... e.g. "
                              "\"MyAlgo=algorithm.name=myalgo,algorithm.mu=0.1\"")
    keys = [o.split("=", 1)[0] for o in overrides]
    if any(k.startswith("tracking.") or k == "seed" for k in keys):
        raise ConfigError(f"--add-method={spec!r}: seed and tracking.* are the grid's (use --seeds / --store-dir); "
                          "allowed: the method's own keys, e.g. algorithm.*")
    if "algorithm.name" not in keys:
        if label not in ALGORITHMS:
            raise ConfigError(f"--add-method={spec!r} names no algorithm: give algorithm.name=ALGO (registered: "
                              f"{', '.join(sorted(ALGORITHMS))}) or use a registered algorithm's name as NAME")
        overrides.insert(0, f"algorithm.name={label}")
    from flplat.configure import load_config

    try:
        load_config(None, overrides)  # an unknown algorithm or key, a bad value: said with the option's text
    except ConfigError as e:
        raise ConfigError(f"--add-method={spec!r}: {e}") from None
    return Method(label, overrides, added=True)


def with_added(table: Table, added: Sequence[Method]) -> Table:
    """``table`` with the user's methods after the paper's; they keep every seed under ``--baseline-seeds`` (like
    the paper's focus methods). A label that is already a method of the table is a ConfigError."""
    if not added:
        return table
    names = [m.name for m in table.methods]
    for m in added:
        if m.name in names:
            raise ConfigError(f"--add-method {m.name!r}: table {table.id} already has a method of that name; "
                              f"allowed: another label than {', '.join(names)}")
        names.append(m.name)
    focus = [*(table.focus or [table.methods[-1].name]), *(m.name for m in added)]
    return replace(table, methods=[*table.methods, *added], focus=focus)


@functools.cache
def _config_data_name(path: str) -> str:
    from omegaconf import OmegaConf

    return str(OmegaConf.select(OmegaConf.load(REPO / path), "data.name", default="digits"))


def paper_module(paper: str):
    if paper not in PAPERS:
        raise ConfigError(f"paper {paper!r} is unknown; allowed: {', '.join(PAPERS)}")
    return importlib.import_module(f"flplat.studies.papers.{paper.replace('-', '_')}")


def paper_tables(paper: str) -> list[Table]:
    """The paper's tables: its module's ``TABLES``, then those of the further modules
    :data:`flplat.studies.papers.MORE_MODULES` lists for it (e.g. Flux's mixed shifts and drift, its sweeps)."""
    from flplat.studies.papers import MORE_MODULES

    mods = [paper_module(paper), *(importlib.import_module(f"flplat.studies.papers.{m}")
                                   for m in MORE_MODULES.get(paper, ()))]
    return [t for mod in mods for t in mod.TABLES]


@dataclass
class Job:
    table: str
    cell: str
    method: str
    seed: int
    config: str | None
    overrides: list[str]
    key: str  # hash of the resolved config
    code: CodeIdentity | None = None  # the code that would make its run now (flplat.tracking.provenance)
    # the resolved config as runs log it (:func:`flplat.config_io.loggable`) without ``tracking`` (this machine's
    # store): what its run record carries (:mod:`flplat.studies.reproduction.records`)
    resolved: dict | None = field(default=None, repr=False, compare=False)
    member: str | None = None  # the member of a pooled cell (``Cell.members``) it runs, None in a plain cell

    @property
    def label(self) -> str:
        return f"{self.table} {self.cell}{'/' + self.member if self.member else ''} {self.method} s{self.seed}"


def record_config(cfg) -> dict:
    """``cfg`` as a run record carries it: :func:`~flplat.config_io.loggable` (environment lookups unresolved)
    without ``tracking`` (where this machine stores runs; :func:`~flplat.config_io.config_key` leaves it out too)."""
    d = loggable(cfg)
    d.pop("tracking", None)
    return d


def select(items, names: Sequence[str] | None, what: str, attr: str):
    if not names:
        return list(items)
    known = {getattr(i, attr): i for i in items}
    bad = [n for n in names if n not in known]
    if bad:
        raise ConfigError(f"--{what}={','.join(bad)} unknown; allowed: {', '.join(known)}")
    return [known[n] for n in names]


def per_table(tables: Sequence[Table], methods: Sequence[str] | None, cells: Sequence[str] | None
              ) -> dict[str, tuple[list[str] | None, list[str] | None]]:
    """``--methods`` / ``--cells`` per table, by table id. One table: exactly the names given (an unknown name is
    the usual error). Several tables: each takes the names it has, so ``known_association ari --methods
    FedAvg,Flux`` runs FedAvg where it is a row; a name no chosen table has is a ConfigError, and a table that has
    none of the names is left out (reported in one line on stderr)."""
    if len(tables) <= 1 or (not methods and not cells):
        return {t.id: (list(methods) if methods else None, list(cells) if cells else None) for t in tables}
    for names, what, attr, of in ((methods, "methods", "name", lambda t: t.methods),
                                  (cells, "cells", "id", lambda t: t.cells)):
        known = list(dict.fromkeys(getattr(i, attr) for t in tables for i in of(t)))
        bad = [n for n in names or [] if n not in known]
        if bad:
            raise ConfigError(f"--{what}={','.join(bad)} is in none of the tables {', '.join(t.id for t in tables)}; "
                              f"allowed: {', '.join(known)}")
    out = {}
    for t in tables:
        m = [n for n in methods if n in {x.name for x in t.methods}] if methods else None
        c = [n for n in cells if n in {x.id for x in t.cells}] if cells else None
        if m == [] or c == []:
            print(f"{t.id}: none of the --{'methods' if m == [] else 'cells'} given is in this table; left out",
                  file=sys.stderr)
            continue
        out[t.id] = (m, c)
    return out


def _fill(text: str, params: dict[str, Any]) -> str:
    for k, v in params.items():
        text = text.replace("{" + k + "}", str(v))
    return text


def resolve_scale(table: Table, scale: str) -> tuple[list[str], str]:
    if scale not in SCALES:
        raise ConfigError(f"--scale={scale!r}; allowed: {', '.join(SCALES)}")
    over = [] if scale == "paper" else list(table.scales.get(scale, []))
    note = table.notes.get(scale) or ("the paper's setting (the ready configs as they are)" if scale == "paper"
                                      else "overrides: " + (" ".join(over) or "none"))
    return over, note


def plan(paper: str, table: Table, scale: str, seeds: Sequence[int], methods, cells, extra: Sequence[str],
         experiment: str, store_dir: str, baseline_seeds: int | None = None) -> list[Job]:
    """Every job of a train table, each config validated before anything runs (bad input: ConfigError). With
    ``baseline_seeds`` = n, methods other than the reference and the table's focus run only the first n seeds. A
    pooled cell (``Cell.members``) has one job per member at ``scale``, method and seed, all under the cell's id."""
    from flplat.experiment import load_config

    over_scale, _ = resolve_scale(table, scale)
    jobs = []
    for c in select(table.cells, cells, "cells", "id"):
        if c.id in table.undefined:
            continue
        for p, m in ((p, m) for p in c.parts(scale) for m in select(table.methods, methods, "methods", "name")):
            for s in (seeds if baseline_seeds is None or table.all_seeds(m.name) else seeds[:baseline_seeds]):
                name = f"{c.id}/{p.id}" if p is not c else c.id
                over = [*c.overrides, *(p.overrides if p is not c else []), *(_fill(o, c.params) for o in m.overrides),
                        *over_scale, *extra, f"seed={s}", f"tracking.experiment={experiment}",
                        f"tracking.store_dir={store_dir}", f"tracking.run_name={table.id}/{name}/{m.name}/s{s}"]
                config = m.config or p.config or c.config
                path = str(REPO / config) if config else None
                cfg = load_config(path, over)
                jobs.append(Job(table.id, c.id, m.name, s, path, over, config_key(cfg), code_identity(cfg),
                                record_config(cfg), p.id if p is not c else None))
    return jobs
