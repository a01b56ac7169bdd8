"""The protocol between the engine and the strategies, below both (neither imports the other):

* ``state`` -- models as flat vectors (:class:`~flplat.protocol.state.ParamLayout`), the server state and the
  compact per-client store;
* ``strategy`` -- the :class:`~flplat.protocol.strategy.Strategy` interface and the messages it exchanges with
  clients (``ClientPlan``, ``ClientResult``, ``EvalResult``, ``LocalHook``, ``HookContext``, ...);
* ``seeding`` -- :func:`~flplat.protocol.seeding.derive_seed`, every random stream's seed (data, algorithms, engine);
* ``registry`` -- how registries add entries and remember where each comes from (built-in or a plugin).

It imports only :mod:`flplat.errors` of flplat. Users (plugins) import these names from :mod:`flplat.api`.
"""
