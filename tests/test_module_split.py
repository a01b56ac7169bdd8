"""Names that moved out of a module stay readable from their old path for one minor version, as the very same
objects, with a deprecation warning naming the new home (flplat.deprecation.moved): the executor's out of
``flplat.engine.orchestrator``, the file loaders out of ``flplat.data.datasets``, the store / heartbeat / resume
names out of ``flplat.tracking.runs``, the protocol's out of ``flplat.algorithms.base`` and ``flplat.engine.state``,
the method blocks out of ``flplat.maths``. Importing ``flplat.data.datasets`` alone still registers every dataset."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from flplat.deprecation import FlplatDeprecationWarning

FILES_NAMES = [
    "CACHE_DIR", "DEBIAN_FMNIST_DIR", "DECODED_CACHE_VERSION", "ENV_VAR", "FMNIST_CLASSES", "IDX_FILES",
    "NORMALIZATION", "REPO_SHARED_DATA", "DataUnavailableError", "_CIFAR_LAYOUT", "_IDX_LAYOUT", "_cached_arrays",
    "_candidate_dirs", "_cifar_files", "_decoded_cache_dir", "_download_root", "_file_digest", "_find_idx_files",
    "_locate", "_missing_message", "_read_idx_split", "_torchvision_download", "_with_layout", "log",
]
MOVED = [
    *[("flplat.engine.orchestrator", n, "flplat.engine.executor", n) for n in ("request_clients", "subset",
                                                                           "LazyRequests", "LocalExecutor")],
    ("flplat.engine.orchestrator", "clustering_scores", "flplat.engine.evaluation", "clustering_scores"),
    *[("flplat.data.datasets", n, "flplat.data.files", n) for n in FILES_NAMES],
    *[("flplat.data.datasets", n, "flplat.data.formats", n) for n in ("DataFormatError", "read_idx")],
    ("flplat.tracking.runs", "HEARTBEAT_TAG", "flplat.tracking.heartbeat", "HEARTBEAT_TAG"),
    ("flplat.tracking.runs", "runs_by_key", "flplat.tracking.resume", "runs_by_key"),
    ("flplat.tracking.runs", "checkpoint_path", "flplat.tracking.store", "checkpoint_path"),
    ("flplat.tracking.meta", "git_commit", "flplat.tracking.provenance", "git_commit"),
    ("flplat.algorithms.base", "Strategy", "flplat.api", "Strategy"),
    ("flplat.algorithms.base", "ClientFn", "flplat.protocol.strategy", "ClientFn"),
    ("flplat.engine.state", "ParamLayout", "flplat.api", "ParamLayout"),
    ("flplat.maths.aggregation", "fedavg", "flplat.api", "fedavg"),
    ("flplat.maths.multimodel", "random_models", "flplat.api", "random_models"),
    ("flplat.maths.multimodel", "merge_groups", "flplat.maths.feddrift", "merge_groups"),
    ("flplat.maths.server_opt", "ServerOpt", "flplat.maths.fedopt", "ServerOpt"),
]


@pytest.mark.parametrize("old,name,new,new_name", MOVED, ids=[f"{o}.{n}" for o, n, _, _ in MOVED])
def test_a_moved_name_warns_and_is_the_same_object(old: str, name: str, new: str, new_name: str) -> None:
    mod = importlib.import_module(old)
    with pytest.warns(FlplatDeprecationWarning, match=rf"^{old}\.{name} is deprecated since flplat \S+ and will be "
                                                      rf"removed in \S+; use {new}\.{new_name}$") as rec:
        got = getattr(mod, name)
    assert got is getattr(importlib.import_module(new), new_name)
    assert rec[0].filename == __file__  # the warning points at the line that reads the old path


def test_an_unknown_name_of_a_shim_is_still_an_attribute_error() -> None:
    from flplat.data import datasets

    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        datasets.no_such_name  # noqa: B018


def test_importing_datasets_registers_every_dataset() -> None:
    code = "from flplat.data.datasets import DATASETS; print(' '.join(sorted(DATASETS)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["acs_income", "amazon_reviews", "chexpert", "cifar10", "cifar100", "digits", "femnist", "fmnist",
                   "imagefolder", "mnist", "npz", "office_home", "sent140", "serengeti", "synthetic", "table"]
