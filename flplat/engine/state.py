"""Flat model state, server state, the client store and seed derivation, re-exported from their home in the
protocol layer (:mod:`flplat.protocol.state`, :mod:`flplat.protocol.seeding`) so that
``from flplat.engine.state import ServerState`` keeps working. New code imports :mod:`flplat.api` or
:mod:`flplat.protocol`."""

from __future__ import annotations

from flplat.protocol.seeding import derive_seed
from flplat.protocol.state import ClientStore, ParamLayout, ServerState

__all__ = ["ClientStore", "ParamLayout", "ServerState", "derive_seed"]
