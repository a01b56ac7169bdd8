"""The bad-input battery: run each bad input through the `flplat` command and print a table.

    python tools/scripts/bad_inputs.py            # every case
    python tools/scripts/bad_inputs.py -k tune    # the cases whose name contains "tune"

Each case runs in a fresh temporary directory with its own tracking store. The expected outcome of a bad input:
exit status 2, exactly one line on stderr (``flplat: error: ...`` naming the key and the allowed values) and no
MLflow run created. A few cases are failures of a run rather than of the input (a diverged run): they expect
exit 1, one line, and the run ended FAILED (never FINISHED). Verdict ``ok`` when all holds, else what differs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
QS = str(REPO / "configs" / "quickstart.yaml")
FAST = ["federation.rounds=1", "fabric.num_threads=1", "tracking.plots=false"]

# name, files to write in the case's directory {name: text}, argv after `flplat`, expected exit, run status
CASES: list[tuple[str, dict[str, str], list[str], int, str | None]] = [
    ("config is a YAML list", {"c.yaml": "- a\n- b\n"}, ["run", "c.yaml"], 2, None),
    ("config is a YAML scalar", {"c.yaml": "42\n"}, ["run", "c.yaml"], 2, None),
    ("config is a YAML string", {"c.yaml": "just a string\n"}, ["run", "c.yaml"], 2, None),
    ("empty config file", {"c.yaml": ""}, ["run", "c.yaml"], 2, None),
    ("override federation..rounds=1", {}, ["run", QS, "federation..rounds=1"], 2, None),
    ("override .rounds=1", {}, ["run", QS, ".rounds=1"], 2, None),
    ("data.root does not exist", {}, ["run", QS, "data.name=mnist", "data.root=nowhere", *FAST], 2, None),
    ("data.root lacks a file", {"d/train-images-idx3-ubyte": ""},
     ["run", QS, "data.name=mnist", "data.root=d", *FAST], 2, None),
    ("unreachable tracking URI", {}, ["run", QS, "tracking.uri=http://127.0.0.1:9", *FAST], 2, None),
    ("tracking dir not writable", {}, ["run", QS, "tracking.store_dir=/proc/flplat-store", *FAST], 2, None),
    ("tune --storage foo://bar", {"s.yaml": "fedavg:\n  federation.batch_size: [16, 32]\n"},
     ["tune", QS, "--space", "s.yaml", "--storage", "foo://bar", *FAST], 2, None),
    ("search range low > high", {"s.yaml": "fedprox:\n  algorithm.mu: {low: 1.0, high: 0.1}\n"},
     ["tune", QS, "--space", "s.yaml", "algorithm.name=fedprox", "--storage", "sqlite:///o.db", *FAST], 2, None),
    ("grid with a later invalid value", {"s.yaml": "fedprox:\n  algorithm.mu: [0.1, -5.0]\n"},
     ["tune", QS, "--space", "s.yaml", "algorithm.name=fedprox", "--storage", "sqlite:///o.db", *FAST], 2, None),
    ("tune --n-trials -1", {"s.yaml": "fedavg:\n  federation.batch_size: [16, 32]\n"},
     ["tune", QS, "--space", "s.yaml", "--n-trials", "-1", "--storage", "sqlite:///o.db", *FAST], 2, None),
    ("sweep --seeds ''", {}, ["sweep", QS, "--seeds", "", *FAST], 2, None),
    ("noniid-plot alpha <= 0", {}, ["noniid-plot", "--alphas", "0,-1", "--seeds", "0"], 2, None),
    ("noniid-plot S > 1", {}, ["noniid-plot", "--s-values", "1.5", "--seeds", "0"], 2, None),
    ("noniid-plot --out in a missing dir", {}, ["noniid-plot", "--seeds", "0", "--out", "missing/x.png"], 2, None),
    ("noniid-plot no partition can meet", {},
     ["noniid-plot", "--clients", "500", "--alphas", "0.01", "--s-values", "", "--seeds", "0"], 2, None),
    ("table --metric naming nothing", {}, ["table", "--experiment", "quickstart", "--metric", "nope"], 2, None),
    ("table --group-by naming nothing", {}, ["table", "--experiment", "quickstart", "--group-by", "nope.key"], 2,
     None),
    ("IFCA with more clusters than clients", {},
     ["run", QS, "algorithm.name=ifca", "algorithm.num_clusters=50", *FAST], 2, None),
    ("learning rate inf", {}, ["run", QS, "federation.optimizer.lr=inf", *FAST], 2, None),
    ("diverged run (lr=1e30, sgd)", {},
     ["run", QS, "federation.optimizer.lr=1e30", "federation.optimizer.name=sgd", *FAST], 1, "FAILED"),
    ("partition with no test data", {},
     ["run", QS, "partition.train_fraction=0.999", "partition.test_fraction=0.001", *FAST], 2, None),
    ("failure probability > 1", {}, ["run", QS, "federation.failures.dropout=1.5", *FAST], 2, None),
    ("--resume of an unknown run", {}, ["run", "--resume", "0123456789abcdef"], 2, None),
    ("--resume with a config file", {}, ["run", QS, "--resume", "0123456789abcdef"], 2, None),
    ("--resume with a non-tracking override", {}, ["run", "--resume", "0123456789abcdef", "federation.rounds=3"], 2,
     None),
    ("sweep with an invalid seed", {}, ["sweep", QS, "--seeds", "0,x", *FAST], 2, None),
]

SETUP_TABLE = ["run", QS, *FAST, "tracking.experiment=quickstart"]  # a finished run for the `table` cases


def _runs(store: Path) -> list:
    db = store / "mlflow.db"
    if not db.exists():
        return []
    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=f"sqlite:///{db}")
    return c.search_runs([e.experiment_id for e in c.search_experiments()])


def run_case(files, argv, expect_rc, expect_status, timeout: int) -> tuple[int, int, float, str]:
    with tempfile.TemporaryDirectory(prefix="flplat-bad-") as d:
        d = Path(d)
        for name, text in files.items():
            (d / name).parent.mkdir(parents=True, exist_ok=True)
            (d / name).write_text(text)
        env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
        env["PYTHONPATH"] = str(REPO)
        cmd = [sys.executable, "-m", "flplat.cli"]
        store_arg = [] if argv[0] in ("noniid-plot",) else []
        if argv[0] == "table":
            subprocess.run([*cmd, *SETUP_TABLE, "--no-progress", f"tracking.store_dir={d / 'mlruns'}"], cwd=d,
                           env=env, capture_output=True, timeout=timeout)
            argv = [*argv, "--store-dir", str(d / "mlruns")]
        elif argv[0] in ("run", "tune", "sweep") and not any(a.startswith("tracking.store_dir") for a in argv):
            store_arg = [f"tracking.store_dir={d / 'mlruns'}"]
        before = len(_runs(d / "mlruns"))
        t0 = time.time()
        try:
            p = subprocess.run([*cmd, *argv, *store_arg], cwd=d, env=env, capture_output=True, text=True,
                               timeout=timeout)
            rc, err = p.returncode, p.stderr
        except subprocess.TimeoutExpired as e:
            rc, err = 124, (e.stderr or b"").decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        took = time.time() - t0
        runs = _runs(d / "mlruns")
        lines = [ln for ln in err.splitlines() if ln.strip() and " INFO " not in ln]
        problems = []
        if rc != expect_rc:
            problems.append(f"exit {rc} != {expect_rc}")
        if len(lines) != 1:
            problems.append(f"{len(lines)} lines")
        new = runs[: len(runs) - before] if len(runs) > before else []
        if expect_status is None and new:
            problems.append(f"{len(new)} run(s) created")
        if expect_status is not None and not all(r.info.status == expect_status for r in runs):
            problems.append("run status " + ",".join(r.info.status for r in runs))
        return rc, len(lines), took, ("ok" if not problems else "; ".join(problems)) + \
            (f" | {lines[-1][:100]}" if lines else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", default="", help="only cases whose name contains this")
    ap.add_argument("--timeout", type=int, default=180)
    args = ap.parse_args()
    rows = []
    print("| input | exit | lines | s | verdict |\n|---|---|---|---|---|", flush=True)
    for name, files, argv, rc, status in CASES:
        if args.k and args.k not in name:
            continue
        got, n, took, verdict = run_case(files, argv, rc, status, args.timeout)
        rows.append(verdict.startswith("ok"))
        print(f"| {name} | {got} | {n} | {took:.0f} | {verdict} |", flush=True)
    print(f"\n{sum(rows)}/{len(rows)} ok")
    return 0 if all(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
