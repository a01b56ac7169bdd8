"""Dataset registry: every dataset is loaded whole into memory as tensors (:class:`~flplat.data.containers.Dataset`).

``x`` is float32 shaped ``(N, C, H, W)`` for images and ``(N, F)`` for tabular data; ``y`` is int64. Image pixels
are scaled to [0, 1] and then standardised per channel with the fixed constants in :data:`NORMALIZATION`.

Sources
-------
``digits``
    scikit-learn's bundled ``load_digits`` (1,797 8x8 grey images, 10 classes; pixels 0..16, divided by 16).
    No official test set.
``mnist`` / ``fmnist``
    The four IDX files under their standard names (``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
    ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``), gzip-compressed (``.gz``) or not, read by the small
    numpy IDX parser :func:`read_idx`. 60,000 train + 10,000 test 28x28 images, 10 classes.
``cifar10`` / ``cifar100``
    The python-pickle batches of the official archives, as torchvision unpacks them: ``cifar-10-batches-py/``
    (``data_batch_1`` .. ``data_batch_5``, ``test_batch``, ``batches.meta``) and ``cifar-100-python/``
    (``train``, ``test``, ``meta``; the 100 fine labels). Read with pickle + numpy through an unpickler that only
    admits numpy arrays, so torchvision is not needed to read them. 50,000 train + 10,000 test 32x32 RGB images.
``synthetic``
    A Gaussian mixture generated from ``data.samples`` / ``features`` / ``classes`` / ``separation`` and the
    experiment seed (see :func:`load_synthetic`).
``acs_income``, ``serengeti`` (:mod:`flplat.data.tabular`), ``sent140``, ``amazon_reviews`` (:mod:`flplat.data.text`:
token ids, int64 ``x``), ``femnist`` (:mod:`flplat.data.leaf`), ``chexpert`` (:mod:`flplat.data.medical`: multi-label),
``office_home`` (:mod:`flplat.data.officehome`)
    The papers' other datasets, read from their public file formats only (never downloaded); each module's
    docstring gives the format, the choices made and where to get the files. They fill ``client_ids`` (natural
    clients: FEMNIST writers, Sent140 users) and ``meta`` (CheXpert view/sex/age, Office-Home domain, ACS state).
``imagefolder`` / ``npz`` / ``table``
    A user's own files without code (``data.path``): class sub-folders of images, an ``.npz`` with ``x`` / ``y``
    arrays, a CSV / Parquet table with a label column; each optionally with the natural client of every sample
    (``data.client_column``) and metadata columns (``data.meta_columns``). See :mod:`flplat.data.user_files`.

Where the files of ``mnist`` / ``fmnist`` / ``cifar10`` / ``cifar100`` are looked for (``data.root``,
``$FLPLAT_DATA``, ``../shared/data``, ...), when they are downloaded, and the decoded cache (``data.cache``,
``data.cache_dir``) are :mod:`flplat.data.files`' part; this module loads a dataset (:func:`load_dataset`,
:func:`subsample`) and registers the generated datasets and the file-backed image sets. Each other dataset
registers itself in its own module, with its keys (:mod:`flplat.data.registry`: ``data.NAME`` checked as
``model.*`` is); importing this module imports them all. The file loaders and the locator live in
:mod:`flplat.data.files`, the format readers in :mod:`flplat.data.formats`; reading one of their names from this
module (their old path) warns until flplat 0.3.0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from flplat.data.containers import Dataset
from flplat.data.files import _labels, _standardise, load_cifar, load_idx_dataset
from flplat.data.registry import DATASETS, data_config, load_builtins, register_dataset
from flplat.deprecation import moved
from flplat.errors import check_range

__all__ = ["DATASETS", "load_dataset", "load_digits", "load_synthetic", "register_dataset", "subsample"]

# the names that moved to flplat.data.files / flplat.data.formats when the loaders were split out
__getattr__ = moved(__name__, {
    **{n: "flplat.data.files" for n in (
        "CACHE_DIR", "DEBIAN_FMNIST_DIR", "DECODED_CACHE_VERSION", "ENV_VAR", "FMNIST_CLASSES", "IDX_FILES",
        "NORMALIZATION", "REPO_SHARED_DATA", "DataUnavailableError", "_CIFAR_LAYOUT", "_IDX_LAYOUT", "_cached_arrays",
        "_candidate_dirs", "_cifar_files", "_decoded_cache_dir", "_download_root", "_file_digest", "_find_idx_files",
        "_locate", "_missing_message", "_read_idx_split", "_torchvision_download", "_with_layout", "log")},
    **{n: "flplat.data.formats" for n in ("DataFormatError", "read_cifar_batches", "read_idx", "read_pickle")}})


def load_dataset(cfg: Any, seed: int) -> Dataset:
    """Load the dataset named ``cfg.name`` (``cfg``: the validated ``data`` section, or a mapping / object with its
    keys; checked as a config is: an unknown name or key is a :class:`~flplat.errors.ConfigError`), subsampled by
    ``max_train_samples`` / ``max_test_samples``."""
    cfg = data_config(cfg)
    ds = DATASETS[cfg.name].load(cfg, seed)
    n_train, n_test = int(cfg.max_train_samples), int(cfg.max_test_samples)
    return subsample(ds, n_train, n_test, seed) if n_train or n_test else ds


def subsample(ds: Dataset, max_train: int, max_test: int, seed: int) -> Dataset:
    """``ds`` with uniformly random subsets of at most ``max_train`` pool / ``max_test`` test samples (0: all),
    in their original order; deterministic in ``seed``."""
    import dataclasses

    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5AB5]))

    def pick(n: int, k: int) -> torch.Tensor | None:
        return torch.from_numpy(np.sort(rng.choice(n, size=k, replace=False))) if 0 < k < n else None

    def per_sample(ids: np.ndarray | None, cols: dict[str, np.ndarray] | None, keep: torch.Tensor, suffix: str):
        idx = keep.numpy()
        if ids is not None:
            out[f"client_ids{suffix}"] = ids[idx]
        if cols:
            out[f"meta{suffix}"] = {k: v[idx] for k, v in cols.items()}

    out = {}
    keep = pick(len(ds.y_train), max_train)
    if keep is not None:
        out.update(x_train=ds.x_train[keep], y_train=ds.y_train[keep])
        per_sample(ds.client_ids, ds.meta, keep, "")
    if ds.y_test is not None:
        keep = pick(len(ds.y_test), max_test)
        if keep is not None:
            out.update(x_test=ds.x_test[keep], y_test=ds.y_test[keep])
            per_sample(ds.client_ids_test, ds.meta_test, keep, "_test")
    return dataclasses.replace(ds, **out) if out else ds


# ------------------------------------------------------------------------------------------------------ digits


@register_dataset("digits")
def load_digits(cfg: Any, seed: int) -> Dataset:
    """scikit-learn's bundled 8x8 digits: x (1797, 1, 8, 8), 10 classes, no official test set."""
    from sklearn.datasets import load_digits as sk_load_digits

    bunch = sk_load_digits()
    images = np.asarray(bunch.images)[:, None, :, :]
    return Dataset(
        name="digits",
        x_train=_standardise(images, 16.0, "digits"),
        y_train=_labels(bunch.target),
        num_classes=10,
        class_names=[str(i) for i in range(10)],
    )


# --------------------------------------------------------------------------------------------------- synthetic


@dataclass
class SyntheticConfig:
    """``synthetic``: a Gaussian-mixture classification task."""

    samples: int = 2000
    features: int = 20
    classes: int = 10
    separation: float = 2.0

    def check(self) -> None:
        check_range(self.samples >= 2, "data.samples", self.samples, "an integer >= 2")
        check_range(self.features >= 1, "data.features", self.features, "an integer >= 1")
        check_range(self.classes >= 2, "data.classes", self.classes, "an integer >= 2")
        check_range(self.separation >= 0, "data.separation", self.separation, "a number >= 0")


@register_dataset("synthetic", SyntheticConfig)
def load_synthetic(cfg: Any, seed: int) -> Dataset:
    """A Gaussian-mixture classification task, deterministic in ``seed``.

    Class means are drawn from ``N(0, separation^2 I)`` in ``features`` dimensions and every sample is its class
    mean plus ``N(0, I)`` noise, so ``separation`` is measured in noise standard deviations. Labels are balanced
    (class ``i % C``, shuffled). ``samples`` samples form the train pool; an extra 20% (at least one) form the
    official test set. Features are not rescaled.
    """
    n, f, c = int(cfg.samples), int(cfg.features), int(cfg.classes)
    n_test = max(1, round(0.2 * n))
    rng = np.random.default_rng(seed)
    means = rng.normal(0.0, float(cfg.separation), size=(c, f))
    y = rng.permutation(np.arange(n + n_test) % c)
    x = (means[y] + rng.standard_normal((n + n_test, f))).astype(np.float32)
    return Dataset(
        name="synthetic",
        x_train=torch.from_numpy(x[:n].copy()),
        y_train=_labels(y[:n]),
        num_classes=c,
        x_test=torch.from_numpy(x[n:].copy()),
        y_test=_labels(y[n:]),
        class_names=[f"class_{i}" for i in range(c)],
    )


# ------------------------------------------------------------------------------------ file-backed (flplat.data.files)


@register_dataset("mnist")
def load_mnist(cfg: Any, seed: int) -> Dataset:
    """MNIST digits: x (60000, 1, 28, 28) + official test set (10000, 1, 28, 28), 10 classes."""
    return load_idx_dataset(cfg, "mnist")


@register_dataset("fmnist")
def load_fmnist(cfg: Any, seed: int) -> Dataset:
    """Fashion-MNIST: x (60000, 1, 28, 28) + official test set (10000, 1, 28, 28), 10 classes."""
    return load_idx_dataset(cfg, "fmnist")


@register_dataset("cifar10")
def load_cifar10(cfg: Any, seed: int) -> Dataset:
    """CIFAR-10: x (50000, 3, 32, 32) + official test set (10000, 3, 32, 32), 10 classes."""
    return load_cifar(cfg, "cifar10")


@dataclass
class CIFAR100Config:
    """``cifar100``: keep the first n fine classes (DA-PFL Table II: 20); 0: all 100."""

    classes: int = 0

    def check(self) -> None:
        check_range(0 <= self.classes <= 100, "data.classes", self.classes, "an integer in [0, 100]")


@register_dataset("cifar100", CIFAR100Config)
def load_cifar100(cfg: Any, seed: int) -> Dataset:
    """CIFAR-100 (fine labels): x (50000, 3, 32, 32) + official test set (10000, 3, 32, 32), 100 classes.

    ``data.classes=n`` (> 0) keeps only the images of the first ``n`` fine classes (labels 0..n-1), in both
    splits: DA-PFL §V-A, "Following the setting in [63], we select the first 20 classes for training and testing"
    (n = 20: 10,000 + 2,000 images)."""
    ds = load_cifar(cfg, "cifar100")
    k = int(cfg.classes)
    if not 0 < k < ds.num_classes:
        return ds
    keep, keep_test = ds.y_train < k, ds.y_test < k
    return Dataset(name="cifar100", x_train=ds.x_train[keep], y_train=ds.y_train[keep], num_classes=k,
                   x_test=ds.x_test[keep_test], y_test=ds.y_test[keep_test],
                   class_names=ds.class_names[:k] if ds.class_names else None)


load_builtins()  # every module of flplat.data registers its entries (importing this module is enough)
