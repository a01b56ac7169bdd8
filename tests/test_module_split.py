"""The names that moved out of ``flplat.engine.orchestrator`` (into ``flplat.engine.executor``) and out of
``flplat.data.datasets`` (into ``flplat.data.files``) stay importable from their old modules as the very same
objects, and importing ``flplat.data.datasets`` alone still registers every dataset."""

from __future__ import annotations

import subprocess
import sys

import pytest

from flplat.data import datasets, files
from flplat.engine import executor, orchestrator

EXECUTOR_NAMES = ["LocalExecutor", "LazyRequests", "request_clients", "subset", "_softmax_and_labels"]
FILES_NAMES = [
    "CACHE_DIR", "DEBIAN_FMNIST_DIR", "DECODED_CACHE_VERSION", "ENV_VAR", "FMNIST_CLASSES", "IDX_FILES",
    "NORMALIZATION", "REPO_SHARED_DATA", "DataUnavailableError", "_CIFAR_LAYOUT", "_IDX_LAYOUT", "_cached_arrays",
    "_candidate_dirs", "_cifar_files", "_decoded_cache_dir", "_download_root", "_file_digest", "_find_idx_files",
    "_labels", "_locate", "_missing_message", "_read_idx_split", "_standardise", "_torchvision_download",
    "_with_layout", "load_cifar", "load_idx_dataset", "log",
]


@pytest.mark.parametrize("name", EXECUTOR_NAMES)
def test_orchestrator_reexports_the_executor(name: str) -> None:
    assert getattr(orchestrator, name) is getattr(executor, name)


@pytest.mark.parametrize("name", FILES_NAMES)
def test_datasets_reexports_the_file_loaders(name: str) -> None:
    assert getattr(datasets, name) is getattr(files, name)


def test_public_names_of_datasets_are_all_there() -> None:
    for name in datasets.__all__:
        assert hasattr(datasets, name), name
    for name in orchestrator.__all__:
        assert hasattr(orchestrator, name), name


def test_importing_datasets_registers_every_dataset() -> None:
    code = "from flplat.data.datasets import DATASETS; print(' '.join(sorted(DATASETS)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["acs_income", "amazon_reviews", "chexpert", "cifar10", "cifar100", "digits", "femnist", "fmnist",
                   "imagefolder", "mnist", "npz", "office_home", "sent140", "serengeti", "synthetic", "table"]
