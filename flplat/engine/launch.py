"""Early start of a sharded run's local processes, before the heavy imports.

Fabric's own subprocess launcher starts the other ``fabric.devices - 1`` processes when ``Fabric.launch()`` runs,
i.e. after this process has imported lightning and everything else; the children then import it all again, so
the start-up is paid twice in a row. :func:`launch_early` starts them right after the config is read, with the
same environment protocol Fabric's launcher uses (``MASTER_ADDR``, ``MASTER_PORT``, ``NODE_RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``; Fabric then sees ``LOCAL_RANK`` and does not launch again), so all processes
import and load their data in parallel. It does nothing under an external launcher (``torchrun``, SLURM:
``LOCAL_RANK`` / ``WORLD_SIZE`` already set), for several nodes, or when ``fabric.devices`` is not an integer
> 1 (then Fabric launches as usual). Such a one-node run meets through a file store in a private temporary
directory (``FLPLAT_RDZV_FILE``) and gloo binds to the loopback interface, so nothing listens on the network
(:func:`flplat.engine.sharding.loopback_rendezvous`).
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
    if "LOCAL_RANK" in os.environ or "WORLD_SIZE" in os.environ:
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
