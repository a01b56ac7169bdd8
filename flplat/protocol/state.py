"""Flat model state and server/client state containers (the state half of the strategy protocol).

Models travel between server and clients as one flat float vector: the concatenation of every floating-point
entry of the model's ``state_dict`` (parameters, then float buffers such as batch-norm running statistics,
in ``state_dict`` order). Aggregation is then plain tensor algebra on ``(n_clients, P)`` stacks, and
per-client state is one row per client. Integer buffers (``num_batches_tracked``) are not part of the vector.

Batch norm (``cifar_cnn``, ``resnet9``): the running mean and variance are float buffers, so they travel in the
vector like the parameters -- a client trains from the statistics it receives, sends back the ones its batches
moved, every aggregation treats them as it treats the weights (FedAvg: the sample-weighted mean), and a model is
evaluated with the statistics of its vector. This is what the papers' stacks do: Keras' ``get_weights()`` and the
usual Flower ``state_dict`` exchange carry the moving statistics too. ``layout.is_param`` / ``mask(...,
params_only=True)`` let a method leave them out where it must (model distances and similarities of CFL, DA-PFL,
FedAMP, FeSEM; FedDyn's correction). ``num_batches_tracked`` stays in the trainer's module: with the default
momentum it is never read (it would matter only for ``momentum=None``, the cumulative average, which no model here
uses). tests/test_paper_models.py pins this behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from flplat.deprecation import deprecated


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
    """Per-client state vectors kept compactly as rows of ``(K, P)`` storage, allocated lazily.

    Rows that were never written read as ``default`` (e.g. the initial global model) and cost nothing: in RAM
    the rows live in blocks of ``block`` clients, each allocated on the first write to one of its clients, so
    memory follows the clients that actually hold state. ``dtype`` may be ``torch.float16`` to halve it (rows
    are returned as float32). With ``path`` the rows live in one memory-mapped file (``torch.from_file``,
    sparse on disk: unwritten rows take no space), so e.g. 10,000 clients' copies of a 1 M-parameter model
    (20 GB in float16) need disk, not RAM; the file is created on first write.
    """

    def __init__(self, num_clients: int, size: int, default: torch.Tensor | None = None,
                 dtype: torch.dtype = torch.float32, path: str | None = None, block: int = 64):
        self.num_clients = num_clients
        self.size = size
        self.default = default
        self.dtype = dtype
        self.path = path
        self.block = block
        self._file: torch.Tensor | None = None  # (K, P) memory-mapped rows when path is set
        self._blocks: dict[int, torch.Tensor] = {}  # in RAM: block id -> (block, P) rows
        self._written = np.zeros(num_clients, dtype=bool)

    def _row(self, client: int, device=None) -> torch.Tensor:
        if self.path is not None:
            if self._file is None:
                from pathlib import Path

                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                n = self.num_clients * self.size
                self._file = torch.from_file(str(self.path), shared=True, size=n, dtype=self.dtype).view(
                    self.num_clients, -1)
            return self._file[client]
        b = client // self.block
        rows = self._blocks.get(b)
        if rows is None:
            rows = self._blocks[b] = torch.empty(min(self.block, self.num_clients - b * self.block), self.size,
                                                 dtype=self.dtype, device=device)
        return rows[client - b * self.block]

    def get(self, client: int) -> torch.Tensor:
        if not self._written[client]:
            if self.default is None:
                raise KeyError(f"client {client} has no stored state")
            return self.default
        row = self._row(client)
        return row if self.dtype == torch.float32 and self.path is None else row.float()

    def set(self, client: int, vec: torch.Tensor) -> None:
        self._row(client, vec.device).copy_(vec)
        self._written[client] = True

    def has(self, client: int) -> bool:
        return bool(self._written[client])

    def nbytes(self) -> int:
        """Bytes of state storage in memory (the mapped file counts fully: its size on disk is sparse)."""
        if self._file is not None:
            return self._file.numel() * self._file.element_size()
        return sum(r.numel() * r.element_size() for r in self._blocks.values())

    def state_dict(self) -> dict[str, Any]:
        return {"file": self._file, "blocks": dict(self._blocks), "written": self._written.copy(),
                "default": self.default}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self._file, self._blocks = d["file"], dict(d["blocks"])
        self._written, self.default = d["written"].copy(), d["default"]

    def __getstate__(self) -> dict[str, Any]:
        """Pickled compactly (checkpoints, :mod:`flplat.engine.checkpoint`): only the written rows, in the store's
        dtype, whatever the storage (RAM blocks or a memory-mapped file)."""
        d = self.__dict__.copy()
        idx = np.flatnonzero(self._written)
        d["_file"], d["_blocks"] = None, {}
        d["_rows"] = torch.stack([self._row(int(k)).detach().cpu().clone() for k in idx]) if len(idx) else None
        d["_row_ids"] = idx
        return d

    def __setstate__(self, d: dict[str, Any]) -> None:
        rows, idx = d.pop("_rows"), d.pop("_row_ids")
        self.__dict__.update(d)
        for k, row in zip(idx, rows if rows is not None else []):
            self._row(int(k)).copy_(row)


@dataclass(init=False)
class ServerState:
    """Everything the server carries between rounds; strategies read and return it.

    ``weights``: the global model (None when there is none); ``clusters``: one model per cluster as a
    ``(tau, P)`` tensor with ``assignment[k]`` = cluster of client k (-1: not assigned yet); ``personal``:
    per-client models or other per-client vectors; ``opt``: server-optimizer state; ``method``: the method's own
    state, an instance of a dataclass the strategy defines (e.g. Flux's descriptors and centroids, HACCS's groups,
    latencies and losses), set in ``init_state`` and read and updated in the later calls; None for a method without
    one. It is checkpointed with the rest of the state (pickled: keep it to arrays, tensors and plain values).

    ``extra`` (a dict of string keys) is deprecated (since flplat 0.2.0, removed in 0.3.0): reading or setting it,
    or passing ``ServerState(extra=...)``, warns; a method's state goes in ``method``.
    """

    round: int = 0
    weights: torch.Tensor | None = None
    clusters: torch.Tensor | None = None
    assignment: np.ndarray | None = None
    personal: ClientStore | None = None
    opt: dict[str, Any] = field(default_factory=dict)
    method: Any = None

    def __init__(self, round: int = 0, weights: torch.Tensor | None = None, clusters: torch.Tensor | None = None,
                 assignment: np.ndarray | None = None, personal: ClientStore | None = None,
                 opt: dict[str, Any] | None = None, method: Any = None, extra: dict[str, Any] | None = None):
        self.round, self.weights, self.clusters, self.assignment = round, weights, clusters, assignment
        self.personal, self.opt, self.method = personal, {} if opt is None else opt, method
        self._extra: dict[str, Any] = {}
        if extra is not None:
            _extra_deprecated(3)
            self._extra = dict(extra)

    @property
    def extra(self) -> dict[str, Any]:
        """Deprecated: a method's state goes in ``method``."""
        _extra_deprecated(3)
        return self._extra

    @extra.setter
    def extra(self, value: dict[str, Any]) -> None:
        _extra_deprecated(3)
        self._extra = dict(value)

    def __setstate__(self, d: dict[str, Any]) -> None:
        """A pickle of an older ServerState (``extra`` a field, no ``method``) loads into this one."""
        d = dict(d)
        if "extra" in d:
            d["_extra"] = d.pop("extra")
        d.setdefault("_extra", {})
        d.setdefault("method", None)
        self.__dict__.update(d)


def _extra_deprecated(stacklevel: int) -> None:
    deprecated("ServerState.extra", "ServerState.method (an instance of a dataclass the strategy defines)",
               stacklevel=stacklevel)
