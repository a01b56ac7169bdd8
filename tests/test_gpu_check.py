"""tools/benchmarks/gpu_check.py, the check a GPU machine runs first: on CPU at toy size (``--tiny``) every check
passes or skips with its reason and the table is written, so the script cannot rot without a GPU; its harness goes
on when one check fails, stops at its caps and the overall budget, and writes the docs section; its checks can
fail."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
import types

import numpy as np
import pytest
from conftest import REPO

TOOL = REPO / "tools" / "benchmarks" / "gpu_check.py"


@pytest.fixture(scope="module")
def gc_mod():
    spec = importlib.util.spec_from_file_location("gpu_check", TOOL)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = mod  # (dataclasses look their module up)
    spec.loader.exec_module(mod)
    return mod


def test_tiny_mode_passes_or_skips_every_check_and_writes_the_table(tmp_path):
    out = tmp_path / "out"
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, str(TOOL), "--tiny", "--out", str(out),
                          "--budget-s", "400"], cwd=REPO, capture_output=True, text=True, timeout=900)
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    data = json.loads((out / "gpu_check.json").read_text())
    checks = data["checks"]
    groups = {c["name"].split("[")[0] for c in checks}
    assert groups == {"quickstart", "vectorize_parity", "batched_eval", "checkpoint_resume", "no_copy_per_batch"}
    for c in checks:
        assert c["status"] in ("PASS", "SKIP"), c
        assert c["detail"], c  # every result says why
        assert f"{c['status']}  {c['name']}" in res.stdout
    skipped = [c for c in checks if c["status"] == "SKIP"]
    assert [c["name"] for c in skipped] == ["no_copy_per_batch[32-true, loop]"]  # the CUDA-only assertion
    assert "no CUDA device" in skipped[0]["detail"]
    cells = data["grid"]
    assert len(cells) == 12 and all(c["s_per_round"] > 0 and c["updates_per_s"] > 0 for c in cells)
    assert {(c["model"], c["algorithm"], c["path"]) for c in cells} == {
        (m, a, p) for m in ("FMNIST MLP", "LeNet-5", "ResNet-9") for a in ("fedavg", "ditto")
        for p in ("loop", "vectorised")}
    for c in cells:  # a vectorised run that fell back to the loop says why; nothing else is noted at this size
        assert c["note"] == "" or (c["path"] == "vectorised" and c["note"].startswith("fell back: ")), c
    md = (out / "gpu_check.md").read_text()
    assert "| model | K | algorithm | path | s / round |" in md and "| quickstart[bf16-mixed] | PASS |" in md
    assert data["meta"]["tiny"] and data["meta"]["elapsed_s"] < took
    print(f"tiny gpu_check: {took:.0f} s")


def test_one_check_failing_or_hanging_does_not_stop_the_others(gc_mod, tmp_path):
    m = gc_mod
    rep = m.Report(tmp_path)
    ctx = m.Context("cpu", True, tmp_path, time.monotonic() + 120)

    def breaks(ctx):
        yield m.Outcome("a[1]", m.PASS, "fine")
        raise RuntimeError("broken here\nsecond line of a long message")

    def hangs(ctx):
        time.sleep(30)
        yield m.Outcome("b", m.PASS, "never")

    def passes(ctx):
        yield m.Outcome("c", m.PASS, "ok")

    t0 = time.monotonic()
    m.run_check("a", breaks, ctx, rep, cap=30)
    m.run_check("b", hangs, ctx, rep, cap=0.5)
    m.run_check("c", passes, ctx, rep, cap=30)
    assert time.monotonic() - t0 < 20  # not the 30 s the hanging check asks for (slack for a loaded machine)
    assert [(o.name, o.status) for o in rep.checks] == [("a[1]", "PASS"), ("a", "FAIL"), ("b", "FAIL"), ("c", "PASS")]
    assert rep.checks[1].detail.startswith("RuntimeError: broken here at test_gpu_check.py:")
    assert "its cap" in rep.checks[2].detail
    saved = json.loads((tmp_path / "gpu_check.json").read_text())  # written after every result
    assert [c["name"] for c in saved["checks"]] == ["a[1]", "a", "b", "c"]


def test_the_overall_budget_skips_instead_of_overrunning(gc_mod, tmp_path):
    m = gc_mod
    rep = m.Report(tmp_path)

    def slow(ctx):
        time.sleep(30)
        yield m.Outcome("x", m.PASS, "never")

    spent = m.Context("cpu", True, tmp_path, time.monotonic() + m.RESERVE_S - 1)
    m.run_check("x", slow, spent, rep, cap=30)
    nearly = m.Context("cpu", True, tmp_path, time.monotonic() + m.RESERVE_S + 1.0)
    t0 = time.monotonic()
    m.run_check("y", slow, nearly, rep, cap=30)
    assert time.monotonic() - t0 < 20  # skipped at once, not after the check's 30 s
    assert [(o.name, o.status) for o in rep.checks] == [("x", "SKIP"), ("y", "SKIP")]
    assert all("overall budget" in o.detail for o in rep.checks)


def test_grid_goes_on_after_a_broken_cell_and_lists_what_the_budget_left_out(gc_mod, tmp_path, monkeypatch):
    m = gc_mod
    seen = []
    clock = [1000.0]  # a fake clock each cell advances, so the outcome does not hang on the machine's load
    monkeypatch.setattr(m, "time", types.SimpleNamespace(monotonic=lambda: clock[0], sleep=time.sleep))

    def fake(ctx, model, k, algo, path, spec, timed, cap):
        seen.append((model, algo, path))
        clock[0] += 0.4
        if len(seen) == 2:
            raise ValueError("cannot build")
        return m.Cell(model, k, algo, path, s_per_round=0.5, updates_per_s=2.0, rounds_timed=timed)

    monkeypatch.setattr(m, "run_cell", fake)
    rep = m.Report(tmp_path)
    ctx = m.Context("cpu", True, tmp_path, clock[0] + m.RESERVE_S + 3 + 1.0)
    m.run_grid(ctx, rep)
    assert len(rep.grid) == 3  # 1.0 s above the 3 s floor: cells at 0.0, 0.4 and 0.8 s start, the 4th does not
    assert rep.grid[1].note.startswith("error: ValueError: cannot build") and rep.grid[1].s_per_round is None
    assert rep.grid[0].s_per_round == 0.5 and len(rep.skipped) == 1
    assert rep.skipped[0].startswith(f"{12 - len(rep.grid)} grid cells for lack of budget")
    assert "Not measured: " in (tmp_path / "gpu_check.md").read_text()
    assert [(c.model, c.algorithm, c.path) for c in rep.grid] == seen  # FedAvg first, vectorised before loop
    assert seen[:2] == [("FMNIST MLP", "fedavg", "vectorised"), ("FMNIST MLP", "fedavg", "loop")]


def test_table_speed_up_and_docs_section(gc_mod, tmp_path):
    m = gc_mod
    rep = m.Report(None, {"device": "NVIDIA H100", "versions": "torch 2", "date": "2026-01-01", "commit": "abc",
                          "command": "python tools/benchmarks/gpu_check.py", "budget_s": 480, "elapsed_s": 400,
                          "grid": {"q": 0.1, "samples": 50, "epochs": 1, "batch": 20, "timed_rounds": 3}})
    rep.checks.append(m.Outcome("quickstart[32-true]", m.PASS, "|Δ| 0.001"))
    rep.grid += [m.Cell("LeNet-5", 1000, "fedavg", "vectorised", 0.5, 200.0, 1234.0, 3, "fell back: a (b)"),
                 m.Cell("LeNet-5", 1000, "fedavg", "loop", 2.0, 50.0, 900.0, 3),
                 m.Cell("ResNet-9", 10000, "ditto", "loop", note="skipped: too big")]
    assert m.speedups(rep.grid) == {("LeNet-5", 1000, "fedavg"): 4.0}
    md = m.render(rep.to_json())
    assert "| LeNet-5 | 1,000 | fedavg | vectorised | 0.500 | 200 | 4.00× | 1,234 | fell back: a (b) |" in md
    assert "| LeNet-5 | 1,000 | fedavg | loop | 2.000 | 50 | — | 900 |  |" in md
    assert "| ResNet-9 | 10,000 | ditto | loop | — | — | — | — | skipped: too big |" in md
    assert "| quickstart[32-true] | PASS | \\|Δ\\| 0.001 |" in md and "**NVIDIA H100**" in md

    doc = "# Perf\n\nintro\n\n## GPU\n\nold text\n\n### sub\n\nold\n\n## Machine\n\n* 2 cores\n"
    new = m.replace_section(doc, "NEW BODY\n")
    assert new == "# Perf\n\nintro\n\n## GPU\n\nNEW BODY\n\n## Machine\n\n* 2 cores\n"
    assert m.replace_section(new, "NEW BODY\n") == new
    assert m.replace_section("# Perf\n\nintro\n", "B") == "# Perf\n\nintro\n\n## GPU\n\nB\n"
    assert m.replace_section("# P\n\n## GPU\n\nold\n", "B") == "# P\n\n## GPU\n\nB\n"
    path = tmp_path / "performance.md"
    path.write_text(doc)
    m.write_docs(rep.to_json(), path)
    text = path.read_text()
    assert "old text" not in text and "## Machine" in text and "| LeNet-5 | 1,000 |" in text
    earlier = rep.to_json()
    earlier["meta"] = {**earlier["meta"], "commit": "def", "date": "2025-12-31"}
    m.write_docs([rep.to_json(), earlier], path)  # several runs: one block each, in the order given
    text = path.read_text()
    assert text.index("commit abc") < text.index("commit def") and text.count("| LeNet-5 | 1,000 | fedavg | loop") == 2


def test_the_docs_gpu_section_is_the_scripts(gc_mod):
    """docs/performance.md's GPU section is what ``--write-docs`` writes: the script's instructions, then results
    (or the note that none exist yet), so the two cannot drift apart."""
    m = gc_mod
    text = (REPO / "docs" / "performance.md").read_text()
    start = text.index(m.SECTION + "\n")
    body = text[start + len(m.SECTION) + 2:].split("\n## ", 1)[0]
    assert body.startswith(m.DOCS_INTRO + "\n### Results\n\n")
    assert m.DOCS_COMMAND in body
    assert m.replace_section(text, body) == text


def test_copy_verdict_and_local_steps(gc_mod):
    m = gc_mod

    def c(h2d, d2h):
        return {"h2d": h2d, "d2h": d2h, "syncs": 0}

    assert m.copy_verdict((64, 24, c(8, 6)), (8, 180, c(8, 6)))[0] == "PASS"
    assert m.copy_verdict((64, 24, c(8, 6)), (8, 180, c(8, 8)))[0] == "PASS"  # within COPY_SLACK = 2
    status, text = m.copy_verdict((64, 24, c(8, 30)), (8, 180, c(8, 186)))  # one DtoH per batch
    assert status == "FAIL" and "156 more copies for 156 more batches (1.00 per batch)" in text
    assert m.copy_verdict((64, 24, c(0, 0)), (8, 180, c(0, 0)))[0] == "SKIP"
    assert m.copy_verdict((64, 24, c(8, 6)), (32, 40, c(8, 6)))[0] == "FAIL"
    # 360 / 64 -> 6 batches; 359 -> 6; 65 = 64 + a one-sample batch merged into the first -> 1; 1 -> 1
    assert m.local_steps(np.array([360, 359, 65, 1]), 64) == 14
    assert m.local_steps([40, 40], 20, epochs=2) == 8


def test_checkpoint_check_fails_when_resume_loses_the_server_rng(gc_mod, tmp_path, monkeypatch):
    """The check can fail: a resume that restarts the server's client sampling instead of restoring it."""
    from flplat.engine import checkpoint

    m = gc_mod
    ctx = m.Context("cpu", True, tmp_path, time.monotonic() + 300)
    assert [o.status for o in m.check_checkpoint_resume(ctx)] == ["PASS", "PASS"]
    real = checkpoint.restore

    def loses_rng(orch, data):
        out = real(orch, data)
        orch.rng.bit_generator.state = np.random.default_rng(12345).bit_generator.state
        return out

    monkeypatch.setattr(checkpoint, "restore", loses_rng)
    got = list(m.check_checkpoint_resume(ctx))
    assert [o.status for o in got] == ["FAIL", "FAIL"], [o.line() for o in got]
    assert "round 2" in got[0].detail


def test_bad_arguments_exit_2(tmp_path):
    tool = str(TOOL)
    for args, msg in ((["--only", "nope"], "--only='nope' is not valid"),
                      (["--budget-s", "0"], "--budget-s=0 is out of range"),
                      (["--tiny", "--write-docs"], "without --tiny")):
        res = subprocess.run([sys.executable, tool, *args, "--out", str(tmp_path)], cwd=REPO, capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 2 and msg in res.stderr, res.stderr


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="with a GPU this would run the whole check")
def test_without_cuda_and_without_tiny_one_line_and_exit_2(tmp_path):
    res = subprocess.run([sys.executable, str(TOOL), "--out", str(tmp_path)], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        "gpu_check: no CUDA device is visible; allowed here: --tiny (CPU, toy sizes)"]
    assert not (tmp_path / "gpu_check.json").exists()


def test_checks_that_overrun_leave_the_grid_its_share_of_the_budget(gc_mod, tmp_path, monkeypatch):
    m = gc_mod

    def hangs(ctx):
        time.sleep(60)
        yield m.Outcome("a", m.PASS, "never")

    import flplat.experiment  # noqa: F401  (imported before the clock starts: the budget counts the imports)

    grid_left = []
    monkeypatch.setattr(m, "CHECKS", {"a": hangs})
    monkeypatch.setattr(m, "CHECK_CAPS", {"a": 1000})
    monkeypatch.setattr(m, "RESERVE_S", 0.5)
    monkeypatch.setattr(m, "run_grid", lambda ctx, report: grid_left.append(ctx.left()))
    t0 = time.monotonic()
    assert m.main(["--tiny", "--out", str(tmp_path), "--budget-s", "20", "--only", "a,grid"]) == 0
    took = time.monotonic() - t0
    data = json.loads((tmp_path / "gpu_check.json").read_text())
    assert [(c["name"], c["status"]) for c in data["checks"]] == [("a", "SKIP")]
    assert "overall budget" in data["checks"][0]["detail"]
    # the checks stop at CHECKS_SHARE x 20 s (less the reserve), not after the hanging check's 60 s: the grid
    # starts with the rest, 9 s (slack for a loaded machine)
    assert took < 20 * m.CHECKS_SHARE + 8
    assert 20 * (1 - m.CHECKS_SHARE) - 4 < grid_left[0] < 20 * (1 - m.CHECKS_SHARE)
