"""flplat: clustered and personalized federated learning under non-IID data."""

__version__ = "0.1.0"
