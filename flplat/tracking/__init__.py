"""What a run leaves behind and how it is read back.

* ``runs`` -- the MLflow store and the orchestrator callback that logs one experiment (params, one metric batch
  per round, artifacts, the final status).
* ``reports`` -- tables and figures built from MLflow runs and from partitions (``flplat table``,
  ``flplat noniid-plot``).
"""
