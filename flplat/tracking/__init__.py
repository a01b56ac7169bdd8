"""What a run leaves behind and how it is read back.

* ``runs`` -- the orchestrator callback that logs one experiment (params, one metric batch per round, artifacts,
  the final status). The public names of ``store``, ``heartbeat`` and ``resume`` were once read from here: that
  old path warns until flplat 0.3.0.
* ``store`` -- where the MLflow store and the checkpoints are (``tracking.uri`` / ``store_dir``), opening it.
* ``heartbeat`` -- a run's heartbeat tag and the one rule that says when a RUNNING run is stale.
* ``resume`` -- studies find their earlier runs by key and continue, replace or leave alone the unfinished ones.
* ``reports`` -- tables and figures built from MLflow runs and from partitions (``flplat table``,
  ``flplat noniid-plot``).
* ``compare`` -- ``flplat compare``: final metrics mean ± std over seeds and per-round curves with a band.
* ``meta`` -- model-training experiments, run names and tags, per-round CPU time and peak memory.
* ``models`` -- the final models as artifacts and loading them back (``flplat.load_model``).
"""
