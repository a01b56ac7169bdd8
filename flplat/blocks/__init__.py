"""Method blocks: the parts several methods are made of, exported by :mod:`flplat.api` (the built-in algorithms and
plugins import them from there).

* ``aggregation`` -- FedAvg, per-group FedAvg, weighted means of stacked flat models;
* ``strategies`` -- :class:`~flplat.blocks.strategies.FedAvgStrategy`, the FedAvg server other methods change in
  one part (FedProx, FedOpt, Power-of-Choice, HACCS, FedCLS, a plugin);
* ``hooks`` -- local hooks pulling towards a centre (FedProx's proximal term: FedProx, Ditto, FedAMP, DA-PFL,
  FedSoft);
* ``multimodel`` -- several models of one architecture scored on a client's data in one batched pass, random
  further initialisations, every client's loss under each model, a plan counting every model's download (IFCA,
  FedDrift, FeSEM, FedSoft, FedEM, FedRC);
* ``mixture`` -- the mixture-of-components rounds FedEM and FedRC share (E-step, component draws, M-step jobs,
  the mixture predictor);
* ``selection`` -- client selection: proportional sampling, client losses, round robin over groups, loss-aware
  selection (Power-of-Choice, HACCS, FedCLS);
* ``compose`` -- running another registered algorithm inside a method (PQFed's inner federation).

What was decided, and why. A built-in algorithm is a plugin that ships with flplat: it imports :mod:`flplat.api`
and at most its own maths module (``flplat.maths.<its file name>`` or ``flplat.maths.<its file name>_*``), never
another algorithm file (tests/test_layout.py holds this). What two methods share therefore lives here, below the
api, and the api exports it; a method's own maths stays in :mod:`flplat.maths`. General maths several methods use
(silhouette K-means, the Hellinger distance, PSI, IID-detection scores, model distances, the task loss) stays in
:mod:`flplat.maths` / :mod:`flplat.metrics`, where the engine and the studies use it too, and the api exports the
names the methods need. This package sits above the protocol, the maths and the metrics and below the api; it imports
nothing of the data, models or engine.
"""
