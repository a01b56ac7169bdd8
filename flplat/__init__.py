"""flplat: clustered and personalized federated learning under non-IID data.

``flplat.load_model(run_id, which="global")`` returns a run's saved model (see :mod:`flplat.tracking.models`);
it is imported on first use, so ``import flplat`` stays light. Your own algorithms, datasets, models and
partitions (plugins) import :mod:`flplat.api`; see docs/extending.md.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "load_model"]


def __getattr__(name):
    if name == "load_model":
        from flplat.tracking.runs import load_model

        return load_model
    raise AttributeError(f"module 'flplat' has no attribute {name!r}")
