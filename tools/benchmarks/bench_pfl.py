"""Benchmark: flplat's execution modes against pfl-research's simulator (``pfl`` 0.6), whole processes.

The same federation runs as whole processes, interpreter start to exit, in both stacks: FedAvg on Fashion-MNIST
read from the same IDX files (``--data-root``), K clients with the platform's Dirichlet(α) partition (each
client's train and test indices), the same sampled clients each round (``q·K`` of them), the same MLP
(784-hidden-10, ReLU, PyTorch's default initialisation), E local epochs of batch ``B``, a fresh Adam (lr) per
client, a sample-weighted average of the client models, T rounds, ``--threads`` torch threads on the CPU.

Sides (``--sides``, default ``pfl,loop,vec``):

* ``pfl`` — a script on pfl's public API, run by ``--pfl-python`` (pfl and flplat never share a process or an
  interpreter: pfl pins ``numpy``/``packaging`` ranges of its own, so it lives in its own virtual environment):
  ``PyTorchModel`` (local optimiser Adam, central optimiser SGD with lr 1, i.e. the model plus the averaged
  difference), ``FederatedAveraging``, ``SimulatedBackend`` with ``WeightByDatapoints`` (sample-weighted), a
  ``FederatedDataset`` whose ``make_dataset_fn`` gives client k its training rows (shuffled, as the platform
  shuffles each epoch) and whose ``user_sampler`` returns the platform's sampled clients in order. The script
  imports numpy, torch and pfl only and decodes the IDX files itself (gzip + ``np.frombuffer``, the platform's
  standardisation constants).
* ``loop`` — ``python -m flplat.cli run`` (the per-client loop, the default);
* ``vec`` — the same with ``federation.vectorize=true`` (the round's clients trained in one ``torch.func.vmap``);
* ``shard2`` — the same with ``fabric.devices=2`` (two processes, one thread each: two cores; not in the default
  sides since the others use ``--threads`` threads).

Evaluation, the same work on both sides: after every ``--eval-every``-th round and the last one, the global model
is evaluated on every client's test split (one correct count per client; the pooled accuracy is reported, the platform's
``global_accuracy``) and on the 10,000-image
test set, in batches of 1,024 (flplat: ``federation.eval_every``, its default 1 = every round; pfl: a callback
that calls ``PyTorchModel.evaluate`` on each client's test ``Dataset`` and on the test set). pfl's own per-round
evaluation of each *training* user before and after local training on its training data (``do_evaluation``) is
switched off: work the platform does not do (turning it off makes pfl faster, never slower). MLflow tracking is
off on the platform side (pfl logs nothing either); its per-round metrics print to stdout, the platform's progress
line to stderr.

Timing: one untimed warm-up run of every side (file cache, ``.pyc``, the platform's decoded-data cache), then
``--repeats`` rounds of all sides, alternating the order (A B C, C B A, ...). Per side: the median wall time of
the whole process, its CPU time (user + system, ``wait4``'s rusage), the steady seconds per round (rounds 2..T,
measured inside the process) and the medians of the per-repeat ratios pfl ÷ side (a speed-up: above 1 the side is
faster than pfl). The load average is printed per repeat: the machine may be shared.

    python tools/benchmarks/bench_pfl.py --pfl-python /path/to/pflvenv/bin/python   # 20 rounds, 5 repeats
    python tools/benchmarks/bench_pfl.py --sides pfl,vec --repeats 3 --eval-every 20   # evaluation at the end only
    python tools/benchmarks/bench_pfl.py --sides loop,vec --baseline /path/to/checkout # flplat before / after

``--pfl-python`` defaults to ``$PFL_PYTHON``, else this interpreter. Installing pfl (never a core dependency):
``pip install 'flplat[pfl]'`` puts it beside flplat; a separate environment,
``python -m venv pflvenv && pflvenv/bin/pip install 'pfl[pytorch]==0.6.0'``, avoids its pins. Without pfl the
flplat sides still run (``--sides loop,vec``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NORM = {"fmnist": (0.2860, 0.3530), "mnist": (0.1307, 0.3081)}  # the platform's standardisation constants
LAYOUT = {"fmnist": "FashionMNIST/raw", "mnist": "MNIST/raw"}
SIDE_OVERRIDES = {"loop": [], "vec": ["federation.vectorize=true"], "shard2": ["fabric.devices=2"]}


def flplat_overrides(args) -> list[str]:
    return [f"seed={args.seed}", f"data.name={args.dataset}", f"data.root={args.data_root}",
            "partition.name=dirichlet", f"partition.num_clients={args.clients}", f"partition.alpha={args.alpha}",
            "algorithm.name=fedavg", "model.name=mlp", f"model.hidden=[{args.hidden}]", "model.dropout=0.0",
            f"federation.rounds={args.rounds}", f"federation.client_fraction={args.fraction}",
            f"federation.local_epochs={args.epochs}", f"federation.batch_size={args.batch_size}",
            "federation.optimizer.name=adam", f"federation.optimizer.lr={args.lr}",
            f"federation.eval_every={args.eval_every}", "federation.eval_batch_size=1024",
            "fabric.accelerator=cpu", "fabric.precision=32-true", "tracking.enabled=false"]


def write_plan(args, path: Path) -> None:
    """The platform's partition and sampled clients, for the pfl script (untimed)."""
    benchlib.write_plan(flplat_overrides(args), args.seed, args.fraction, args.rounds, path, ROOT)


# --------------------------------------------------------------------------------------------- the pfl side


def read_idx(root: Path, name: str):
    """One IDX file (``name`` or ``name.gz``) as a numpy array."""
    import numpy as np

    gz = root / f"{name}.gz"
    raw = gzip.open(gz).read() if gz.exists() else (root / name).read_bytes()
    ndim = raw[3]
    dims = np.frombuffer(raw, ">u4", ndim, 4)
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_images(data_root: str, dataset: str):
    """Train and test images (float32, standardised as the platform does: scaled to [0, 1], then the fixed mean
    and standard deviation) and labels (int64), as torch tensors, from the IDX files under ``data_root``."""
    import numpy as np
    import torch

    root = Path(data_root) / LAYOUT[dataset]
    mean, std = NORM[dataset]

    def images(name):
        return torch.from_numpy((read_idx(root, name).astype(np.float32) / np.float32(255) - np.float32(mean))
                                / np.float32(std))

    def labels(name):
        return torch.from_numpy(read_idx(root, name).astype(np.int64))

    return (images("train-images-idx3-ubyte"), labels("train-labels-idx1-ubyte"),
            images("t10k-images-idx3-ubyte"), labels("t10k-labels-idx1-ubyte"))


def pfl_worker(args) -> None:
    """FedAvg on pfl's simulator (runs under ``--pfl-python``; imports numpy, torch and pfl only)."""
    t0 = time.perf_counter()
    os.environ.setdefault("PFL_PYTORCH_DEVICE", "cpu")  # the CPU comparison, also where a GPU is present
    import dataclasses
    import types

    import numpy as np
    import torch
    import torch.nn.functional as F
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.aggregate.weighting import WeightByDatapoints
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.callback.base import TrainingProcessCallback
    from pfl.data.dataset import Dataset
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
    from pfl.metrics import Metrics, StringMetricName, Weighted
    from pfl.model.pytorch import PyTorchModel
    from torch import nn

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t_import = time.perf_counter()

    x, y, xg, yg = load_images(args.data_root, args.dataset)
    plan = np.load(args.plan)
    t_data = time.perf_counter()

    widths = [784, *[int(h) for h in args.hidden.split(",")]]
    layers = [nn.Flatten(1)]
    for a, b in zip(widths, widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    net = nn.Sequential(*layers, nn.Linear(widths[-1], 10))

    def loss(self, xb, yb):
        self.train()
        return F.cross_entropy(self(xb), yb)

    @torch.no_grad()
    def metrics(self, xb, yb):
        self.eval()
        logits = self(xb)
        return {"loss": Weighted(F.cross_entropy(logits, yb, reduction="sum").item(), len(yb)),
                "accuracy": Weighted((logits.argmax(1) == yb).sum().item(), len(yb))}

    net.loss, net.metrics = types.MethodType(loss, net), types.MethodType(metrics, net)
    model = PyTorchModel(net, local_optimizer_create=torch.optim.Adam,
                         central_optimizer=torch.optim.SGD(net.parameters(), lr=1.0))

    train = [torch.from_numpy(plan[f"train{k}"]) for k in range(args.clients)]
    shuffle = np.random.default_rng(args.seed)

    def make_dataset_fn(k):
        rows = train[k][torch.from_numpy(shuffle.permutation(len(train[k])))]
        return Dataset((x[rows], y[rows]), user_id=k)

    order = iter(plan["selected"].reshape(-1).tolist())
    federated = FederatedDataset(make_dataset_fn, lambda: next(order))
    eval_params = NNEvalHyperParams(local_batch_size=1024)
    tests = [Dataset((x[plan[f"test{k}"]], y[plan[f"test{k}"]])) for k in range(args.clients)]
    test_set = Dataset((xg, yg))
    acc = StringMetricName("accuracy")
    result: dict = {"round_s": []}

    class FedAvg(FederatedAveraging):
        """pfl's FedAvg without its per-round evaluation of each training user (on its training data)."""

        def get_next_central_contexts(self, *a, **kw):
            contexts, m, met = super().get_next_central_contexts(*a, **kw)
            if contexts is not None:
                contexts = tuple(dataclasses.replace(c, do_evaluation=False) for c in contexts)
            return contexts, m, met

    class Evaluate(TrainingProcessCallback):
        """Every client's test split and the test set, after every ``eval_every``-th and the last round."""

        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            t, out = central_iteration + 1, Metrics()
            if t % args.eval_every == 0 or t == args.rounds:
                per_client = [model.evaluate(d, eval_params=eval_params)[acc] for d in tests]
                result["acc"] = sum(w.weighted_value for w in per_client) / sum(w.weight for w in per_client)
                result["global"] = model.evaluate(test_set, eval_params=eval_params)[acc].overall_value
                out[StringMetricName("pooled client test accuracy")] = Weighted.from_unweighted(result["acc"])
                out[StringMetricName("test set accuracy")] = Weighted.from_unweighted(result["global"])
            result["round_s"].append(time.perf_counter() - result.pop("t", t_setup))
            result["t"] = time.perf_counter()
            return False, out

    backend = SimulatedBackend(training_data=federated, val_data=federated, postprocessors=[WeightByDatapoints()])
    params = NNAlgorithmParams(central_num_iterations=args.rounds, evaluation_frequency=args.rounds,
                               train_cohort_size=len(plan["selected"][0]), val_cohort_size=None)
    train_params = NNTrainHyperParams(local_num_epochs=args.epochs, local_learning_rate=args.lr,
                                      local_batch_size=args.batch_size)
    t_setup = time.perf_counter()
    FedAvg().run(algorithm_params=params, backend=backend, model=model, model_train_params=train_params,
                 model_eval_params=eval_params, callbacks=[Evaluate()])
    t_end = time.perf_counter()
    result.pop("t", None)
    result["phases"] = {"import": t_import - t0, "data": t_data - t_import, "setup": t_setup - t_data,
                        "rounds": t_end - t_setup}
    Path(args.out).write_text(json.dumps(result))


# ---------------------------------------------------------------------------------------------------- driver

INSTALL = ("pip install 'flplat[pfl]', or in its own environment: python -m venv pflvenv && "
           "pflvenv/bin/pip install 'pfl[pytorch]==0.6.0'")


def pfl_version(python: str) -> str | None:
    """The version of pfl that ``python`` imports (with torch), None where it cannot."""
    try:
        res = subprocess.run([python, "-c", "import torch, pfl; print(pfl.__version__)"], capture_output=True,
                             text=True, timeout=300)
    except OSError:
        return None
    return res.stdout.strip().splitlines()[-1] if res.returncode == 0 and res.stdout.strip() else None



def run_side(side: str, args, argv: list[str], tmp: Path) -> dict:
    out = tmp / "pfl.json"
    out.unlink(missing_ok=True)
    name, _, base = side.partition("@")
    root = Path(args.baseline) if base else ROOT
    env = {k: v for k, v in os.environ.items()
           if k not in ("LOCAL_RANK", "WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS")}
    if name == "pfl":
        env.pop("PYTHONPATH", None)
        cmd = [args.pfl_python, str(Path(__file__).resolve()), *argv, "--worker", "pfl",
               "--plan", str(tmp / "plan.npz"), "--out", str(out)]
    else:
        env["PYTHONPATH"], env["COLUMNS"] = str(root), "200"
        threads = [f"fabric.num_threads={1 if name == 'shard2' else args.threads}"] if args.threads else []
        cmd = [sys.executable, "-m", "flplat.cli", "run", "configs/quickstart.yaml", *flplat_overrides(args),
               *threads, *SIDE_OVERRIDES[name]]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 15)
        stdout, stderr = p.communicate()
        raise SystemExit(f"{side} did not finish in {args.timeout} s:\n{stderr[-3000:]}") from None
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{side} failed (exit {p.returncode}):\n{stderr[-3000:]}")
    if name == "pfl":
        r = json.loads(out.read_text())
    else:
        # "[round t/T] ... time=0.15s left=0" (the platform's progress line); "global_accuracy=..." (its summary)
        r = {"round_s": [float(line.rsplit("time=", 1)[1].split("s", 1)[0]) for line in stderr.splitlines()
                         if line.startswith("[round ")],
             "acc": float(stdout.split("global_accuracy=")[1].split()[0]),
             "global": float(stdout.split("global_test_accuracy=")[1].split()[0])}
    ru = getattr(p, "rusage", None)
    r["wall"] = wall
    r["cpu"] = ru.ru_utime + ru.ru_stime if ru else float("nan")
    r["steady"] = statistics.mean(r["round_s"][1:]) if len(r["round_s"]) > 1 else r["round_s"][0]
    return r


def _popen_wait4():
    return benchlib.popen_wait4()


def report(sides: list[str], rows: list[dict], args) -> None:
    print(f"\n{'side':>11} {'wall s':>7} {'CPU s':>7} {'s/round':>8} {'pfl/side wall':>14} {'pfl/side CPU':>13} "
          f"{'client acc':>10} {'test acc':>9}")
    for side in sides:
        med = {k: statistics.median(r[side][k] for r in rows) for k in ("wall", "cpu", "steady")}
        sp = {k: (statistics.median(r["pfl"][k] / r[side][k] for r in rows) if "pfl" in sides else float("nan"))
              for k in ("wall", "cpu")}
        print(f"{side:>11} {med['wall']:>7.2f} {med['cpu']:>7.2f} {med['steady']:>8.3f} {sp['wall']:>13.2f}x "
              f"{sp['cpu']:>12.2f}x {rows[-1][side]['acc']:>10.4f} {rows[-1][side]['global']:>9.4f}")
    mine = [s for s in sides if s != "pfl" and "@" not in s]
    if "pfl" in sides and mine:
        best = min(mine, key=lambda s: statistics.median(r[s]["wall"] for r in rows))
        ratio = statistics.median(r["pfl"]["wall"] / r[best]["wall"] for r in rows)
        print(f"fastest flplat side: {best}, pfl / {best} = {ratio:.2f}x wall (target: at least 2x)")
    if "pfl" in sides and "phases" in rows[-1]["pfl"]:
        ph = {k: statistics.median(r["pfl"]["phases"][k] for r in rows) for k in rows[-1]["pfl"]["phases"]}
        print("pfl phases (median s): " + "  ".join(f"{k} {v:.2f}" for k, v in ph.items()))
    for side in sides:
        if side.endswith("@base"):
            now = side.split("@")[0]
            after = {k: statistics.median(r[now][k] / r[side][k] for r in rows) for k in ("wall", "cpu")}
            print(f"{now}: this checkout / {args.baseline}: wall {after['wall']:.3f}, CPU {after['cpu']:.3f} "
                  f"(medians of {len(rows)} per-repeat ratios)")
    loads = [r["load"] for r in rows]
    print(f"load1 during the repeats: {min(loads):.2f}-{max(loads):.2f}"
          + ("  (above the core count: wall times are disturbed, compare CPU times)"
             if max(loads) > (os.cpu_count() or 1) else ""))


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--pfl-python", default=os.environ.get("PFL_PYTHON", sys.executable),
                    help="the interpreter with pfl 0.6 and torch installed (its own environment)")
    ap.add_argument("--data-root", default=os.environ.get("FLPLAT_DATA", str(ROOT.parent / "shared" / "data")),
                    help="the directory with FashionMNIST/raw (torchvision's layout); both sides read it")
    benchlib.add_federation_args(ap, NORM, rounds=20)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of every side (0: torch's default)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up run of each side")
    ap.add_argument("--sides", default="pfl,loop,vec")
    ap.add_argument("--baseline", default=None, metavar="DIR",
                    help="another checkout: its flplat sides run too, as <side>@base (before / after ratios)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds before a side's run is stopped")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--plan", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    return ap


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.worker == "pfl":
        pfl_worker(args)
        return 0
    sides = args.sides.split(",")
    unknown = sorted(set(sides) - {"pfl", *SIDE_OVERRIDES})
    if unknown:
        ap.error(f"--sides: unknown {unknown}; allowed: pfl, {', '.join(SIDE_OVERRIDES)}")
    if args.baseline:
        sides += [f"{s}@base" for s in sides if s != "pfl"]
    version = None
    if "pfl" in sides:
        version = pfl_version(args.pfl_python)
        if version is None:
            ap.error(f"--pfl-python {args.pfl_python} cannot import pfl; install it ({INSTALL}) or leave pfl out "
                     "of --sides")
    _popen_wait4()
    print(f"{args.dataset} mlp [{args.hidden}]: K={args.clients} q={args.fraction} E={args.epochs} T={args.rounds} "
          f"B={args.batch_size} alpha={args.alpha} eval_every={args.eval_every} threads={args.threads or 'default'} "
          f"cpus={os.cpu_count()}  pfl: {f'{version} ({args.pfl_python})' if version else '-'}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_plan(args, tmp / "plan.npz")
        if not args.no_warmup:
            for side in sides:
                run_side(side, args, argv, tmp)
        rows = []
        for i in range(args.repeats):
            order = sides if i % 2 == 0 else sides[::-1]
            rows.append({side: run_side(side, args, argv, tmp) for side in order})
            rows[-1]["load"] = os.getloadavg()[0]
            print(f"repeat {i + 1}: " + "  ".join(f"{s} {rows[-1][s]['wall']:.2f}s/{rows[-1][s]['cpu']:.2f}s CPU"
                                                  for s in order) + f"  load1 {rows[-1]['load']:.2f}", flush=True)
    if rows:
        report(sides, rows, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
