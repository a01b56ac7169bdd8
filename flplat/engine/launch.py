"""Early start of a sharded run's local processes, before the heavy imports.

Fabric's own subprocess launcher starts the other ``fabric.devices - 1`` processes when ``Fabric.launch()`` runs,
i.e. after this process has imported lightning and everything else; the children then import it all again, so
the start-up is paid twice in a row. :func:`launch_early` starts them right after the config is read, with the
same environment protocol Fabric's launcher uses (``MASTER_ADDR``, ``MASTER_PORT``, ``NODE_RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``; Fabric then sees ``LOCAL_RANK`` and does not launch again), so all processes
import and load their data in parallel. It does nothing under an external launcher (``torchrun``, SLURM:
``LOCAL_RANK`` / ``WORLD_SIZE`` already set, or a SLURM job step of several tasks), for several nodes, or when
``fabric.devices`` is not an integer > 1 (then Fabric launches as usual). Such a one-node run meets through a
file store in a private temporary directory (``FLPLAT_RDZV_FILE``) and gloo binds to the loopback interface, so
nothing listens on the network (:func:`flplat.engine.sharding.loopback_rendezvous`).

Inside SLURM (:func:`cluster_environment`): a job step of ONE task (an sbatch script, a job-array task, salloc) is
not the run's world. Lightning would take it as one (``SLURM_NTASKS=1``): ``fabric.devices=N`` trained in a
single process while the run recorded N, and the processes started early were each rank 0 of a world of one. Such
a run is N processes started here, as on any machine; a step that srun started with one task per process is
Lightning's SLURM environment; any other number of tasks is refused in one line.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

RDZV_ENV = "FLPLAT_RDZV_FILE"  # set for the processes of a one-node run started by launch_early


def _command() -> list[str]:
    """The command line that re-runs this program (what Fabric's launcher runs in its children)."""
    import __main__

    spec = getattr(__main__, "__spec__", None)
    if spec is None:
        return [sys.executable, os.path.abspath(sys.argv[0]), *sys.argv[1:]]
    return [sys.executable, "-m", spec.name, *sys.argv[1:]]


def launch_early(fabric_cfg, command: list[str] | None = None) -> list[subprocess.Popen]:
    """Start local ranks 1..N-1 of a one-node run with ``fabric.devices = N``; this process becomes rank 0."""
    if "LOCAL_RANK" in os.environ or "WORLD_SIZE" in os.environ or slurm_tasks() > 1:
        return []
    devices = fabric_cfg.devices
    if isinstance(devices, str) and devices.isdigit():
        devices = int(devices)
    if not isinstance(devices, int) or isinstance(devices, bool) or devices <= 1 or int(fabric_cfg.num_nodes) != 1:
        return []
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NODE_RANK="0", LOCAL_RANK="0",
                      WORLD_SIZE=str(devices))
    # one node: rendezvous through a private file instead of a TCP store listening on every interface
    # (flplat.engine.sharding.loopback_rendezvous); removed by finish()
    import tempfile

    os.environ[RDZV_ENV] = os.path.join(tempfile.mkdtemp(prefix="flplat-rdzv-"), "store")
    cmd = command or _command()
    return [subprocess.Popen(cmd, env={**os.environ, "LOCAL_RANK": str(r)}) for r in range(1, devices)]


def finish(procs: list[subprocess.Popen], rc: int) -> int:
    """Wait for the early-started processes (stopping them when this one failed); the run's exit status."""
    for p in procs:
        if rc != 0 and p.poll() is None:
            p.terminate()
        p.wait()
    path = os.environ.pop(RDZV_ENV, None) if procs else None
    if path:
        import shutil

        shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    failed = [p.returncode for p in procs if p.returncode not in (0, None)]
    return rc if rc != 0 or not failed else failed[0]


def slurm_tasks() -> int:
    """The number of tasks of the SLURM job step this process runs in (``SLURM_NTASKS``) when Lightning would take
    SLURM as the launcher: not under torchrun (``TORCHELASTIC_RUN_ID``), not an interactive job named ``bash`` or
    ``interactive`` (``lightning.fabric.plugins.environments.SLURMEnvironment.detect``); 0 otherwise."""
    if "TORCHELASTIC_RUN_ID" in os.environ or os.environ.get("SLURM_JOB_NAME") in ("bash", "interactive"):
        return 0
    try:
        return max(0, int(os.environ.get("SLURM_NTASKS", "0")))
    except ValueError:
        return 0


def fabric_processes(fabric_cfg) -> int | None:
    """The processes a ``fabric`` section asks for: ``devices`` (an integer, or a list of devices) x
    ``num_nodes``; None when the count is known only at launch (``auto``, ``-1``)."""
    devices = fabric_cfg.devices
    if isinstance(devices, str) and devices.isdigit():
        devices = int(devices)
    if isinstance(devices, bool):
        return None
    if isinstance(devices, int):
        n = devices
    elif not isinstance(devices, str) and hasattr(devices, "__len__"):
        n = len(devices)
    else:
        return None
    return n * int(fabric_cfg.num_nodes) if n >= 1 else None


def cluster_environment(fabric_cfg):
    """The cluster environment Fabric must be given instead of the one it detects, or None (its own choice is
    right). In a SLURM job step of one task, a run of N > 1 processes on one node gets Lightning's own environment
    (this command starts the N processes, as outside SLURM); with as many tasks as processes, or outside SLURM,
    Fabric's detection stands. Any other number of tasks is a ConfigError (one line: what to start instead)."""
    from flplat.errors import ConfigError

    tasks, world = slurm_tasks(), fabric_processes(fabric_cfg)
    if not tasks or world is None or world <= 1 or tasks == world:
        return None
    if tasks == 1 and int(fabric_cfg.num_nodes) == 1:
        from lightning.fabric.plugins.environments import LightningEnvironment

        return LightningEnvironment()
    raise ConfigError(f"fabric.devices={fabric_cfg.devices!r} x fabric.num_nodes={fabric_cfg.num_nodes} is {world} "
                      f"processes, but this SLURM job step has {tasks} tasks (SLURM_NTASKS); allowed: one task (flplat "
                      f"starts the processes of one node itself) or srun --nodes={fabric_cfg.num_nodes} "
                      f"--ntasks-per-node={world // max(1, int(fabric_cfg.num_nodes))}")
