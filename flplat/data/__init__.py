"""Datasets, partitions and the in-memory federation."""
