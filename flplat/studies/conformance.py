"""The platform's guarantees, checked on any registered algorithm (``flplat check NAME``).

Every algorithm of :data:`flplat.algorithms.ALGORITHMS` -- a built-in or one a plugin registers -- is held to the
same properties, each checked by one function here on a tiny synthetic federation (:func:`tiny_overrides`: 600
samples, 6 clients, an MLP, 3 rounds of 2 local epochs; well under a second per round) and returning a
:class:`Result`:

* ``registry`` -- the class is a :class:`~flplat.api.Strategy` registered under its ``name``, with a
  docstring (its paper), and its ``Config`` dataclass survives the round trip through OmegaConf;
* ``smoke`` -- a run finishes every round with finite metrics, accuracies in [0, 1], every client evaluated, and the
  training loss lower after the last round than after the first;
* ``determinism`` -- the same config and seed give identical metrics at every round (CPU);
* ``sharded`` -- 2 processes (``fabric.devices=2``, gloo) give the per-round metrics of 1 process (to float
  rounding: rel 1e-5);
* ``checkpoint`` -- a checkpoint taken after the next-to-last round (pickled to bytes as on disk) and restored into
  a freshly built run continues to the metrics of the run that was never stopped;
* ``kill_resume`` -- ``flplat run`` killed with SIGKILL after round 1 and continued with ``flplat run --resume``
  ends in the same MLflow run with every metric at every step identical to an uninterrupted run;
* ``vectorize`` -- the algorithm's first-round client plans trained as one stacked group
  (``federation.vectorize=true``) equal the per-client loop (rel 1e-4), or fall back with a logged reason;
* ``failures`` -- rounds with 30 % drop-outs, stragglers and NaN updates (``federation.failures.*``) are
  survived, and rounds where every client drops out keep the server's models;
* ``invalid_config`` -- an unknown ``algorithm.*`` key and a value of the wrong type for the first number / flag
  of the algorithm's ``Config`` end ``flplat run``'s steps (load the config, run it) in a one-line
  :class:`~flplat.errors.ConfigError` (the CLI's exit 2 with one line), and leave no MLflow run;
* ``declarations`` -- ``reduces_across_shards`` holds: aggregating the group means gives the aggregate of the
  clients' models (:func:`flplat.studies.declarations.check_declarations`);
* ``evaluation`` -- every client is scored with the model ``eval_models`` declares, none that trained (and no
  unseen client) with a model no client trained, and a clustered strategy has formed clusters within the check's
  rounds (:func:`flplat.studies.declarations.check_evaluation`).

The algorithm-specific settings the built-ins need on the tiny federation are :data:`CHECK_OVERRIDES`; a plugin
gives its own as ``key=value`` overrides (``flplat check myalgo algorithm.k=2``), which come last. The test suite's
registry-wide conformance tests call these same functions (``tests/test_algorithms.py``, ``test_checkpoint.py``,
``test_sharding.py``, ``test_vectorized.py``, ``test_failures.py``).

Run as a module (``python -m flplat.studies.conformance sharded OUT.json DEVICES SPEC.json``) it is the program of
the ``sharded`` property: several tiny runs inside one multi-process launch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flplat.errors import ConfigError

#: measured, not computed: left out of every comparison (plus MLflow's system/* metrics)
TIMING = frozenset({"round_time_s", "cpu_time_s", "peak_rss_mb"})

#: What a built-in algorithm needs beyond the tiny federation so that 3 rounds exercise it: CAFA's ABFA scores the
#: shared models on validation splits (without any, CAFA is a ConfigError); the Table II server learning rates of
#: FedAdam and FedYogi (0.001) move the global model by ~0.001 per round, too little to see in 3 rounds; FedPFA
#: groups after round 1 so its group-wise phase runs too; CReFF's feature matching and retraining are shortened;
#: FedSoft's mean training loss over seed 2's sampled clients rises from round 1 to 3 (1.163 -> 1.179; with seeds
#: 0 and 1 it falls), so it runs seed 1.
CHECK_OVERRIDES: dict[str, dict[str, Any]] = {
    "fedsoft": {"seed": 1},
    "cafa": {"partition.train_fraction": 0.6, "partition.val_fraction": 0.2},
    "fedadam": {"algorithm.server_lr": 0.03},
    "fedyogi": {"algorithm.server_lr": 0.03},
    "fedpfa": {"algorithm.warmup_rounds": 1},
    "creff": {"algorithm.match_steps": 10, "algorithm.retrain_steps": 30},
}


def tiny_overrides(**extra) -> list[str]:
    """A synthetic federation that trains in well under a second per round (``extra``: more dotted keys). The
    dataset's and the partition's own keys sit in ``data_defaults`` / ``partition_defaults``, so ``extra`` may
    switch ``data.name`` / ``partition.name`` without meeting keys of another entry."""
    base = {
        "data.name": "synthetic", "data_defaults.synthetic.samples": 600, "data_defaults.synthetic.features": 12,
        "data_defaults.synthetic.classes": 4, "partition.name": "dirichlet", "partition_defaults.dirichlet.alpha": 0.5,
        "partition.num_clients": 6, "partition_defaults.dirichlet.min_samples": 10, "model.name": "mlp",
        "model.hidden": "[16]",
        "federation.rounds": 2, "federation.client_fraction": 0.5, "federation.local_epochs": 1,
        "federation.batch_size": 16, "tracking.enabled": "false",
        "algorithm_defaults.flux_prior.num_clusters": 2,  # Dirichlet has no planted M for Flux-prior's default 0
    }
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


@dataclass
class Result:
    """One property's outcome: ``ok``, and a short reason (on a failure: what differed, where)."""

    prop: str
    ok: bool
    detail: str = ""
    seconds: float = 0.0

    def line(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'}  {self.prop:<15} {self.detail}".rstrip()


class Target:
    """An algorithm under check: its name, the overrides of the tiny federation (:data:`CHECK_OVERRIDES` for a
    built-in, then the user's), and the runs several properties share (the reference run, its checkpoint)."""

    def __init__(self, name: str, overrides: Sequence[str] = ()):
        from flplat.algorithms import ALGORITHMS
        from flplat.plugins import load_plugins

        load_plugins()  # an installed plugin's name (entry points, $FLPLAT_PLUGINS) is looked up below
        if name not in ALGORITHMS:
            raise ConfigError(f"algorithm {name!r} is not registered; allowed: {', '.join(sorted(ALGORITHMS))}")
        self.name = name
        self.cls = ALGORITHMS[name]
        self.overrides = list(overrides)
        self.base = tiny_overrides(**{"algorithm.name": name, "federation.rounds": 3, "federation.local_epochs": 2,
                                      "seed": 2, "fabric.num_threads": 1, **CHECK_OVERRIDES.get(name, {})})
        self.cfg = self.config()  # bad overrides: ConfigError before anything runs
        self.rounds = int(self.cfg.federation.rounds)
        if self.rounds < 2:
            raise ConfigError(f"federation.rounds={self.rounds}: flplat check needs >= 2 rounds (a checkpoint is "
                              "taken before the last one)")
        self._reference = None
        self._checkpoint: bytes | None = None

    def overrides_with(self, *extra: str) -> list[str]:
        return [*self.base, *self.overrides, *extra]

    def config(self, *extra: str):
        from flplat.configure import load_config

        return load_config(None, self.overrides_with(*extra))

    def reference(self):
        """The uninterrupted run (cached), with a checkpoint taken after round ``rounds - 1``."""
        if self._reference is None:
            import torch

            from flplat.engine.events import Callback

            saved = io.BytesIO()
            k = self.rounds - 1

            class Grab(Callback):
                def on_round_end(self, end):
                    if end.round == k:
                        torch.save(end.checkpoint(), saved)

            self._reference = _run(self.cfg, callbacks=[Grab()])
            self._checkpoint = saved.getvalue()
        return self._reference


def _run(cfg, **kw):
    """``flplat.experiment.run`` without progress, keeping this process's torch thread count."""
    import torch

    from flplat.experiment import run

    threads = torch.get_num_threads()
    try:
        return run(cfg, progress=False, **kw)[0]
    finally:
        torch.set_num_threads(threads)


def timeless(history: Sequence[dict]) -> list[dict]:
    return [{k: v for k, v in h.items() if k not in TIMING} for h in history]


def compare_histories(got: Sequence[dict], want: Sequence[dict], rel: float = 0.0, abs_: float = 0.0) -> str | None:
    """None when two per-round histories agree (exactly, or within ``rel`` / ``abs_``), else the first difference."""
    got, want = timeless(got), timeless(want)
    if len(got) != len(want):
        return f"{len(got)} rounds instead of {len(want)}"
    for t, (a, b) in enumerate(zip(got, want), start=1):
        if a.keys() != b.keys():
            return f"round {t}: metrics {sorted(a.keys() ^ b.keys())} only on one side"
        for k in b:
            x, y = a[k], b[k]
            same = x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))
            if not same and not (rel or abs_) or not same and not math.isclose(x, y, rel_tol=rel, abs_tol=abs_):
                return f"round {t}: {k} {x!r} != {y!r}"
    return None


# ---- the properties --------------------------------------------------------------------------------------------

def check_registry(t: Target) -> Result:
    from omegaconf import OmegaConf

    from flplat.api import Strategy

    cls = t.cls
    if not (isinstance(cls, type) and issubclass(cls, Strategy)):
        return Result("registry", False, f"{cls!r} is not a Strategy subclass")
    if cls.name != t.name:
        return Result("registry", False, f"registered as {t.name!r} but its name is {cls.name!r}")
    if not (cls.__doc__ or sys.modules[cls.__module__].__doc__):
        return Result("registry", False, "no docstring (cite the paper in the class or module docstring)")
    if not dataclasses.is_dataclass(cls.Config):
        return Result("registry", False, "its Config is not a dataclass")
    default = cls.Config()
    back = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls.Config), OmegaConf.structured(default)))
    if dataclasses.asdict(back) != dataclasses.asdict(default):
        return Result("registry", False, "its Config does not survive the round trip through OmegaConf")
    return Result("registry", True, f"{cls.__module__}.{cls.__qualname__}")


def check_smoke(t: Target) -> Result:
    import numpy as np

    s = t.reference()
    if len(s.history) != t.rounds:
        return Result("smoke", False, f"{len(s.history)} rounds logged instead of {t.rounds}")
    last = s.metrics
    for key in ("global_accuracy", "ad", "sdad", "train_loss", "bytes_up", "bytes_down", "round_time_s"):
        if key not in last or not np.isfinite(last[key]):
            return Result("smoke", False, f"metric {key} is {last.get(key, 'missing')} at the last round")
    if not 0.0 <= last["global_accuracy"] <= 1.0:
        return Result("smoke", False, f"global_accuracy={last['global_accuracy']} outside [0, 1]")
    if not np.isfinite(s.client_table["accuracy"]).all():
        return Result("smoke", False, "a client has no evaluated model (accuracy not finite)")
    first, final = s.history[0]["train_loss"], s.history[-1]["train_loss"]
    if not final < first:
        return Result("smoke", False, f"train_loss did not decrease ({first:.4g} at round 1, {final:.4g} at round "
                                      f"{t.rounds})")
    return Result("smoke", True, f"{t.rounds} rounds, global_accuracy={last['global_accuracy']:.4f}, train_loss "
                                 f"{first:.4g} -> {final:.4g}")


def check_determinism(t: Target) -> Result:
    a = t.reference()
    b = _run(t.cfg)
    diff = compare_histories(b.history, a.history)
    if diff is None and timeless([b.final]) != timeless([a.final]):
        diff = "run-level summaries differ"
    return Result("determinism", diff is None, f"same seed: {diff}" if diff else "same seed, identical metrics")


def check_checkpoint(t: Target) -> Result:
    import torch

    from flplat.engine import checkpoint

    full = t.reference()
    k = t.rounds - 1
    try:
        data = torch.load(io.BytesIO(t._checkpoint), weights_only=False)
        resumed = _run(t.cfg, resume=data)
    except Exception as e:  # noqa: BLE001  (an unpicklable or unrestorable state is this property's failure)
        return Result("checkpoint", False, f"restoring round {k}: {type(e).__name__}: {_first(e)}")
    del checkpoint
    diff = compare_histories(resumed.history, full.history)
    if diff is None and timeless([resumed.final]) != timeless([full.final]):
        diff = "run-level summaries differ"
    return Result("checkpoint", diff is None, f"resumed after round {k}: {diff}" if diff else
                  f"resumed after round {k}: identical to the uninterrupted run")


def check_failures(t: Target) -> Result:
    import numpy as np
    import torch

    from flplat.engine.events import Callback

    failing = ("federation.client_fraction=0.7", "federation.failures.dropout=0.3",
               "federation.failures.straggler=0.3", "federation.failures.corrupt=0.2")
    try:
        s = _run(t.config(*failing))
    except Exception as e:  # noqa: BLE001
        return Result("failures", False, f"30% drop-outs: {type(e).__name__}: {_first(e)}")
    failed = sum(h["failed_clients"] for h in s.history)
    if len(s.history) != t.rounds or failed == 0:
        return Result("failures", False, f"30% drop-outs: {len(s.history)} rounds, {failed} failed clients")
    if not np.isfinite(s.metrics["global_accuracy"]) or not np.isfinite(s.client_table["accuracy"]).all():
        return Result("failures", False, "30% drop-outs: accuracy not finite")
    start = {}

    def clone(x):
        return None if x is None else x.clone()

    class Start(Callback):
        def on_start(self, begin):
            start.update(weights=clone(begin.state.weights), clusters=clone(begin.state.clusters))

    try:
        s = _run(t.config("federation.client_fraction=0.7", "federation.failures.dropout=1.0"), callbacks=[Start()])
    except Exception as e:  # noqa: BLE001
        return Result("failures", False, f"every client dropping out: {type(e).__name__}: {_first(e)}")
    if any(h["num_participants"] != 0 or h["failed_clients"] == 0 for h in s.history):
        return Result("failures", False, "every client dropping out: a round counted participants")
    for key in ("weights", "clusters"):  # no aggregate without results: the server keeps its models
        now = getattr(s.state, key)
        if (now is None) != (start[key] is None) or (now is not None and not torch.equal(now, start[key])):
            return Result("failures", False, f"every client dropping out: the server's {key} changed")
    return Result("failures", True, f"{int(failed)} failed clients over {t.rounds} rounds survived; rounds without "
                                    "any result keep the server's models")


def check_vectorize(t: Target) -> Result:
    import numpy as np
    import torch

    from flplat.engine.executor import LocalExecutor
    from flplat.experiment import prepare

    threads = torch.get_num_threads()
    try:
        p = prepare(t.cfg)
    finally:
        torch.set_num_threads(threads)
    seed = int(t.cfg.seed)
    loop = LocalExecutor(p.trainer, p.data, seed)
    vec = LocalExecutor(p.trainer, p.data, seed, vectorize=True)
    state = p.strategy.init_state(p.init_weights, np.random.default_rng(seed), loop)
    plans = [(k, p.strategy.plan(state, k)) for k in range(min(3, p.data.num_clients))]
    reasons = sorted({r for _, plan in plans if (r := vec.vectorized.reason(plan)) is not None})
    logged = _Records()
    logger = logging.getLogger("flplat")
    logger.addHandler(logged)
    try:
        got = vec.train(plans, 1)
    finally:
        logger.removeHandler(logged)
    want = loop.train(plans, 1)
    for a, b in zip(got, want):
        if (a.client, a.num_samples, a.num_steps) != (b.client, b.num_samples, b.num_steps):
            return Result("vectorize", False, f"client {b.client}: (samples, steps) {(a.num_samples, a.num_steps)} "
                                              f"!= {(b.num_samples, b.num_steps)}")
        if not torch.allclose(a.weights, b.weights, rtol=1e-4, atol=1e-6):
            dev = float((a.weights - b.weights).abs().max())
            return Result("vectorize", False, f"client {b.client}: weights differ from the per-client loop by "
                                              f"{dev:.3g}")
        if not math.isclose(a.train_loss, b.train_loss, rel_tol=1e-5):
            return Result("vectorize", False, f"client {b.client}: train_loss {a.train_loss} != {b.train_loss}")
        ea, eb = (r.extra for r in (a, b))  # Ditto's earlier phases' weights, APFL's v and α, pFedMe's w
        if ea.keys() != eb.keys():
            return Result("vectorize", False, f"client {b.client}: reports {sorted(ea)} instead of {sorted(eb)}")
        differ = next((key for key in eb if not _same_report(ea[key], eb[key])), None)
        if differ is not None:
            return Result("vectorize", False, f"client {b.client}: extra[{differ!r}] differs from the per-client "
                                              "loop's")
    if len(got) != len(want):
        return Result("vectorize", False, f"{len(got)} results instead of {len(want)}")
    if reasons:
        unlogged = [r for r in reasons if not any(r in m for m in logged.messages)]
        if unlogged:
            return Result("vectorize", False, f"falls back to the loop without a logged reason ({unlogged[0]})")
        return Result("vectorize", True, f"falls back to the per-client loop, logged: {reasons[0]}")
    return Result("vectorize", True, f"{len(plans)} clients' first-round plans match the per-client loop")


def _same_report(a, b) -> bool:
    """Whether two values of a client result's ``extra`` agree (tensors to 1e-4 relative, numbers to 1e-5)."""
    import torch

    if isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and a.shape == b.shape and torch.allclose(a, b, rtol=1e-4, atol=1e-6)
    if isinstance(b, (list, tuple)):
        return isinstance(a, (list, tuple)) and len(a) == len(b) and all(map(_same_report, a, b))
    if isinstance(b, float):
        return isinstance(a, (int, float)) and math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-8)
    return a == b


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def invalid_overrides(t: Target) -> list[str]:
    """Overrides that must be refused: an unknown ``algorithm.*`` key, and a value of the wrong type for the first
    int, float or bool field of the algorithm's ``Config``."""
    bad, seen = ["algorithm.no_such_key_flplat_check=1"], set()
    for f in dataclasses.fields(t.cls.Config):
        typ = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
        if typ in ("int", "float", "bool") and not seen:  # the first one (each check costs ~0.3 s)
            seen.add(typ)
            bad.append(f"algorithm.{f.name}=not_a_{typ}")
    return bad


def check_invalid_config(t: Target, workdir: str | None = None) -> Result:
    """Each of :func:`invalid_overrides` through what ``flplat run`` does (load the config, then run it with
    tracking on, in a temporary store) must end in a :class:`~flplat.errors.ConfigError` of one line -- which the
    CLI prints as ``flplat: error: ...`` with exit 2 -- and leave no MLflow run."""
    from mlflow.tracking import MlflowClient

    from flplat.configure import load_config

    with _workdir(workdir) as tmp:
        yaml_path = _write_config(t, tmp)
        store = Path(tmp) / "invalid-store"
        for bad in invalid_overrides(t):
            try:
                cfg = load_config(yaml_path, [bad, "tracking.enabled=true", f"tracking.store_dir={store}",
                                              "tracking.experiment=invalid", "tracking.plots=false"])
                _run(cfg)
            except ConfigError as e:
                if len(str(e).strip().splitlines()) != 1:
                    return Result("invalid_config", False, f"{bad}: an error of {len(str(e).splitlines())} lines")
            except Exception as e:  # noqa: BLE001
                return Result("invalid_config", False, f"{bad}: {type(e).__name__} ({_first(e)}), not a one-line "
                                                       "error with exit 2")
            else:
                return Result("invalid_config", False, f"{bad}: accepted (the run trained), not exit 2")
            if (store / "mlflow.db").exists():
                c = MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")
                exp = c.get_experiment_by_name("invalid")
                if exp is not None and c.search_runs([exp.experiment_id]):
                    return Result("invalid_config", False, f"{bad}: left an MLflow run")
    return Result("invalid_config", True, f"{len(invalid_overrides(t))} bad values refused with one line (exit 2), "
                                          "no MLflow run")


def check_declarations(t: Target) -> Result:
    from flplat.studies import declarations

    return Result("declarations", *declarations.check_declarations(t.cfg))


def check_evaluation(t: Target) -> Result:
    from flplat.studies import declarations

    return Result("evaluation", *declarations.check_evaluation(t.cfg))


# ---- properties in other processes ------------------------------------------------------------------------------

def _env() -> dict[str, str]:
    """The environment of the processes a check starts: this flplat first on the path, no launcher variables."""
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([root, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    for k in ("LOCAL_RANK", "WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "PYTEST_XDIST_WORKER",
              "MLFLOW_TRACKING_URI"):
        env.pop(k, None)
    return env


def run_sharded(specs: dict[str, list[str]], devices: int = 2, timeout: float = 900) -> dict[str, list[dict]]:
    """The per-round histories (timing left out) of several tiny runs (label -> overrides) inside ONE launch of
    ``devices`` processes (``fabric.devices``), so the processes' start-up is paid once."""
    with tempfile.TemporaryDirectory(prefix="flplat-check-") as tmp:
        spec, out = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        spec.write_text(json.dumps(specs))
        res = subprocess.run([sys.executable, "-m", "flplat.studies.conformance", "sharded", str(out), str(devices),
                              str(spec)], env=_env(), capture_output=True, text=True, timeout=timeout)
        if res.returncode != 0 or not out.is_file():
            tail = [line for line in res.stderr.splitlines() if line.strip()][-1:] or ["no output"]
            raise RuntimeError(f"the {devices}-process launch failed (exit {res.returncode}): {tail[0]}")
        return json.loads(out.read_text())


def check_sharded(t: Target, devices: int = 2, sharded: list[dict] | None = None) -> Result:
    """``sharded``: this target's history from an earlier :func:`run_sharded` (several targets in one launch)."""
    if sharded is None:
        try:
            sharded = run_sharded({t.name: t.overrides_with()}, devices)[t.name]
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            return Result("sharded", False, _first(e))
    diff = compare_histories(sharded, t.reference().history, rel=1e-5, abs_=1e-6)
    return Result("sharded", diff is None, f"{devices} processes vs 1: {diff}" if diff else
                  f"{devices} processes give the per-round metrics of 1")


def check_kill_resume(t: Target, workdir: str | None = None, timeout: float = 900) -> Result:
    """``flplat run`` (another process) killed with SIGKILL once round 1 is reported, continued with ``flplat run
    --resume RUN_ID``, against the same run never interrupted (started alongside): same MLflow run, FINISHED,
    every metric at every step identical, checkpoint removed."""
    with _workdir(workdir) as tmp:
        yaml_path = _write_config(t, tmp)
        store = Path(tmp) / "store"
        common = ["tracking.enabled=true", f"tracking.store_dir={store}", "tracking.plots=false",
                  "tracking.checkpoint_every=1"]

        def cli(*args):
            return subprocess.Popen([sys.executable, "-m", "flplat.cli", *args], env=_env(), cwd=tmp,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        ref = cli("run", yaml_path, *common, "tracking.experiment=ref", "--no-progress")
        killed = cli("run", yaml_path, *common, "tracking.experiment=killed")  # one "[round t/T]" line per round
        seen = []
        for line in killed.stderr:
            seen.append(line)
            if line.startswith("[round 1/"):
                killed.send_signal(signal.SIGKILL)
                break
        _, err = killed.communicate(timeout=timeout)
        out_ref, err_ref = ref.communicate(timeout=timeout)
        if ref.returncode != 0:
            return Result("kill_resume", False, f"the uninterrupted run failed: {_last(err_ref)}")
        if killed.returncode != -signal.SIGKILL:
            return Result("kill_resume", False, f"the run to kill ended with exit {killed.returncode} before the "
                                                f"kill: {_last(''.join(seen) + err)}")
        from mlflow.tracking import MlflowClient

        c = MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")
        (run,) = c.search_runs([c.get_experiment_by_name("killed").experiment_id])
        run_id = run.info.run_id
        if not (store / "checkpoints" / f"{run_id}.pt").is_file():
            return Result("kill_resume", False, "the killed run left no checkpoint")
        res = cli("run", "--resume", run_id, "--force", "--no-progress", f"tracking.store_dir={store}")
        out, err = res.communicate(timeout=timeout)
        if res.returncode != 0:
            return Result("kill_resume", False, f"--resume failed (exit {res.returncode}): {_last(err)}")
        if c.get_run(run_id).info.status != "FINISHED":
            return Result("kill_resume", False, f"the resumed run ended {c.get_run(run_id).info.status}")
        ref_id = next(line.split()[2] for line in out_ref.splitlines() if line.startswith("mlflow run:"))

        def histories(rid):
            return {k: sorted((m.step, m.value) for m in c.get_metric_history(rid, k))
                    for k in c.get_run(rid).data.metrics if k not in TIMING and not k.startswith("system/")}

        got, want = histories(run_id), histories(ref_id)
        if got.keys() != want.keys():
            return Result("kill_resume", False, f"metrics {sorted(got.keys() ^ want.keys())} only on one side")
        for key in sorted(want):
            if got[key] != want[key]:
                return Result("kill_resume", False, f"metric {key}: {got[key]} != {want[key]} (step, value)")
        if (store / "checkpoints" / f"{run_id}.pt").exists():
            return Result("kill_resume", False, "the finished run's checkpoint was not removed")
    return Result("kill_resume", True, "killed after round 1, resumed in the same MLflow run: every metric at every "
                                       "step identical")


@contextlib.contextmanager
def _workdir(workdir: str | None):
    if workdir is not None:
        Path(workdir).mkdir(parents=True, exist_ok=True)
        yield str(workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="flplat-check-") as tmp:
            yield tmp


def _write_config(t: Target, tmp: str) -> str:
    """The target's resolved config as a YAML file for ``flplat run``."""
    from flplat.config_io import to_yaml

    path = Path(tmp) / f"{t.name}.yaml"
    path.write_text(to_yaml(t.cfg))
    return str(path)


def _first(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _last(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


# ---- the suite ---------------------------------------------------------------------------------------------------

PROPERTIES: dict[str, Callable[[Target], Result]] = {
    "registry": check_registry,
    "smoke": check_smoke,
    "determinism": check_determinism,
    "sharded": check_sharded,
    "checkpoint": check_checkpoint,
    "kill_resume": check_kill_resume,
    "vectorize": check_vectorize,
    "failures": check_failures,
    "invalid_config": check_invalid_config,
    "declarations": check_declarations,
    "evaluation": check_evaluation,
}


def select_properties(only: Sequence[str] | None) -> list[str]:
    if not only:
        return list(PROPERTIES)
    bad = [p for p in only if p not in PROPERTIES]
    if bad:
        raise ConfigError(f"--only={','.join(bad)} unknown; allowed: {', '.join(PROPERTIES)}")
    return [p for p in PROPERTIES if p in only]


def run_check(t: Target, prop: str) -> Result:
    """One property; an exception it raises is its failure (with the exception's first line)."""
    t0 = time.perf_counter()
    try:
        r = PROPERTIES[prop](t)
    except ConfigError as e:  # e.g. the algorithm refuses the tiny federation: the user gives overrides
        r = Result(prop, False, f"config refused: {_first(e)}")
    except Exception as e:  # noqa: BLE001
        r = Result(prop, False, f"{type(e).__name__}: {_first(e)}")
    r.seconds = time.perf_counter() - t0
    return r


def check(name: str, overrides: Sequence[str] = (), only: Sequence[str] | None = None,
          report: Callable[[Result], None] | None = None) -> list[Result]:
    """Run the conformance suite (or the properties ``only``) on the registered algorithm ``name``; ``report`` is
    called with each result as it is known. Bad ``name`` / overrides / properties: ConfigError."""
    props = select_properties(only)
    t = Target(name, overrides)
    results = []
    for prop in props:
        r = run_check(t, prop)
        results.append(r)
        if report:
            report(r)
    return results


def _sharded_main(out: str, devices: str, spec_path: str) -> None:
    """The program of :func:`run_sharded`: every process of the launch runs every spec; rank 0 writes."""
    from flplat.configure import load_config
    from flplat.engine.sharding import is_main_process
    from flplat.experiment import run

    specs = json.loads(Path(spec_path).read_text())
    results = {}
    for label, overrides in specs.items():
        summary, _ = run(load_config(None, [*overrides, f"fabric.devices={devices}"]), progress=False)
        results[label] = timeless(summary.history)
    if is_main_process():
        Path(out).write_text(json.dumps(results))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "sharded":
        _sharded_main(*sys.argv[2:])
    else:
        sys.exit("usage: python -m flplat.studies.conformance sharded OUT.json DEVICES SPEC.json")
