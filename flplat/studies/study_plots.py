"""An Optuna study's own plots, logged as artifacts of the study's parent MLflow run.

Optuna's matplotlib visualisations (``optuna.visualization.matplotlib``): the optimisation history
(``plots/optuna_history.png``: objective per trial and the best so far) and the hyperparameter importances
(``plots/optuna_importances.png``: fANOVA importances, Optuna's default evaluator; they need at least two
completed trials and a parameter that varied). A plot that cannot be drawn is skipped and the reason is put
in the parent run's ``flplat.optuna_plots`` tag -- never silently.

For browsing a study interactively, ``optuna-dashboard <storage>`` (the optional ``[dashboard]`` extra) reads
the same storage ``flplat tune`` writes (``sqlite:///mlruns/optuna.db`` by default).
"""

from __future__ import annotations

import warnings


def log_study_plots(client, run_id: str, study) -> dict[str, str]:
    """Log the history and importance plots of ``study`` to run ``run_id``; returns {plot: "ok" or why not}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna
    from optuna.visualization import matplotlib as ovm

    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    status: dict[str, str] = {}
    plots = (("optuna_history", ovm.plot_optimization_history, 1),
             ("optuna_importances", ovm.plot_param_importances, 2))
    for name, fn, need in plots:
        if len(done) < need:
            status[name] = f"skipped: {len(done)} completed trial(s), needs {need}"
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Optuna marks its matplotlib backend experimental
                ax = fn(study)
            fig = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
            fig.set_size_inches(7, 4.5)
            fig.tight_layout()
            client.log_figure(run_id, fig, f"plots/{name}.png")
            plt.close(fig)
            status[name] = "ok"
        except (ValueError, RuntimeError, ImportError) as e:  # e.g. importances when no parameter varied
            status[name] = f"skipped: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
    client.set_tag(run_id, "flplat.optuna_plots", "; ".join(f"{k}: {v}" for k, v in status.items())[:5000])
    return status
