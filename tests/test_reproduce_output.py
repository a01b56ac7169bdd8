"""What `flplat reproduce` says about its numbers: the header states which number a cell holds (from the table's
definition); a row whose every run was refused before it started ends the command with exit 1 and the reason; a run
that finished without the table's value (a clustered method that never started clustering) is said as such, apart
from "not run" and "failed"; a user's row label may have spaces and signs, as the papers' rows do. Digits data and
smoke scale only."""

from __future__ import annotations

import pytest

from flplat.cli import main
from flplat.errors import ConfigError
from flplat.studies import reproduce as rp
from flplat.studies.reproduction.store import FAILED, NO_CLUSTERS, NO_VALUE


def _table(paper: str, tid: str):
    return next(t for t in rp.paper_tables(paper) if t.id == tid)


def test_the_header_says_which_number_each_cell_holds():
    assert rp.value_note(_table("dapfl", "table3_digits")) == (
        "Each value is the mean of mean_local_accuracy over the last 10 rounds (mean_local_accuracy_last10); in "
        "percent (× 100). Ours is the mean ± std over the seeds (population std) of the runs with a value, their "
        "number in brackets.")
    # a row's own metric (PQFed's IFCA), a cell's step of a series (PQFed Table VIII), C_acc, the best value
    assert rp.value_note(_table("pqfed", "table6")).startswith(
        "Each value is target_accuracy at the end of the run (its last logged value); per row, IFCA: global_accuracy "
        "at the end of the run (its last logged value); in percent (× 100).")
    assert rp.value_note(_table("pqfed", "table8")).startswith(
        "Each value is, per cell, target_accuracy_by_stage at the cell's step (stage1: 1, stage2: 2, stage3: 3, ")
    assert "; algorithm2: algorithm2_accuracy at the end of the run" in rp.value_note(_table("pqfed", "table8"))
    assert rp.describe_metric("rounds_to_acc40") == ("the first round at which the run's accuracy "
                                                     "(metrics.accuracy_key) reached 40 % (rounds_to_acc40)")
    assert rp.describe_metric("best_global_test_accuracy") == \
        "the best global_test_accuracy over the run's rounds (best_global_test_accuracy)"
    t = rp.Table("t", "T", [rp.Cell("c")], [rp.Method("A")], metric="tau", kind="train")
    assert rp.value_note(t).startswith("Each value is tau at the end of the run (its last logged value). Ours")
    assert rp.value_note(_table("cafa", "table3")).startswith("Each value is the row's number from the cell's "
                                                               "analysis (no training).")


def test_a_row_label_may_have_spaces_and_signs():
    m = rp.parse_added_method("Flux + my guard (v2)=algorithm.name=fedprox,algorithm.mu=0.1")
    assert (m.name, m.overrides) == ("Flux + my guard (v2)", ["algorithm.name=fedprox", "algorithm.mu=0.1"])
    for bad in ("a: b=fedprox", "a|b=fedprox", "+ =fedprox", "a #b=fedprox", "a ${b}=fedprox"):
        with pytest.raises(ConfigError, match="the row label"):
            rp.parse_added_method(bad)


def test_a_row_whose_every_run_is_refused_exits_1_with_the_reason(tmp_path, capsys):
    """An added row whose value only the method checks once the federation exists (IFCA's 500 clusters for 20
    clients): its runs are skipped, the table is still printed, and the command exits 1 naming the row and why;
    ``--render-only`` the same from the reasons kept on the parent run. The header says which number a cell holds."""
    args = ["reproduce", "dapfl", "table3_digits", "--scale", "smoke", "--cells", "digits_k20_low", "--methods",
            "FedAvg", "--store-dir", str(tmp_path), "--add-method",
            "Too many clusters + x=algorithm.name=ifca,algorithm.num_clusters=500"]
    assert main(args) == 1
    got = capsys.readouterr()
    assert "| digits_k20_low | Too many clusters + x | not in the paper (added method) | — | — | not run: skipped, " \
           "see note 1 |" in got.out
    assert "| digits_k20_low | FedAvg | 66.83 | " in got.out and "(1) |" in got.out
    assert "Each value is the mean of mean_local_accuracy over the last 10 rounds" in got.out
    line = ("flplat: error: table3_digits: row 'Too many clusters + x': all 1 of its runs were refused before they "
            "started: algorithm.num_clusters=500 is out of range for 20 clients")
    assert line in got.err
    assert sum(x.startswith("flplat: error: ") for x in got.err.splitlines()) == 1  # one line per row; FedAvg ran
    assert main([*args, "--render-only"]) == 1
    assert line in capsys.readouterr().err
    assert main(args[:-2]) == 0  # the paper's row alone: all fine


def test_a_run_that_finished_without_clustering_says_so(tmp_path):
    """A finished run that logged no τ (its clustering never started) is "finished, clustering never started" with
    what the run logged; "not run" (no run) and "failed" (ended with an error) stay apart."""
    store = rp.Store("e", str(tmp_path))
    run = store.client.create_run(store.exp_id)
    rid = run.info.run_id
    for k, v in (("federation.rounds", "2"), ("algorithm.start_round", "0")):
        store.client.log_param(rid, k, v)
    store.client.log_metric(rid, "clustering_started", 0.0, step=2)
    store.client.log_metric(rid, "known_association_accuracy", 0.5, step=2)
    store.client.set_terminated(rid, "FINISHED")
    why = store.no_value(rid, "tau")
    assert why == (NO_CLUSTERS + "the run finished after 2 rounds without logging tau; clustering_started = 0 at its "
                   "last round; algorithm.start_round=0: the dynamic start rule did not fire within its rounds")
    assert store.no_value(rid, "ari@2") == NO_CLUSTERS + why[len(NO_CLUSTERS):].replace("tau", "ari")
    other = store.client.create_run(store.exp_id).info.run_id
    store.client.log_param(other, "federation.rounds", "3")
    assert store.no_value(other, "ad") == NO_VALUE + "the run finished after 3 rounds without logging ad"
    t = rp.Table("tau", "T", [rp.Cell("c")], [rp.Method("Flux"), rp.Method("IFCA"), rp.Method("CFL"),
                                             rp.Method("FeSEM")], metric="tau", reference=None, scale_factor=1.0)
    vals = {"tables": {"tau": {"source": "x", "default": "not reported"}}}
    md = rp.render_table(t, vals, {("c", "FeSEM"): [3.0]}, "hdr", skipped={
        ("c", "Flux"): [(0, why)], ("c", "IFCA"): [(0, FAILED + "diverged at round 2")],
        ("c", "FeSEM"): [(1, why)]})
    assert "| c | Flux | not reported | — | — | finished, clustering never started, see note 1 |" in md
    assert "| c | IFCA | not reported | — | — | failed, see note 2 |" in md
    assert "| c | CFL | not reported | — | — | not run |" in md
    assert "| c | FeSEM | not reported | 3 ± 0 (1) | — | no paper value; seed 1 finished, clustering never " \
           "started, see note 3 |" in md
    assert ("1. finished, clustering never started: seed 0: the run finished after 2 rounds without logging tau; "
            "clustering_started = 0 at its last round; algorithm.start_round=0: the dynamic start rule did not "
            "fire within its rounds") in md
    assert "2. failed: seed 0: diverged at round 2" in md


def test_flux_at_smoke_scale_finishes_before_clustering_and_the_tau_table_says_so(tmp_path, capsys):
    """Flux's 2 smoke rounds end before its dynamic start: its τ cell says so (on digits, no files needed)."""
    assert main(["reproduce", "flux", "tau", "--scale", "smoke", "--cells", "label_l5", "--methods", "Flux",
                 "--store-dir", str(tmp_path), "--set", "data.name=digits"]) == 0
    out = capsys.readouterr().out
    assert "| label_l5 | Flux | not reported | — | — | finished, clustering never started, see note 1 |" in out
    assert "1. finished, clustering never started: seed 0: the run finished after 2 rounds without logging tau; " \
           "clustering_started = 0 at its last round; algorithm.start_round=0: the dynamic start rule" in out


def test_an_empty_class_bucket_says_no_many_classes_not_not_run(tmp_path):
    """DA-PFL Table IV on digits: the runs finished, but no client's class has over 80 training samples, so the
    Many rows read "no Many classes" with the rule in the note (not "not run", not a bare "without a value")."""
    store = rp.Store("e", str(tmp_path))
    rid = store.client.create_run(store.exp_id).info.run_id
    for k, v in (("federation.rounds", "100"), ("metrics.class_bucket_edges", "[30.0, 80.0]")):
        store.client.log_param(rid, k, v)
    store.client.set_terminated(rid, "FINISHED")
    why = store.no_value(rid, "acc_many_last10")
    assert why == ("no Many classes: the run finished after 100 rounds and no client's test classes fell in the Many "
                   "bucket by their training counts (metrics.class_bucket_edges=[30.0, 80.0]: Few < a <= Medium <= b "
                   "< Many)")
    assert store.no_value(rid, "acc_few_last10").startswith("no Few classes: ")
    assert store.no_value(rid, "acc_total").startswith(NO_VALUE)  # not a bucket
    t = rp.Table("table4", "T", [rp.Cell("digits_many")], [rp.Method("FedAvg")], metric="acc_many_last10",
                 reference=None, scale_factor=100.0)
    vals = {"tables": {"table4": {"source": "x", "default": "not reported"}}}
    md = rp.render_table(t, vals, {}, "hdr", skipped={("digits_many", "FedAvg"): [(0, why), (1, why)]})
    assert "| digits_many | FedAvg | not reported | — | — | no Many classes, see note 1 |" in md
    assert "1. no Many classes: seeds 0, 1: the run finished after 100 rounds and no client's" in md
