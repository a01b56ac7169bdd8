"""pFedMe's two rows in Flux's tables: "pFedMe", with the λ, η, η_p that `flplat tune` chose under Flux's protocol
(read from the ready configs' algorithm_defaults, not from code), and "pFedMe (its paper's settings)", pFedMe's own
λ 15, η 0.005, η_p 0.1; and the grid the choice was made over."""

from __future__ import annotations

import yaml
from conftest import REPO

from flplat.algorithms.pfedme import PFedMe
from flplat.experiment import load_config
from flplat.studies.papers.flux import PFEDME_PAPER, PFEDME_TUNED_KEYS
from flplat.studies.reproduction.grid import paper_tables
from flplat.studies.tuning import grid_size, is_grid, load_space

SPACE = REPO / "configs/search_spaces/flux_pfedme.yaml"
PAPER = {"lam": 15.0, "lr": 0.005, "personal_lr": 0.1}  # pFedMe (Dinh et al. 2020), MNIST


def _pfedme_tables():
    return [t for t in paper_tables("flux") if any(m.name == "pFedMe" for m in t.methods)]


def _tuned_point(config: str) -> dict:
    raw = yaml.safe_load((REPO / config).read_text())
    return raw["algorithm_defaults"]["pfedme"]


def test_every_flux_table_with_pfedme_has_both_rows_and_the_tuned_row_sets_nothing():
    tables = _pfedme_tables()
    assert len(tables) >= 20  # App. F.1's tables of four datasets, their means, Table 1, the real sets, F.3, D.3
    for t in tables:
        names = [m.name for m in t.methods]
        assert names[names.index("pFedMe") + 1] == PFEDME_PAPER, t.id
        tuned = next(m for m in t.methods if m.name == "pFedMe")
        assert tuned.overrides == ["algorithm.name=pfedme"], t.id  # its λ, η, η_p come from the config


def test_the_two_rows_resolve_to_the_configs_point_and_to_pfedmes_paper():
    configs = sorted({c.config for t in _pfedme_tables() for c in t.cells if c.config})
    assert len(configs) > 100
    points = {tuple(sorted(_tuned_point(p).items())) for p in configs}
    assert len(points) == 1, points  # one chosen point, written into every ready config
    point = dict(next(iter(points)))
    assert set(point) == set(PFEDME_TUNED_KEYS) and point != PAPER
    rows = {m.name: m for m in _pfedme_tables()[0].methods}
    for config in (configs[0], "configs/flux/table1/mnist_label_l5.yaml", configs[-1]):
        tuned = load_config(str(REPO / config), rows["pFedMe"].overrides).algorithm
        paper = load_config(str(REPO / config), rows[PFEDME_PAPER].overrides).algorithm
        assert {k: float(tuned[k]) for k in PFEDME_TUNED_KEYS} == point
        assert {k: float(paper[k]) for k in PFEDME_TUNED_KEYS} == PAPER
        assert tuned.inner_steps == paper.inner_steps == PFedMe.Config().inner_steps  # K stays pFedMe's 5


def test_the_tune_grid_parses_and_holds_both_points():
    space = load_space(SPACE, "pfedme")
    assert is_grid(space) and set(space) == {f"algorithm.{k}" for k in PFEDME_TUNED_KEYS}
    assert grid_size(space) == 12
    point = _tuned_point("configs/flux/table1/mnist_label_l5.yaml")
    for p in (PAPER, point):
        assert all(p[k] in space[f"algorithm.{k}"] for k in PFEDME_TUNED_KEYS), p
    for key, values in space.items():  # every value is a valid override of the config the grid ran on
        for v in values:
            load_config(str(REPO / "configs/flux/table1/mnist_label_l5.yaml"), ["algorithm.name=pfedme", f"{key}={v}"])
