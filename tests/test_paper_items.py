"""The papers' numbered items (flplat/studies/papers/items.py) against the reproduce registry."""

from collections import Counter

from flplat.studies.papers.items import ITEMS, Item, coverage_lines, item_lines, wired
from flplat.studies.reproduce import PAPERS, listing
from flplat.studies.reproduction.grid import paper_tables


def known_tables() -> dict[str, dict[str, set[str]]]:
    return {p: {t.id: {c.id for c in t.cells} for t in paper_tables(p)} for p in PAPERS}


def test_104_items_counted_per_paper_each_once():
    assert len(ITEMS) == 104
    assert Counter(i.paper for i in ITEMS) == {"clust-psi-pfl": 8, "cafa": 8, "dapfl": 9, "flux": 69, "pqfed": 10}
    assert len({(i.paper, i.label) for i in ITEMS}) == 104
    flux = {i.label for i in ITEMS if i.paper == "flux"}
    assert {f"Table {n}" for n in range(10, 67)} <= flux  # the appendix's Tables 10-66, none skipped


def test_every_named_table_and_cell_exists_in_the_registry():
    known = known_tables()
    broken = [(i.paper, i.label, i.tables) for i in ITEMS if i.tables and not wired(i, known[i.paper])]
    assert broken == []


def test_flux_shift_tables_name_their_levels():
    by = {i.label: i for i in ITEMS if i.paper == "flux"}
    assert by["Table 12"].tables == ("known_association", "test_phase")
    assert by["Table 12"].cells == ("feature_l1", "feature_l2", "feature_l3", "feature_l4")
    assert by["Table 29"].tables == ("known_association_fmnist", "test_phase_fmnist")
    assert by["Table 29"].cells == ("concept_xy_l5", "concept_xy_l6", "concept_xy_l7", "concept_xy_l8")
    assert by["Table 41"].tables == ("mean_by_level_cifar100",)
    assert by["Table 41"].cells[:2] == ("ka_l5", "ka_l6") and by["Table 41"].cells[-1] == "tp_l8"


def test_coverage_counts_on_a_hand_made_registry():
    items_known = {"cafa": {"table2": {"a", "b"}}, "flux": {"t": {"c1"}}}
    assert wired(Item("cafa", "x", "", ("table2",), ("a",)), items_known["cafa"])
    assert not wired(Item("cafa", "x", "", ("table2",), ("z",)), items_known["cafa"])  # a missing cell
    assert not wired(Item("cafa", "x", "", ("table2", "gone")), items_known["cafa"])  # a missing table
    assert not wired(Item("cafa", "x", ""), items_known["cafa"])  # names nothing
    lines = coverage_lines({})
    assert lines[0] == "numbered tables and figures with results: 104; wired in flplat reproduce: 0"
    assert lines[1].startswith("  clust-psi-pfl: 0 of 8; not wired: Fig. 3, Fig. 4")


def test_reproduce_list_prints_the_checklist():
    text = listing()
    n = sum(wired(i, known_tables()[i.paper]) for i in ITEMS)
    assert f"numbered tables and figures with results: 104; wired in flplat reproduce: {n}" in text
    assert "  Table VIII: Algorithm 2 per stage and its stop stage, MNIST -> table8, table8_stop" in item_lines("pqfed")
