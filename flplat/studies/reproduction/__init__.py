"""The parts of ``flplat reproduce`` (:mod:`flplat.studies.reproduce` puts them together and re-exports them):

* :mod:`.grid` -- the table model (:class:`~.grid.Table`, cells, methods), the papers' modules and the plan of a
  train table's runs (jobs, scales, the focus / baseline seeds);
* :mod:`.values` -- the numbers the papers report (``configs/papers/<paper>.yaml``) and their check;
* :mod:`.store` -- the MLflow side: finished runs by config hash, runs of an earlier flplat that stand for a job,
  the parent run per table, the reasons runs were skipped;
* :mod:`.execute` -- running the jobs not finished yet through a backend (this process, worker processes or Ray
  tasks) with a progress line, and the finished runs of other code (``--rerun-stale``); :mod:`.ray_address` -- the
  probe of a Ray cluster's ``--address`` before anything runs;
* :mod:`.collect` -- what a table shows, collected from its runs (values, reasons, runs of other code, the rows
  whose every run was refused);
* :mod:`.derived` -- derived tables: cells that are means over other tables' cells (the same runs), a seed with a
  part missing said as incomplete;
* :mod:`.jobs` -- ``--print-jobs``: the unfinished runs as self-contained shell commands or a SLURM job-array
  script;
* :mod:`.render` -- the verdicts and the markdown table; :mod:`.figures` -- the bar and curve charts of the tables.
"""
