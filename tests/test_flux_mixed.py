"""``flplat reproduce flux`` items of flplat/studies/papers/flux_mixed.py: App. F.3's mixed shifts (Tables 56-58)
and App. D.3's dynamic setting (Table 6): the paper's numbers as typed, the configs, and a smoke cell of each
(the conftest's small MNIST; nothing under /work/shared/data is read)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from flplat.cli import main
from flplat.studies.papers import flux_mixed as fm
from flplat.studies.reproduction.grid import REPO, paper_tables
from flplat.studies.reproduction.values import check_paper_values, load_paper_values, paper_value


def test_the_items_are_flux_items_with_well_formed_paper_values():
    ids = [t.id for t in paper_tables("flux")]
    assert {"table56", "table57", "table58", "table6_drift_cells", "table6_drift"} <= set(ids)
    assert not [e for e in check_paper_values("flux") if any(t in e for t in ("table5", "table6"))]


def test_the_typed_numbers_are_the_ones_the_text_quotes():
    """F.3: "Flux sustains a test-phase accuracy of 95.9% at Level 3 [...] ATP (85.4%), APFL (80.6%), and CFL
    (75.2%) [...] above 82.9% even at Level 6" (Table 56). D.3: Flux-soft improves "over the best-performing baseline
    (CFL) by nearly 11 percentage points" and Flux outperforms "all baselines by over 14" (Table 6)."""
    v = load_paper_values("flux")
    assert [paper_value(v, "table56", "l3_test", m)[0] for m in ("Flux", "ATP", "APFL", "CFL")] == \
        [95.91, 85.39, 80.58, 75.18]
    assert paper_value(v, "table56", "l6_test", "Flux")[0] == 82.94
    assert paper_value(v, "table58", "l6_test", "pFedMe")[2] == "not available (N/A in the paper)"
    col = {m.name: paper_value(v, "table6_drift", "dynamic", m.name)[0] for m in fm.DRIFT_METHODS}
    best = max(x for m, x in col.items() if m not in ("Flux", "Flux-soft") and x is not None)
    assert best == col["CFL"] == 75.5 and round(col["Flux-soft"] - best, 1) == 11.0 and col["Flux"] - best == 14.0


def test_the_configs_are_the_generators():
    for _, mix, _ in fm.MIXES.values():
        for lv in fm.MIX_LEVELS:
            part = OmegaConf.load(REPO / fm.mixed_config(mix, lv)).partition
            assert (part.name, part.type, part.level, part.num_unseen_clients) == ("mixed_shift", mix, lv, 10)
    for s in ("feature", "label", "concept_yx", "concept_xy"):
        for lv in fm.DRIFT_LEVELS:
            c = OmegaConf.load(REPO / fm.drift_config(s, lv))
            assert (c.partition.name, c.partition.type, c.partition.level, list(c.partition.change_rounds)) == \
                ("drift", s, lv, [5])
            assert c.algorithm_defaults.flux.recluster_every == 1 and c.federation.rounds == 10


def _records(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _row(out: str, start: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(start))


@pytest.mark.parametrize("table", ["table56", "table57", "table58"])
def test_a_mixed_shift_tables_smoke_cell(table, tmp_path, capsys, small_mnist):
    """Level 3, FedAvg: one run gives both columns (known association and test phase of the same run)."""
    out_dir = tmp_path / "out"
    assert main(["reproduce", "flux", table, "--scale", "smoke", "--cells", "l3_known,l3_test", "--methods", "FedAvg",
                 "--store-dir", str(tmp_path / "store"), "--out", str(out_dir)]) == 0
    got = capsys.readouterr()
    (rec,) = _records(out_dir / f"flux_{table}_smoke_runs.jsonl")[:1]
    assert len({r["run_id"] for r in _records(out_dir / f"flux_{table}_smoke_runs.jsonl")}) == 1
    for cell, metric in (("l3_known", fm.KA), ("l3_test", fm.TP)):
        assert f"| {cell} | FedAvg | " in got.out
        assert f"{100 * rec['metrics'][metric]:.4g} ± 0 (1)" in _row(got.out, f"| {cell} | FedAvg |")


def test_table6_drifts_smoke_cell_is_the_mean_of_its_shifts(tmp_path, capsys, small_mnist):
    """Table 6's dynamic cell at smoke: level 5 of each shift (4 runs), its value the mean of their drifted test
    clients' accuracy; dynamic_known the mean of the same runs' known association; the findings are rendered."""
    out_dir = tmp_path / "out"
    assert main(["reproduce", "flux", "table6_drift", "--scale", "smoke", "--methods", "FedAvg", "--store-dir",
                 str(tmp_path / "store"), "--out", str(out_dir)]) == 0
    got = capsys.readouterr()
    recs = _records(out_dir / "flux_table6_drift_smoke_runs.jsonl")
    runs = {r["run_id"]: r for r in recs}
    assert len(runs) == 4 and {r["cell"].rsplit("_", 1)[0] for r in recs} == \
        {"feature_l5", "label_l5", "concept_yx_l5", "concept_xy_l5"}
    tp = statistics.fmean(r["metrics"][fm.TP] for r in runs.values())
    ka = statistics.fmean(r["metrics"][fm.KA] for r in runs.values())
    assert _row(got.out, "| dynamic | FedAvg |").startswith(f"| dynamic | FedAvg | 71.9 ± 6 | {100 * tp:.4g} ± 0 (1)")
    assert f"{100 * ka:.4g} ± 0 (1)" in _row(got.out, "| dynamic_known | FedAvg |")
    assert "| Flux is above every baseline (Table 6: by 14.0 points, over CFL) | cannot be judged | no value |" \
        in got.out
    assert "the change at round 2" in got.out  # the smoke note says where the change is
