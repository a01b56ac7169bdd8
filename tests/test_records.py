"""Results that accumulate across machines: ``flplat reproduce --out``'s run records carry what a table needs
(:mod:`flplat.studies.reproduction.records`), and ``--import`` turns them into runs of another store
(:mod:`flplat.studies.reproduction.importing`): the table renders the same, nothing is trained again, a second import
adds nothing, records without a config (the ones committed before) are matched to their job and marked, records of
other code are counted and trained again with ``--rerun-stale``, a config in the old key form is keyed again."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest
from conftest import REPO

from flplat.cli import main
from flplat.config_io import config_key
from flplat.tracking import provenance

GRID = ["reproduce", "dapfl", "table3_digits", "--scale", "smoke", "--cells", "digits_k20_low", "--methods", "FedAvg",
        "--set", "fabric.num_threads=1"]
RECORDS = "dapfl_table3_digits_smoke_runs.jsonl"
# the fields of the records committed before records carried their config
OLD_FIELDS = ("cell", "config_key", "method", "metrics", "run_id", "seed", "table", "value")


def _run(args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(args)
    return rc, out.getvalue(), err.getvalue()


def _client(store):
    from mlflow.tracking import MlflowClient

    from flplat.tracking.store import store_uris

    return MlflowClient(tracking_uri=store_uris(None, str(store))[0])


def _kids(store, experiment="reproduce-dapfl"):
    c = _client(store)
    exp = c.get_experiment_by_name(experiment)
    return [r for r in c.search_runs([exp.experiment_id]) if r.data.tags.get("mlflow.parentRunId")] if exp else []


def _table(text: str) -> str:
    return text[text.index("### "):]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """One tiny table trained once (seed 0) with ``--out``: its store, its records and the table it printed."""
    d = tmp_path_factory.mktemp("made")
    rc, out, err = _run([*GRID, "--store-dir", str(d / "store"), "--out", str(d / "out")])
    assert rc == 0, err
    recs = [json.loads(x) for x in (d / "out" / RECORDS).read_text().splitlines()]
    return {"dir": d, "store": d / "store", "out": d / "out", "table": _table(out), "recs": recs}


def _write(path: Path, recs: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


# ------------------------------------------------------------------------------------------ what a record carries


def test_a_record_carries_its_config_code_status_times_and_what_the_figure_read(made):
    from flplat.studies.reproduction.importing import record_cfg

    (rec,) = made["recs"]
    assert (rec["record"], rec["paper"], rec["scale"], rec["parent"], rec["status"]) == \
        (2, "dapfl", "smoke", "dapfl/table3_digits@smoke", "FINISHED")
    assert "tracking" not in rec["config"] and rec["config"]["algorithm"]["name"] == "fedavg"
    assert config_key(record_cfg(rec["config"])) == rec["config_key"]  # the config alone gives the run's key back
    assert rec["code"]["key"] == provenance.code_identity(record_cfg(rec["config"])).key and rec["stale"] is None
    assert rec["start_time"] < rec["end_time"]
    # DA-PFL's figure draws mean_local_accuracy per round: exactly that history is in the record, both rounds
    assert list(rec["history"]) == ["mean_local_accuracy"] and [s for s, _ in rec["history"]["mean_local_accuracy"]] \
        == [1, 2]
    assert not any(k.startswith("system/") for k in rec["metrics"])


# ------------------------------------------------------------------------------------------------ the round trip


def test_imported_records_render_the_same_table_and_train_nothing(made, tmp_path):
    store, out2 = tmp_path / "store", tmp_path / "out2"
    rc, out, err = _run([*GRID, "--store-dir", str(store), "--import", str(made["out"]), "--render-only",
                         "--out", str(out2)])
    assert rc == 0, err
    assert f"{made['out'] / RECORDS}: 1 records: 1 imported" in err
    assert _table(out) == made["table"]  # the same table, numbers and marks
    assert (out2 / "dapfl_table3_digits_smoke.png").is_file()  # the figure, drawn from the imported history
    rc, out, err = _run([*GRID, "--store-dir", str(store)])  # the grid itself: nothing to train
    assert rc == 0 and "table3_digits: 1 of 1 runs already finished, skipped" in err and "[1/1]" not in err
    assert _table(out) == made["table"]
    (run,) = _kids(store)
    (orig,) = _kids(made["store"])
    tags = run.data.tags
    assert tags["flplat.import.run_id"] == orig.info.run_id and tags["flplat.import.file"].endswith(RECORDS)
    assert tags["flplat.config_key"] == tags["flplat.reproduce.key"] == orig.data.tags["flplat.config_key"]
    assert tags["flplat.code"] == orig.data.tags["flplat.code"]  # its code identity, as the run recorded it
    assert (run.info.start_time, run.info.end_time) == (orig.info.start_time, orig.info.end_time)
    assert {k: v for k, v in run.data.params.items() if not k.startswith("tracking.")} == \
        {k: v for k, v in orig.data.params.items() if k in run.data.params and not k.startswith("tracking.")}
    # written again from the imported store, the records say the same (a re-import elsewhere finds the same run)
    (again,) = [json.loads(x) for x in (out2 / RECORDS).read_text().splitlines()]
    (rec,) = made["recs"]
    assert {k: again[k] for k in ("config", "config_key", "code", "metrics", "history", "value", "run_id")} == \
        {k: rec[k] for k in ("config", "config_key", "code", "metrics", "history", "value", "run_id")}
    assert again["run_id"] == orig.info.run_id != run.info.run_id  # the run that made it, not the imported copy


def test_importing_twice_adds_nothing_nor_into_the_store_that_made_the_runs(made, tmp_path):
    store = tmp_path / "store"
    assert _run(["reproduce", "--import", str(made["out"]), "--store-dir", str(store)])[0] == 0
    n = len(_client(store).search_runs([_client(store).get_experiment_by_name("reproduce-dapfl").experiment_id]))
    rc, _, err = _run(["reproduce", "--import", str(made["out"] / RECORDS), "--store-dir", str(store)])
    assert rc == 0 and "1 records: 0 imported, 1 already in the store" in err
    assert len(_client(store).search_runs([_client(store).get_experiment_by_name("reproduce-dapfl")
                                           .experiment_id])) == n == 2  # the run and its table's parent
    copy = tmp_path / "made_store"
    import shutil

    shutil.copytree(made["store"], copy)
    rc, _, err = _run(["reproduce", "--import", str(made["out"]), "--store-dir", str(copy)])
    assert rc == 0 and "0 imported, 1 already in the store" in err and len(_kids(copy)) == 1


# ------------------------------------------------------------------------------ records without a config (older)


def test_a_record_without_its_config_is_matched_to_its_job_marked_and_trained_again_on_request(made, tmp_path):
    (rec,) = made["recs"]
    old = {k: rec[k] for k in OLD_FIELDS}
    old["config_key"] = "0123456789abcdef"  # the hash of the config form of its day
    other = {**old, "method": "MyOwn"}  # an added method: no job of the table has it
    f = _write(tmp_path / "old" / RECORDS, [old, other])
    store = tmp_path / "store"
    rc, out, err = _run([*GRID, "--store-dir", str(store), "--import", str(f), "--render-only"])
    assert rc == 0, err
    assert (f"{f}:2: table3_digits digits_k20_low MyOwn s0: not imported: table3_digits has no method 'MyOwn' now "
            "(an added method, or renamed)") in err
    assert f"{f}: 2 records: 1 imported, 1 not imported (listed above); 1 without their config (unknown code)" in err
    assert ("table3_digits: 1 of 1 runs come from other code than this command's (1 imported from records without "
            "their config, matched to their job by table, cell, method, seed and scale)") in err
    assert ("Code: 1 of 1 runs come from other code than this command's, 1 of them imported from records without "
            "their config") in out
    assert f"| {100 * rec['value']:.4g} ± 0 (1, 1 from other code) |" in out  # the record's value, marked
    (run,) = _kids(store)
    assert run.data.tags["flplat.import.no_config"] == "true" and "flplat.code" not in run.data.tags
    assert run.data.tags["flplat.import.config_key"] == "0123456789abcdef"
    assert run.data.tags["flplat.config_key"] == rec["config_key"]  # keyed as the job the table defines now
    rc, out, err = _run([*GRID, "--store-dir", str(store), "--rerun-stale"])
    assert rc == 0 and "table3_digits: 1 run(s) from other code trained again (--rerun-stale)" in err
    assert "from other code" not in out
    assert _client(store).get_run(run.info.run_id).data.tags["flplat.superseded_by"] in \
        {r.info.run_id for r in _kids(store)} - {run.info.run_id}


def test_a_record_without_its_times_is_written_again_without_times_and_not_summed(made, tmp_path):
    (rec,) = made["recs"]
    f = _write(tmp_path / "old" / RECORDS, [{k: rec[k] for k in OLD_FIELDS}])
    store, out2, doc = tmp_path / "store", tmp_path / "out2", tmp_path / "results.md"
    rc, _, err = _run([*GRID, "--store-dir", str(store), "--import", str(f), "--render-only", "--out", str(out2),
                       "--results", str(doc)])
    assert rc == 0, err
    (run,) = _kids(store)
    assert run.data.tags["flplat.import.untimed"] == "true"
    (again,) = [json.loads(x) for x in (out2 / RECORDS).read_text().splitlines()]
    assert again["start_time"] is None and again["end_time"] is None  # not the import's time as the run's
    assert "1 runs, imported from records without their run times (run time not known)" in doc.read_text()
    assert f"--out {out2} --import {f} --set" in doc.read_text()  # the command says where its runs came from
    # a record with its times keeps them and is summed
    (timed,) = made["recs"]
    assert isinstance(timed["start_time"], int) and "flplat.import.untimed" not in \
        _kids(made["store"])[0].data.tags


def test_records_without_a_config_of_grids_with_other_settings_are_not_both_taken(made, tmp_path):
    """Two records without a config that match one job but recorded different hashes come from grids run with
    different settings (``--set``): the second is reported, in one import or a later one."""
    (rec,) = made["recs"]
    a = {k: rec[k] for k in OLD_FIELDS} | {"config_key": "aaaaaaaaaaaaaaaa"}
    b = a | {"config_key": "bbbbbbbbbbbbbbbb", "value": 0.5}
    fa, fb = _write(tmp_path / "a" / RECORDS, [a]), _write(tmp_path / "b" / RECORDS, [b])
    store = tmp_path / "store"
    rc, _, err = _run(["reproduce", "--import", str(fa), "--import", str(fb), "--store-dir", str(store)])
    assert rc == 0 and f"{fb}:1: table3_digits digits_k20_low FedAvg s0: not imported: it matches the job that {fa}:1" \
        in err and "recorded config hashes differ (bbbbbbbbbbbbbbbb and aaaaaaaaaaaaaaaa)" in err
    rc, _, err = _run(["reproduce", "--import", str(fb), "--store-dir", str(store)])
    assert rc == 0 and "not imported: its job's run" in err and "recorded config hash differs" in err
    assert len(_kids(store)) == 1


# ----------------------------------------------------------------------------------------- records of other code


def test_a_record_of_other_code_is_counted_and_trained_again_with_rerun_stale(made, tmp_path):
    (rec,) = made["recs"]
    f = _write(tmp_path / "other" / RECORDS, [rec | {"code": rec["code"] | {"key": "made-elsewhere"}}])
    store = tmp_path / "store"
    rc, out, err = _run([*GRID, "--store-dir", str(store), "--import", str(f)])
    assert rc == 0 and "1 of 1 runs already finished" in err
    assert "(1 made by another flplat source or plugin code)" in err and " (1, 1 from other code) |" in out
    (run,) = _kids(store)
    assert run.data.tags["flplat.code"] == "made-elsewhere" and "flplat.import.no_config" not in run.data.tags
    rc, out, err = _run([*GRID, "--store-dir", str(store), "--rerun-stale"])
    assert rc == 0 and "1 run(s) from other code trained again (--rerun-stale)" in err and "other code" not in out
    assert len(_kids(store)) == 2


# ------------------------------------------------------------------------------------ configs in the old key form


def test_a_record_whose_config_is_in_the_old_key_form_is_keyed_again(made, tmp_path):
    """A record written before datasets and partitions had their own keys: its config holds the old flat keys
    (here those of other entries, at their old defaults, as a full dump of that time had them) and the hash of that
    form; it is upgraded, keyed as the job it is and found finished by the grid."""
    (rec,) = made["recs"]
    cfg = json.loads(json.dumps(rec["config"]))
    cfg["data"].update({"synthetic_samples": 2000, "text": {"max_length": 25}})
    cfg["partition"].update({"pqfed_sources": 15, "natural_test": "auto"})
    f = _write(tmp_path / "old_form" / RECORDS, [rec | {"config": cfg, "config_key": "fedcba9876543210"}])
    store = tmp_path / "store"
    rc, out, err = _run([*GRID, "--store-dir", str(store), "--import", str(f)])
    assert rc == 0, err
    assert "1 records: 1 imported; 1 keyed again from an older config form" in err
    assert "1 of 1 runs already finished, skipped" in err and _table(out) == made["table"]
    (run,) = _kids(store)
    assert run.data.tags["flplat.config_key"] == rec["config_key"]
    assert run.data.tags["flplat.import.config_key"] == "fedcba9876543210"


def test_record_cfg_renames_old_keys_and_sets_what_earlier_versions_ran_with():
    from flplat.experiment import load_config
    from flplat.studies.reproduction.grid import record_config
    from flplat.studies.reproduction.importing import record_cfg

    new = load_config(None, ["data.name=synthetic", "partition.name=shift", "partition.type=label",
                             "partition.level=3", "partition.num_clients=6"])
    old = record_config(new)
    part = old["partition"]
    part["shift_type"], part["shift_level"] = part.pop("type"), part.pop("level")  # the flat schema's names
    with pytest.warns(DeprecationWarning):
        assert config_key(record_cfg(old)) == config_key(new)
    # APFL's steps mixed with w after the step before algorithm.mix_with existed: a record without the key ran that
    apfl = record_config(load_config(None, ["algorithm.name=apfl"]))
    assert apfl["algorithm"].pop("mix_with") == "before"
    assert record_cfg(apfl).algorithm.mix_with == "after"
    assert config_key(record_cfg(apfl)) != config_key(load_config(None, ["algorithm.name=apfl"]))


# ------------------------------------------------------------------------------------ failed runs and bad input


def test_a_failed_record_shows_its_error_and_is_written_again(made, tmp_path):
    from flplat.studies.reproduction.importing import record_cfg

    (rec,) = made["recs"]
    cfg = json.loads(json.dumps(rec["config"])) | {"seed": 1}
    failed = rec | {"seed": 1, "config": cfg, "config_key": config_key(record_cfg(cfg)), "status": "FAILED",
                    "error": "diverged: train_loss is nan at round 2", "run_id": None, "metrics": {}, "history": {},
                    "value": None}
    f = _write(tmp_path / "in" / RECORDS, [rec, failed])
    store, out2 = tmp_path / "store", tmp_path / "out2"
    rc, out, err = _run([*GRID, "--seeds", "0,1", "--store-dir", str(store), "--import", str(f), "--render-only",
                         "--out", str(out2)])
    assert rc == 0, err
    assert "2 records: 2 imported\n" in err and "failed: seed 1: diverged: train_loss is nan at round 2" in out
    again = {r["seed"]: r for r in map(json.loads, (out2 / RECORDS).read_text().splitlines())}
    assert again[1]["status"] == "FAILED" and again[1]["error"] == "diverged: train_loss is nan at round 2"
    assert again[1]["config_key"] == failed["config_key"]
    rc, _, err = _run(["reproduce", "--import", str(f), "--store-dir", str(store)])
    assert "0 imported, 2 already in the store" in err  # a failed run is not imported twice either


def test_bad_records_are_one_line_exit_2_and_nothing_is_written(made, tmp_path):
    store = tmp_path / "store"
    rc, _, err = _run(["reproduce", "--import", str(tmp_path / "nope"), "--store-dir", str(store)])
    assert rc == 2 and err.strip().startswith("flplat: error: --import=") and "no such file or directory" in err
    bad = tmp_path / "bad" / "x_runs.jsonl"
    bad.parent.mkdir()
    bad.write_text('{"table": "t", "cell": "c"}\n')
    rc, _, err = _run(["reproduce", "--import", str(made["out"]), "--import", str(bad), "--store-dir", str(store)])
    assert rc == 2 and f"{bad}:1 is not a run record" in err and len(err.strip().splitlines()) == 1
    assert not _kids(store)  # the good file before it was not imported either
    bad.write_text("not json\n")
    rc, _, err = _run(["reproduce", "--import", str(bad), "--store-dir", str(store)])
    assert rc == 2 and f"{bad}:1 is not a JSON line" in err


# ------------------------------------------------------------------------------------------ the committed records


def test_the_committed_cafa_table4_records_render_the_committed_numbers(tmp_path):
    """``docs/results/cafa/reproduce`` imported into an empty store with the table: ``--render-only`` gives the
    numbers of the committed table, each marked as imported without its config. Its records
    (``cafa_table4_runs.jsonl``, written before records carried their config, read at a step: the windowed accuracy
    at round 30) are read before the other files of the directory, whose records of the same jobs come from later
    runs under another config form (Figs. 4, 6 trained them again): the table's own records win."""
    done = REPO / "docs/results/cafa/reproduce"

    def rows(text):
        return {tuple(c.strip() for c in line.split("|")[1:3]): re.sub(r", \d+ from other code", "",
                                                                       line.split("|")[4].strip())
                for line in text.splitlines() if line.startswith("| fmnist_")}

    rc, out, err = _run(["reproduce", "cafa", "table4", "--scale", "reduced", "--cells", "fmnist_0-29",
                         "--baseline-seeds", "1", "--render-only", "--store-dir", str(tmp_path / "store"),
                         "--import", str(done)])
    assert rc == 0, err
    assert "cafa_table4_runs.jsonl: 7 records: 7 imported; 7 without their config (unknown code)" in err
    assert "cafa_fig6_runs.jsonl:2: fig6 fmnist_round10 FedAvg s1: not imported: it matches the job that " \
        f"{done / 'cafa_table4_runs.jsonl'}:2" in err
    want = rows((done / "cafa_table4.md").read_text())
    assert rows(out) == want and want[("fmnist_0-29", "CAFA")] == "78.4 ± 2.6 (3)"
    assert "Code: 7 of 7 runs come from other code than this command's, 7 of them imported" in out


# ------------------------------------------------------------------------- another machine: what counts as finished


def test_on_the_importing_machine_only_a_changed_config_is_left_to_run(made, tmp_path):
    """Store B holds only the imported records: the grid as it ran has nothing left to run; the same grid with
    another setting (``--set``: another config, another key) has its job to run, and the imported run is not taken
    for it."""
    store = tmp_path / "store"
    assert _run(["reproduce", "--import", str(made["out"]), "--store-dir", str(store)])[0] == 0
    rc, out, err = _run([*GRID, "--store-dir", str(store), "--print-jobs"])
    assert rc == 0 and out.strip() == "", out
    rc, out, err = _run([*GRID, "federation.local_epochs=2", "--store-dir", str(store), "--print-jobs"])
    (line,) = out.strip().splitlines()
    assert rc == 0 and "federation.local_epochs=2" in line and "table3_digits" in line


def test_a_record_without_its_config_whose_hash_is_its_jobs_is_keyed_as_that_job_with_its_code(made, tmp_path):
    """A record of the earlier format (no config) that recorded the job's config hash and its code: the config it ran
    is the job's, to the hash; it is not marked as imported without its config, and its code counts as recorded."""
    (rec,) = made["recs"]
    f = _write(tmp_path / "old" / RECORDS, [{k: rec[k] for k in (*OLD_FIELDS, "code", "stale")}])
    store = tmp_path / "store"
    rc, out, err = _run([*GRID, "--store-dir", str(store), "--import", str(f), "--render-only"])
    assert rc == 0, err
    assert f"{f}: 1 records: 1 imported\n" in err and _table(out) == made["table"]
    (run,) = _kids(store)
    assert "flplat.import.no_config" not in run.data.tags and run.data.tags["flplat.code"] == rec["code"]["key"]
    f2 = _write(tmp_path / "nocode" / RECORDS, [{k: rec[k] for k in OLD_FIELDS}])  # no code recorded: unknown code
    store2 = tmp_path / "store2"
    rc, out, err = _run([*GRID, "--store-dir", str(store2), "--import", str(f2), "--render-only"])
    assert rc == 0 and "(1 made before runs recorded their code)" in err and "(1, 1 from other code)" in out


def test_pooled_cell_records_name_their_member_and_old_ones_are_told_apart_by_their_hash(tmp_path):
    """A pooled cell runs one job per member under the cell's id: a record names its member; a record of the
    earlier format (no config, no member) is matched to the member whose config hash it recorded, and refused when
    it recorded none of theirs."""
    from flplat.studies.reproduction.grid import paper_tables, plan
    from flplat.studies.reproduction.importing import import_records

    t = next(t for t in paper_tables("flux") if t.id == "test_assignment")
    jobs = plan("flux", t, "reduced", [0], ["Flux"], ["mnist_label"], [], "reproduce-flux", str(tmp_path / "s"))
    assert [j.member for j in jobs] == ["label_l2", "label_l8"]
    old = {"table": "test_assignment", "cell": "mnist_label", "method": "Flux", "seed": 0, "run_id": "r",
           "value": 0.5, "metrics": {"test_phase_accuracy": 0.5}}
    f = _write(tmp_path / "in" / "flux_test_assignment_runs.jsonl",
               [old | {"config_key": jobs[1].key}, old | {"config_key": "0123456789abcdef"}])
    got = import_records([str(f)], str(tmp_path / "store"))
    assert got.runs == 1 and len(got.unmatched) == 1
    assert "name 2 jobs (s0 label_l2, s0 label_l8) and its config hash is none of theirs" in got.unmatched[0]
    (run,) = _kids(tmp_path / "store", "reproduce-flux")
    assert run.data.tags["flplat.config_key"] == jobs[1].key and run.info.run_name == \
        "test_assignment/mnist_label/label_l8/Flux/s0"
    assert "flplat.import.no_config" not in run.data.tags


def test_committed_records_of_pooled_cells_name_their_member():
    """Every committed record of a pooled cell (one run per member under the cell's id) names the member it ran:
    without it a record of a config-less run matches several jobs and is not imported on another machine."""
    from flplat.studies.reproduction.grid import PAPERS, paper_tables
    from flplat.studies.reproduction.records import name_parts, read_records

    pooled = {(p, t.id, c.id): {m.id for m in c.members} for p in PAPERS for t in paper_tables(p) for c in t.cells
              if c.members}
    bad, seen = [], 0
    for f in sorted((REPO / "docs" / "results").glob("*/reproduce/*_runs.jsonl")):
        paper = name_parts(f)[0]
        for n, rec in enumerate(read_records(f), 1):
            members = pooled.get((paper, rec["table"], rec["cell"]))
            if members is not None:
                seen += 1
                if rec.get("member") not in members:
                    bad.append(f"{f.name}:{n} {rec['cell']} member={rec.get('member')!r}")
    assert seen > 300 and not bad, bad[:5]


def test_committed_flux_records_of_the_tuned_pfedme_row_carry_their_config():
    """Flux's "pFedMe" row took the point ``flplat tune`` chose (configs/flux/pfedme_tuned.yaml) after the first
    level runs: the config-less records of those runs ran pFedMe's own paper's settings, and matched by table, cell,
    method and seed they showed 10-30 % in the tuned row's cells. Every committed record of that row carries its
    config (the old ones were trained again with ``--rerun-stale``), so none stands for a job it did not run."""
    from omegaconf import OmegaConf

    from flplat.studies.reproduction.records import read_records

    tuned = OmegaConf.load(REPO / "configs" / "flux" / "pfedme_tuned.yaml").algorithm
    point = {k: float(tuned[k]) for k in ("lam", "lr", "personal_lr")}
    bad, seen = [], 0
    for f in sorted((REPO / "docs" / "results" / "flux" / "reproduce").glob("*_runs.jsonl")):
        for n, rec in enumerate(read_records(f), 1):
            if rec.get("method") == "pFedMe":
                seen += 1
                algo = (rec.get("config") or {}).get("algorithm", {})
                if rec.get("config_inferred") or {k: algo.get(k) for k in point} != point:
                    bad.append(f"{f.name}:{n} {rec['cell']} s{rec['seed']}")
    assert seen > 50 and not bad, bad[:5]


def test_a_record_made_under_another_data_root_is_this_machines_run(made, tmp_path):
    """Where the inputs were is not what a run computed: a record whose config names another ``data.root`` (another
    machine's directory) is keyed with the importing command's, so the grid of this machine finds it finished."""
    (rec,) = made["recs"]
    cfg = json.loads(json.dumps(rec["config"]))
    cfg["data"]["root"] = "/elsewhere/data"
    f = _write(tmp_path / "other_root" / RECORDS, [rec | {"config": cfg}])
    store = tmp_path / "store"
    here = str(tmp_path / "data_here")
    rc, out, err = _run([*GRID, f"data.root={here}", "--store-dir", str(store), "--import", str(f)])
    assert rc == 0, err
    assert "1 of 1 runs already finished, skipped" in err and _table(out) == made["table"]
    (run,) = _kids(store)
    assert run.data.params["data.root"] == here


def test_a_record_without_its_config_made_without_a_data_root_is_the_job_of_one_that_sets_it(made, tmp_path):
    """A record of the earlier format (no config) made without ``data.root``, imported by a command that sets it: its
    hash is the job's at the default location, so it is keyed as that job with the code it recorded, not marked as
    imported without its config."""
    (rec,) = made["recs"]
    f = _write(tmp_path / "old" / RECORDS, [{k: rec[k] for k in (*OLD_FIELDS, "code", "stale")}])
    store = tmp_path / "store"
    rc, out, err = _run([*GRID, f"data.root={tmp_path / 'data_here'}", "--store-dir", str(store), "--import", str(f),
                         "--render-only"])
    assert rc == 0, err
    assert f"{f}: 1 records: 1 imported\n" in err and _table(out) == made["table"]
    (run,) = _kids(store)
    assert "flplat.import.no_config" not in run.data.tags and run.data.tags["flplat.code"] == rec["code"]["key"]
