"""What a run leaves behind and how it is read back.

* ``runs`` -- the MLflow store and the orchestrator callback that logs one experiment (params, one metric batch
  per round, artifacts, the final status).
* ``reports`` -- tables and figures built from MLflow runs and from partitions (``flplat table``,
  ``flplat noniid-plot``).
* ``compare`` -- ``flplat compare``: final metrics mean ± std over seeds and per-round curves with a band.
* ``meta`` -- model-training experiments, run names and tags, per-round CPU time and peak memory.
* ``models`` -- the final models as artifacts and loading them back (``flplat.load_model``).
"""
