"""Old import path of the flat state, server state, client store and seed derivation: they are :mod:`flplat.api`'s
(defined in :mod:`flplat.protocol.state` and :mod:`flplat.protocol.seeding`). ``from flplat.engine.state import
ServerState`` works until flplat 0.3.0 with a deprecation warning; import from :mod:`flplat.api`."""

from __future__ import annotations

from flplat.deprecation import moved

__getattr__ = moved(__name__, {n: "flplat.api" for n in ("ClientStore", "ParamLayout", "ServerState", "derive_seed")})
