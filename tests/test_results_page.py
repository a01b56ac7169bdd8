"""docs/results.md's "Not run here" list (tools/generators/results_not_run.py) against the reproduce registry."""

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def tool():
    spec = importlib.util.spec_from_file_location("results_not_run", REPO / "tools/generators/results_not_run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_committed_list_names_every_table_without_a_block():
    m = tool()
    md = (REPO / "docs" / "results.md").read_text()
    assert m.listed(md) == {(p, t) for p, t, _ in m.without_block(md)}


def test_the_list_groups_tables_by_the_datasets_missing_on_a_hand_made_page():
    m = tool()
    page = ("x\n<!-- flplat reproduce cafa table2 reduced -->\nblock\n<!-- flplat reproduce cafa table2 reduced -->\n"
            f"{m.START}\nold\n{m.END}\n")
    waiting = {(p, t) for p, t, _ in m.without_block(page)}
    assert ("cafa", "table2") not in waiting and ("cafa", "table3") in waiting
    text = m.section(page, ("digits", "fmnist", "mnist", "synthetic"))
    assert "`cafa table2`" not in text and "`clust-psi-pfl table3`" in text.split("data there, not run yet: ")[1]
    assert "- needs CIFAR-100, FEMNIST (not on that machine): `dapfl table6_cifar100_femnist`" in text
    assert m.listed(page.replace(f"{m.START}\nold\n{m.END}", text)) == waiting
    p = REPO / "docs" / "results.md"
    assert m.main(["--results", str(p), "--check"]) == 0


def test_the_readme_counts_the_numbered_items_as_the_page_and_the_registry_do():
    m = tool()
    c = m.item_counts((REPO / "docs" / "results.md").read_text())
    assert c["items"] == c["with_block"] + c["needs_data"] + c["not_yet"] + (c["items"] - c["wired"])
    readme = " ".join((REPO / "README.md").read_text().split())
    assert (f"of the five papers' {c['items']} numbered tables and figures with results, {c['wired']} are wired "
            f"(`flplat reproduce --list` ends with the checklist), {c['with_block']} have results in "
            f"docs/results.md") in readme
    assert f"{c['needs_data']} need data this machine lacks and {c['not_yet']} could run here but have not" in readme
