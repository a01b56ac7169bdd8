"""Start-up cost: importing the platform (what every process of a sharded run does before Fabric launches the
others) must not pull in the heavy optional stacks; algorithms import them where they use them."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO

HEAVY = ("sklearn", "ot", "mlflow", "optuna", "kneed")


def test_importing_the_platform_and_every_algorithm_stays_light():
    code = ("import sys, flplat.cli, flplat.algorithms, flplat.experiment as c; "
            "c.load_config(None, []); "
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "", f"imported at start-up: {out.stdout.strip()}"


def test_preparing_a_fedavg_run_without_tracking_stays_light():
    """The whole assembly of a plain run (data, partition, partition metrics, model, Fabric) needs none of the
    heavy optional stacks: no POT/scikit-learn for the EMD partition metric, no MLflow with tracking off."""
    code = ("import sys, flplat.experiment as c; "
            "c.prepare(c.load_config(None, ['data.name=synthetic', 'tracking.enabled=false', "
            "'fabric.accelerator=cpu'])); "
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1:] in ([], [""]), f"imported by prepare: {out.stdout.strip()}"


def test_reading_a_config_does_not_import_lightning():
    """`flplat run` reads the config, then starts a sharded run's other processes (flplat.engine.launch): reading it
    must not pay Lightning's import first, or the processes import one after the other instead of in parallel."""
    code = ("import sys, flplat.cli, flplat.configure as c; "
            "c.load_config('configs/quickstart.yaml', ['fabric.devices=2']); "
            "print(','.join(m for m in ('lightning', 'flplat.engine.client', 'mlflow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "", f"imported before the other processes start: {out.stdout.strip()}"
