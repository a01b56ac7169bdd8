"""The papers' figures wired into `flplat reproduce`: CAFA Figs. 2, 4, 5, 6, DA-PFL Figs. 1, 3, PQFed Figs. 5, 6.

The pure parts with hand-computed values on tiny inputs (TWEMA, the EMD bands, the summaries and the findings), then
each figure's smoke cell end to end through the CLI (the PNG is written, the rows are there, the paper's numbers
print), and the figures that read training runs share them with the tables they come from."""

from __future__ import annotations

import math

import numpy as np
import pytest

from flplat.cli import main
from flplat.maths import pqfed as pm
from flplat.metrics.curves import twema
from flplat.studies import reproduce as rp
from flplat.studies.papers import cafa_figures as cf
from flplat.studies.papers import dapfl_figures as df
from flplat.studies.papers import pqfed_figures as pf


# ------------------------------------------------------------------------------------------------------ TWEMA
def test_twema_by_hand():
    # x = 0, 1, 2: each step is 500 thousandths of the range; p = 0.5^(1/250) gives w = 0.5^(1/500), decay 0.5
    assert twema([0, 1, 2], [0, 3, 3], 0.5 ** (1 / 250)) == pytest.approx([0.0, 2.0, 18 / 7])
    # x = 0, 1, 4: steps of 250 and 750 thousandths ("time weighted"); w^250 = 0.5, so decays 0.5 and 0.125
    # S = 0, 2, 2·0.125 + 2 = 2.25; D = 1, 1.5, 1.5·0.125 + 1 = 1.1875
    assert twema([0, 1, 4], [0, 2, 2], 0.5 ** (1 / 125)) == pytest.approx([0.0, 4 / 3, 36 / 19])
    assert twema([1, 2, 3], [0.2, 0.9, 0.4], 0.0) == pytest.approx([0.2, 0.9, 0.4])  # 0: raw
    a = 0.999 ** 1000  # p = 1: the weight is capped at 0.999
    assert twema([0, 1], [0.0, 1.0], 1.0) == pytest.approx([0.0, 1 / (a + 1)])
    assert twema([5], [0.7], 0.9) == [0.7] and twema([], [], 0.9) == []
    with pytest.raises(ValueError, match="smoothing must be in"):
        twema([0, 1], [0, 1], 1.5)


def test_curve_smoothing_is_a_checked_tracking_key_that_keeps_the_runs(tmp_path, capsys):
    """``tracking.curve_smoothing`` is read from the planned runs' configs (so ``--set`` changes it) and leaves the
    runs' identity alone; out of [0, 1] it is a one-line error with exit status 2."""
    t = next(t for t in rp.paper_tables("cafa") if t.id == "fig6")
    base = rp.plan("cafa", t, "smoke", [0], None, ["fmnist_best"], [], "e", str(tmp_path))
    smooth = rp.plan("cafa", t, "smoke", [0], None, ["fmnist_best"], ["tracking.curve_smoothing=0.25"], "e",
                     str(tmp_path))
    assert [j.key for j in base] == [j.key for j in smooth]
    assert cf.curve_smoothing(rp.FigureContext({}, "smoke", "x.png", jobs=smooth)) == 0.25
    assert cf.curve_smoothing(rp.FigureContext({}, "smoke", "x.png", jobs=base)) == 0.9
    assert cf.curve_smoothing(rp.FigureContext({}, "smoke", "x.png")) == 0.9
    assert main(["reproduce", "cafa", "fig6", "--scale", "smoke", "--set", "tracking.curve_smoothing=1.5",
                 "--store-dir", str(tmp_path)]) == 2
    assert "tracking.curve_smoothing" in capsys.readouterr().err
    assert not (tmp_path / "mlflow.db").exists()


# ---------------------------------------------------------------------------------------------- PQFed Fig. 5
def test_emd_bands_by_hand_and_as_the_selection_rules():
    emd = np.array([0.0, 0.1, 0.3, 0.31, 0.6, 0.61, 1.0])  # T = 0; max over the others 1.0
    assert pm.emd_bands(emd, 0).tolist() == [-1, 0, 0, 1, 1, 2, 2]  # thresholds 0.3 and 0.6, inclusive
    emd = np.array([3.0, 0.0, 1.0, 2.0, 5.0, 10.0])  # T = 1; thresholds 3 and 6
    bands = pm.emd_bands(emd, 1)
    assert bands.tolist() == [0, -1, 0, 0, 1, 2]
    assert np.flatnonzero((bands >= 0) & (bands <= 0)).tolist() == pm.select_collaborators(emd, 1, "strict").tolist()
    assert np.flatnonzero((bands >= 0) & (bands <= 1)).tolist() == pm.select_collaborators(emd, 1, "lenient").tolist()
    assert pm.emd_bands(emd, 1, (0.1, 0.2)).tolist() == [2, -1, 0, 1, 2, 2]
    with pytest.raises(ValueError, match="strict <= lenient"):
        pm.emd_bands(emd, 1, (0.6, 0.3))


def test_band_summary_keeps_the_largest_rate_of_each_selection():
    rates = [0.0, 0.1, 0.2, 0.3, 0.4]
    # T first; thresholds 0.3 and 0.6 of the largest, 1.0
    assert pf.band_summary(np.array([0, 0.1, 0.25, 0.5, 0.55, 1.0]), rates) == {
        "strict: clients": 2, "strict: largest r": 0.1, "lenient: clients": 4, "lenient: largest r": 0.3}
    # not monotonic in r: a far client at r = 0.1 is left out of both, a near one at r = 0.4 is kept
    assert pf.band_summary(np.array([0, 0.1, 0.7, 0.2, 1.0, 0.5]), rates) == {
        "strict: clients": 2, "strict: largest r": 0.2, "lenient: clients": 3, "lenient: largest r": 0.4}


def test_fig6_findings_judge_the_spread_at_strong_privacy():
    ours = {("eps1", "max − min"): [0.05], ("eps10", "max − min"): [0.08, 0.1], ("eps100", "max − min"): [0.5]}
    (_, holds, text), = pf.fig6_findings(ours)
    assert holds is True and "ε = 10: 0.090" in text and "ε = 100: 0.500" in text  # ε = 100 is not judged
    ours[("eps10", "max − min")] = [0.2]
    assert pf.fig6_findings(ours)[0][1] is False
    assert pf.fig6_findings({("eps100", "max − min"): [0.5]})[0][1] is None


# ----------------------------------------------------------------------------------------------- CAFA Figs. 2, 5, 6
def test_group_profile_by_hand():
    props = np.array([[0.5, 0.5, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]])
    # held 2 and 4; largest 0.5 and 0.25; entropy ln 2 / ln 4 = 0.5 and 1
    assert cf.group_profile(props) == pytest.approx({"classes held": 3.0, "largest class share": 0.375,
                                                     "entropy": 0.75})


def test_cafa_findings_on_hand_made_values():
    ours = {("case1", "IID: entropy"): [0.99, 0.98], ("case1", "non-IID: entropy"): [0.45, 0.5],
            ("case1", "non-IID: fewest classes"): [2, 2], ("case1", "non-IID: most classes"): [4, 3]}
    assert [h for _, h, _ in cf.fig2_findings(ours)] == [True, True]
    ours[("case1", "non-IID: entropy")] = [0.45, 0.985]  # one seed where a non-IID group is as uniform
    ours[("case1", "non-IID: most classes")] = [5, 3]
    assert [h for _, h, _ in cf.fig2_findings(ours)] == [False, False]
    five = {("case3", "F1"): [1.0, 1.0], ("case3", "Precision"): [1.0, 1.0], ("case3", "Recall"): [1.0, 1.0]}
    assert cf.fig5_findings(five)[0][1] is True
    five[("case3", "F1")] = [1.0, 0.96]
    assert cf.fig5_findings(five)[0][1] is False and "in 1 of 2 seeds" in cf.fig5_findings(five)[0][2]
    six = {("fmnist_round10", m): [v] for m, v in (("FedAvg", 0.6), ("FedProx", 0.55), ("CAFA", 0.5))}
    assert cf.fig6_findings(six)[0][1] is True
    six[("fmnist_round10", "FedProx")] = [0.45]
    assert cf.fig6_findings(six)[0][1] is False
    assert cf.fig6_findings({("fmnist_best", "CAFA"): [0.5]})[0][1] is None  # no round 10: cannot be judged


# ------------------------------------------------------------------------------------------- DA-PFL Figs. 1, 3
def test_count_profile_by_hand():
    # row 1: held 2, largest 1/2, mean 20/3 and population std 20/3·√2/2... CV = 1/√2; row 2: CV 0
    assert df.count_profile(np.array([[10, 0, 10], [5, 5, 5]])) == pytest.approx(
        {"classes held": 2.5, "largest class share": (0.5 + 1 / 3) / 2, "class-count CV": 1 / math.sqrt(2) / 2})
    ours = {("alpha=1.0", "class-count CV"): [0.8, 0.9], ("alpha=0.5", "class-count CV"): [1.2, 1.1]}
    assert df.fig3_findings(ours)[0][1] is True
    ours[("alpha=0.5", "class-count CV")] = [0.7, 0.8]
    assert df.fig3_findings(ours)[0][1] is False


def test_fig1_findings_on_hand_made_values():
    rows = {"accuracy": [0.6, 0.65, 0.7, 0.8], "FedAMP weight (exp_cos)": [0.26, 0.25, 0.25, 0.24],
            "FedAMP weight (exp_dist)": [0.3, 0.26, 0.24, 0.2], "DA-PFL affinity": [0.1, 0.2, 0.3, 0.4],
            "DA-PFL weight": [0.05, 0.15, 0.3, 0.5]}
    ours = {(g, r): [v[i]] for r, v in rows.items() for i, g in enumerate(df.PARTNERS)}
    assert [h for _, h, _ in df.fig1_findings(ours)] == [True, True, True, True]
    ours[("group2", "FedAMP weight (exp_cos)")] = [0.26]  # a tie at the top is not "highest for group 1"
    ours[("group4", "accuracy")] = [0.55]  # accuracy ranks 2, 3, 4, 1: DA-PFL's ρ = 1 − 6·12 / 60 = −0.2
    found = df.fig1_findings(ours)
    assert [h for _, h, _ in found] == [False, True, False, False]
    assert "-5.00 points" in found[2][2] and "DA-PFL weight -0.20" in found[3][2]


def test_the_toy_clients_are_client_0s_counts_permuted():
    assert all(sorted(c) == sorted(df.CLIENT0) for c in df.PARTNERS.values())
    assert df.PARTNERS["group1"] == df.CLIENT0
    pooled = [tuple(a + b for a, b in zip(df.CLIENT0, c)) for c in df.PARTNERS.values()]
    assert pooled[0] == (160, 100, 40) and pooled[-1] == (100, 100, 100)


# ---------------------------------------------------------------------------------------------- end to end
def _reproduce(tmp_path, capsys, paper, table, *extra):
    out = tmp_path / "out"
    assert main(["reproduce", paper, table, "--scale", "smoke", "--store-dir", str(tmp_path / "store"),
                 "--out", str(out), *extra]) == 0
    text = capsys.readouterr()
    assert (out / f"{paper}_{table}_smoke.png").is_file()
    return text.out, text.err


@pytest.mark.parametrize("paper, table, rows", [
    ("cafa", "fig2", ["| case1 | IID: entropy | not reported", "| case1 | non-IID: fewest classes | 2 |",
                      "| case1 | non-IID: most classes | 4 |",
                      "| IID clients exhibit more uniform distributions (Fig. 2's caption) | claim holds |"]),
    ("cafa", "fig5", ["| case3 | K | 11 |", "| case3 | IID cluster size | 30 |", "| case3 | F1 | 1 |",
                      "| case3 | PCA variance (2 components) | not reported |",
                      "| IID clients form the largest cluster, the IID cluster (§V-B, Fig. 5) |"]),
    ("dapfl", "fig1", [f"| group{g} | {r} | not reported" for g in range(1, 5) for r in df.FIG1_ROWS] +
                      ["| group 1's accuracy is below group 4's (the paper: about 8 points) |"]),
    ("dapfl", "fig3", [f"| alpha={a} | {r} | not reported" for a in ("1.0", "0.5") for r in df.FIG3_ROWS] +
                      ["| α = 0.5 is more imbalanced than α = 1"]),
])
def test_analysis_figure_smoke(tmp_path, capsys, paper, table, rows):
    out, _ = _reproduce(tmp_path, capsys, paper, table)
    for row in rows:
        assert row in out


@pytest.mark.parametrize("table, rows", [
    ("fig5", ["| eps10 | strict: largest r | 0.3 |", "| eps10 | lenient: largest r | 0.6 |",
              "| epsinf | strict: largest r | 0.2 |", "| epsinf | lenient: largest r | 0.5 |",
              "| eps10 | r=0 | not reported", "| epsinf | r=1 | not reported"]),
    ("fig6", [f"| eps{e} | {r} | not reported" for e in ("0.1", "10", "inf") for r in pf.FIG6_ROWS] +
             ["| the clients' membership-inference powers stay close at ε ≤ 10 (within 0.1) |"]),
])
def test_pqfed_figure_smoke(tmp_path, capsys, small_mnist, table, rows):
    out, _ = _reproduce(tmp_path, capsys, "pqfed", table)
    for row in rows:
        assert row in out


def test_pqfed_fig6_clients_average_to_the_mia_tables_power(small_mnist):
    cell = rp.Cell("eps10", params={"epsilon": 10.0})
    from flplat.studies.papers import pqfed

    per_client = pf.client_powers(cell, 0, "smoke")
    assert len(per_client) == len(pf.FIG6_ROWS) and set(per_client) == set(pf.FIG6_ROWS)
    assert per_client["mean"] == pytest.approx(pqfed.mia(cell, 0, "smoke")["power"])
    powers = [per_client[r] for r in pf.CLIENT_ROWS]
    assert per_client["mean"] == pytest.approx(np.mean(powers))
    assert per_client["max − min"] == pytest.approx(max(powers) - min(powers))


def _capture_figure(monkeypatch, paper: str, table: str) -> list:
    """Wrap the table's figure so that the test sees the FigureContext it is given."""
    t = next(t for t in rp.paper_tables(paper) if t.id == table)
    seen, draw = [], t.figure
    monkeypatch.setattr(t, "figure", lambda ctx: (seen.append(ctx), draw(ctx)))
    return seen


def test_an_analysis_figure_draws_the_seed_the_table_ran(tmp_path, capsys, monkeypatch):
    seen = _capture_figure(monkeypatch, "dapfl", "fig3")
    out, _ = _reproduce(tmp_path, capsys, "dapfl", "fig3", "--seeds", "2")
    assert seen[0].seeds == [2] and "Seeds: 2." in out


def test_cafa_fig4_and_fig6_read_the_runs_of_tables_iv_and_v(tmp_path, capsys, monkeypatch, small_mnist):
    """Fig. 6 at smoke: the paper's round-30 and best numbers print, the curves are drawn from the runs with the
    smoothing of their configs; Fig. 4 after it trains nothing (its CAFA run is Fig. 6's, which is Table V's), and
    draws the silhouette curve of that run."""
    seen = _capture_figure(monkeypatch, "cafa", "fig6")
    out, _ = _reproduce(tmp_path, capsys, "cafa", "fig6", "--cells", "fmnist_round10,fmnist_round30,fmnist_best",
                        "--set", "tracking.curve_smoothing=0.5")
    assert len({j.key for j in seen[0].jobs}) == 3 and cf.curve_smoothing(seen[0]) == 0.5
    for row in ("| fmnist_round30 | CAFA | 66.8 |", "| fmnist_round30 | FedAvg | 62.11 |",
                "| fmnist_round30 | FedProx | 58.73 |", "| fmnist_best | CAFA | 83.45 |",
                "| fmnist_round10 | FedAvg | not reported |",
                "| FedAvg and FedProx above CAFA in the first rounds, up to about round 10 | cannot be judged |"):
        assert row in out
    assert "| fmnist_best | CAFA | 83.45 | " in out and "| fmnist_best | CAFA | 83.45 | — |" not in out  # a value
    out, err = _reproduce(tmp_path, capsys, "cafa", "fig4", "--cells", "fmnist")
    assert "fig4: 1 of 1 runs already finished, skipped" in err
    assert "| fmnist | k | not reported (a figure without numbers) | " in out
    t5 = next(t for t in rp.paper_tables("cafa") if t.id == "table5")
    f6 = next(t for t in rp.paper_tables("cafa") if t.id == "fig6")
    f4 = next(t for t in rp.paper_tables("cafa") if t.id == "fig4")
    for scale in rp.SCALES:
        keys5 = {j.key for j in rp.plan("cafa", t5, scale, [0], ["FedAvg", "FedProx", "CAFA"], None, [], "e", "d")}
        keys6 = {j.key for j in rp.plan("cafa", f6, scale, [0], None, None, [], "e", "d")}
        keys4 = {j.key for j in rp.plan("cafa", f4, scale, [0], None, None, [], "e", "d")}
        assert keys6 == keys5 and keys4 < keys6 and len(keys4) == 2  # CAFA on CIFAR-10 and on FMNIST


def test_cafa_fig4_rows_keep_every_seed_under_baseline_seeds():
    """Both rows of Fig. 4 read the same CAFA run: ``--baseline-seeds`` must not cut one of them to one seed."""
    f4 = next(t for t in rp.paper_tables("cafa") if t.id == "fig4")
    jobs = rp.plan("cafa", f4, "smoke", [0, 1, 2], None, ["fmnist"], [], "e", "d", baseline_seeds=1)
    assert {(j.method, j.seed) for j in jobs} == {(m, s) for m in ("k", "silhouette at k") for s in (0, 1, 2)}
    assert len({j.key for j in jobs}) == 3


# ------------------------------------------------------------------------------------------------- colours
@pytest.mark.parametrize("n", [3, 13, 20, 23])
def test_every_method_of_a_bar_chart_has_its_own_look(tmp_path, monkeypatch, n):
    """Clust-PSI-PFL's 13 methods and Flux's 14 rows in one chart: no two methods share a colour up to 20 methods
    (matplotlib's default cycle has 10), and past 20 a hatch tells the repeated colours apart."""
    import matplotlib.pyplot as plt

    from flplat.studies.reproduction import figures

    drawn = []
    monkeypatch.setattr(plt, "close", lambda fig: drawn.append(fig))
    ours = {(c, f"m{i}"): [0.5 + i / 100] for c in ("a", "b") for i in range(n)}
    figures.plot_cells(ours, "t", "y", str(tmp_path / "f.png"))
    (ax,) = drawn[0].axes
    from matplotlib.container import BarContainer

    bars = [b for b in ax.containers if isinstance(b, BarContainer)]
    looks = {(tuple(b.patches[0].get_facecolor()), b.patches[0].get_hatch() or "") for b in bars}
    assert len(bars) == n and len(looks) == n
    assert (tmp_path / "f.png").stat().st_size > 0
