"""The engine: one training loop, one round loop, and the state they pass around.

* ``state`` -- the old import path of the flat-vector layout, server state, client store and seed derivation (they
  live in :mod:`flplat.protocol`, the contract between the engine and the strategies, below both; import them from
  :mod:`flplat.api`): it warns until flplat 0.3.0.
* ``client`` -- the one training loop: a LightningModule driven by Lightning Fabric, reused for every client.
* ``vectorized`` -- the same local training for a group of clients at once (``torch.func``).
* ``optim`` -- the client optimizers: ``torch.optim`` for the loop, the same updates on stacked parameters.
* ``orchestrator`` -- the one round loop (select, plan, train, aggregate; the evaluator scores the round).
* ``evaluation`` -- which model scores each client (the strategy's declaration), the test phase, run summaries.
* ``events`` -- the frozen records callbacks receive (run start, round end, run end); ``callbacks`` -- the
  progress display and the client-state cleanup; ``checkpoint`` -- round checkpoints and their callback.
* ``executor`` -- where clients run: the in-process executor (training, scoring, ``compute``) and its requests.
* ``sharding`` -- the sharded executor: a round's clients split over Fabric processes (else the in-process one).
* ``launch`` -- starting a sharded run's local processes before the heavy imports.

Nothing here imports tracking, tuning or the CLI; strategies (:mod:`flplat.algorithms`) plug in through
:class:`~flplat.protocol.strategy.Strategy` (:mod:`flplat.protocol`, below both the engine and the algorithms:
the engine imports no algorithm).
"""
