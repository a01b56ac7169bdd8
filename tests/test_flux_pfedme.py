"""pFedMe's two rows in Flux's tables: "pFedMe", with the λ, η, η_p that `flplat tune` chose under Flux's protocol
(read from the chosen point's config, configs/flux/pfedme_tuned.yaml, not from code), and "pFedMe (its paper's
settings)", pFedMe's own λ 15, η 0.005, η_p 0.1; and the grid the choice was made over."""

from __future__ import annotations

import yaml
from conftest import REPO

from flplat.algorithms.pfedme import PFedMe
from flplat.config_io import config_key
from flplat.experiment import load_config
from flplat.studies.papers.flux import PFEDME_PAPER, PFEDME_TUNED, PFEDME_TUNED_KEYS, pfedme_tuned_overrides
from flplat.studies.reproduction.grid import paper_tables
from flplat.studies.tuning import grid_size, is_grid, load_space

SPACE = REPO / "configs/search_spaces/flux_pfedme.yaml"
GRID_CONFIG = "configs/flux/table1/mnist_label_l5.yaml"  # the cell the grid ran on (MNIST P(Y) level 5)
PAPER = {"lam": 15.0, "lr": 0.005, "personal_lr": 0.1}  # pFedMe (Dinh et al. 2020), MNIST


def _pfedme_tables():
    return [t for t in paper_tables("flux") if any(m.name == "pFedMe" for m in t.methods)]


def _chosen() -> dict:
    return {k: float(v) for k, v in yaml.safe_load((REPO / PFEDME_TUNED).read_text())["algorithm"].items()
            if k in PFEDME_TUNED_KEYS}


def test_every_flux_table_with_pfedme_has_both_rows_with_distinct_settings():
    tables = _pfedme_tables()
    assert len(tables) >= 20  # App. F.1's tables of four datasets, their means, Table 1, the real sets, F.3, D.3
    chosen = _chosen()
    assert set(chosen) == set(PFEDME_TUNED_KEYS) and chosen != PAPER
    for t in tables:
        names = [m.name for m in t.methods]
        assert names[names.index("pFedMe") + 1] == PFEDME_PAPER, t.id
        rows = {m.name: m for m in t.methods}
        assert rows["pFedMe"].overrides == ["algorithm.name=pfedme", *(f"algorithm.{k}={chosen[k]}" for k in
                                                                       PFEDME_TUNED_KEYS)], t.id
    rows = {m.name: m for m in tables[0].methods}
    tuned = load_config(str(REPO / GRID_CONFIG), rows["pFedMe"].overrides)
    paper = load_config(str(REPO / GRID_CONFIG), rows[PFEDME_PAPER].overrides)
    assert {k: float(tuned.algorithm[k]) for k in PFEDME_TUNED_KEYS} == chosen
    assert {k: float(paper.algorithm[k]) for k in PFEDME_TUNED_KEYS} == PAPER
    assert tuned.algorithm.inner_steps == paper.algorithm.inner_steps == PFedMe.Config().inner_steps  # K = 5
    # the paper row is the config the earlier "pFedMe" runs had (the algorithm's defaults): their runs stand for it
    assert config_key(paper) == config_key(load_config(str(REPO / GRID_CONFIG), ["algorithm.name=pfedme"]))


def test_the_tuned_row_reads_the_chosen_points_config(tmp_path):
    path = tmp_path / "point.yaml"
    path.write_text("algorithm:\n  name: pfedme\n  lam: 2.5\n  lr: 0.125\n  personal_lr: 0.0625\n")
    assert pfedme_tuned_overrides(path) == ["algorithm.name=pfedme", "algorithm.lam=2.5", "algorithm.lr=0.125",
                                            "algorithm.personal_lr=0.0625"]


def test_the_tune_grid_parses_and_holds_both_points():
    space = load_space(SPACE, "pfedme")
    assert is_grid(space) and set(space) == {f"algorithm.{k}" for k in PFEDME_TUNED_KEYS}
    assert grid_size(space) == 12
    for p in (PAPER, _chosen()):
        assert all(p[k] in space[f"algorithm.{k}"] for k in PFEDME_TUNED_KEYS), p
    for key, values in space.items():  # every value is a valid override of the config the grid ran on
        for v in values:
            load_config(str(REPO / GRID_CONFIG), ["algorithm.name=pfedme", f"{key}={v}"])
    chosen = load_config(str(REPO / PFEDME_TUNED))  # the chosen point's config is the grid's cell at that point
    assert (chosen.data.name, chosen.partition.type, chosen.partition.level) == ("mnist", "label", 5)
    assert chosen.algorithm.name == "pfedme" and chosen.federation.rounds == 10
