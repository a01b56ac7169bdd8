"""The GPU check: run it first on any machine with a CUDA device; CI runs it on CPU (``--tiny``) so it cannot rot.

    python tools/benchmarks/gpu_check.py --out $OUT --budget-s 480 --write-docs   # one GPU, at most 8 minutes
    python tools/benchmarks/gpu_check.py --tiny --out /tmp/gpu_check              # CPU, toy sizes, < 1 minute (CI)
    # docs from results fetched from a GPU box
    python tools/benchmarks/gpu_check.py --render $OUT/gpu_check.json --write-docs  # several files: latest first

Checks (each independent: one that fails or raises does not stop the others; each prints one
``PASS`` / ``FAIL`` / ``SKIP`` line with its reason):

``quickstart[P]``
    ``configs/quickstart.yaml`` (scikit-learn's bundled digits: nothing to download) on CUDA at precision P in
    32-true, 16-mixed and bf16-mixed; its final ``global_accuracy`` must lie within :data:`ACCURACY_TOL` of the same
    quick start on CPU at 32-true (the trajectories differ by float rounding, so equality is not expected).
``vectorize_parity[M]``
    the same federation with ``federation.vectorize=false`` and ``=true`` on CUDA: every per-round metric within
    :data:`PARITY_TOL` (accuracies within :data:`ACCURACY_ABS`) and the final global weights' largest difference
    reported. TF32 is switched off for this check: it compares the maths of the two paths, not TF32 rounding. A
    vectorised path that falls back to the loop is a SKIP naming the logged reason.
``batched_eval[A]``
    ``federation.batched_eval=true`` against ``false`` (FedAvg: one shared model; Ditto: personal models in vmap
    groups): the evaluation metrics must agree.
``checkpoint_resume[A]``
    a run checkpointed every round (:class:`flplat.engine.checkpoint.CheckpointCallback`, the callback
    ``tracking.checkpoint_every`` installs) interrupted after round 1, read back from its file and resumed
    (``flplat.experiment.run(cfg, resume=...)``), against the uninterrupted run (CUDA tensors of the server state
    and Ditto's per-client store go through the file). MLflow is not needed (the GPU image lacks it).
``no_copy_per_batch[P, path]``
    ``torch.profiler`` counts the CUDA ``Memcpy HtoD`` / ``DtoH`` activities of one round in which 4 clients train
    E = 1 epoch in few large batches, and again in many small ones: the count must not grow with the number of
    batches (at most :data:`COPY_SLACK` more), for the loop and the vectorised path at each precision. Needs CUDA;
    on CPU the same runs are profiled and the check SKIPs.

Then the measurement (``grid``): seconds per round and client updates per second for FedAvg and Ditto, per-client
loop against vectorised, on the FMNIST MLP (784 inputs), LeNet-5 (1x28x28) and ResNet-9 (3x32x32) at
K = 100, 1,000 and 10,000 clients with q = 0.1 (:data:`GRID`), with the peak GPU memory. Data are synthetic
tensors of those shapes (a dataset registered by this script: the machine may have no MNIST / CIFAR files and no
internet). Each cell runs one untimed warm-up round, then up to :data:`GRID_TIMED_ROUNDS` timed rounds (the
device synchronised at each round's end) and stops before the final round's evaluation. Cells run in the order of
:func:`grid_cells` (K = 1,000 first: the most informative), each within its own cap and the overall budget; what
the budget does not reach is listed as skipped. A cell whose vectorised run fell back to the loop says so ("fell
back: reason"); one that runs out of GPU memory says so; a Ditto cell whose per-client models cannot fit the
device (K x parameters x 4 bytes) is skipped with that arithmetic.

Budget and output: ``--budget-s`` (default 480) bounds the whole run: every check has a cap
(:data:`CHECK_CAPS`, enforced with SIGALRM), the checks together end by :data:`CHECKS_SHARE` of the budget (so the
grid always gets the rest), and whatever is left when the budget is spent is SKIPped with a note.
``gpu_check.json`` and ``gpu_check.md`` in ``--out`` (default ``$OUT``) are rewritten after every result, so a
run killed from outside still leaves what it measured. ``--write-docs`` puts the Markdown (device, command, date)
into the "## GPU" section of docs/performance.md. The results name the device, the versions and the commit
(``$GPU_CHECK_COMMIT`` where set, else ``git rev-parse``: a copy of the checkout may carry a stale ``.git``). Exit
status: 0 when nothing FAILed, 1 otherwise, 2 on bad arguments (e.g. no CUDA device without ``--tiny``).

Every value a machine may need to adapt -- overrides, tolerances, sizes, caps -- is in the block below.
The runs go through the public entry points only (``flplat.experiment.load_config`` / ``run``, config keys
``federation.vectorize``, ``fabric.accelerator``, ``fabric.precision``; ``flplat.api.register_dataset``), so the
script survives changes of the engine's internals.

The GPU image has PyTorch and Lightning but not OmegaConf; ``--bundle-deps DIR`` copies the pure-Python packages
flplat needs beyond the image (:data:`BUNDLED`) from this environment into DIR, to carry and put on PYTHONPATH
(docs/performance.md, "GPU", gives the exact command).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import logging
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run from a checkout without installing (the GPU machine gets a bare copy)

# ============================================ what to adapt ============================================
QUICKSTART = REPO / "configs" / "quickstart.yaml"
PRECISIONS = ("32-true", "16-mixed", "bf16-mixed")
#: |final global_accuracy on the device at precision P - on CPU at 32-true| allowed (digits: 360 test samples,
#: one sample = 0.0028; 20 rounds of float rounding move the final accuracy by a few samples)
ACCURACY_TOL = {"32-true": 0.03, "16-mixed": 0.05, "bf16-mixed": 0.05}
#: (rel, abs) for continuous metrics (losses) and weights: vectorised vs loop, batched vs per-client evaluation
PARITY_TOL = {"cpu": (1e-4, 1e-6), "cuda": (1e-3, 1e-5)}
ACCURACY_ABS = 0.01  # accuracies (a count ratio: one flipped borderline sample moves them by 1/n)
#: resumed vs uninterrupted: exact on CPU; on CUDA some sums use atomics (their order varies from run to run), so
#: losses get (rel, abs), accuracies one sample of 360, final weights an absolute gap: a resume that restores the
#: wrong state or RNG misses these by orders of magnitude
RESUME_TOL = {"cpu": {"rel": 0.0, "abs": 0.0, "acc": 0.0, "weights": 0.0},
              "cuda": {"rel": 1e-5, "abs": 1e-7, "acc": 0.003, "weights": 1e-6}}
COPY_SLACK = 2  # host<->device copies the many-batch run may add (the check needs >= 20x more batches)
TIMING = ("round_time_s", "cpu_time_s", "peak_rss_mb")  # metrics that are times, never compared

#: overrides of every run (tiny mode adds TINY_COMMON)
COMMON = {"tracking.enabled": "false", "fabric.precision": "32-true"}
TINY_COMMON = {"fabric.num_threads": 1}
#: the federations of the checks: digits (bundled with scikit-learn), small models
DIGITS = {"data.name": "digits", "partition.name": "dirichlet", "partition.alpha": 0.5, "model.name": "mlp"}
PARITY_BASE = {**DIGITS, "partition.num_clients": 24, "federation.client_fraction": 0.5, "federation.local_epochs": 2,
               "federation.batch_size": 32, "federation.rounds": 3, "federation.eval_every": 1}
PARITY_MODELS = {"mlp": {"model.name": "mlp"},
                 "fmnist_cnn": {"model.name": "fmnist_cnn", "model.channels": "[4,8]", "model.dense": 16},
                 # hooks with a stacked form (flplat/protocol/stacked.py): APFL, pFedMe (K steps per batch)
                 "mlp, apfl": {"model.name": "mlp", "algorithm.name": "apfl"},
                 "mlp, pfedme": {"model.name": "mlp", "algorithm.name": "pfedme"}}
BATCHED_BASE = {**DIGITS, "partition.num_clients": 20, "federation.client_fraction": 0.5, "federation.rounds": 2,
                "federation.local_epochs": 1, "federation.eval_every": 1}
RESUME_BASE = {**DIGITS, "partition.num_clients": 10, "federation.client_fraction": 0.5, "federation.rounds": 3,
               "federation.local_epochs": 1, "federation.eval_every": 1}
COPY_BASE = {**DIGITS, "partition.num_clients": 4, "federation.client_fraction": 1.0, "federation.rounds": 1,
             "federation.local_epochs": 1}
COPY_BATCHES = (64, 8)  # batch sizes of the few-batch and many-batch runs (digits: ~360 samples per client)
TINY_COPY_BATCHES = (64, 16)
ALGORITHMS = ("fedavg", "ditto")

#: the grid: model label -> (input shape, model overrides, federation.vectorize_group)
GRID = {
    "FMNIST MLP": ((1, 28, 28), {"model.name": "mlp", "model.hidden": "[200,200]"}, 0),
    "LeNet-5": ((1, 28, 28), {"model.name": "lenet5"}, 0),
    "ResNet-9": ((3, 32, 32), {"model.name": "resnet9"}, 64),  # 6.6 M parameters: 64 clients' stacks at a time
}
TINY_GRID = {
    "FMNIST MLP": ((1, 28, 28), {"model.name": "mlp", "model.hidden": "[16]"}, 0),
    "LeNet-5": ((1, 28, 28), {"model.name": "lenet5", "model.channels": "[2,4]", "model.fc": "[8]"}, 0),
    "ResNet-9": ((3, 32, 32), {"model.name": "resnet9", "model.widths": "[4,4,8,8]"}, 4),
}
GRID_CLIENTS = (1000, 100, 10000)  # in the order they run
TINY_GRID_CLIENTS = (10,)
SAMPLES_PER_CLIENT = 50  # 40 train + 10 test: 10,000 clients of ResNet-9 inputs are 6 GB on the device
TINY_SAMPLES_PER_CLIENT = 20
GRID_BASE = {"partition.name": "iid", "partition.train_fraction": 0.8, "partition.test_fraction": 0.2,
             "federation.client_fraction": 0.1, "federation.local_epochs": 1, "federation.batch_size": 20,
             "federation.optimizer.name": "adam", "federation.optimizer.lr": 0.001,
             "federation.rounds": 1000, "federation.eval_every": 1000}  # stopped before: never evaluates
GRID_TIMED_ROUNDS = 3  # after one warm-up round
TINY_GRID_TIMED_ROUNDS = 1
STORE_FRACTION = 0.7  # a Ditto cell is skipped when K x P x 4 bytes exceed this share of the device's memory

#: seconds each check may take at most (on the H100: a few seconds to a minute each); the grid takes the rest
CHECK_CAPS = {"quickstart": 150, "vectorize_parity": 60, "batched_eval": 60, "checkpoint_resume": 60,
              "no_copy_per_batch": 90}
CHECKS_SHARE = 0.55  # the checks together end by this share of the budget: the grid always gets the rest
GRID_CELL_CAP_S = 45.0
RESERVE_S = 5.0  # kept for writing the results
BUNDLED = ("omegaconf",)  # pure-Python packages flplat imports that the GPU image lacks (OmegaConf 2.4: only PyYAML)
DOCS = REPO / "docs" / "performance.md"
SECTION = "## GPU"
DOCS_COMMAND = "python tools/benchmarks/gpu_check.py --out $OUT --budget-s 480 --write-docs"
# =======================================================================================================

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
log = logging.getLogger("flplat")


class CheckTimeout(BaseException):  # noqa: N818  (a BaseException: flplat's `except Exception` must not swallow it)
    """Raised by SIGALRM when a check or grid cell reaches its cap."""


class _Stop(BaseException):  # noqa: N818
    """Raised by a callback to end a run between rounds (the grid's cells, the interrupted run)."""


@dataclass
class Outcome:
    name: str
    status: str
    detail: str
    seconds: float = 0.0

    def line(self) -> str:
        return f"{self.status}  {self.name:<36} {self.detail}  ({self.seconds:.1f}s)"


@dataclass
class Cell:
    model: str
    clients: int
    algorithm: str
    path: str  # loop | vectorised
    s_per_round: float | None = None
    updates_per_s: float | None = None
    peak_mib: float | None = None
    rounds_timed: int = 0
    note: str = ""


@dataclass
class Report:
    """Everything measured so far; :meth:`save` rewrites the JSON and the Markdown (called after every result)."""

    out: Path | None
    meta: dict = field(default_factory=dict)
    checks: list[Outcome] = field(default_factory=list)
    grid: list[Cell] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def add(self, o: Outcome) -> None:
        self.checks.append(o)
        print(o.line(), flush=True)
        self.save()

    def add_cell(self, c: Cell) -> None:
        self.grid.append(c)
        rate = "-" if c.s_per_round is None else f"{c.s_per_round:.3f} s/round, {c.updates_per_s:.1f} updates/s"
        print(f"GRID  {c.model} K={c.clients} {c.algorithm} {c.path}: {rate} {c.note}".rstrip(), flush=True)
        self.save()

    def to_json(self) -> dict:
        return {"meta": self.meta, "checks": [asdict(o) for o in self.checks],
                "grid": [asdict(c) for c in self.grid], "skipped": self.skipped}

    def save(self) -> None:
        if self.out is None:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        for name, text in (("gpu_check.json", json.dumps(self.to_json(), indent=1)),
                           ("gpu_check.md", render(self.to_json()))):
            tmp = self.out / f".{name}.tmp"
            tmp.write_text(text)
            os.replace(tmp, self.out / name)

    @classmethod
    def from_json(cls, data: dict) -> Report:
        return cls(None, data.get("meta", {}), [Outcome(**o) for o in data.get("checks", [])],
                   [Cell(**c) for c in data.get("grid", [])], list(data.get("skipped", [])))


# ------------------------------------------------------------------------------------------- rendering


def _fmt(v: float | None, spec: str) -> str:
    return "—" if v is None else format(v, spec)


def _cell(text: str) -> str:
    """Text for a Markdown table cell (a bare ``|`` would end the cell)."""
    return text.replace("|", "\\|")


def speedups(cells: list[Cell]) -> dict[tuple, float]:
    """(model, K, algorithm) -> loop s/round / vectorised s/round, where both were measured."""
    s = {(c.model, c.clients, c.algorithm, c.path): c.s_per_round for c in cells if c.s_per_round}
    return {k[:3]: s[k] / s[(*k[:3], "vectorised")] for k in s if k[3] == "loop" and (*k[:3], "vectorised") in s}


def render(data: dict) -> str:
    """The Markdown of a result file: a heading line, the checks' table and the grid's table."""
    m, rep = data.get("meta", {}), Report.from_json(data)
    counts = {s: sum(o.status == s for o in rep.checks) for s in (PASS, FAIL, SKIP)}
    lines = [f"Run on **{m.get('device', '?')}** ({m.get('versions', '')}) on {m.get('date', '?')}, commit "
             f"{m.get('commit', '?')}: `{m.get('command', '')}`; {m.get('elapsed_s', 0):.0f} s of a "
             f"{m.get('budget_s', 0):.0f} s budget{' (tiny mode: CPU, toy sizes)' if m.get('tiny') else ''}. "
             f"Checks: {counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped.", "",
             "| check | result | detail |", "|---|---|---|"]
    lines += [f"| {o.name} | {o.status} | {_cell(o.detail)} |" for o in rep.checks]
    g = m.get("grid", {})
    lines += ["", f"Seconds per round (after one warm-up round; mean of up to {g.get('timed_rounds', '?')} timed "
                  f"rounds, the device synchronised at each round's end, evaluation excluded) and client updates "
                  f"per second, q = {g.get('q', '?')}, {g.get('samples', '?')} samples per client (80 % train), "
                  f"E = {g.get('epochs', '?')}, B = {g.get('batch', '?')}, Adam, 32-true, synthetic inputs:", "",
              "| model | K | algorithm | path | s / round | client updates / s | vectorised speed-up | "
              "peak GPU memory (MiB) | note |", "|---|---|---|---|---|---|---|---|---|"]
    up = speedups(rep.grid)
    for c in rep.grid:
        ratio = up.get((c.model, c.clients, c.algorithm)) if c.path == "vectorised" else None
        lines.append(f"| {c.model} | {c.clients:,} | {c.algorithm} | {c.path} | {_fmt(c.s_per_round, '.3f')} | "
                     f"{_fmt(c.updates_per_s, ',.0f')} | {_fmt(ratio, '.2f')}{'×' if ratio else ''} | "
                     f"{_fmt(c.peak_mib, ',.0f')} | {_cell(c.note)} |")
    if rep.skipped:
        lines += ["", "Not measured: " + "; ".join(rep.skipped) + "."]
    return "\n".join(lines) + "\n"


def replace_section(text: str, body: str, heading: str = SECTION) -> str:
    """``text`` with the section under the line ``heading`` (up to the next heading of the same level) replaced by
    ``body``; appended at the end when there is no such section."""
    level = heading.split(" ", 1)[0] + " "
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if ln.rstrip("\n") == heading), None)
    new = [heading + "\n", "\n", body.rstrip("\n") + "\n", "\n"]
    if start is None:
        return text.rstrip("\n") + "\n\n" + "".join(new).rstrip("\n") + "\n"
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(level)), len(lines))
    tail = lines[end:]
    return "".join(lines[:start] + (new if tail else new[:-1]) + tail)


DOCS_INTRO = """\
`tools/benchmarks/gpu_check.py` is the first thing to run on a machine with a CUDA device (one GPU, at most 8 minutes);
`--write-docs` replaces this section's results with its own, naming the device, the command and the date. No anchor
publishes such a table.

```bash
""" + DOCS_COMMAND + """
```

It checks, each check independent of the others and printed as one `PASS` / `FAIL` / `SKIP` line with its reason:
the quick start (`configs/quickstart.yaml`, scikit-learn's bundled digits) on CUDA at `32-true`, `16-mixed` and
`bf16-mixed`, final accuracy within 0.03 / 0.05 / 0.05 of the CPU's `32-true`; vectorised against per-client loop
on CUDA (every per-round metric, final weights; TF32 off for this comparison); batched against per-client
evaluation (FedAvg, Ditto); checkpoint and resume on CUDA (interrupted after round 1, resumed from the file, against
the uninterrupted run); no host↔device copy per batch (`torch.profiler`'s CUDA `Memcpy HtoD` / `DtoH` count of a
round with few large batches against one with many small ones, for the loop and the vectorised path at each
precision). Then it measures seconds per round and client updates per second for FedAvg and Ditto, per-client loop
against vectorised, on the FMNIST MLP (784 inputs, hidden [200, 200]), LeNet-5 (1×28×28) and ResNet-9 (3×32×32)
at K = 100, 1,000 and 10,000 clients with q = 0.1 (synthetic inputs of those shapes, 50 samples per client), with
the peak GPU memory.
`--budget-s` is a hard limit: every check has a cap, and what the budget does not reach is listed as not measured;
`gpu_check.json` and `gpu_check.md` in `--out` are rewritten after every result, so a run stopped from outside
still leaves what it measured. A vectorised run that falls back to the loop is reported as "fell back: reason".

On a GPU machine with PyTorch and Lightning but without flplat's other dependencies (and no internet), carry
OmegaConf, the one pure-Python package the check needs beyond them, and put the results here afterwards:

```bash
# here: copies OmegaConf into .gpu_site/ (git-ignored)
python tools/benchmarks/gpu_check.py --bundle-deps .gpu_site
# there, with the checkout and .gpu_site/ (GPU_CHECK_COMMIT: the commit the copy holds, `git rev-parse HEAD` here)
GPU_CHECK_COMMIT=<commit> PYTHONPATH=.gpu_site python3 tools/benchmarks/gpu_check.py --out $OUT --budget-s 480
# here, with the fetched results file
python tools/benchmarks/gpu_check.py --render gpu_check.json --write-docs   # several runs: the latest first
```

CI runs the same checks on CPU at toy size (`python tools/benchmarks/gpu_check.py --tiny`,
tests/test_gpu_check.py), where the CUDA-only assertion skips with its reason, so the script keeps working with the
platform's interfaces.
"""
NOT_RUN = "**Not run on a GPU yet**: no GPU was available to this work so far; the check above is ready.\n"


def docs_section(data: dict | list[dict] | None) -> str:
    """The body of the docs' GPU section: how to run the check, then the results of ``data`` (None: not run yet),
    one block per run when ``data`` lists several (in the order given: the latest first)."""
    runs = [] if data is None else [data] if isinstance(data, dict) else list(data)
    return DOCS_INTRO + "\n### Results\n\n" + ("\n".join(render(d) for d in runs) if runs else NOT_RUN)


def write_docs(data: dict | list[dict], path: Path = DOCS) -> None:
    path.write_text(replace_section(path.read_text(), docs_section(data)))
    print(f"wrote the '{SECTION}' section of {path}", flush=True)


# ---------------------------------------------------------------------------------------------- harness


@dataclass
class Context:
    device: str  # cuda | cpu
    tiny: bool
    tmp: Path
    deadline: float  # time.monotonic() by which everything must have ended

    def left(self) -> float:
        return self.deadline - time.monotonic() - RESERVE_S

    def overrides(self, *parts: dict) -> list[str]:
        """``key=value`` overrides: :data:`COMMON`, this device, then ``parts`` in order (later ones win)."""
        d = {**COMMON, **(TINY_COMMON if self.tiny else {}), "fabric.accelerator": self.device}
        for p in parts:
            d.update(p)
        return [f"{k}={v}" for k, v in d.items()]


@contextlib.contextmanager
def alarm(seconds: float):
    """Raise :class:`CheckTimeout` in this (main) thread after ``seconds``."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def fire(signum, frame):
        raise CheckTimeout()

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def reason(e: BaseException) -> str:
    """One line: the exception, and where in flplat or this script it was raised."""
    msg = (str(e).strip().splitlines() or [""])[0][:300]
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "flplat" in f.filename or "gpu_check" in f.filename]
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return f"{type(e).__name__}: {msg}{where}"


def run_check(name: str, fn: Callable[[Context], Iterator[Outcome]], ctx: Context, report: Report,
              cap: float) -> None:
    """Run one check's generator of outcomes within ``min(cap, what the budget has left)``; an exception ends
    only this check (a FAIL naming it), a cap reached is a FAIL (the check's own cap) or a SKIP (the budget)."""
    left = ctx.left()
    if left < 1:
        report.add(Outcome(name, SKIP, "the overall budget is spent (--budget-s)"))
        return
    limit = min(cap, left)
    t0 = time.monotonic()
    last = t0
    try:
        with alarm(limit):
            for o in fn(ctx):
                now = time.monotonic()
                o.seconds, last = now - last, now
                report.add(o)
    except CheckTimeout:
        own = limit == cap
        report.add(Outcome(name, FAIL if own else SKIP,
                           f"stopped after {limit:.0f} s: " + ("its cap (CHECK_CAPS) was reached" if own else
                                                               "the overall budget is spent (--budget-s)"),
                           time.monotonic() - last))
    except (Exception, _Stop) as e:  # noqa: BLE001  (any failure of one check is reported; the others still run)
        report.add(Outcome(name, FAIL, reason(e), time.monotonic() - last))
    finally:
        _free()


def _free() -> None:
    gc.collect()
    with contextlib.suppress(Exception):
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def attempt(name: str, fn: Callable[[], Outcome]) -> Outcome:
    """``fn()``, or a FAIL naming the exception: one sub-check's failure does not end its check."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001
        return Outcome(name, FAIL, reason(e))


class Hooks:
    """A run's round events (``flplat.experiment.run(cfg, callbacks=[...])``, records of
    :mod:`flplat.engine.events`); override what is needed."""

    def on_start(self, start) -> None: ...

    def on_round_end(self, end) -> None: ...

    def on_end(self, end) -> None: ...


class Warnings(logging.Handler):
    """The ``flplat`` logger's warnings during a block (the vectorised path's fallback reason)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())

    def fallback(self) -> str | None:
        """The reason of the first "federation.vectorize: ... (reason)" warning, or None."""
        for m in self.messages:
            if m.startswith("federation.vectorize"):
                found = re.search(r"\((.*)\)\s*$", m)
                return found.group(1) if found else m
        return None

    def __enter__(self):
        log.addHandler(self)
        return self

    def __exit__(self, *exc):
        log.removeHandler(self)


def run_cfg(overrides: list[str], path: Path | None = None, **kw):
    from flplat.experiment import load_config, run

    return run(load_config(str(path) if path else None, overrides), progress=False, **kw)[0]


def compare(got: list[dict], want: list[dict], rel: float, abs_: float, acc_abs: float = ACCURACY_ABS
            ) -> tuple[str | None, float]:
    """(the first per-round metric beyond the tolerance -- ``acc_abs`` for accuracies, ``rel`` / ``abs_`` for the
    others; 0: equal -- or None, the largest relative difference of any metric)."""
    worst = 0.0
    if len(got) != len(want):
        return f"{len(got)} rounds instead of {len(want)}", math.inf
    for t, (a, b) in enumerate(zip(got, want), start=1):
        for k in sorted(b.keys() - set(TIMING)):
            if k not in a:
                return f"round {t}: {k} missing", math.inf
            x, y = float(a[k]), float(b[k])
            if math.isnan(x) and math.isnan(y):
                continue
            worst = max(worst, abs(x - y) / max(abs(y), 1e-12))
            ok = abs(x - y) <= acc_abs if "accuracy" in k else math.isclose(x, y, rel_tol=rel, abs_tol=abs_)
            if not ok:
                return f"round {t}: {k} {x:.6g} vs {y:.6g}", worst
    return None, worst


def weight_gap(a, b) -> float:
    return float((a.state.weights.detach().float().cpu() - b.state.weights.detach().float().cpu()).abs().max())


# ------------------------------------------------------------------------------------------------ checks


def check_quickstart(ctx: Context) -> Iterator[Outcome]:
    extra = {"federation.rounds": 2} if ctx.tiny else {}
    ref = run_cfg(ctx.overrides(extra, {"fabric.accelerator": "cpu"}), QUICKSTART)
    want = float(ref.metrics["global_accuracy"])
    where = "cuda" if ctx.device == "cuda" else "cpu (no CUDA device: the CUDA comparison is not made)"
    for prec in PRECISIONS:
        name = f"quickstart[{prec}]"

        def one(prec=prec, name=name):
            got = float(run_cfg(ctx.overrides(extra, {"fabric.precision": prec}), QUICKSTART)
                        .metrics["global_accuracy"])
            d, tol = abs(got - want), ACCURACY_TOL[prec]
            return Outcome(name, PASS if d <= tol else FAIL, f"global_accuracy {got:.4f} on {where} vs {want:.4f} "
                                                             f"on cpu 32-true: |Δ| {d:.4f} (tolerance {tol})")
        yield attempt(name, one)


@contextlib.contextmanager
def no_tf32():
    import torch

    try:
        saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    except RuntimeError:  # (a torch that refuses the legacy flags: compare with its settings, tolerances decide)
        yield
        return
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def check_vectorize_parity(ctx: Context) -> Iterator[Outcome]:
    rel, abs_ = PARITY_TOL[ctx.device]
    extra = {"federation.rounds": 2} if ctx.tiny else {}
    for label, model in PARITY_MODELS.items():
        name = f"vectorize_parity[{label}]"

        def one(model=model, name=name):
            over = ctx.overrides(PARITY_BASE, model, extra)
            with no_tf32(), Warnings() as w:
                loop = run_cfg([*over, "federation.vectorize=false"])
                vec = run_cfg([*over, "federation.vectorize=true"])
            if w.fallback():
                return Outcome(name, SKIP, f"fell back: {w.fallback()}")
            diff, worst = compare(vec.history, loop.history, rel, abs_)
            gap = weight_gap(vec, loop)
            detail = (f"{len(loop.history)} rounds; largest relative metric difference {worst:.2e}, final weights "
                      f"max |Δ| {gap:.2e} (tolerance rel {rel:g}, accuracies ±{ACCURACY_ABS})")
            return Outcome(name, FAIL if diff else PASS, f"{diff}; {detail}" if diff else detail)
        yield attempt(name, one)


def check_batched_eval(ctx: Context) -> Iterator[Outcome]:
    import numpy as np

    rel, abs_ = PARITY_TOL[ctx.device]
    for algo in ALGORITHMS:
        name = f"batched_eval[{algo}]"

        def one(algo=algo, name=name):
            over = ctx.overrides(BATCHED_BASE, {"algorithm.name": algo})
            a = run_cfg([*over, "federation.batched_eval=true"])
            b = run_cfg([*over, "federation.batched_eval=false"])
            diff, worst = compare(a.history, b.history, rel, abs_)
            acc_a, acc_b = (np.asarray(s.client_table["accuracy"], dtype=float) for s in (a, b))
            differ = int((~np.isclose(acc_a, acc_b, rtol=0, atol=1e-9)).sum())
            detail = (f"{len(acc_b)} clients, {differ} with another accuracy; largest relative metric difference "
                      f"{worst:.2e}")
            return Outcome(name, FAIL if diff else PASS, f"{diff}; {detail}" if diff else detail)
        yield attempt(name, one)


def check_checkpoint_resume(ctx: Context) -> Iterator[Outcome]:
    from flplat.engine import checkpoint

    tol = RESUME_TOL[ctx.device]
    for algo in ALGORITHMS:
        name = f"checkpoint_resume[{algo}]"

        def one(algo=algo, name=name):
            over = ctx.overrides(RESUME_BASE, {"algorithm.name": algo})
            full = run_cfg(over)
            folder = Path(tempfile.mkdtemp(dir=ctx.tmp))

            class Interrupt(Hooks):
                def on_round_end(self, end):
                    if end.round == 1:
                        raise _Stop()

            with contextlib.suppress(_Stop):  # run_id: the file's name (the tracker's run otherwise)
                run_cfg(over, callbacks=[checkpoint.CheckpointCallback(folder, 1, run_id="gpu-check"), Interrupt()])
            files = list(folder.glob("*.pt"))
            if not files:
                return Outcome(name, FAIL, "the interrupted run left no checkpoint file")
            data = checkpoint.load(files[0])
            resumed = run_cfg(over, resume=data)
            diff, worst = compare(resumed.history, full.history, tol["rel"], tol["abs"], tol["acc"])
            gap = weight_gap(resumed, full)
            if diff is None and gap > tol["weights"]:
                diff = f"final weights differ by up to {gap:.2e}"
            detail = (f"interrupted after round 1 of {len(full.history)}, resumed from its "
                      f"{files[0].stat().st_size / 1024:.0f} KiB checkpoint: " +
                      ("identical" if worst == 0 and gap == 0 else f"largest relative metric difference "
                       f"{worst:.2e}, final weights max |Δ| {gap:.2e} (tolerance {tol})"))
            return Outcome(name, FAIL if diff else PASS, f"{diff}; {detail}" if diff else detail)
        yield attempt(name, one)


class Profile(Hooks):
    """``torch.profiler`` over a run's rounds (from the first round's start to the run's end)."""

    def __init__(self, cuda: bool):
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        self.prof = profile(activities=acts)

    def on_start(self, start):
        self.prof.start()

    def on_end(self, end):
        self.prof.stop()

    def counts(self) -> dict[str, int]:
        c = {"h2d": 0, "d2h": 0, "memcpy_calls": 0, "syncs": 0, "ops": 0}
        for e in self.prof.events():
            n = e.name.lower()
            c["ops"] += 1
            if re.search(r"memcpy.*htod", n):
                c["h2d"] += 1
            elif re.search(r"memcpy.*dtoh", n):
                c["d2h"] += 1
            elif n.startswith("cudamemcpy"):
                c["memcpy_calls"] += 1
            elif n in ("cudastreamsynchronize", "cudadevicesynchronize"):
                c["syncs"] += 1
        return c


def check_no_copy_per_batch(ctx: Context) -> Iterator[Outcome]:
    cuda = ctx.device == "cuda"
    cases = [(p, path) for path in ("loop", "vectorised") for p in PRECISIONS] if cuda else [("32-true", "loop")]
    for prec, path in cases:
        name = f"no_copy_per_batch[{prec}, {path}]"

        def one(prec=prec, path=path, name=name):
            seen = []
            for bs in TINY_COPY_BATCHES if ctx.tiny else COPY_BATCHES:
                prof = Profile(cuda)
                over = ctx.overrides(COPY_BASE, {"fabric.precision": prec, "federation.batch_size": bs,
                                                "federation.vectorize": str(path == "vectorised").lower()})
                with Warnings() as w:
                    s = run_cfg(over, callbacks=[prof])
                steps = local_steps(s.client_table["num_train"], bs)
                seen.append((bs, steps, prof.counts(), w.fallback()))
            (b1, n1, c1, _), (b2, n2, c2, fell) = seen
            if not cuda:
                return Outcome(name, SKIP, f"no CUDA device: host<->device copies exist only with one (profiled "
                                           f"{c1['ops']} / {c2['ops']} events over {n1} / {n2} steps)")
            status, text = copy_verdict((b1, n1, c1), (b2, n2, c2))
            return Outcome(name, status, text + (f"; fell back: {fell}" if fell else ""))
        yield attempt(name, one)


def copy_verdict(few: tuple[int, int, dict], many: tuple[int, int, dict]) -> tuple[str, str]:
    """PASS when the (batch size, steps, counts) run with many batches made at most :data:`COPY_SLACK` more
    host<->device copies than the one with few (and has at least twice the steps); SKIP when the profiler saw
    no copy at all (every round copies each epoch's batch order to the device: CUPTI did not record)."""
    (b1, n1, c1), (b2, n2, c2) = few, many
    desc = (f"B={b1}: {n1} steps, {c1['h2d']} HtoD + {c1['d2h']} DtoH; B={b2}: {n2} steps, {c2['h2d']} HtoD + "
            f"{c2['d2h']} DtoH (stream syncs {c1['syncs']} / {c2['syncs']})")
    if c1["h2d"] + c1["d2h"] + c2["h2d"] + c2["d2h"] == 0:
        return SKIP, f"the profiler recorded no CUDA memcpy activity (CUPTI?): {desc}"
    if n2 < 2 * n1:
        return FAIL, f"the many-batch run has fewer than twice the steps (change COPY_BATCHES): {desc}"
    grow = (c2["h2d"] + c2["d2h"]) - (c1["h2d"] + c1["d2h"])
    if grow <= COPY_SLACK:
        return PASS, f"copies do not grow with batches: {desc}"
    return FAIL, f"{grow} more copies for {n2 - n1} more batches ({grow / (n2 - n1):.2f} per batch): {desc}"


def local_steps(num_train, batch_size: int, epochs: int = 1) -> int:
    """Local steps of one round in which every client trains: per client ceil(n / B) batches, a trailing
    one-sample batch merged into the one before (the engine's ``batch_bounds``), times E."""
    n = [int(v) for v in num_train]
    return epochs * sum(-(-k // batch_size) - (1 if k > batch_size and k % batch_size == 1 else 0) for k in n)


CHECKS: dict[str, Callable[[Context], Iterator[Outcome]]] = {
    "quickstart": check_quickstart,
    "vectorize_parity": check_vectorize_parity,
    "batched_eval": check_batched_eval,
    "checkpoint_resume": check_checkpoint_resume,
    "no_copy_per_batch": check_no_copy_per_batch,
}


# -------------------------------------------------------------------------------------------------- grid

_REGISTERED: set[str] = set()
_POOLS: dict[tuple, tuple] = {}  # (shape, n) -> the pool's tensors, kept across the cells of one K


def synthetic_dataset(shape: tuple[int, ...], n: int, device: str) -> str:
    """Register (once) a dataset of ``n`` samples of ``shape`` (10 classes: Gaussian noise around a random mean per
    class, so training has something to learn) and a 1,000-sample test set; its ``data.name``. The pool is drawn on
    ``device`` (fast; 6 GB for 500,000 CIFAR-shaped samples) and handed to flplat on the CPU, as a loader does."""
    from flplat.api import Dataset, register_dataset

    name = "gpu_check_" + "x".join(map(str, shape)) + f"_{n}"
    if name in _REGISTERED:
        return name

    def load(cfg, seed, shape=shape, n=n, name=name):
        key = (shape, n)
        if key not in _POOLS:
            _POOLS[key] = make_pool(shape, n, seed, device)
        x, y, xt, yt = _POOLS[key]
        return Dataset(name=name, x_train=x, y_train=y, num_classes=10, x_test=xt, y_test=yt)

    register_dataset(name)(load)
    _REGISTERED.add(name)
    return name


def make_pool(shape, n: int, seed: int, device: str, n_test: int = 1000):
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    means = torch.randn(10, *shape, generator=g, device=device)
    out = []
    for rows in (n, n_test):
        y = torch.randint(0, 10, (rows,), generator=g, device=device)
        x = torch.empty(rows, *shape)
        for a in range(0, rows, 65536):  # in chunks: the device holds one chunk at a time
            b = min(a + 65536, rows)
            x[a:b] = (torch.randn(b - a, *shape, generator=g, device=device) + means[y[a:b]]).cpu()
        out += [x, y.cpu()]
    return tuple(out)


def grid_cells(clients, models) -> list[tuple[str, int, str, str]]:
    """(model, K, algorithm, path), most informative first: by K in the given order, then FedAvg before Ditto,
    then the models, the vectorised path before the loop."""
    return [(m, k, a, p) for k in clients for a in ALGORITHMS for m in models for p in ("vectorised", "loop")]


class CellTimer(Hooks):
    """Times each round (device synchronised at its end) and ends the run (:class:`_Stop`) after the warm-up
    round plus ``timed`` rounds, or earlier when another round would pass ``deadline`` (time.monotonic)."""

    def __init__(self, timed: int, deadline: float, cuda: bool):
        self.timed, self.deadline, self.cuda = timed, deadline, cuda
        self.times: list[float] = []
        self.clients: list[float] = []

    def _sync(self) -> float:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        return time.monotonic()

    def on_start(self, start):
        self.t = self._sync()

    def on_round_end(self, end):
        metrics = end.metrics
        now = self._sync()
        self.times.append(now - self.t)
        self.clients.append(float(metrics.get("num_participants", 0)))
        self.t = now
        if len(self.times) >= 1 + self.timed or now + 1.2 * self.times[-1] > self.deadline:
            raise _Stop()


def run_cell(ctx: Context, model: str, k: int, algo: str, path: str, spec, timed: int, cap: float) -> Cell:
    import torch

    from flplat.experiment import load_config, run

    shape, model_over, group = spec
    cell = Cell(model, k, algo, path)
    cuda = ctx.device == "cuda"
    name = synthetic_dataset(shape, k * (TINY_SAMPLES_PER_CLIENT if ctx.tiny else SAMPLES_PER_CLIENT), ctx.device)
    cfg = load_config(None, ctx.overrides(GRID_BASE, model_over, {
        "data.name": name, "partition.num_clients": k, "algorithm.name": algo,
        "federation.vectorize": str(path == "vectorised").lower(), "federation.vectorize_group": group}))
    too_big = store_too_big(cfg, shape, k, algo) if cuda else None
    if too_big:
        cell.note = f"skipped: {too_big}"
        return cell
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    timer = CellTimer(timed, time.monotonic() + cap, cuda)
    try:
        with Warnings() as w, alarm(cap):
            with contextlib.suppress(_Stop):
                run(cfg, callbacks=[timer], progress=False)
    except CheckTimeout:
        cell.note = f"stopped at its cap of {cap:.0f} s"
    except torch.cuda.OutOfMemoryError:
        cell.note = "out of GPU memory"
    except Exception as e:  # noqa: BLE001
        cell.note = f"error: {reason(e)}"
    if cuda:
        cell.peak_mib = torch.cuda.max_memory_allocated() / 2**20
    times = timer.times[1:] or timer.times
    if times:
        cell.rounds_timed = len(timer.times) - 1
        cell.s_per_round = statistics.fmean(times)
        cell.updates_per_s = statistics.fmean(timer.clients[-len(times):]) / cell.s_per_round
        if cell.rounds_timed == 0:
            cell.note = (cell.note + "; " if cell.note else "") + "warm-up round only"
    fell = w.fallback() if path == "vectorised" else None
    if fell:
        cell.note = (cell.note + "; " if cell.note else "") + f"fell back: {fell}"
    return cell


def store_too_big(cfg, shape, k: int, algo: str) -> str | None:
    """Why a personalised method's per-client models cannot fit the device (they live there, in blocks), or None."""
    if algo != "ditto":
        return None
    import torch

    from flplat.models import build_model

    p = sum(t.numel() for t in build_model(cfg.model, shape, 10).parameters())
    need, have = k * p * 4, torch.cuda.get_device_properties(0).total_memory
    if need <= STORE_FRACTION * have:
        return None
    return (f"{k:,} personal models x {p:,} parameters x 4 B = {need / 2**30:.0f} GiB > {STORE_FRACTION:.0%} of the "
            f"device's {have / 2**30:.0f} GiB")


def run_grid(ctx: Context, report: Report) -> None:
    models = TINY_GRID if ctx.tiny else GRID
    timed = TINY_GRID_TIMED_ROUNDS if ctx.tiny else GRID_TIMED_ROUNDS
    cells = grid_cells(TINY_GRID_CLIENTS if ctx.tiny else GRID_CLIENTS, models)
    report.meta["grid"] = {"q": GRID_BASE["federation.client_fraction"],
                           "samples": TINY_SAMPLES_PER_CLIENT if ctx.tiny else SAMPLES_PER_CLIENT,
                           "epochs": GRID_BASE["federation.local_epochs"],
                           "batch": GRID_BASE["federation.batch_size"], "timed_rounds": timed}
    last_k = None
    for i, (model, k, algo, path) in enumerate(cells):
        left = ctx.left()
        if left < 3:
            report.skipped.append(f"{len(cells) - i} grid cells for lack of budget (--budget-s): "
                                  + ", ".join(f"{m} K={kk:,} {a} {p}" for m, kk, a, p in cells[i:]))
            report.save()
            print(f"SKIP  grid: {len(cells) - i} cells left, the overall budget is spent", flush=True)
            return
        if k != last_k:
            _POOLS.clear()  # keep only the current K's pools in host memory
            last_k = k
        try:
            cell = run_cell(ctx, model, k, algo, path, models[model], timed, min(GRID_CELL_CAP_S, left))
        except (Exception, _Stop) as e:  # noqa: BLE001  (a cell that cannot even start: say why, go on)
            cell = Cell(model, k, algo, path, note=f"error: {reason(e)}")
        report.add_cell(cell)
        _free()


# -------------------------------------------------------------------------------------------------- main


def describe(device: str) -> dict:
    import torch

    meta = {"date": datetime.date.today().isoformat(), "python": platform.python_version(),
            "versions": f"torch {torch.__version__}"}
    if device == "cuda":
        meta["device"] = torch.cuda.get_device_name(0)
        meta["versions"] += f", CUDA {torch.version.cuda}, {torch.cuda.device_count()} visible"
        meta["device_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    else:
        meta["device"] = f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores; no CUDA)"
    # $GPU_CHECK_COMMIT first: a lent GPU machine gets a copy of the working tree whose .git may name another
    # commit (seen: the session's first commit, after the tree had moved on)
    commit = os.environ.get("GPU_CHECK_COMMIT", "")[:7]
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                    text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            commit = ""
    meta["commit"] = commit or "unknown"
    return meta


def bundle_deps(target: Path) -> None:
    """Copy the pure-Python packages of :data:`BUNDLED` from this environment into ``target``."""
    import importlib

    target.mkdir(parents=True, exist_ok=True)
    for name in BUNDLED:
        src = Path(importlib.import_module(name).__file__).parent
        shutil.copytree(src, target / name, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        print(f"copied {src} -> {target / name}")


def parse(argv) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT") or "gpu_check_out",
                    help="folder for gpu_check.json / gpu_check.md (default: $OUT, else ./gpu_check_out)")
    ap.add_argument("--budget-s", type=float, default=480.0, help="hard overall time budget in seconds (default 480)")
    ap.add_argument("--tiny", action="store_true", help="CPU, toy sizes (CI): CUDA-only assertions SKIP")
    ap.add_argument("--only", default="", help=f"comma-separated subset of: {', '.join([*CHECKS, 'grid'])}")
    ap.add_argument("--write-docs", action="store_true", help=f"replace the '{SECTION}' section of {DOCS.name}")
    ap.add_argument("--render", metavar="JSON", nargs="+",
                    help="no runs: render gpu_check.json files, the latest first (with --write-docs: into docs)")
    ap.add_argument("--bundle-deps", metavar="DIR", help=f"no runs: copy {', '.join(BUNDLED)} into DIR (to carry)")
    args = ap.parse_args(argv)
    if args.write_docs and args.tiny:
        ap.error("--write-docs records a GPU's results; allowed: without --tiny")
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    bad = [s for s in only if s not in [*CHECKS, "grid"]]
    if bad:
        ap.error(f"--only={bad[0]!r} is not valid; allowed: {', '.join([*CHECKS, 'grid'])}")
    if args.budget_s <= 0:
        ap.error(f"--budget-s={args.budget_s:g} is out of range; allowed: a number of seconds > 0")
    args.only = only or [*CHECKS, "grid"]
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.bundle_deps:
        bundle_deps(Path(args.bundle_deps))
        return 0
    if args.render:
        runs = [json.loads(Path(f).read_text()) for f in args.render]
        print("\n".join(render(d) for d in runs), end="")
        tiny = [f for f, d in zip(args.render, runs) if d.get("meta", {}).get("tiny")]
        if args.write_docs and tiny:
            print(f"gpu_check: {tiny[0]} holds a --tiny (CPU) run; allowed with --write-docs: a GPU run's results",
                  file=sys.stderr)
            return 2
        if args.write_docs:
            write_docs(runs)
        return 0
    t0 = time.monotonic()
    import torch

    device = "cpu" if args.tiny else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device is visible; allowed here: --tiny (CPU, toy sizes)", file=sys.stderr)
        return 2
    command = "python tools/benchmarks/gpu_check.py " + " ".join(argv or sys.argv[1:])
    report = Report(Path(args.out), {**describe(device), "tiny": args.tiny, "budget_s": args.budget_s,
                                     "command": command})
    report.save()
    print(f"gpu_check on {report.meta['device']} ({report.meta['versions']}); budget {args.budget_s:.0f} s; "
          f"results in {report.out}", flush=True)
    try:
        import flplat.experiment  # noqa: F401
    except Exception as e:  # noqa: BLE001  (e.g. OmegaConf missing on a bare GPU image: see --bundle-deps)
        report.add(Outcome("import flplat", FAIL, f"{reason(e)} (carry what is missing: --bundle-deps)"))
        return 1
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        ctx = Context(device, args.tiny, Path(tmp), t0 + CHECKS_SHARE * args.budget_s)
        for name, fn in CHECKS.items():
            if name in args.only:
                run_check(name, fn, ctx, report, CHECK_CAPS[name])
        ctx.deadline = t0 + args.budget_s
        if "grid" in args.only:
            run_grid(ctx, report)
    report.meta["elapsed_s"] = time.monotonic() - t0
    report.save()
    if args.write_docs:
        write_docs(report.to_json())
    failed = [o.name for o in report.checks if o.status == FAIL]
    print(f"gpu_check: {len(report.checks)} checks, {len(failed)} failed"
          + (f" ({', '.join(failed)})" if failed else "") + f"; {report.meta['elapsed_s']:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
