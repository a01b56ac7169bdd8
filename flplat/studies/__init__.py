"""Many experiments at once: Optuna studies and seed sweeps (``flplat tune``, ``flplat sweep``).

Studies sit above :mod:`flplat.experiment` (each trial or seed is one experiment run) and below the CLI.
"""
