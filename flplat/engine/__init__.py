"""The engine: one training loop, one round loop, and the state they pass around.

* ``state`` -- models as flat vectors (:class:`~flplat.engine.state.ParamLayout`), the server state, the compact
  per-client store and seed derivation; the contract between the engine and the strategies.
* ``client`` -- the one training loop: a LightningModule driven by Lightning Fabric, reused for every client.
* ``vectorized`` -- the same local training for a group of clients at once (``torch.func``).
* ``orchestrator`` -- the one round loop (select, plan, train, aggregate, evaluate) and its callbacks.
* ``sharding`` -- the executors: in process, or a round's clients sharded over Fabric processes.
* ``launch`` -- starting a sharded run's local processes before the heavy imports.

Nothing here imports tracking, tuning or the CLI; strategies (:mod:`flplat.algorithms`) plug in through
:class:`~flplat.algorithms.base.Strategy`.
"""
