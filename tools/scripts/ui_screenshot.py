"""Screenshots of `flplat ui` in a real browser (headless Chromium): what a researcher sees on opening the UI.

Starts `flplat ui` on a store (the console script next to this interpreter, with a PATH that does not contain the
virtualenv: the UI must start without an activated venv), waits for the server, opens the experiment's page in
headless Chromium and writes a PNG per page:

    python tools/scripts/ui_screenshot.py --store-dir /tmp/runs --experiment demo --out docs/img/mlflow_runs.png

The page is the experiment's runs table in MLflow's model-training view (``?workflowType=machine_learning``; the
charts are one click away, the ``compareRunsMode=CHART`` query did not open them in MLflow 3.17). Needs a
Chromium (`apt-get install chromium`; or --browser PATH). Exit status 2 when no browser is found.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_browser(explicit: str | None = None) -> str | None:
    if explicit:
        return explicit if Path(explicit).exists() or shutil.which(explicit) else None
    return next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ui_process(store_dir: str, port: int) -> subprocess.Popen:
    """`flplat ui` as a user would call it: the venv's console script, the venv not on PATH."""
    script = Path(sys.executable).parent / "flplat"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "flplat.cli"]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "MLFLOW_TRACKING_URI")}
    env["PATH"] = "/usr/bin:/bin"
    return subprocess.Popen([*cmd, "ui", "--store-dir", store_dir, "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def wait_ready(port: int, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError("flplat ui exited: " + proc.stdout.read().decode(errors="replace")[-2000:])
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"flplat ui did not answer on port {port} within {timeout:.0f} s")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # the server's own process group (start_new_session)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def screenshot(browser: str, url: str, out: str, width: int = 1500, height: int = 900, budget_ms: int = 20000) -> None:
    with tempfile.TemporaryDirectory(prefix="flplat-chromium-") as profile:
        cmd = [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               f"--user-data-dir={profile}", f"--window-size={width},{height}",
               f"--virtual-time-budget={budget_ms}", f"--screenshot={Path(out).resolve()}", url]
        subprocess.run(cmd, check=True, capture_output=True, timeout=180)


def experiment_url(base: str, exp_id: str) -> str:
    from flplat.cli import experiment_url as url

    return url(base, exp_id)


def experiment_id(store_dir: str, name: str) -> str:
    from mlflow.tracking import MlflowClient

    from flplat.tracking.store import store_uris

    exp = MlflowClient(tracking_uri=store_uris(None, store_dir)[0]).get_experiment_by_name(name)
    if exp is None:
        raise SystemExit(f"no experiment {name!r} in {store_dir}")
    return exp.experiment_id


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store-dir", required=True)
    ap.add_argument("--experiment", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--browser", default=None)
    ap.add_argument("--width", type=int, default=1500)
    ap.add_argument("--height", type=int, default=900)
    args = ap.parse_args(argv)
    browser = find_browser(args.browser)
    if browser is None:
        print("ui_screenshot: no Chromium found (apt-get install chromium, or --browser PATH)", file=sys.stderr)
        return 2
    exp = experiment_id(args.store_dir, args.experiment)
    port = free_port()
    proc = ui_process(args.store_dir, port)
    try:
        wait_ready(port, proc)
        url = experiment_url(f"http://127.0.0.1:{port}", exp)
        screenshot(browser, url, args.out, args.width, args.height)
    finally:
        stop(proc)
    print(f"wrote {args.out} ({url})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
