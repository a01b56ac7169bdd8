"""The one-process, full-precision CPU case without Lightning: :class:`PlainFabric`, what
:func:`flplat.experiment.build_fabric` returns for ``fabric.accelerator=cpu``, one device, one node, ``32-true``.

Why: ``import lightning`` costs ~3 s of CPU per process on the machine of docs/performance.md ("flplat against
pfl-research's simulator"), about twice ``import torch``: its ``lightning.fabric.utilities.imports`` reads
torchmetrics' version by importing torchmetrics, which imports torchvision (and through it ``torch._dynamo``,
sympy, triton), ``scipy.signal`` and matplotlib. On a 20-round FMNIST run of ~15 s of CPU that was a sixth of the
whole process. In this case Fabric does nothing the trainer needs: the device is the CPU, the precision plugin is
the identity (no autocast, no gradient scaling, no module or input conversion), there is no process group and
``launch()`` has nothing to start. So the trainer gets this object instead: the same attributes and methods, with
what Fabric's ``Precision`` base and single-device strategy do in that case (results are the same to the last bit:
the same tensors, the same operations). Every other setting (GPU, another precision, several processes, an
environment where Lightning would detect a launcher: SLURM with several tasks, torchrun) keeps Lightning Fabric.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import torch


class PlainPrecision:
    """Fabric's ``Precision`` base (``32-true``): every conversion is the identity, no loss scaler."""

    scaler = None

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module

    def convert_input(self, data: Any) -> Any:
        return data

    def forward_context(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()


class PlainOptimizer:
    """Fabric's optimizer wrapper without a strategy in between: the wrapped ``optimizer``'s own steps."""

    def __init__(self, optimizer: torch.optim.Optimizer):
        self.optimizer = optimizer

    @property
    def param_groups(self) -> list[dict]:
        return self.optimizer.param_groups

    @property
    def state(self):
        return self.optimizer.state

    def step(self, closure=None):
        return self.optimizer.step(closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)


class _Strategy:
    def __init__(self) -> None:
        self.precision = PlainPrecision()


class PlainFabric:
    """The part of Lightning Fabric's interface the platform uses, for one CPU process at full precision."""

    device = torch.device("cpu")
    world_size, global_rank, local_rank, node_rank = 1, 0, 0, 0
    is_global_zero = True

    def __init__(self) -> None:
        self.strategy = _Strategy()

    def launch(self) -> None:
        """Nothing to start (one process)."""

    def autocast(self) -> contextlib.AbstractContextManager:
        return self.strategy.precision.forward_context()

    def backward(self, loss: torch.Tensor, *args, **kwargs) -> None:
        loss.backward(*args, **kwargs)

    def to_device(self, obj: Any) -> Any:
        """Tensors and modules (also inside lists, tuples and dicts) on the CPU (already there: the same object)."""
        if isinstance(obj, (torch.Tensor, torch.nn.Module)):
            return obj.to(self.device)
        if isinstance(obj, (list, tuple)):
            return type(obj)(self.to_device(o) for o in obj)
        if isinstance(obj, dict):
            return {k: self.to_device(v) for k, v in obj.items()}
        return obj

    def setup_optimizers(self, *optimizers: torch.optim.Optimizer):
        wrapped = tuple(PlainOptimizer(o) for o in optimizers)
        return wrapped[0] if len(wrapped) == 1 else wrapped


def plain_fabric_applies(fcfg) -> bool:
    """Whether a ``fabric`` section is the one-process, full-precision CPU case (see the module docstring): CPU
    (``auto`` where no CUDA or MPS device is visible), ``devices`` 1, ``num_nodes`` 1, ``32-true``, and no launcher
    that Lightning would join (``WORLD_SIZE`` / ``LOCAL_RANK`` of torchrun, a SLURM step of several tasks)."""
    from flplat.engine.launch import slurm_tasks

    accel = str(fcfg.accelerator)
    if accel == "auto":
        mps = getattr(torch.backends, "mps", None)
        accel = "cpu" if not torch.cuda.is_available() and not (mps is not None and mps.is_available()) else "gpu"
    devices = fcfg.devices
    return (accel == "cpu" and str(devices) == "1" and not isinstance(devices, bool) and int(fcfg.num_nodes) == 1
            and str(fcfg.precision) in ("32-true", "32") and slurm_tasks() <= 1
            and not any(k in os.environ for k in ("WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID")))
