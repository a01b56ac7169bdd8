"""Above single experiments: Optuna studies and seed sweeps (``flplat tune``, ``flplat sweep``), the study's
plots, and scoring a run's saved model on other data (``flplat evaluate``).

Studies sit above :mod:`flplat.experiment` (each trial or seed is one experiment run; evaluation re-assembles a
run's data from its config) and below the CLI.
"""
