"""Flat model state and server/client state containers.

Models travel between server and clients as one flat float vector: the concatenation of every floating-point
entry of the model's ``state_dict`` (parameters, then float buffers such as batch-norm running statistics,
in ``state_dict`` order). Aggregation is then plain tensor algebra on ``(n_clients, P)`` stacks, and
per-client state is one row per client. Integer buffers (``num_batches_tracked``) are not part of the vector.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn


class ParamLayout:
    """Maps a module's float state to and from one flat vector.

    The layout is bound to the tensors of one module instance (the trainer's reusable model), so ``load`` is a
    single fused copy into the live parameters and ``flatten`` a single concatenation.
    """

    def __init__(self, module: nn.Module):
        params = {id(p) for p in module.parameters()}
        self.names: list[str] = []
        self.tensors: list[torch.Tensor] = []
        self.is_param: list[bool] = []
        for name, t in module.state_dict(keep_vars=True).items():
            if t.is_floating_point():
                self.names.append(name)
                self.tensors.append(t)
                self.is_param.append(id(t) in params)
        self.shapes = [tuple(t.shape) for t in self.tensors]
        self.numels = [t.numel() for t in self.tensors]
        self.size = int(sum(self.numels))
        self.offsets = np.concatenate([[0], np.cumsum(self.numels)]).astype(np.int64)

    def flatten(self) -> torch.Tensor:
        """A new float32 vector holding the module's current state."""
        with torch.no_grad():
            return torch.cat([t.detach().reshape(-1).float() for t in self.tensors])

    def load(self, vec: torch.Tensor) -> None:
        """Copy ``vec`` into the module's tensors in place."""
        if vec.numel() != self.size:
            raise ValueError(f"state vector has {vec.numel()} entries, the model has {self.size}")
        with torch.no_grad():
            views = [v.view(s) for v, s in zip(vec.split(self.numels), self.shapes)]
            torch._foreach_copy_(self.tensors, views)

    def split(self, vec: torch.Tensor) -> list[torch.Tensor]:
        """Views of ``vec`` shaped like the module's tensors (same order as ``names``)."""
        return [v.view(s) for v, s in zip(vec.split(self.numels), self.shapes)]

    def mask(self, prefix: str | tuple[str, ...] = "", params_only: bool = False) -> torch.Tensor:
        """Boolean mask over the flat vector selecting entries whose name starts with ``prefix``.

        E.g. ``mask("head.")`` selects the classifier (FedRep keeps it local, FedAvg aggregates the rest).
        """
        out = torch.zeros(self.size, dtype=torch.bool)
        for name, is_p, a, b in zip(self.names, self.is_param, self.offsets[:-1], self.offsets[1:]):
            if name.startswith(prefix) and (is_p or not params_only):
                out[a:b] = True
        return out


class ClientStore:
    """Per-client state vectors kept compactly as rows of one ``(K, P)`` tensor, created lazily.

    Rows that were never written read as ``default`` (e.g. the initial global model). ``dtype`` may be
    ``torch.float16`` to halve memory (rows are returned as float32). With ``path`` the rows live in a
    memory-mapped file (``torch.from_file``), so e.g. 10,000 clients' copies of a 1 M-parameter model
    (40 GB in float32) need disk, not RAM; the file is created on first write.
    """

    def __init__(self, num_clients: int, size: int, default: torch.Tensor | None = None,
                 dtype: torch.dtype = torch.float32, path: str | None = None):
        self.num_clients = num_clients
        self.size = size
        self.default = default
        self.dtype = dtype
        self.path = path
        self._rows: torch.Tensor | None = None
        self._written = np.zeros(num_clients, dtype=bool)

    def _alloc(self, device) -> torch.Tensor:
        if self.path is None:
            return torch.zeros(self.num_clients, self.size, dtype=self.dtype, device=device)
        from pathlib import Path

        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        n = self.num_clients * self.size
        return torch.from_file(str(self.path), shared=True, size=n, dtype=self.dtype).view(self.num_clients, -1)

    def get(self, client: int) -> torch.Tensor:
        if not self._written[client]:
            if self.default is None:
                raise KeyError(f"client {client} has no stored state")
            return self.default
        row = self._rows[client]
        return row if self.dtype == torch.float32 and self.path is None else row.float()

    def set(self, client: int, vec: torch.Tensor) -> None:
        if self._rows is None:
            self._rows = self._alloc(vec.device if self.path is None else "cpu")
        self._rows[client].copy_(vec)
        self._written[client] = True

    def has(self, client: int) -> bool:
        return bool(self._written[client])

    def nbytes(self) -> int:
        return 0 if self._rows is None else self._rows.numel() * self._rows.element_size()

    def state_dict(self) -> dict[str, Any]:
        return {"rows": self._rows, "written": self._written.copy(), "default": self.default}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self._rows, self._written, self.default = d["rows"], d["written"].copy(), d["default"]


@dataclass
class ServerState:
    """Everything the server carries between rounds; strategies read and return it.

    ``weights``: the global model (None when there is none); ``clusters``: one model per cluster as a
    ``(tau, P)`` tensor with ``assignment[k]`` = cluster of client k (-1: not assigned yet); ``personal``:
    per-client models or other per-client vectors; ``opt``: server-optimizer state; ``extra``: anything else
    a strategy needs (kept small and tensor/ndarray-valued so checkpoints stay generic).
    """

    round: int = 0
    weights: torch.Tensor | None = None
    clusters: torch.Tensor | None = None
    assignment: np.ndarray | None = None
    personal: ClientStore | None = None
    opt: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


def derive_seed(root: int, *keys: int | str) -> int:
    """A 32-bit seed derived from the root seed and a path of keys (strings hashed with CRC32).

    Every random stream of a run (partition, model init, client sampling, each client's batches in each
    round) has its own derived seed, so results do not depend on execution order or on which process
    trains a client.
    """
    ints = [int(root) & 0xFFFFFFFF]
    ints += [zlib.crc32(k.encode()) if isinstance(k, str) else int(k) & 0xFFFFFFFF for k in keys]
    return int(np.random.SeedSequence(ints).generate_state(1)[0])
