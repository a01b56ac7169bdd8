"""`flplat reproduce`: the papers' numbers as data (shape and a hand-checked sample), the verdicts, the run identity,
and one tiny table end to end through the CLI (smoke scale, a temporary MLflow store): nested runs, the markdown on
the parent run, skipping finished runs on a re-run, bad input creating no run."""

from __future__ import annotations

from dataclasses import replace

import pytest
from omegaconf import OmegaConf

from flplat.cli import main
from flplat.errors import ConfigError
from flplat.studies import reproduce as rp


@pytest.mark.parametrize("paper", rp.PAPERS)
def test_paper_values_cover_every_table_cell(paper):
    assert rp.check_paper_values(paper) == []


def test_paper_values_check_finds_a_missing_cell(tmp_path):
    raw = OmegaConf.to_container(OmegaConf.load(rp.VALUES_DIR / "cafa.yaml"))
    del raw["tables"]["table5"]["values"]["cifar10"]["FedProx"]
    raw["tables"]["table2"]["values"]["case1"]["Acc"] = "   "
    del raw["tables"]["table3"]["source"]
    OmegaConf.save(OmegaConf.create(raw), tmp_path / "cafa.yaml")
    errs = rp.check_paper_values("cafa", tmp_path)
    assert any("table5: cell cifar10 method FedProx" in e for e in errs)
    assert any("table2: cell case1 method Acc" in e for e in errs)
    assert any("table3: no 'source'" in e for e in errs)


@pytest.mark.parametrize("paper, table, cell, method, expected", [
    # typed from the seeds, checked by hand against the text
    ("clust-psi-pfl", "table3", "similarity_0", "Clust-PSI-PFL", (0.98, 0.01)),
    ("clust-psi-pfl", "table3", "dirichlet_0.7", "PoC", (0.63, 0.02)),
    ("clust-psi-pfl", "table3", "dirichlet_0.05", "CL", (0.90, 0.02)),
    ("clust-psi-pfl", "table4", "similarity_0", "CFL", (0.51, None)),
    ("flux", "known_association", "feature_l5", "Flux", (95.50, 0.10)),
    ("flux", "known_association", "concept_yx_l5", "FedAvg", (63.87, 0.36)),
    ("flux", "test_phase", "label_l8", "IFCA", (54.54, 5.97)),
    ("flux", "known_association", "feature_l1", "FedAvg", (86.29, 0.45)),  # Table 12, levels 1-4
    ("flux", "test_phase", "label_l4", "FeSEM", (90.93, 2.37)),  # Table 14
    ("flux", "mean_by_level", "ka_l1", "FedAvg", (93.07, 0.50)),  # Table 10
    ("flux", "mean_by_level", "tp_l5", "FedAvg", (86.62, 1.75)),  # Table 11
    ("flux", "table1", "mnist_ka", "Flux", (92.5, 2.9)),
    ("flux", "table1", "chexpert_tp", "APFL", (64.0, 0.4)),
    ("flux", "scalability", "label_l7", "FedAvg", (84.2, 2.5)),
    ("flux", "scalability", "concept_xy_l6", "Flux", (96.3, 0.1)),
    ("dapfl", "table1", "cifar10_k100_high", "DA-PFL", (68.25, None)),
    ("dapfl", "table3_digits", "digits_k20_high", "FedProx", (28.62, None)),
    ("dapfl", "table5", "cifar10_k20_low", "DA-PFL-V2", (56.21, None)),
    ("cafa", "table2", "case1", "Precision", (0.83, None)),
    ("cafa", "table5", "cifar10", "FedProx", (80.42, None)),
    ("pqfed", "table2", "exp3", "FedAvg", (96.00, None)),
    ("pqfed", "table5", "exp12", "FedDyn", (97.00, None)),
    ("pqfed", "table6", "mnist", "IFCA", (97.54, None)),
    ("pqfed", "table8", "stage5", "FedProx", (0.9840, None)),
    ("pqfed", "table8", "stage11", "FedDyn", (0.9142, None)),
    ("pqfed", "table8_stop", "mnist", "FedDyn", (8, None)),
])
def test_paper_values_sample(paper, table, cell, method, expected):
    mean, std, _ = rp.paper_value(rp.load_paper_values(paper), table, cell, method)
    assert (mean, std) == pytest.approx(expected)


def test_paper_value_reasons():
    v = rp.load_paper_values("flux")
    assert rp.paper_value(v, "test_phase", "concept_yx_l5", "Flux")[0] is None  # N/A: P(Y|X) has no test phase
    assert rp.paper_value(v, "ari", "feature_l2", "Flux") == (None, None, "not reported")  # the table default
    assert rp.paper_value(v, "tau", "label_l5", "true M") == (None, None, "not reported")
    assert rp.paper_value(rp.load_paper_values("cafa"), "table5", "fmnist", "CBCC-only")[2] == "not reported"


def test_verdict_claim_and_spread():
    # paper: method 80 ± 1 above the reference 70; ours 79 above 60: the claim holds, |79 - 80| <= 2·sqrt(1² + 0²)
    assert rp.verdict(80, 1, [79], 70, [60], is_reference=False, tie=0.5) == "claim holds (above ref.); within spread"
    # ours below the reference: the claim fails; 3 points off with std 1: outside the spread
    assert rp.verdict(80, 1, [77], 70, [78], is_reference=False, tie=0.5) == \
        "claim fails (paper above ref., ours below); outside spread"
    # our seeds' spread widens the tolerance: std over [74, 80] = 3 -> tolerance 2·sqrt(1 + 9) = 6.3
    assert rp.verdict(80, 1, [74, 80], 70, [60, 60], is_reference=False, tie=0.5).endswith("within spread")
    # gaps within the tie count as ties; no paper std nor ours: the tie is the tolerance
    assert rp.verdict(70.2, None, [70.4], 70, [70.3], is_reference=False, tie=0.5) == \
        "claim holds (tied with ref.); within spread"
    assert rp.verdict(71, None, [70], 70, [70], is_reference=False, tie=0.5) == \
        "claim fails (paper above ref., ours tied with); outside spread"
    assert rp.verdict(80, 1, [79], 70, [60], is_reference=True, tie=0.5) == "reference; within spread"
    assert rp.verdict(80, None, [10], 70, [5], is_reference=False, tie=0.5, comparable=False) == \
        "claim holds (above ref.); other dataset"
    assert rp.verdict(0.2, None, [0.3], 0.4, [0.5], is_reference=False, tie=0.01, higher_is_better=False) == \
        "claim holds (below (better) ref.); outside spread"
    assert rp.verdict(None, None, [0.3], None, None, is_reference=False, tie=0.01) == "no paper value"
    assert rp.verdict(80, 1, [], 70, [60], is_reference=False, tie=0.5) == "not run"


def test_config_key_ignores_tracking_and_threads_only():
    from flplat.experiment import load_config

    a = load_config(None, ["tracking.experiment=a", "fabric.num_threads=1"])
    b = load_config(None, ["tracking.experiment=b", "tracking.run_name=x", "fabric.num_threads=2"])
    assert rp.config_key(a) == rp.config_key(b)
    assert rp.config_key(a) != rp.config_key(load_config(None, ["seed=1"]))


@pytest.mark.parametrize("paper", rp.PAPERS)
def test_every_train_table_validates_at_every_scale(paper):
    """Each table's configs exist and its overrides are keys of the chosen algorithms, at every scale: every method
    on the first cell and the first method on every cell at smoke, every method on the first cell at the others (the
    whole grids are ~2,000 configs: too slow here)."""
    for t in rp.paper_tables(paper):
        if t.kind != "train":
            continue
        first = next((c.id for c in t.cells if c.id not in t.undefined), None)
        if first is None:  # every cell waits for something, with its reason: nothing is planned
            assert rp.plan(paper, t, "smoke", [0], None, None, [], "x", "/tmp/unused") == []
            continue
        # a pooled cell with its first member at smoke only (its members are ready configs under the cell's
        # overrides; planning all of them at three scales takes minutes): one run per cell and method at smoke
        t = replace(t, cells=[replace(c, members=c.parts("smoke")[:1]) if c.members else c for c in t.cells])
        for cells, methods in (([first], None), (None, [t.methods[0].name])):
            jobs = _plan(paper, t, "smoke", methods, cells)
            assert jobs is None or len(jobs) == (len(t.methods) if cells else len(t.cells) - len(t.undefined))
        for scale in ("reduced", "paper"):  # a scale's overrides are the same for every run of the table
            jobs = _plan(paper, t, scale, None, [first])
            parts = len(next(c for c in t.cells if c.id == first).parts(scale))  # a pooled cell: one run per member
            assert jobs is None or len(jobs) == len(t.methods) * parts


def _plan(paper, t, scale, methods, cells):
    """``rp.plan`` of one scale (validates every run's config)."""
    return rp.plan(paper, t, scale, [0], methods, cells, [], "x", "/tmp/unused")


@pytest.mark.parametrize("paper", rp.PAPERS)
def test_focus_methods_are_methods_of_their_table(paper):
    for t in rp.paper_tables(paper):
        assert set(t.focus or []) <= {m.name for m in t.methods}, t.id


def test_baseline_seeds_keep_every_seed_for_the_reference_and_the_papers_method():
    t = next(t for t in rp.paper_tables("dapfl") if t.id == "table3_digits")
    jobs = rp.plan("dapfl", t, "smoke", [0, 1, 2], None, ["digits_k20_low"], [], "x", "/tmp/unused", baseline_seeds=1)
    seeds = {}
    for j in jobs:
        seeds.setdefault(j.method, []).append(j.seed)
    assert seeds.pop("FedAvg") == [0, 1, 2] and seeds.pop("DA-PFL") == [0, 1, 2]
    assert seeds and all(s == [0] for s in seeds.values())
    flux = rp.paper_tables("flux")[0]
    assert flux.all_seeds("Flux") and flux.all_seeds("Flux-prior") and not flux.all_seeds("IFCA")


def test_render_table_rows_and_counts():
    t = rp.Table("t", "T", [rp.Cell("c1"), rp.Cell("c2")], [rp.Method("FedAvg"), rp.Method("New")], tie=0.005,
                 scale_factor=100.0)
    vals = {"tables": {"t": {"source": "Table 9", "values": {"c1": {"FedAvg": [70, 1], "New": [80, 1]},
                                                             "c2": {"FedAvg": 70, "New": "not reported"}}}}}
    ours = {("c1", "FedAvg"): [0.70, 0.72], ("c1", "New"): [0.60]}
    md = rp.render_table(t, vals, ours, "hdr")
    assert "| c1 | FedAvg | 70 ± 1 | 71 ± 1 (2) | +1 | reference; within spread |" in md
    assert "| c1 | New | 80 ± 1 | 60 ± 0 (1) | -20 | claim fails (paper above ref., ours below); outside spread |" in md
    assert "| c2 | New | not reported | — | — | not run |" in md
    assert "Claims: 0 hold, 1 fail. Values: 1 within the paper's spread, 1 outside." in md


def test_parse_added_method():
    m = rp.parse_added_method("MyAlgo=algorithm.name=fedprox,algorithm.mu=0.1,model.hidden=[16,16]")
    assert (m.name, m.overrides, m.added) == ("MyAlgo", ["algorithm.name=fedprox", "algorithm.mu=0.1",
                                                         "model.hidden=[16,16]"], True)
    assert rp.parse_added_method("fedprox").overrides == ["algorithm.name=fedprox"]  # NAME is the algorithm
    assert rp.parse_added_method("fedprox=algorithm.mu=0.1").overrides == ["algorithm.name=fedprox", "algorithm.mu=0.1"]
    t = next(t for t in rp.paper_tables("dapfl") if t.id == "table3_digits")
    t2 = rp.with_added(t, [m])
    assert [x.name for x in t2.methods] == [x.name for x in t.methods] + ["MyAlgo"]
    assert t2.all_seeds("MyAlgo") and t2.all_seeds("DA-PFL") and not t2.all_seeds("IFCA")  # --baseline-seeds
    assert [x.name for x in t.methods][-1] == "DA-PFL"  # the paper's table is not changed


def test_render_table_added_method_has_no_paper_value_and_a_verdict_against_the_reference():
    t = rp.Table("t", "T", [rp.Cell("c1")], [rp.Method("FedAvg"), rp.Method("Mine", added=True),
                                             rp.Method("Low", added=True), rp.Method("Same", added=True)],
                 tie=0.005, scale_factor=100.0)
    vals = {"tables": {"t": {"source": "Table 9", "values": {"c1": {"FedAvg": [70, 1]}}}}}
    ours = {("c1", "FedAvg"): [0.70], ("c1", "Mine"): [0.80, 0.82], ("c1", "Low"): [0.5], ("c1", "Same"): [0.703]}
    md = rp.render_table(t, vals, ours, "hdr")
    assert ("| c1 | Mine | not in the paper (added method) | 81 ± 1 (2) | — | ours above ref.; no paper value "
            "(added method) |") in md
    assert "| c1 | Low | not in the paper (added method) | 50 ± 0 (1) | — | ours below ref.;" in md
    assert "| c1 | Same | not in the paper (added method) | 70.3 ± 0 (1) | — | ours tied with ref.;" in md
    assert "Claims: 0 hold, 0 fail." in md  # no paper claim about an added method


def test_cli_added_method_beside_the_papers_cached_and_render_only(tmp_path, capsys):
    store = tmp_path / "store"
    args = ["reproduce", "dapfl", "table3_digits", "--scale", "smoke", "--cells", "digits_k20_low",
            "--methods", "FedAvg", "--store-dir", str(store), "--add-method",
            "MyProx=algorithm.name=fedprox,algorithm.mu=0.1"]
    assert main(args) == 0
    out = capsys.readouterr()
    assert "| digits_k20_low | FedAvg | 66.83 |" in out.out
    assert "| digits_k20_low | MyProx | not in the paper (added method) | " in out.out
    assert "; no paper value (added method) |" in out.out
    assert "Added methods (not in the paper, no paper value): MyProx (algorithm.name=fedprox algorithm.mu=0.1)." \
        in out.out
    assert "[2/2] table3_digits digits_k20_low" in out.err
    _, runs = _runs(store)
    kids = {r.data.tags["flplat.reproduce.method"]: r for r in runs if r.data.tags.get("mlflow.parentRunId")}
    assert sorted(kids) == ["FedAvg", "MyProx"]
    assert kids["MyProx"].data.params["algorithm.name"] == "fedprox" and kids["MyProx"].data.params["algorithm.mu"] \
        == "0.1"
    assert main([*args, "--render-only"]) == 0  # cached by config hash: nothing trains, the row is shown
    out = capsys.readouterr()
    assert "2 of 2 runs already finished, skipped" in out.err
    assert "| digits_k20_low | MyProx | not in the paper (added method) | " in out.out
    assert len(_runs(store)[1]) == 3  # the two runs and one parent


def _runs(store):
    from mlflow.tracking import MlflowClient

    from flplat.tracking.store import store_uris

    client = MlflowClient(tracking_uri=store_uris(None, str(store))[0])
    exp = client.get_experiment_by_name("reproduce-dapfl")
    return client, (client.search_runs([exp.experiment_id]) if exp else [])


def test_cli_smoke_table_end_to_end(tmp_path, capsys):
    store, out = tmp_path / "store", tmp_path / "out"
    args = ["reproduce", "dapfl", "table3_digits", "--scale", "smoke", "--cells", "digits_k20_low",
            "--methods", "FedAvg,DA-PFL", "--store-dir", str(store), "--out", str(out)]
    assert main(args) == 0
    text = capsys.readouterr()
    assert "| digits_k20_low | DA-PFL | 74.43 |" in text.out and "| digits_k20_low | FedAvg | 66.83 |" in text.out
    assert "[2/2] table3_digits digits_k20_low" in text.err  # the progress display
    assert (out / "dapfl_table3_digits_smoke.md").read_text().startswith("### DA-PFL Table III")  # scale in the name
    import json

    recs = [json.loads(x) for x in (out / "dapfl_table3_digits_smoke_runs.jsonl").read_text().splitlines()]
    assert sorted(r["method"] for r in recs) == ["DA-PFL", "FedAvg"] and all(r["seed"] == 0 for r in recs)
    assert all(r["value"] == r["metrics"]["mean_local_accuracy_last10"] for r in recs)
    client, runs = _runs(store)
    parents = [r for r in runs if "flplat.reproduce.parent" in r.data.tags]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId")]
    assert len(parents) == 1 and len(children) == 2
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}
    assert {r.data.tags["flplat.reproduce.method"] for r in children} == {"FedAvg", "DA-PFL"}
    assert parents[0].info.status == "FINISHED"
    md = client.download_artifacts(parents[0].info.run_id, "reproduce/table3_digits.md", str(tmp_path))
    assert "| digits_k20_low | DA-PFL |" in open(md).read()
    # a re-run trains nothing and reuses the parent; with --results it renders the table into the document from
    # the store, and a second render replaces the block (the time line counts the runs MLflow recorded)
    doc = tmp_path / "results.md"
    doc.write_text("# Results\n\n<!-- flplat reproduce: new tables above -->\n")
    assert main([*args, "--results", str(doc)]) == 0
    assert "2 of 2 runs already finished, skipped" in capsys.readouterr().err
    assert main([*args, "--results", str(doc)]) == 0
    capsys.readouterr()
    text = doc.read_text()
    assert text.count("<!-- flplat reproduce dapfl table3_digits smoke -->") == 1
    assert text.index("| digits_k20_low | DA-PFL | 74.43 |") < text.index("new tables above")
    assert "*Made by* `flplat reproduce dapfl table3_digits --scale smoke --methods FedAvg,DA-PFL" in text
    assert "2 runs, " in text
    assert len(_runs(store)[1]) == 3
    assert main([*args, "--seeds", "0,1"]) == 0
    assert "2 of 4 runs already finished" in capsys.readouterr().err
    assert len(_runs(store)[1]) == 5


def test_pqfed_table8_stages_are_one_run_per_method_and_seed(tmp_path, capsys, small_mnist):
    """PQFed Table VIII at smoke scale: the 11 stages and Algorithm 2's outcome of one inner algorithm and seed are one
    run (every stage trained), read from its per-stage series; ``table8_stop`` reuses that run (nothing new trained)."""
    from mlflow.tracking import MlflowClient

    from flplat.tracking.store import store_uris

    base = ["reproduce", "pqfed", "table8", "--scale", "smoke", "--methods", "FedAvg", "--store-dir", str(tmp_path)]
    assert main(base) == 0
    out = capsys.readouterr()
    assert "[1/1] table8 stage1 FedAvg s0" in out.err and "[2/" not in out.err
    rows = [line for line in out.out.splitlines() if "| FedAvg |" in line]
    assert [r.split(" | ")[0].strip("| ") for r in rows] == [f"stage{i}" for i in range(1, 12)] + ["algorithm2"]
    assert rows[0].startswith("| stage1 | FedAvg | 0.9685 |")
    assert rows[-1].startswith("| algorithm2 | FedAvg | 0.9831 |")
    client = MlflowClient(tracking_uri=store_uris(None, str(tmp_path))[0])
    exp = client.get_experiment_by_name("reproduce-pqfed")
    (run,) = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("mlflow.parentRunId")]
    hist = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "target_accuracy_by_stage")}
    accs = [hist[i] for i in range(1, 12)]
    for row, acc in zip(rows, accs):
        assert f"| {acc:.4g} ± 0 (1) |" in row
    # Algorithm 2's rule by hand on the series: break at the first stage below the best so far, else the last
    stop = next((i for i in range(2, 12) if accs[i - 1] < max(accs[:i - 1])), 11)
    assert run.data.metrics["algorithm2_stage"] == stop
    assert f"| {accs[stop - 1]:.4g} ± 0 (1) |" in rows[-1]
    assert main([*base[:2], "table8_stop", *base[3:]]) == 0
    out = capsys.readouterr()
    assert "table8_stop: 1 of 1 runs already finished, skipped" in out.err
    assert f"| mnist | FedAvg | 1 | {stop} ± 0 (1) |" in out.out


def test_flux_tau_table_reads_the_true_m_from_fluxs_run(tmp_path, capsys, small_mnist):
    """Flux's τ table: the ``true M`` row is the partition's number of distributions, read from Flux's own run (one
    run for both rows); IFCA is given the true M (App. E.1), so its τ equals it."""
    from flplat.experiment import load_config, prepare

    assert main(["reproduce", "flux", "tau", "--scale", "smoke", "--cells", "label_l5", "--methods",
                 "IFCA,Flux,true M", "--store-dir", str(tmp_path)]) == 0
    out = capsys.readouterr()
    assert "[2/2] tau label_l5" in out.err and "[3/" not in out.err
    t = next(t for t in rp.paper_tables("flux") if t.id == "tau")
    m = prepare(load_config(str(rp.REPO / next(c for c in t.cells if c.id == "label_l5").config),
                            t.scales["smoke"])).data.meta["num_distributions"]
    assert f"| label_l5 | true M | not reported | {m} ± 0 (1) |" in out.out
    assert f"| label_l5 | IFCA | not reported | {m} ± 0 (1) |" in out.out


def test_flux_scalability_smoke_cell_reports_known_association(tmp_path, capsys, small_mnist):
    """App. F.2 / Table 50 at smoke scale (40 + 10 unseen clients instead of 1,200 + 100): the run ends with the
    known-association accuracy, which the table sets beside the paper's mean ± std."""
    assert main(["reproduce", "flux", "scalability", "--scale", "smoke", "--cells", "label_l7", "--methods", "FedAvg",
                 "--store-dir", str(tmp_path)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| label_l7 | FedAvg |"))
    assert row.startswith("| label_l7 | FedAvg | 84.2 ± 2.5 | ") and " (1) | " in row


def test_cli_analysis_table_smoke(tmp_path, capsys):
    assert main(["reproduce", "cafa", "table3", "--scale", "smoke", "--cells", "case1", "--store-dir",
                 str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| case1 | Acc | 0.95 |" in out and "| case1 | K | 7 |" in out


@pytest.mark.parametrize("args, msg", [
    ([], "give a paper (clust-psi-pfl, cafa, dapfl, flux, pqfed), --list or --import PATH"),
    (["nopaper"], "paper 'nopaper' is unknown"),
    (["dapfl", "table9"], "--tables=table9 unknown"),
    (["dapfl", "table3_digits", "--cells", "digits_k7"], "--cells=digits_k7 unknown"),
    (["dapfl", "table3_digits", "--methods", "FedFoo"], "--methods=FedFoo unknown"),
    (["dapfl", "table3_digits", "--scale", "huge"], "--scale='huge'"),
    (["dapfl", "table3_digits", "--results", "/nonexistent/dir/r.md"], "--results=/nonexistent/dir/r.md: its "
     "directory does not exist"),
    (["cafa", "table2", "--methods", "Acc,Foo"], "--methods=Foo unknown"),
    (["dapfl", "table3_digits", "--jobs", "999"], "--jobs=999"),
    (["dapfl", "table3_digits", "--baseline-seeds", "0"], "--baseline-seeds=0; allowed: an integer >= 1"),
    (["dapfl", "table3_digits", "--set", "federation.rounds=0"], "federation.rounds"),
    (["dapfl", "table3_digits", "--add-method", "My|Algo=algorithm.name=fedavg"], "the row label 'My|Algo' must "
     "have a letter or digit and none of ',|:#$'"),
    (["dapfl", "table3_digits", "--rerun-stale", "--render-only"], "--rerun-stale trains, --render-only trains "
     "nothing"),
    (["dapfl", "table3_digits", "--add-method", "Mine=algorithm.mu"], "'algorithm.mu' is not key=value"),
    (["dapfl", "table3_digits", "--add-method", "Mine=algorithm.mu=0.1"], "names no algorithm: give algorithm.name"),
    (["dapfl", "table3_digits", "--add-method", "FedAvg=algorithm.name=fedprox"], "already has a method of that "
     "name"),
    (["dapfl", "table3_digits", "--add-method", "X=algorithm.name=nope"], "--add-method='X=algorithm.name=nope': "
     "algorithm.name='nope' is not valid"),
    (["dapfl", "table3_digits", "--add-method", "X=algorithm.name=fedprox,algorithm.mu=-1"], "algorithm.mu=-1.0 is "
     "out of range"),
    (["dapfl", "table3_digits", "--add-method", "X=algorithm.name=fedprox,seed=3"], "seed and tracking.* are the "
     "grid's"),
    (["dapfl", "table3_digits", "--add-method", "fedprox", "--add-method", "fedprox"], "'fedprox': table "
     "table3_digits already has"),
    (["cafa", "table2", "--add-method", "fedprox"], "train nothing of their own (analysis or derived tables)"),
])
def test_cli_bad_input_exits_2_without_runs(tmp_path, capsys, args, msg):
    assert main(["reproduce", *args, "--store-dir", str(tmp_path)]) == 2
    assert msg in capsys.readouterr().err
    assert not (tmp_path / "mlflow.db").exists()


def test_list(capsys):
    assert main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    for paper in rp.PAPERS:
        assert f"{paper}:" in out
    assert "cells: case1, case2, case3" in out


def test_select_rejects_unknown():
    with pytest.raises(ConfigError, match="allowed: a, b"):
        rp.select([rp.Cell("a"), rp.Cell("b")], ["c"], "cells", "id")


@pytest.mark.slow
def test_jobs_2_runs_in_worker_processes_with_the_same_results(tmp_path, capsys):
    """--jobs 2: the runs happen in two worker processes (one thread each), nested and tagged as with --jobs 1, and
    give the same metrics (same config + seed -> same metrics on CPU; the smoke scale sets one thread anyway)."""
    base = ["reproduce", "dapfl", "table3_digits", "--scale", "smoke", "--cells", "digits_k20_low",
            "--methods", "FedAvg,DA-PFL"]
    assert main([*base, "--jobs", "2", "--store-dir", str(tmp_path / "a")]) == 0
    assert main([*base, "--jobs", "1", "--store-dir", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    got = {}
    for name in ("a", "b"):
        _, runs = _runs(tmp_path / name)
        kids = [r for r in runs if r.data.tags.get("mlflow.parentRunId")]
        assert len(kids) == 2
        got[name] = {r.data.tags["flplat.reproduce.method"]: r.data.metrics["mean_local_accuracy_last10"]
                     for r in kids}
    assert got["a"] == got["b"]


def test_a_run_that_fails_its_config_is_skipped_not_fatal(tmp_path, capsys):
    """An error found while preparing one run (here: every Dirichlet redraw leaves a client under min_samples) skips
    that run with its reason; the table is still written, the cell "not run"; the row has no run at all, so the
    command exits 1 with the row and the reason."""
    assert main(["reproduce", "dapfl", "table3_digits", "--scale", "smoke", "--cells", "digits_k20_low",
                 "--methods", "FedAvg", "--store-dir", str(tmp_path), "--set", "partition.min_samples=500",
                 "partition.max_retries=1"]) == 1
    out = capsys.readouterr()
    assert "digits_k20_low FedAvg s0: skipped (" in out.err
    assert "flplat: error: table3_digits: row 'FedAvg': all 1 of its runs were refused before they started: " \
           "partition.name='dirichlet' is infeasible" in out.err
    # the table says why: the row points to a note with the reason per seed
    assert "| digits_k20_low | FedAvg | 66.83 | — | — | not run: skipped, see note 1 |" in out.out
    assert "1. skipped: seed 0: partition.name='dirichlet' is infeasible: num_clients * min_samples" in out.out
    # the reason stays on the parent run: a later --render-only shows it too (no run exists to read it from)
    assert main(["reproduce", "dapfl", "table3_digits", "--scale", "smoke", "--cells", "digits_k20_low",
                 "--methods", "FedAvg", "--store-dir", str(tmp_path), "--set", "partition.min_samples=500",
                 "partition.max_retries=1", "--render-only"]) == 1
    out = capsys.readouterr().out
    assert "not run: skipped, see note 1 |" in out and "1. skipped: seed 0: partition.name='dirichlet'" in out


def test_a_job_whose_run_failed_shows_the_error_not_not_run(tmp_path, capsys):
    """A job whose run ended FAILED (here: one written as a diverged run would be) is "failed, see note N" with the
    run's recorded error; once a run of the same hash finishes, its value replaces the note."""
    from mlflow.tracking import MlflowClient

    from flplat.studies.papers import dapfl
    from flplat.tracking.store import store_uris

    argv = ["reproduce", "dapfl", "table3_digits", "--scale", "smoke", "--cells", "digits_k20_low", "--methods",
            "FedAvg", "--seeds", "0", "--store-dir", str(tmp_path)]
    t = next(x for x in dapfl.TABLES if x.id == "table3_digits")
    job = rp.plan("dapfl", t, "smoke", [0], ["FedAvg"], ["digits_k20_low"], [], "reproduce-dapfl", str(tmp_path))[0]
    store = rp.Store("reproduce-dapfl", str(tmp_path))
    client = MlflowClient(tracking_uri=store_uris(None, str(tmp_path))[0])
    run = client.create_run(store.exp_id, tags={"flplat.config_key": job.key,
                                                "flplat.error": "diverged at round 2: every client's update is NaN"})
    client.set_terminated(run.info.run_id, "FAILED")
    assert main([*argv, "--render-only"]) == 0
    out = capsys.readouterr().out
    assert "| digits_k20_low | FedAvg | 66.83 | — | — | failed, see note 1 |" in out
    assert "1. failed: seed 0: diverged at round 2: every client's update is NaN" in out
    assert main(argv) == 0  # runs it: the finished run supersedes the failed one
    out = capsys.readouterr().out
    assert "failed" not in out and "| digits_k20_low | FedAvg | 66.83 | — | — | not run" not in out


def test_render_table_gives_the_reason_of_skipped_runs():
    """Rows with skipped runs point to numbered notes (one per distinct set of seeds and reasons) under the table;
    a row with some seeds run keeps its verdict and says which seeds were skipped."""
    t = rp.Table("t", "T", [rp.Cell("c1"), rp.Cell("c2")], [rp.Method("FedAvg"), rp.Method("New")])
    vals = {"tables": {"t": {"source": "Table 9", "values": {"c1": {"FedAvg": 0.7, "New": 0.8},
                                                             "c2": {"FedAvg": 0.7, "New": 0.8}}}}}
    ours = {("c1", "FedAvg"): [0.70], ("c1", "New"): [0.80]}
    why = "partition infeasible | no draw (best: 3)"
    skipped = {("c2", "FedAvg"): [(1, why), (0, why)], ("c2", "New"): [(0, why), (1, why)],
               ("c1", "New"): [(1, "other reason")]}
    md = rp.render_table(t, vals, ours, "hdr", skipped=skipped)
    assert "| c2 | FedAvg | 0.7 | — | — | not run: skipped, see note 2 |" in md
    assert "| c2 | New | 0.8 | — | — | not run: skipped, see note 2 |" in md
    assert ("| c1 | New | 0.8 | 0.8 ± 0 (1) | +0 | claim holds (above ref.); within spread; "
            "seed 1 skipped, see note 1 |") in md
    assert "1. skipped: seed 1: other reason\n2. skipped: seeds 0, 1: partition infeasible \\| no draw (best: 3)\n" \
        in md
    assert "Claims: 1 hold, 0 fail." in md
    assert "skipped" not in rp.render_table(t, vals, ours, "hdr")


def test_an_analysis_cell_the_data_cannot_meet_is_skipped_with_its_reason(tmp_path, monkeypatch):
    """An analysis (no training) whose partition is infeasible skips that cell and seed; the table gives the reason."""
    from flplat.data.splits import InfeasiblePartitionError

    def analyze(cell, seed, scale):
        if cell.id == "b":
            raise InfeasiblePartitionError(f"no partition for seed {seed}")
        return {"x": 1.0}

    table = rp.Table("t", "T", [rp.Cell("a"), rp.Cell("b")], [rp.Method("x")], kind="analysis", analyze=analyze,
                     reference=None, seeds=[0])
    monkeypatch.setattr(rp, "paper_tables", lambda paper: [table])
    md = rp.reproduce("cafa", scale="smoke", store_dir=str(tmp_path))
    assert "| a | x | not reported | 1 ± 0 (1) | — | no paper value |" in md
    assert "| b | x | not reported | — | — | not run: skipped, see note 1 |" in md
    assert "1. skipped: seed 0: no partition for seed 0" in md


def test_clust_psi_pfl_alpha_005_cell_redraws_as_the_paper():
    """Table III/IV's Dirichlet α = 0.05 cell lifts the redraw cap (the authors' partition has none), in its config
    and in the header; the other cells keep their ready configs as they are (their runs keep their hashes)."""
    from flplat.experiment import load_config

    t = next(t for t in rp.paper_tables("clust-psi-pfl") if t.id == "table3")
    jobs = rp.plan("clust-psi-pfl", t, "reduced", [0], ["FedAvg"], None, [], "x", "/tmp/unused")
    retries = {j.cell: load_config(j.config, j.overrides).partition.get("max_retries") for j in jobs}
    assert retries.pop("dirichlet_0.05") == 100_000 and set(retries.values()) == {100, None}  # None: similarity
    cell = next(c for c in t.cells if c.id == "dirichlet_0.05")
    assert cell.note.startswith("partition.max_retries=100000, the paper's partition")
    assert [c.id for c in t.cells if c.overrides or c.note] == ["dirichlet_0.05"]


def test_cell_notes_are_stated_in_the_header(tmp_path, capsys):
    args = ["reproduce", "clust-psi-pfl", "table4", "--scale", "smoke", "--methods", "FedAvg", "--render-only",
            "--store-dir", str(tmp_path)]
    assert main([*args, "--cells", "dirichlet_0.05"]) == 0
    assert "Per cell: dirichlet_0.05: partition.max_retries=100000, the paper's partition" in capsys.readouterr().out
    assert main([*args, "--cells", "dirichlet_0.09"]) == 0
    assert "Per cell" not in capsys.readouterr().out


@pytest.mark.slow
def test_clust_psi_pfl_alpha_005_partition_is_feasible_with_the_papers_redraws():
    """FMNIST, K = 100, α = 0.05: with the cell's redraws a partition with every client >= 10 samples exists (about
    one draw in 10,000 qualifies; seed 0 took about 10^4 draws, 5-25 s)."""
    from flplat.api import derive_seed
    from flplat.data.datasets import load_dataset
    from flplat.data.partitions import build_federation
    from flplat.experiment import load_config

    t = next(t for t in rp.paper_tables("clust-psi-pfl") if t.id == "table3")
    (job,) = rp.plan("clust-psi-pfl", t, "reduced", [0], ["FedAvg"], ["dirichlet_0.05"], [], "x", "/tmp/unused")
    cfg = load_config(job.config, job.overrides)
    try:
        ds = load_dataset(cfg.data, derive_seed(0, "data"))
    except ConfigError as e:
        pytest.skip(f"FMNIST not available: {e}")
    fed = build_federation(ds, cfg.partition, derive_seed(0, "partition"))
    assert fed.meta["min_client_samples"] >= 10 and len(fed.clients) == 100


def test_out_files_of_a_table_at_two_scales_do_not_overwrite_each_other():
    assert rp.out_stem("flux", "ari", "reduced") == "flux_ari"  # the default scale keeps the plain name
    assert rp.out_stem("flux", "ari", "paper") == "flux_ari_paper"


def test_compatible_accepts_only_new_keys_at_their_defaults():
    old = {"seed": "0", "algorithm.name": "fedavg", "federation.rounds": "20", "tracking.experiment": "a"}
    new = {**old, "federation.eval_batch": "256", "tracking.experiment": "b", "fabric.num_threads": "1"}
    defaults = {"federation.eval_batch": "256", "federation.rounds": "3"}
    assert rp.compatible(new, old, defaults) == ["federation.eval_batch"]
    assert rp.compatible({**new, "federation.eval_batch": "64"}, old, defaults) is None  # a new key set away
    assert rp.compatible({**new, "federation.rounds": "10"}, old, defaults) is None  # a changed value
    assert rp.compatible({k: v for k, v in new.items() if k != "seed"}, old, defaults) is None  # a removed key
    assert rp.compatible(old, old, {}) == []


def test_earlier_flux_runs_stand_for_the_row_of_the_guard_they_ran_with():
    """``algorithm.knee_guard``: a Flux run made before the key existed ran the knee alone, so it stands for the
    "Flux" row (none, the default again) and not for "Flux + noise guard"; a run of the time the guard was the
    default logged noise and stands only for the guard row; Flux-prior (K-means) never reads the key, so its runs
    stand whatever they logged."""
    old = {"seed": "0", "algorithm.name": "flux", "algorithm.clustering": "dbscan"}
    defaults = {"algorithm.knee_guard": "none"}
    paper, guarded = {**old, "algorithm.knee_guard": "none"}, {**old, "algorithm.knee_guard": "noise"}
    assert rp.compatible(guarded, old, defaults) is None
    assert rp.compatible(paper, old, defaults) == ["algorithm.knee_guard"]
    newer = {"algorithm.descriptor_part": "full"}  # a key added since the guard-default runs, at its default
    assert rp.compatible({**guarded, **newer}, guarded, {**defaults, **newer}) == ["algorithm.descriptor_part"]
    assert rp.compatible({**paper, **newer}, guarded, {**defaults, **newer}) is None
    prior = {**old, "algorithm.name": "flux_prior", "algorithm.clustering": "kmeans"}
    assert rp.compatible({**prior, "algorithm.knee_guard": "none"}, prior, defaults) == []
    assert rp.compatible({**prior, "algorithm.knee_guard": "none"}, {**prior, "algorithm.knee_guard": "noise"},
                         defaults) == []


def test_the_flux_rows_of_the_guard_resolve_to_the_configs_their_runs_logged():
    """The "Flux" row resolves to knee_guard=none (the default), "Flux + noise guard" to noise, so by config hash a
    run made with the guard is the guard row's and a paper-default run the Flux row's."""
    jobs = rp.plan("flux", rp.paper_tables("flux")[0], "smoke", [0], ["Flux", "Flux + noise guard"], ["feature_l2"],
                   [], "e", "/tmp/u")
    from flplat.experiment import load_config

    guard = {j.method: load_config(j.config, list(j.overrides)).algorithm.knee_guard for j in jobs}
    assert guard == {"Flux": "none", "Flux + noise guard": "noise"}
    assert len({j.key for j in jobs}) == 2


def test_run_params_are_what_the_run_logs_without_tracking():
    from flplat.config_io import flatten, loggable
    from flplat.experiment import load_config

    cfg = load_config(None, ["fabric.num_threads=1"])
    params = rp.run_params(cfg)
    assert params["seed"] == str(cfg.seed) and params["algorithm.name"] == "fedavg"
    assert not any(k.startswith("tracking.") for k in params) and "fabric.num_threads" not in params
    logged = flatten(loggable(cfg))
    left_out = {k for k in logged if k.startswith("tracking.") or k in ("fabric.num_threads", "plugins")}
    assert set(logged) - set(params) == left_out


def test_finished_runs_of_an_earlier_flplat_are_reused_when_compatible(tmp_path, capsys):
    """A run whose hash no longer matches (flplat gained a config key since) still counts when its logged params
    match the job's: simulated by giving the finished run another hash tag."""
    store = tmp_path / "store"
    args = ["reproduce", "dapfl", "table3_digits", "--scale", "smoke", "--cells", "digits_k20_low",
            "--methods", "FedAvg", "--store-dir", str(store)]
    assert main(args) == 0
    client, runs = _runs(store)
    (child,) = [r for r in runs if r.data.tags.get("mlflow.parentRunId")]
    client.set_tag(child.info.run_id, "flplat.reproduce.key", "made-by-an-older-flplat")
    capsys.readouterr()
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"finished run {child.info.run_id} of an earlier flplat stands for it" in err
    assert len(_runs(store)[1]) == 2  # nothing trained again
    # --render-only trains nothing: a new seed's runs are shown as not run
    assert main([*args, "--seeds", "0,1", "--render-only"]) == 0
    out = capsys.readouterr()
    assert "1 of 2 runs not finished, shown as not run (--render-only)" in out.err
    assert "(1) |" in out.out and len(_runs(store)[1]) == 2
    # a job whose params differ is not matched: it trains
    client.set_tag(child.info.run_id, "flplat.reproduce.key", "made-by-an-older-flplat")
    assert main([*args, "--set", "federation.local_epochs=2"]) == 0
    assert "stands for it" not in capsys.readouterr().err
    assert len(_runs(store)[1]) == 3


def test_a_figure_with_nothing_to_draw_is_skipped(tmp_path, capsys, small_mnist):
    """Clust-PSI-PFL's Fig. 5 is drawn from Clust-PSI-PFL's runs: a table rendered without them has no figure."""
    assert main(["reproduce", "clust-psi-pfl", "table3", "--scale", "smoke", "--cells", "dirichlet_50", "--methods",
                 "FedAvg", "--store-dir", str(tmp_path / "store"), "--out", str(tmp_path / "out")]) == 0
    assert "table3: no figure (nothing to draw from the runs finished so far)" in capsys.readouterr().err
    assert not (tmp_path / "out" / "clust-psi-pfl_table3_smoke.png").exists()


def test_a_cell_where_the_metric_is_undefined_is_one_row_with_the_reason_and_runs_nothing(tmp_path):
    """``Table.undefined``: no job is planned for the cell, and the table gives one row with the reason instead of
    a "not run" row per method (Flux's test phase does not exist for P(Y|X), App. F.1)."""
    t = rp.Table("t", "T", [rp.Cell("a", "configs/quickstart.yaml"), rp.Cell("b", "configs/quickstart.yaml")],
                 [rp.Method("FedAvg", ["algorithm.name=fedavg"]), rp.Method("New", ["algorithm.name=fedprox"])],
                 undefined={"b": "no labels at test time"})
    jobs = rp.plan("flux", t, "smoke", [0], None, None, [], "e", str(tmp_path))
    assert {j.cell for j in jobs} == {"a"} and len(jobs) == 2
    md = rp.render_table(t, {"tables": {}}, {("a", "FedAvg"): [0.5], ("a", "New"): [0.6]}, "hdr")
    assert "| b | every method | — | — | — | not defined here: no labels at test time |" in md
    assert "| b | FedAvg" not in md and "| a | New |" in md
    from flplat.studies.papers import flux
    tp = next(x for x in flux.TABLES if x.id == "test_phase")
    assert set(tp.undefined) == {f"concept_yx_l{lv}" for lv in range(1, 9)}
    for x in flux.TABLES:  # other datasets' test-phase tables as MNIST's; CheXpert / Office-Home run every cell
        if x.id.startswith("test_phase"):
            assert set(x.undefined) == {f"concept_yx_l{lv}" for lv in range(1, 9)}, x.id
        else:
            assert not x.undefined, x.id


def test_flux_true_m_row_runs_every_seed_like_flux():
    """The true M of a Flux cell depends on the seed (the partition draws the distributions): under
    --baseline-seeds its row runs every seed, as Flux's own (the same runs)."""
    from flplat.studies.papers import flux
    tau = next(x for x in flux.TABLES if x.id == "tau")
    jobs = rp.plan("flux", tau, "smoke", [0, 1, 2], ["Flux", "true M", "IFCA"], ["feature_l2"], [], "e", "/tmp/u",
                   baseline_seeds=1)
    seeds = {m: sorted(j.seed for j in jobs if j.method == m) for m in ("Flux", "true M", "IFCA")}
    assert seeds == {"Flux": [0, 1, 2], "true M": [0, 1, 2], "IFCA": [0]}
    assert {j.key for j in jobs if j.method == "true M"} == {j.key for j in jobs if j.method == "Flux"}


def test_methods_across_several_tables_apply_where_each_table_has_them(capsys):
    """``known_association ari --methods FedAvg,Flux``: FedAvg is a row of the first table only (ARI has no
    reference row), so the second takes Flux alone; a name in none of the tables is an error; one table keeps the
    strict check; a table with none of the names is left out with one line."""
    from flplat.studies.papers import flux
    ka, ari = (next(x for x in flux.TABLES if x.id == i) for i in ("known_association", "ari"))
    sel = rp.per_table([ka, ari], ["FedAvg", "Flux"], ["label_l2"])
    assert sel == {"known_association": (["FedAvg", "Flux"], ["label_l2"]), "ari": (["Flux"], ["label_l2"])}
    with pytest.raises(ConfigError, match="--methods=Nope is in none of the tables known_association, ari"):
        rp.per_table([ka, ari], ["FedAvg", "Nope"], None)
    assert rp.per_table([ari], ["FedAvg"], None) == {"ari": (["FedAvg"], None)}  # plan() then refuses it
    with pytest.raises(ConfigError, match="--methods=FedAvg unknown"):
        rp.plan("flux", ari, "smoke", [0], ["FedAvg"], None, [], "e", "/tmp/u")
    assert rp.per_table([ka, ari], ["FedAvg"], None) == {"known_association": (["FedAvg"], None)}
    assert "ari: none of the --methods given is in this table; left out" in capsys.readouterr().err


def test_every_flux_table_runs_every_seed_for_the_papers_flux_row():
    """Under --baseline-seeds the paper's own row ("Flux") keeps every seed in every Flux table, the scalability one
    included (its last row is the opt-in "Flux (d' only)", which alone was the default focus)."""
    from flplat.studies.papers import flux
    for table in flux.TABLES:
        if table.kind == "train" and any(m.name == "Flux" for m in table.methods):
            assert table.all_seeds("Flux"), table.id


def test_a_run_logged_before_the_fedartml_metrics_gives_no_old_value_under_the_new_names(tmp_path):
    """A finished run stored before ``hellinger``, ``jsd``, ``emd`` became FedArtML's multi-client definitions (its
    three values are client-to-global means) is read back with them as ``*_to_global``, by the reproduction store
    and by the report tables; a run of today is read back as logged."""
    from flplat.tracking.reports import collect_runs

    store = rp.Store("reproduce-x", str(tmp_path))
    old = {"wpsi": 2.0, "hellinger": 0.4, "jsd": 0.5, "emd": 0.45, "global_accuracy": 0.8}
    new = {**old, "hellinger": 0.7, "hellinger_to_global": 0.4, "jsd_to_global": 0.5, "emd_to_global": 0.45}
    for key, metrics in (("old", old), ("new", new)):
        run = store.client.create_run(store.exp_id, tags={"flplat.reproduce.paper": "x", "flplat.reproduce.key": key})
        store.client.log_param(run.info.run_id, "algorithm.name", "fedavg")
        for k, v in metrics.items():
            store.client.log_metric(run.info.run_id, k, v)
        store.client.set_terminated(run.info.run_id, "FINISHED")
    done = store.finished("x")
    assert done["old"][1] == {"wpsi": 2.0, "hellinger_to_global": 0.4, "jsd_to_global": 0.5, "emd_to_global": 0.45,
                              "global_accuracy": 0.8}
    assert done["new"][1] == new
    from flplat.tracking.store import store_uris

    rows = collect_runs("reproduce-x", store_uris(None, str(tmp_path))[0])
    assert sorted(r["metrics"].get("hellinger", -1) for r in rows) == [-1, 0.7]
    assert all(r["metrics"]["hellinger_to_global"] == 0.4 for r in rows)
