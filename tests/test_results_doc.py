"""flplat.studies.results_doc: the blocks that `flplat reproduce --results` keeps in a results document."""

from __future__ import annotations

from flplat.studies.results_doc import INSERT_MARK, replace_block, run_seconds, timing_line, update_results


def test_block_is_appended_then_replaced_in_place():
    doc = "# Results\n\nintro\n"
    one = replace_block(doc, "pqfed", "table2", "reduced", "| a |\n")
    assert one.startswith("# Results\n\nintro\n\n<!-- flplat reproduce pqfed table2 reduced -->\n| a |\n")
    assert one.endswith("<!-- end flplat reproduce pqfed table2 reduced -->\n")
    two = replace_block(one + "\ntail\n", "pqfed", "table2", "reduced", "| b |")
    assert "| a |" not in two and "| b |" in two
    assert two.count("<!-- flplat reproduce pqfed table2 reduced -->") == 1
    assert two.index("| b |") < two.index("tail")  # replaced where it was, the rest untouched


def test_tables_and_scales_are_separate_blocks_and_new_ones_go_above_the_mark():
    doc = f"# R\n\n{INSERT_MARK}\n\n## Older runs\n"
    doc = replace_block(doc, "cafa", "table2", "reduced", "T2")
    doc = replace_block(doc, "cafa", "table3", "reduced", "T3")
    doc = replace_block(doc, "cafa", "table2", "smoke", "T2 smoke")
    doc = replace_block(doc, "cafa", "table2", "reduced", "T2 again")
    assert doc.index("T2 again") < doc.index("T3") < doc.index("T2 smoke") < doc.index(INSERT_MARK)
    assert doc.index(INSERT_MARK) < doc.index("## Older runs")
    assert "T2\n" not in doc


def test_replacement_text_is_literal():
    doc = replace_block("", "p", "t", "s", r"a \1 b \g<0>")
    assert r"a \1 b \g<0>" in replace_block(doc, "p", "t", "s", r"a \1 b \g<0>")


class _Info:
    def __init__(self, start, end):
        self.start_time, self.end_time = start, end


class _Client:
    def __init__(self, times, untimed=()):
        self.times, self.untimed = times, set(untimed)

    def get_run(self, rid):
        tags = {"flplat.import.untimed": "true"} if rid in self.untimed else {}
        return type("R", (), {"info": _Info(*self.times[rid]), "data": type("D", (), {"tags": tags})()})()


def test_run_seconds_sums_finished_runs_once_each():
    client = _Client({"a": (1_000, 3_500), "b": (10_000, 11_000), "c": (5_000, None)})
    assert run_seconds(client, ["a", "b", "a", "c"]) == (2, 3.5, 0)


def test_runs_imported_without_their_times_are_counted_but_not_summed():
    # an old record's run is made at the import, start = end: "0 s" would be a false run time
    client = _Client({"a": (1_000, 3_500), "old": (9_000, 9_000)}, untimed={"old"})
    assert run_seconds(client, ["a", "old"]) == (2, 2.5, 1)
    assert ("2 runs, 2 s of run time summed over the runs (MLflow start → end; 1 of them imported from records "
            "without their run times, not in the sum); rendered") in timing_line("c", 2, 2.5, None, 1)
    line = timing_line("c", 28, 0.0, None, 28)
    assert "28 runs, imported from records without their run times (run time not known); rendered" in line
    assert "0 s" not in line


def test_update_results_writes_file_and_footer(tmp_path):
    path = tmp_path / "results.md"
    line = timing_line("flplat reproduce cafa table2", 3, 3_600.0, 12.0)
    assert "3 runs, 60.0 min of run time" in line and "12 s wall" in line
    assert timing_line("c", 3, 60.0, None).endswith("60 s of run time summed over the runs (MLflow start → end); "
                                                     "rendered from the store with --render-only.*")
    update_results(path, "cafa", "table2", "reduced", "#### Table\n", line)
    update_results(path, "cafa", "table2", "reduced", "#### Table v2\n", line)
    text = path.read_text()
    assert text.count("#### Table") == 1 and "v2" in text and line in text
    assert not (tmp_path / "results.md.tmp").exists()


def test_the_figure_is_linked_relative_to_the_document(tmp_path):
    (tmp_path / "docs" / "results" / "pqfed").mkdir(parents=True)
    png = tmp_path / "docs" / "results" / "pqfed" / "pqfed_fig3.png"
    png.write_bytes(b"png")
    update_results(tmp_path / "docs" / "results.md", "pqfed", "fig3", "reduced", "#### T", "footer", figure=png)
    text = (tmp_path / "docs" / "results.md").read_text()
    assert "#### T\n\n![pqfed fig3](results/pqfed/pqfed_fig3.png)\n\nfooter" in text
