"""Flux's App. F.1 at all eight levels and its means: every per-shift table has levels 1-8 with the paper's numbers
(a count per table, and the summary tables' numbers are the means of the per-shift ones, as the values file's header
says); derived tables (Tables 10/11 ... 40/41, Figs. 4 / 12, Table 1) average other tables' cells per seed, say which
parts are missing instead of a partial mean, and run a smoke cell each on tiny generated data."""

from __future__ import annotations

import functools
import json
import pickle
import statistics
from pathlib import Path

import numpy as np
import pytest

from flplat.cli import main
from flplat.studies import reproduce as rp

SHIFTS = ("feature", "label", "concept_yx", "concept_xy")
EIGHT = [f"{s}_l{lv}" for s in SHIFTS for lv in range(1, 9)]
SUFFIXES = ("", "_fmnist", "_cifar10", "_cifar100")
PAPER_ROWS = ["FedAvg", "IFCA", "FedRC", "FedEM", "FeSEM", "FedDrift", "CFL", "pFedMe", "APFL", "ATP", "Flux",
              "Flux-prior"]


def _tables():
    return {t.id: t for t in rp.paper_tables("flux")}


@functools.cache
def _all_values() -> dict:
    return rp.load_paper_values("flux")["tables"]


def _values(table: str) -> dict:
    return _all_values()[table]["values"]


def test_every_per_shift_table_has_the_eight_levels_of_each_shift():
    tables = _tables()
    for suffix in SUFFIXES:
        for kind in ("known_association", "test_phase", "ari", "tau"):
            t = tables[kind + suffix]
            assert [c.id for c in t.cells] == EIGHT, t.id
            assert all((rp.REPO / c.config).is_file() for c in t.cells), t.id
            no_tp = {f"concept_yx_l{lv}" for lv in range(1, 9)}
            assert set(t.undefined) == (no_tp if kind == "test_phase" else set()), t.id


def test_the_papers_numbers_for_every_level_shift_and_row():
    """12 rows × 32 cells per dataset, less the paper's N/A: ATP has no Known A. outside P(Y|X) (24), pFedMe no Test
    Phase (24 defined cells), P(Y|X) no Test Phase at all; the summaries (16 cells) and Table 1 (12 columns) the
    same way (Table 1's CheXpert column has no ATP)."""
    def numbers(vals, rows=PAPER_ROWS):
        return {(c, m) for c, row in vals.items() for m in rows if isinstance(row[m], list)}

    for suffix in SUFFIXES:
        ka, tp = _values("known_association" + suffix), _values("test_phase" + suffix)
        assert list(ka) == EIGHT and list(tp) == EIGHT
        assert numbers(ka) == {(c, m) for c in EIGHT for m in PAPER_ROWS if m != "ATP" or "concept_yx" in c}
        assert numbers(tp) == {(c, m) for c in EIGHT for m in PAPER_ROWS if m != "pFedMe" and "concept_yx" not in c}
        assert len(numbers(ka)) == 360 and len(numbers(tp)) == 264
        assert len(numbers(_values("mean_by_level" + suffix))) == 176  # ATP Known A., pFedMe Test Phase: N/A
    assert len(numbers(_values("table1"))) == 131


def _mean(values: list) -> float:
    return statistics.fmean(v[0] for v in values)


def test_the_summary_numbers_are_the_means_of_the_per_shift_numbers():
    """The typed-in numbers check against each other as the values file's header says: the summary per level is
    the mean over the shifts (Test Phase over three: P(Y|X) has none), to 0.01 except the paper's own exceptions
    (ATP's Test Phase on MNIST, FMNIST, CIFAR-10; 28 others within 0.53); Table 1 is the mean over the levels."""
    ok, off, atp = 0, [], set()
    for suffix in SUFFIXES:
        summary = _values("mean_by_level" + suffix)
        for pre, table, shifts in (("ka", "known_association", SHIFTS),
                                   ("tp", "test_phase", ("feature", "label", "concept_xy"))):
            per_shift = _values(table + suffix)
            for lv in range(1, 9):
                for m in PAPER_ROWS:
                    s = summary[f"{pre}_l{lv}"][m]
                    parts = [per_shift[f"{sh}_l{lv}"][m] for sh in shifts]
                    if not isinstance(s, list) or not all(isinstance(p, list) for p in parts):
                        continue
                    gap = abs(_mean(parts) - s[0])
                    if gap <= 0.011:
                        ok += 1
                    elif m == "ATP" and pre == "tp":
                        atp.add(suffix)
                    else:
                        off.append(gap)
    assert ok == 652 and len(off) == 28 and max(off) < 0.54 and atp == {"", "_fmnist", "_cifar10"}
    t1, exceptions = _values("table1"), set()
    for d, suffix in (("mnist", ""), ("fmnist", "_fmnist"), ("cifar10", "_cifar10"), ("cifar100", "_cifar100")):
        for pre in ("ka", "tp"):
            for m in PAPER_ROWS:
                levels = [_values("mean_by_level" + suffix)[f"{pre}_l{lv}"][m] for lv in range(1, 9)]
                if isinstance(t1[f"{d}_{pre}"][m], list) and abs(_mean(levels) - t1[f"{d}_{pre}"][m][0]) > 0.05:
                    exceptions.add((d, pre, m))
    assert exceptions == {("cifar10", "tp", "IFCA"), ("cifar100", "ka", "FedEM"), ("cifar100", "ka", "FedDrift"),
                          ("cifar100", "tp", "FedDrift"), ("cifar100", "tp", "ATP")}
    chexpert = _values("chexpert_known_association")
    assert t1["chexpert_ka"]["FedAvg"][0] == pytest.approx(_mean([chexpert[lv]["FedAvg"] for lv in chexpert]), abs=0.01)


def test_derive_means_each_seed_over_its_parts_and_names_the_missing_ones():
    parts = {"a": [("T", "x"), ("T", "y"), ("U", "z")], "b": [("T", "x")], "c": []}
    values = {("T", "x", "M"): {0: 0.5, 1: 0.7}, ("T", "y", "M"): {0: 0.6, 1: 0.9}, ("U", "z", "M"): {0: 0.7}}
    why = {("U", "z", "M", 1): "failed: diverged"}
    ours, skips = rp.derive(parts, {"M": [0, 1], "N": [0]}, values, why)
    assert ours[("a", "M")] == pytest.approx([0.6])  # (0.5 + 0.6 + 0.7) / 3; seed 1 lacks U/z: no partial mean
    assert ours[("b", "M")] == pytest.approx([0.5, 0.7])
    assert skips[("a", "M")] == [(1, "incomplete: 1 of 3 parts without a value: U z (failed: diverged)")]
    assert ("a", "N") not in ours
    assert skips[("a", "N")] == [(0, "incomplete: 3 of 3 parts without a value: T x, y (not run); U z (not run)")]
    assert skips[("c", "M")][0] == (0, "incomplete: the cell has no parts at this scale")
    assert ("b", "M") not in skips


def test_a_derived_table_renders_its_means_beside_the_papers_and_says_what_is_missing():
    part = rp.Table("per_shift", "T", [rp.Cell("s1_l1", "configs/quickstart.yaml"),
                                       rp.Cell("s2_l1", "configs/quickstart.yaml"),
                                       rp.Cell("s3_l1", "configs/quickstart.yaml")],
                    [rp.Method("FedAvg"), rp.Method("New")], undefined={"s3_l1": "no labels"})
    t = rp.Table("mean", "Means", [rp.Cell("l1")], part.methods, kind="derived", scale_factor=100.0,
                 parts={"l1": [(part, "s1_l1"), (part, "s2_l1")]})
    paper = {"tables": {"mean": {"values": {"l1": {"FedAvg": [50.0, 1.0], "New": [60.0, 1.0]}}}}}
    ours, skips = rp.derive({"l1": [("per_shift", "s1_l1"), ("per_shift", "s2_l1")]}, {"FedAvg": [0, 1], "New": [0]},
                            {("per_shift", "s1_l1", "FedAvg"): {0: 0.4, 1: 0.5},
                             ("per_shift", "s2_l1", "FedAvg"): {0: 0.6, 1: 0.7},
                             ("per_shift", "s1_l1", "New"): {0: 0.6}}, {})
    md = rp.render_table(t, paper, ours, "hdr", skipped=skips)
    assert "| l1 | FedAvg | 50 ± 1 | 55 ± 5 (2) | +5 | reference; within spread |" in md  # (40+60)/2, (50+70)/2
    assert "| l1 | New | 60 ± 1 | — | — | incomplete, see note 1 |" in md
    assert "1. incomplete: seed 0: 1 of 2 parts without a value: per_shift s2_l1 (not run)" in md
    note = rp.value_note(t)
    assert note.startswith("Each value is, per seed, the mean of the cell's parts (cells of other tables, the same "
                           "runs: l1: per_shift (every cell with a value, 2 of 3))")
    assert "per_shift: global_accuracy at the end of the run" in note and "in percent (× 100)" in note


def test_derived_parts_are_defined_cells_of_the_papers_train_tables():
    for paper in rp.PAPERS:
        tables = rp.paper_tables(paper)
        for t in (x for x in tables if x.kind == "derived"):
            for scale in rp.SCALES:
                parts = t.parts_at(scale)
                assert set(parts) == {c.id for c in t.cells}, (t.id, scale)
                for comps in parts.values():
                    assert comps, (t.id, scale)
                    for tbl, cid in comps:
                        assert tbl in tables and tbl.kind == "train" and cid in {c.id for c in tbl.cells}, t.id
                        assert cid not in tbl.undefined, (t.id, tbl.id, cid)
    by_id = _tables()
    assert [c for _, c in by_id["mean_by_level"].parts["tp_l3"]] == ["feature_l3", "label_l3", "concept_xy_l3"]
    assert len(by_id["table1"].parts["mnist_ka"]) == 32 and len(by_id["table1"].parts["mnist_tp"]) == 24
    assert [c for _, c in by_id["table1"].parts_at("smoke")["fmnist_ka"]] == [f"{s}_l5" for s in SHIFTS]


def test_list_names_the_means_with_their_parts_and_the_papers_source(capsys):
    assert main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    assert "  mean_by_level [derived] Flux Tables 10/11, Fig. 4" in out
    assert "    means of: known_association (32 cells), test_phase (24 cells)\n" in out
    for t in ("mean_by_level_fmnist", "mean_by_level_cifar10", "mean_by_level_cifar100", "table1"):
        assert f"  {t} [derived] " in out
    assert "    paper: App. F.1 Tables 40 (levels 1-4) and 41 (levels 5-8) (CIFAR-100;" in out


def _records(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _row(out: str, start: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(start))


def test_mean_by_level_and_table1_smoke_cells_are_the_means_of_the_same_runs(tmp_path, capsys, small_mnist):
    """Fig. 4 / Tables 10-11 at smoke scale, level 5, FedAvg: 4 runs (the known-association and test-phase tables'
    own), the known-association cell the mean of their 4 values, the test-phase cell of P(X), P(Y), P(X|Y)'s; the
    figure is written. Table 1's MNIST cells at smoke (level 5 of each shift) read the same runs, training none;
    its CheXpert cell for ATP (not a row of the CheXpert tables) says so."""
    store, out_dir = str(tmp_path / "store"), tmp_path / "out"
    args = ["--scale", "smoke", "--methods", "FedAvg", "--store-dir", store, "--out", str(out_dir)]
    assert main(["reproduce", "flux", "mean_by_level", "--cells", "ka_l5,tp_l5", *args]) == 0
    got = capsys.readouterr()
    assert "[4/4] known_association concept_xy_l5 FedAvg s0" in got.err and "[5/" not in got.err
    recs = _records(out_dir / "flux_mean_by_level_smoke_runs.jsonl")
    ka = statistics.fmean(r["metrics"]["known_association_accuracy"] for r in recs if r["table"] == "known_association")
    tp = statistics.fmean(r["metrics"]["test_phase_accuracy"] for r in recs
                          if r["table"] == "test_phase" and r["cell"] != "concept_yx_l5")
    assert len({r["run_id"] for r in recs}) == 4 and sum(r["table"] == "test_phase" for r in recs) == 3
    assert _row(got.out, "| ka_l5 | FedAvg |").startswith(f"| ka_l5 | FedAvg | 80.94 ± 1.53 | {100 * ka:.4g} ± 0 (1) |")
    assert _row(got.out, "| tp_l5 | FedAvg |").startswith(f"| tp_l5 | FedAvg | 86.62 ± 1.75 | {100 * tp:.4g} ± 0 (1) |")
    assert (out_dir / "flux_mean_by_level_smoke.png").stat().st_size > 0
    assert main(["reproduce", "flux", "table1", "--cells", "mnist_ka,mnist_tp", *args]) == 0
    got = capsys.readouterr()
    assert "table1: 4 of 4 runs already finished, skipped" in got.err
    assert _row(got.out, "| mnist_ka | FedAvg |").startswith(f"| mnist_ka | FedAvg | 80.9 ± 2 | {100 * ka:.4g} ± 0")
    assert _row(got.out, "| mnist_tp | FedAvg |").startswith(f"| mnist_tp | FedAvg | 85.6 ± 2.1 | {100 * tp:.4g} ± 0")
    assert "level 5 of each shift only" in got.out  # the smoke note says what the smoke cells average
    assert main(["reproduce", "flux", "table1", "--cells", "chexpert_ka", "--methods", "ATP", "--scale", "smoke",
                 "--store-dir", store, "--render-only"]) == 0
    out = capsys.readouterr().out
    assert "| chexpert_ka | ATP | not available (N/A in the paper) | — | — | incomplete, see note 1 |" in out
    assert ("1. incomplete: seed 0: 3 of 3 parts without a value: chexpert_known_association low, medium, high (not "
            "a row of chexpert_known_association)") in out


def _cifar(root: Path, name: str) -> None:
    """The python-pickle batches of the official archives (800 training, 200 test images of noise)."""
    rng = np.random.default_rng(0)

    def dump(path: Path, n: int, label_key: str, classes: int) -> None:
        with open(path, "wb") as fh:
            pickle.dump({"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                         label_key: [int(v) for v in rng.integers(0, classes, n)]}, fh, protocol=2)

    if name == "cifar10":
        d = root / "cifar-10-batches-py"
        d.mkdir(parents=True)
        for i in range(1, 6):
            dump(d / f"data_batch_{i}", 160, "labels", 10)
        dump(d / "test_batch", 200, "labels", 10)
        (d / "batches.meta").write_bytes(pickle.dumps({"label_names": [f"c{i}" for i in range(10)]}, protocol=2))
    else:
        d = root / "cifar-100-python"
        d.mkdir(parents=True)
        dump(d / "train", 800, "fine_labels", 100)
        dump(d / "test", 200, "fine_labels", 100)
        (d / "meta").write_bytes(pickle.dumps({"fine_label_names": [f"f{i}" for i in range(100)]}, protocol=2))


@pytest.mark.parametrize("dataset", ["fmnist", "cifar10", "cifar100"])
def test_each_datasets_mean_by_level_runs_a_smoke_cell(dataset, tmp_path, capsys, small_mnist):
    """Fig. 12's other columns / Tables 20/21, 30/31, 40/41: the known-association cell at level 5 from its 4 runs
    (FMNIST from the conftest's IDX files, CIFAR from pickle batches written here)."""
    over = []
    if dataset != "fmnist":
        _cifar(tmp_path / "data", dataset)
        over = ["--set", f"data.root={tmp_path / 'data'}"]
    assert main(["reproduce", "flux", f"mean_by_level_{dataset}", "--scale", "smoke", "--cells", "ka_l5", "--methods",
                 "FedAvg", "--store-dir", str(tmp_path / "store"), *over]) == 0
    got = capsys.readouterr()
    assert f"[4/4] known_association_{dataset} concept_xy_l5 FedAvg s0" in got.err
    row = _row(got.out, "| ka_l5 | FedAvg |")
    assert " ± 0 (1) |" in row and "not run" not in row and "incomplete" not in row


def test_print_jobs_of_a_derived_table_prints_its_parts_runs_under_their_tables(tmp_path):
    """``--print-jobs`` for a derived table: one command per unfinished run of its parts, each running the component
    table's cell (so the run lands where that table and the derived one find it); a run two parts share once."""
    text = rp.job_commands("flux", ["mean_by_level"], "smoke", cells=["ka_l5", "tp_l5"], methods=["FedAvg"],
                           store_dir=str(tmp_path))
    lines = text.splitlines()
    assert len(lines) == 4  # tp_l5's three parts are ka_l5's runs
    for s in SHIFTS:
        assert sum(f"reproduce flux known_association --scale smoke --cells {s}_l5 --methods FedAvg --seeds 0" in x
                   for x in lines) == 1
