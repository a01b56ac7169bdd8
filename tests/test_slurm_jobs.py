"""Grids on SLURM: ``flplat reproduce ... --print-jobs array > grid.sh && sbatch grid.sh`` as a cluster user runs
it (flplat/studies/reproduction/jobs.py), and runs of several processes inside a SLURM task
(flplat/engine/launch.py, flplat/experiment.py).

The script goes alone to stdout (MLflow's "View run" lines of a tracking server go to stderr), carries the
interpreter, the directory, the store, the checkpoints, the plugins and PYTHONPATH, and asks for the CPUs / GPUs of
its runs; a fake ``sbatch`` (checks the first line, runs each array task in turn with SLURM's variables) runs it
from another directory with a PATH without the virtualenv and nothing exported. ``fabric.devices=2`` inside a
one-task SLURM job trains in 2 processes, and such a run of a grid, killed, resumes from its checkpoint."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from conftest import REPO

from flplat.cli import main
from flplat.errors import ConfigError

GRID = ["reproduce", "dapfl", "table3_digits", "--scale", "smoke", "--cells", "digits_k20_low"]
FAST = ["federation.rounds=1", "fabric.num_threads=1"]
SLURM_TASK = {"SLURM_JOB_ID": "1000", "SLURM_JOB_NAME": "flplat-dapfl", "SLURM_NTASKS": "1", "SLURM_PROCID": "0",
              "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NNODES": "1"}  # what sbatch gives a one-task job

# a stand-in for SLURM's sbatch: refuses a script whose first line is not the interpreter's (as sbatch does), then
# runs every task of its job array in turn, each with the variables slurmd sets, output to slurm-<job>_<task>.out in
# the directory it is called from (sbatch's default)
FAKE_SBATCH = r"""#!/bin/bash
script="$1"
if [ "$(head -n 1 "$script")" != "#!/bin/bash" ]; then
  echo "sbatch: error: This does not look like a batch script.  The first line must start with #! followed by" \
    "the path to an interpreter." >&2
  exit 1
fi
range=$(sed -n 's/^#SBATCH --array=\([0-9][0-9]*\)-\([0-9][0-9]*\)$/\1 \2/p' "$script")
name=$(sed -n 's/^#SBATCH --job-name=//p' "$script")
cpus=$(sed -n 's/^#SBATCH --cpus-per-task=//p' "$script")
[ -n "$range" ] || { echo "sbatch: error: no #SBATCH --array=FIRST-LAST line" >&2; exit 1; }
set -- $range
status=0
for i in $(seq "$1" "$2"); do
  SLURM_JOB_ID=$((1001 + i)) SLURM_ARRAY_JOB_ID=1000 SLURM_ARRAY_TASK_ID=$i SLURM_JOB_NAME="$name" SLURM_NTASKS=1 \
    SLURM_CPUS_PER_TASK="${cpus:-1}" SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_NODEID=0 SLURM_NNODES=1 \
    bash "$script" > "slurm-1000_$i.out" 2>&1
  rc=$?
  echo "task $i: exit $rc"
  [ $rc -eq 0 ] || status=1
done
exit $status
"""

# a user's method in a module of their own (an algorithm registered under a new name)
PLUGIN = """from flplat.algorithms.fedavg import FedAvg
from flplat.api import register_algorithm


@register_algorithm
class SlurmAvg(FedAvg):
    name = "slurmavg"
"""


def _client(store):
    from mlflow.tracking import MlflowClient

    from flplat.tracking.store import store_uris

    return MlflowClient(tracking_uri=store_uris(None, str(store))[0])


def _runs(store, experiment="reproduce-dapfl") -> list:
    client = _client(store)
    exp = client.get_experiment_by_name(experiment)
    return [] if exp is None else client.search_runs([exp.experiment_id])


def _clean_env(**extra) -> dict[str, str]:
    """An environment without flplat's: no PYTHONPATH, plugins, store or launcher variables."""
    drop = ("PYTHONPATH", "FLPLAT_PLUGINS", "MLFLOW_TRACKING_URI", "LOCAL_RANK", "WORLD_SIZE", "RANK", "MASTER_ADDR",
            "MASTER_PORT", "NODE_RANK", "PYTEST_XDIST_WORKER")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("SLURM_")}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


def _print_jobs(args, cwd, form="array") -> subprocess.CompletedProcess:
    """``flplat reproduce ... --print-jobs FORM`` run as a user runs it: this tree's flplat, from ``cwd``."""
    return subprocess.run([sys.executable, "-m", "flplat.cli", *args, "--print-jobs", form], cwd=cwd,
                          env=_clean_env(PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=300)


# ---------------------------------------------------------------------------------------------- the script itself
def test_only_the_script_goes_to_stdout_when_mlflow_prints_view_run_lines(tmp_path, capsys, monkeypatch):
    """With a tracking server, MLflow writes "View run ..." / "View experiment ..." to stdout whenever a run's status
    is set (``TrackingServiceClient._log_url``, called by ``set_terminated``); printing marks the tables' parent runs
    SCHEDULED. Here the file store is made to print them the same way: they go to stderr, the script alone to
    stdout, its first line ``#!/bin/bash``."""
    from mlflow.tracking._tracking_service.client import TrackingServiceClient

    def log_url(self, run_id):  # what MLflow does for a RestStore (an http tracking server)
        sys.stdout.write(f"\U0001f3c3 View run x at: http://127.0.0.1:5000/#/experiments/1/runs/{run_id}\n")
        sys.stdout.write("\U0001f9ea View experiment at: http://127.0.0.1:5000/#/experiments/1\n")

    monkeypatch.setattr(TrackingServiceClient, "_log_url", log_url)
    store = tmp_path / "store"
    assert main([*GRID, "--methods", "FedAvg", "--store-dir", str(store), "--set", *FAST, "--print-jobs", "array"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == "#!/bin/bash" and "View run" not in out and "View experiment" not in out
    assert "View run" in err  # MLflow did print them: on stderr
    assert main([*GRID, "--methods", "FedAvg", "--store-dir", str(store), "--set", *FAST, "--print-jobs"]) == 0
    out, err = capsys.readouterr()
    assert len(out.strip().splitlines()) == 1 and "View run" not in out and "View run" in err


def test_the_script_pins_the_interpreter_directory_store_plugins_and_checkpoints(tmp_path, monkeypatch, capsys):
    """Relative paths at print time become absolute; a variable unset at print time is unset in the script (the job's
    environment cannot send the runs to another store); the interpreter is this one, never a bare ``flplat``."""
    from flplat.studies.reproduction.jobs import absolute_uri

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("FLPLAT_PLUGINS", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), "rel/src"]))
    assert main([*GRID, "--methods", "FedAvg", "--store-dir", "st", "--set", *FAST, "--print-jobs", "array"]) == 0
    script = capsys.readouterr().out.splitlines()
    assert f"cd {tmp_path}" in script and "unset MLFLOW_TRACKING_URI" in script and "unset FLPLAT_PLUGINS" in script
    assert f"export PYTHONPATH={REPO}:{tmp_path / 'rel/src'}" in script
    cmd = script[script.index("CMDS=(") + 1]
    assert cmd.startswith(f"'{sys.executable} -m flplat.cli reproduce dapfl table3_digits ")
    assert f"--store-dir {tmp_path / 'st'} " in cmd and f"tracking.checkpoint_dir={tmp_path / 'st/checkpoints'}" in cmd
    assert "#SBATCH --cpus-per-task=1" in script and not any(line.startswith("#SBATCH --gres") for line in script)
    # the lines form carries the same, per command
    assert main([*GRID, "--methods", "FedAvg", "--store-dir", "st", "--set", *FAST, "--print-jobs"]) == 0
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.startswith(f"cd {tmp_path} && env -u MLFLOW_TRACKING_URI -u FLPLAT_PLUGINS "
                           f"PYTHONPATH={REPO}:{tmp_path / 'rel/src'} {sys.executable} -m flplat.cli reproduce ")
    assert absolute_uri("sqlite:///db/m.db") == f"sqlite:///{tmp_path / 'db/m.db'}"
    assert absolute_uri("sqlite:////abs/m.db") == "sqlite:////abs/m.db"
    assert absolute_uri("http://head:5000") == "http://head:5000" and absolute_uri("st") == str(tmp_path / "st")
    # a plugin module outside the installation: its directory joins PYTHONPATH (an installed one's does not)
    from flplat.studies.reproduction.jobs import pinned

    (tmp_path / "plug" / "h_slurm_pkg").mkdir(parents=True)
    (tmp_path / "plug" / "h_slurm_pkg" / "__init__.py").write_text("")
    (tmp_path / "plug" / "h_slurm_pkg" / "empty.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "plug"))
    monkeypatch.setenv("FLPLAT_PLUGINS", "h_slurm_pkg.empty,json")
    pin = pinned()
    assert pin.env["FLPLAT_PLUGINS"] == "h_slurm_pkg.empty,json" and pin.python == sys.executable
    assert pin.env["PYTHONPATH"].split(os.pathsep) == [str(REPO), str(tmp_path / "rel/src"), str(tmp_path / "plug")]
    assert pin.exports()[1] == "export FLPLAT_PLUGINS=h_slurm_pkg.empty,json" and pin.cwd == str(tmp_path)
    monkeypatch.delenv("FLPLAT_PLUGINS")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///srv/m.db")  # a store named by the environment: exported
    assert main([*GRID, "--methods", "FedAvg", "--store-dir", "st", "--set", *FAST, "--print-jobs", "array"]) == 0
    script = capsys.readouterr().out.splitlines()
    assert f"export MLFLOW_TRACKING_URI=sqlite:///{tmp_path / 'srv/m.db'}" in script
    assert f"tracking.checkpoint_dir={tmp_path / 'srv/checkpoints'}" in script[script.index("CMDS=(") + 1]


def test_a_task_asks_for_the_cpus_and_gpus_of_its_runs_and_one_node(tmp_path, capsys):
    store = str(tmp_path / "store")
    base = [*GRID, "--methods", "FedAvg", "--store-dir", store, "--set", *FAST]
    assert main([*base, "fabric.devices=2", "fabric.num_threads=3", "--print-jobs", "array"]) == 0
    assert "#SBATCH --cpus-per-task=6" in capsys.readouterr().out.splitlines()
    assert main([*base, "fabric.devices=2", "fabric.accelerator=cuda", "--print-jobs", "array"]) == 0
    script = capsys.readouterr().out.splitlines()
    assert "#SBATCH --gres=gpu:2" in script and "#SBATCH --cpus-per-task=2" in script
    parents = {r.info.run_id: r.info.status for r in _runs(store)}
    assert main([*base, "fabric.num_nodes=2", "fabric.devices=1", "--print-jobs", "array"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip().splitlines()[-1] == (
        "flplat: error: fabric.num_nodes=2 (table3_digits digits_k20_low FedAvg s0): a task of a SLURM job array "
        "runs on one node; allowed: fabric.num_nodes=1 (fabric.devices processes on the task's node), or run it "
        "over nodes with srun (docs/scaling.md)")
    assert {r.info.run_id: r.info.status for r in _runs(store)} == parents  # nothing marked SCHEDULED again


def test_fake_sbatch_runs_the_printed_array_from_anywhere_without_the_virtualenv(tmp_path):
    """The issue's check: a grid with a plugin method (``--add-method`` + ``--plugin``, the module beside the
    user's files) printed with a relative store; submitted from another directory, PATH without the virtualenv
    (a bare ``flplat`` would exit 127), nothing exported: every task exits 0 and every run is FINISHED in the
    grid's store, which then has nothing left to run."""
    home, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    (elsewhere / "bin").mkdir(parents=True)
    home.mkdir()
    (home / "slurm_plugin.py").write_text(PLUGIN)
    sbatch = elsewhere / "bin" / "sbatch"
    sbatch.write_text(FAKE_SBATCH)
    sbatch.chmod(0o755)
    args = [*GRID, "--methods", "FedAvg", "--add-method", "Mine=algorithm.name=slurmavg", "--store-dir", "store",
            "--set", *FAST, "--plugin", "slurm_plugin"]
    res = _print_jobs(args, home)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.startswith("#!/bin/bash\n#SBATCH --job-name=flplat-dapfl\n#SBATCH --array=0-1\n")
    (home / "grid.sh").write_text(res.stdout)
    path = f"{elsewhere / 'bin'}:/usr/bin:/bin"
    assert shutil.which("flplat", path=path) is None  # the check means something: no flplat on this PATH
    t0 = time.perf_counter()
    sub = subprocess.run(["sbatch", str(home / "grid.sh")], cwd=elsewhere, env=_clean_env(PATH=path),
                         capture_output=True, text=True, timeout=600)
    logs = "".join(p.read_text()[-1500:] for p in sorted(elsewhere.glob("slurm-*.out")))
    assert sub.stdout.split("\n")[:2] == ["task 0: exit 0", "task 1: exit 0"], sub.stdout + sub.stderr + logs
    runs = [r for r in _runs(home / "store") if r.data.tags.get("mlflow.parentRunId")]
    assert sorted((r.data.tags["flplat.reproduce.method"], r.info.status) for r in runs) == [
        ("FedAvg", "FINISHED"), ("Mine", "FINISHED")], logs
    assert not (elsewhere / "mlruns").exists() and not (home / "mlruns").exists()
    # the grid's own planning finds its FedAvg run finished there (the plugin's run: same tags, same store)
    from flplat.studies.reproduce import Store, paper_tables, plan
    from flplat.studies.reproduction.execute import unfinished

    (t,) = [t for t in paper_tables("dapfl") if t.id == "table3_digits"]
    jobs = plan("dapfl", t, "smoke", [0], ["FedAvg"], ["digits_k20_low"], FAST, "reproduce-dapfl",
                str(home / "store"))
    assert unfinished("dapfl", jobs, Store("reproduce-dapfl", str(home / "store")))[0] == []
    print(f"fake sbatch: 2 tasks in {time.perf_counter() - t0:.1f}s")


# ---------------------------------------------------------------------------------- several processes in a SLURM job
def _slurm(monkeypatch, **env):
    for k in [k for k in os.environ if k.startswith("SLURM_")] + ["TORCHELASTIC_RUN_ID", "LOCAL_RANK", "WORLD_SIZE"]:
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)


def test_a_one_task_slurm_job_is_not_the_world_of_a_sharded_run(monkeypatch):
    """In a job step of one task, ``fabric.devices=2`` on one node gets Lightning's own environment (flplat starts
    the 2 processes), where Lightning alone takes SLURM's one task as the whole world; srun's one task per process
    keeps Lightning's SLURM environment; another count is one line."""
    from lightning.fabric.plugins.environments import LightningEnvironment

    from flplat.engine.launch import cluster_environment, fabric_processes, launch_early, slurm_tasks

    two, one = SimpleNamespace(devices=2, num_nodes=1), SimpleNamespace(devices=1, num_nodes=1)
    _slurm(monkeypatch)
    assert slurm_tasks() == 0 and cluster_environment(two) is None  # outside SLURM: Fabric's choice
    _slurm(monkeypatch, **SLURM_TASK)
    assert slurm_tasks() == 1 and isinstance(cluster_environment(two), LightningEnvironment)
    assert cluster_environment(one) is None
    with pytest.raises(ConfigError, match=r"fabric.devices=2 x fabric.num_nodes=2 is 4 processes, but this SLURM job "
                                          r"step has 1 tasks .* srun --nodes=2 --ntasks-per-node=2"):
        cluster_environment(SimpleNamespace(devices=2, num_nodes=2))
    _slurm(monkeypatch, **{**SLURM_TASK, "SLURM_NTASKS": "2"})  # srun --ntasks-per-node=2: Lightning's SLURM env
    assert cluster_environment(two) is None
    assert launch_early(two, ["/nonexistent-python-that-must-not-start"]) == []  # srun started both processes
    with pytest.raises(ConfigError, match="is 3 processes, but this SLURM job step has 2 tasks"):
        cluster_environment(SimpleNamespace(devices=3, num_nodes=1))
    _slurm(monkeypatch, **{**SLURM_TASK, "SLURM_JOB_NAME": "interactive"})  # Lightning ignores such a job
    assert slurm_tasks() == 0
    _slurm(monkeypatch, **{**SLURM_TASK, "TORCHELASTIC_RUN_ID": "x"})  # torchrun inside SLURM: torchrun's
    assert slurm_tasks() == 0
    assert fabric_processes(SimpleNamespace(devices=[0, 1], num_nodes=2)) == 4
    assert fabric_processes(SimpleNamespace(devices="auto", num_nodes=1)) is None


def test_a_launch_with_fewer_processes_than_the_config_is_refused(tmp_path):
    """The safety net under any launcher: Lightning's own detection in a one-task SLURM job (what flplat did
    before) gives a world of one for ``fabric.devices=2``; flplat refuses to train then (one line) instead of
    training in one process while the run records 2."""
    code = ("import flplat.engine.launch as L, flplat.experiment as E; from flplat.errors import ConfigError\n"
            "L.cluster_environment = lambda fcfg: None\n"
            "cfg = E.load_config(None, ['fabric.devices=2'])\n"
            "try:\n    E.build_fabric(cfg.fabric)\nexcept ConfigError as e:\n    print(e)\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_clean_env(PYTHONPATH=str(REPO),
                                                                                     **SLURM_TASK),
                         capture_output=True, text=True, timeout=300)
    assert (res.stdout.strip().splitlines() or ["(no error: it trained)"])[-1] == (
        "fabric.devices=2 x fabric.num_nodes=1 asks for 2 processes, but the launcher started 1; allowed: flplat's "
        "own launch (one command), or a launcher that starts 2 (torchrun --nproc-per-node, srun --ntasks-per-node; "
        "docs/scaling.md)"), res.stdout + res.stderr[-2000:]


def test_default_threads_are_the_cores_this_process_may_use(monkeypatch):
    """A SLURM task's --cpus-per-task (its CPU affinity), not the node's cores, shared by the processes."""
    from flplat.engine import sharding

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert sharding.default_threads(2) == 2 and sharding.default_threads(8) == 1


AGREE = """
import json, os, sys
import torch.distributed as dist
import torch.multiprocessing as mp


def rank(r, tmp):
    from flplat.config import TrackingConfig
    from flplat.errors import ConfigError, RunFailed
    from flplat.tracking.resume import agree

    dist.init_process_group("gloo", init_method=f"file://{tmp}/pg", rank=r, world_size=2)
    tcfg = TrackingConfig(store_dir=tmp)
    out = []

    def decide(run_id):
        def take():
            with open(os.path.join(tmp, "decided"), "a") as fh:
                fh.write(f"{r}\\n")  # who decided
            if run_id == "boom":
                raise OSError("the store is gone")
            return ({"meta": {"run_id": run_id}, "round": 3, "who": "rank 0"} if run_id else None), {"t": "v"}
        return take

    for run_id in ("ckpt", None, "missing", "boom"):
        try:
            resume, tags = agree(tcfg, decide(run_id))
            out.append([resume and {k: resume[k] for k in ("round", "who")}, tags])
        except (ConfigError, RunFailed, OSError) as e:
            out.append(f"{type(e).__name__}: {e}")
    with open(os.path.join(tmp, f"out{r}.json"), "w") as fh:
        json.dump(out, fh)
    dist.barrier()  # both done before either tears gloo down (as flplat's close_process_group_at_exit does): a
    dist.destroy_process_group()  # process leaving with the group alive could abort ("terminate called ...")


if __name__ == "__main__":
    mp.spawn(rank, args=(sys.argv[1],), nprocs=2)
"""


def test_a_sharded_run_resumes_as_rank_0_decides(tmp_path):
    """:func:`flplat.tracking.resume.agree` in 2 processes: rank 0 alone decides (looks the run up), rank 1 follows: it
    loads the same run's checkpoint from disk, gets the same tags, starts afresh when rank 0 does; a checkpoint rank
    1 cannot read, or a decision rank 0 could not take, ends both with one line."""
    from flplat.engine import checkpoint
    from flplat.engine.checkpoint import VERSION

    checkpoint.save(tmp_path / "checkpoints" / "ckpt.pt", {"version": VERSION, "meta": {"run_id": "ckpt"},
                                                           "round": 3, "who": "the file"})
    (tmp_path / "agree.py").write_text(AGREE)
    res = subprocess.run([sys.executable, str(tmp_path / "agree.py"), str(tmp_path)], cwd=tmp_path,
                         env=_clean_env(PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    import json

    r0, r1 = (json.loads((tmp_path / f"out{r}.json").read_text()) for r in (0, 1))
    assert (tmp_path / "decided").read_text().split() == ["0"] * 4  # rank 0 decided, every time alone
    assert r0[0] == [{"round": 3, "who": "rank 0"}, {"t": "v"}]  # its own decision
    assert r1[0] == [{"round": 3, "who": "the file"}, {"t": "v"}]  # the same run, from its checkpoint on disk
    assert r0[1] == r1[1] == [None, {"t": "v"}]  # a new run: both start afresh
    missing = tmp_path / "checkpoints" / "missing.pt"
    for r in (r0, r1):
        assert r[2].startswith(f"ConfigError: tracking.checkpoint_dir: rank 1 cannot read the checkpoint {missing} "
                               "of run missing (FileNotFoundError")
    assert r0[3] == "OSError: the store is gone"
    assert r1[3] == "RunFailed: rank 0 could not look up the run to resume (OSError: the store is gone)"


@pytest.mark.slow
def test_a_sharded_run_of_a_grid_in_a_slurm_task_trains_in_two_processes_and_resumes(tmp_path):
    """An array task's run with ``fabric.devices=2`` (a one-task SLURM job): 2 processes train it (tag
    ``flplat.processes``); killed (SIGTERM, as scancel) after its first checkpoint, the same task again resumes it
    from that checkpoint in the same MLflow run (rank 0 decides, rank 1 follows), with the per-round metrics of an
    uninterrupted one-process run."""
    from flplat.experiment import load_config, run

    store = tmp_path / "store"
    over = ["fabric.devices=2", "fabric.num_threads=1", "federation.rounds=30"]
    cmd = [sys.executable, "-m", "flplat.cli", *GRID, "--methods", "FedAvg", "--seeds", "0", "--store-dir",
           str(store), "--set", *over]
    env = _clean_env(PYTHONPATH=str(REPO), **SLURM_TASK, SLURM_ARRAY_TASK_ID="0")
    first = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    deadline = time.time() + 600
    while not list((store / "checkpoints").glob("*.pt")) and first.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGTERM)
    err = first.communicate(timeout=300)[1]
    assert first.returncode == 143, err[-2000:]
    (killed,) = [r for r in _runs(store) if r.data.tags.get("mlflow.parentRunId")]
    assert killed.info.status in ("KILLED", "FAILED") and killed.data.tags["flplat.processes"] == "2"
    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"flplat: resuming run {killed.info.run_id} of this config after round" in again.stderr
    (done,) = [r for r in _runs(store) if r.data.tags.get("mlflow.parentRunId")]
    assert done.info.run_id == killed.info.run_id and done.info.status == "FINISHED"
    assert done.data.tags["flplat.resumed"] == "1" and done.data.tags["flplat.processes"] == "2"
    import torch

    job = _the_job(store)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one, _ = run(load_config(job.config, [*job.overrides, "tracking.enabled=false"]), progress=False)
    finally:
        torch.set_num_threads(threads)
    client = _client(store)
    for key in ("global_accuracy", "train_loss", "mean_local_accuracy"):
        got = [m.value for m in sorted(client.get_metric_history(done.info.run_id, key), key=lambda m: m.step)]
        assert got == pytest.approx([h[key] for h in one.history], rel=1e-5, abs=1e-6), key


def _the_job(store):
    """The grid's FedAvg job above as planned (one process: ``fabric.devices`` left at 1), the reference."""
    from flplat.studies.reproduce import paper_tables, per_table, plan

    (t,) = [t for t in paper_tables("dapfl") if t.id == "table3_digits"]
    sel = per_table([t], ["FedAvg"], ["digits_k20_low"])[t.id]
    (job,) = plan("dapfl", t, "smoke", [0], *sel, ["fabric.num_threads=1", "federation.rounds=30"],
                  "reproduce-dapfl", str(store))
    return job
