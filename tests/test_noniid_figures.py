"""Clust-PSI-PFL Fig. 3 and Fig. 4 (§III-C): the paper's findings judged on hand-made curves, the feature
importances of the four models on data where the answer is known, and Fig. 4 end to end at the smoke scale."""

from __future__ import annotations

import numpy as np
import pytest

from flplat.cli import main
from flplat.studies.papers import clust_psi_pfl_noniid as nf


def _ours(wpsi_a, emd_a, wpsi_s, emd_s, hd=lambda w: 0.05 * w + 0.1):
    """Two seeds per cell (value ± 0.01); α cells 0.1, 1, 10 and S cells 0, 0.5, 1; HD and JSD = hd(WPSI)."""
    ours = {}
    for prefix, xs, w, e in (("alpha", (0.1, 1, 10), wpsi_a, emd_a), ("S", (0, 0.5, 1), wpsi_s, emd_s)):
        for x, wi, ei in zip(xs, w, e):
            cell = f"{prefix}={x:g}"
            for row, v in (("WPSI", wi), ("HD", hd(wi)), ("JSD", hd(wi) * 0.9), ("EMD", ei)):
                ours[(cell, row)] = [v - 0.01, v + 0.01]
    return ours


def _verdicts(ours):
    return [holds for _, holds, _ in nf.fig3_findings(ours)]


def test_turns_count_steps_beyond_two_standard_errors() -> None:
    # tol = 2 sqrt(0.1² + 0.1²) = 0.283: the rise 0 -> 1 and the fall 1 -> 0.5 both count
    assert nf.turns([0.0, 1.0, 0.5], [0.1, 0.1, 0.1]) == (1, 1)
    # tol = 2 sqrt(0.3² + 0.3²) = 0.849: the fall of 0.5 is noise
    assert nf.turns([0.0, 1.0, 0.5], [0.3, 0.3, 0.3]) == (1, 0)
    assert nf.turns([3.0, 2.0, 1.0], [0.0, 0.0, 0.0]) == (0, 2)


def test_fig3_findings_hold_and_fail_on_hand_made_curves() -> None:
    # WPSI falls with α and S; HD, JSD linear in WPSI; EMD up then down under Dirichlet: all three hold
    ours = _ours([9, 3, 0.5], [0.2, 0.5, 0.1], [12, 2, 0.1], [0.9, 0.5, 0.1])
    found = nf.fig3_findings(ours)
    assert [h for _, h, _ in found] == [True, True, True]
    assert "Spearman ρ = -1.000" in found[0][2] and "EMD rises 1× and falls 1×" in found[2][2]
    assert "Similarity S: EMD monotonic (0 rises, 2 falls)" in found[2][2]
    # WPSI rising with S: (i) fails
    assert _verdicts(_ours([9, 3, 0.5], [0.2, 0.5, 0.1], [0.1, 2, 12], [0.9, 0.5, 0.1]))[0] is False
    # HD and JSD saturating in WPSI (1 - exp(-w)): far from linear, (ii) fails
    assert _verdicts(_ours([9, 3, 0.5], [0.2, 0.5, 0.1], [12, 2, 0.1], [0.9, 0.5, 0.1],
                           hd=lambda w: 1 - np.exp(-w)))[1] is False
    # EMD monotonic under both: (iii) fails; a turn within the noise does not count
    assert _verdicts(_ours([9, 3, 0.5], [0.6, 0.5, 0.1], [12, 2, 0.1], [0.9, 0.5, 0.1]))[2] is False
    assert _verdicts(_ours([9, 3, 0.5], [0.6, 0.61, 0.1], [12, 2, 0.1], [0.9, 0.5, 0.1]))[2] is False
    # one seed per cell has no standard error: (iii) cannot be judged
    one = {k: v[:1] for k, v in ours.items()}
    assert _verdicts(one)[2] is None


def test_each_model_ranks_the_informative_feature_first() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(160, 4))
    y = 2.0 * x[:, 0] + 0.05 * rng.normal(size=160)  # only the first feature (WPSI's column) matters
    for model in nf.MODELS:
        imp = nf.feature_importances(model, x, y, seed=0)
        assert max(nf.QUANTIFIERS, key=imp.get) == "WPSI", (model, imp)
        assert imp[nf.R2] > 0.8, (model, imp)
        if nf.IMPORTANCE[model] == "impurity":
            assert sum(imp[q] for q in nf.QUANTIFIERS) == pytest.approx(1.0)
        else:  # permutation: shuffling a useless feature costs nothing
            assert all(abs(imp[q]) < 0.05 for q in ("HD", "JSD", "EMD")), (model, imp)


def test_fig4_findings_rank_wpsi_per_model_and_over_all() -> None:
    ours = {("dirichlet/GBT", "WPSI"): [0.5, 0.7], ("dirichlet/GBT", "HD"): [0.2, 0.2],
            ("dirichlet/GBT", "JSD"): [0.1, 0.1], ("dirichlet/GBT", "EMD"): [0.0, 0.0],
            ("dirichlet/GBT", nf.R2): [0.9, 0.95],
            ("similarity/SVM", "WPSI"): [0.1, 0.1], ("similarity/SVM", "HD"): [0.3, 0.5],
            ("similarity/SVM", "JSD"): [0.1, 0.1], ("similarity/SVM", "EMD"): [0.0, 0.1]}
    found = nf.fig4_findings(ours)
    assert [(f, h) for f, h, _ in found] == [
        ("WPSI ranked first: dirichlet/GBT (impurity)", True),
        ("WPSI ranked first: similarity/SVM (permutation)", False),
        ("Highlight 1: WPSI ranked first by every model under both protocols", False)]
    assert found[0][2] == "WPSI 0.6 > HD 0.2 > JSD 0.1 > EMD 0; held-out R² 0.925"
    assert found[1][2] == "HD 0.4 > WPSI 0.1 > JSD 0.1 > EMD 0.05"
    assert found[2][2] == "WPSI first in 1 of 2 (protocol, model)"


def test_fig4_smoke_end_to_end(tmp_path, capsys):
    assert main(["reproduce", "clust-psi-pfl", "fig4", "--scale", "smoke", "--cells", "similarity/tree",
                 "--store-dir", str(tmp_path / "store"), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "### Clust-PSI-PFL Fig. 4" in out and "GradientBoostingRegressor in place of LightGBM" in out
    for row in ("WPSI", "HD", "JSD", "EMD", nf.R2):
        assert f"| similarity/tree | {row} | not reported" in out
    assert "| WPSI ranked first: similarity/tree (impurity) | claim" in out
    assert "| Highlight 1: WPSI ranked first by every model under both protocols | claim" in out
    assert (tmp_path / "out" / "clust-psi-pfl_fig4_smoke.png").is_file()
