"""The contract of a dataset and of a partition, checked on any registered entry: ``flplat check --dataset NAME`` and
``flplat check --partition NAME`` (the algorithms' suite is :mod:`flplat.studies.conformance`; same output, same exit
statuses).

**Datasets** -- the dataset is loaded from ``data.name=NAME`` plus the overrides (a dataset that reads files needs
``data.path=...`` or ``data.root=...``):

* ``registry`` -- registered with a ``Config`` dataclass (or ``NoConfig``) that survives the round trip through
  OmegaConf and defines none of the keys every dataset shares;
* ``dtypes`` -- ``x`` float32 and finite (int64 token ids below ``len(vocab)`` for a text dataset), ``y`` int64
  class indices (multi-label: float32 0/1), the official test set the same, client ids and metadata int64;
* ``shapes`` -- as many labels, client ids and metadata values as samples; the test set's inputs shaped as the
  pool's; multi-label ``y`` ``(N, num_classes)``;
* ``classes`` -- ``num_classes`` >= 1 and every label below it, ``class_names`` one per class when given;
* ``determinism`` -- loading twice with the same seed (the global random generators seeded differently in between)
  gives identical tensors and arrays;
* ``invalid_config`` -- an unknown ``data.*`` key is one line naming it (exit 2).

**Partitions** -- run on the check dataset (:func:`check_dataset`: scikit-learn's digits as 1,497 + 300 8x8 images,
with ten natural clients and two metadata columns, ``view`` and ``age``, so every built-in protocol can run), or on
the dataset the overrides name (``data.name=...``); :data:`CHECK_OVERRIDES` gives the built-ins settings that fit it:

* ``registry`` -- as for datasets (against the partitions' shared keys);
* ``disjoint`` -- no sample in two clients (training or unseen) nor in two drift stages of a client, a client's train /
  val / test disjoint, every training client with a training sample;
* ``in_range`` -- every index inside the pool the federation trains on, a public sample inside the global test set;
* ``pure`` -- a pure function of the seed: the same seed gives the same clients, pool and planted ids whatever the
  global random generators hold (reported: whether another seed gives other clients);
* ``planted`` -- a partition registered with ``plants=True`` gives one integer distribution id per training client
  and per unseen client (with a drift: per stage and training client), and ``num_distributions`` is the number of
  distinct training ids (over every stage); one without it gives none;
* ``invalid_config`` -- an unknown ``partition.*`` key is one line naming it (exit 2).

The test suite runs these on every registered dataset that needs no file from outside the test and on every
registered partition (``tests/test_data_conformance.py``), and on deliberately broken ones, which fail.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from flplat.errors import ConfigError
from flplat.studies.conformance import Result, _first

#: what a built-in partition needs to run on the check dataset (the user's overrides come last)
CHECK_OVERRIDES: dict[str, list[str]] = {
    "pqfed": ["partition.num_clients=4", "partition.rates=[0.0,0.5,1.0]", "partition.sources=5",
              "partition.target_sources=2", "partition.samples_per_source=20", "partition.target_test_per_source=10",
              "partition.public_size=100", "partition.pca_components=10"],
    "metadata": ["partition.columns=[view,age]", "partition.bins.age=[50]", "partition.num_unseen_clients=2"],
    "shift": ["partition.type=label", "partition.level=3", "partition.num_unseen_clients=2"],
    "mixed_shift": ["partition.type=concept_xy+label", "partition.level=3", "partition.num_unseen_clients=2"],
    "drift": ["partition.type=label", "partition.level=3", "partition.num_unseen_clients=2"],
}


def check_dataset():
    """The dataset partitions are checked on: digits' first 1,497 images as the pool and the other 300 as the
    official test set, ten natural clients (``client_ids``, the same writers in the test set) and the metadata
    columns ``view`` (0/1) and ``age`` (20..79), drawn from a fixed seed."""
    import torch
    from sklearn.datasets import load_digits

    from flplat.data.containers import Dataset

    bunch = load_digits()
    x = torch.from_numpy((np.asarray(bunch.images, np.float32)[:, None] / 16.0 - 0.3) / 0.4)
    y = torch.from_numpy(np.asarray(bunch.target, np.int64))
    rng = np.random.default_rng(20240601)
    n, n_all = 1497, len(y)
    writers, view, age = rng.integers(10, size=n_all), rng.integers(2, size=n_all), rng.integers(20, 80, size=n_all)
    return Dataset(name="check", x_train=x[:n], y_train=y[:n], num_classes=10, x_test=x[n:], y_test=y[n:],
                   class_names=[str(i) for i in range(10)], client_ids=writers[:n], client_ids_test=writers[n:],
                   meta={"view": view[:n], "age": age[:n]}, meta_test={"view": view[n:], "age": age[n:]})


class Entry:
    """A dataset or partition under check: its spec, its validated config, and the data it runs on."""

    def __init__(self, kind: str, name: str, overrides: Sequence[str] = ()):
        from flplat.configure import load_config
        from flplat.data.registry import DATASETS, PARTITIONS, load_builtins

        load_builtins()
        registry = DATASETS if kind == "dataset" else PARTITIONS
        if name not in registry:
            raise ConfigError(f"{kind} {name!r} is not registered; allowed: {', '.join(sorted(registry))}")
        self.kind, self.name, self.spec = kind, name, registry[name]
        self.section = "data" if kind == "dataset" else "partition"
        self.overrides = [f"{self.section}.name={name}", *(CHECK_OVERRIDES.get(name, []) if kind == "partition"
                                                          else []), *overrides, "tracking.enabled=false"]
        self.cfg = load_config(None, self.overrides)  # bad overrides: ConfigError before anything runs
        self.own_data = any(o.split("=", 1)[0].strip().startswith("data.") for o in overrides)
        self._dataset = None

    def load(self):
        from flplat.data.datasets import load_dataset

        return load_dataset(self.cfg.data, 0)

    def dataset(self):
        if self._dataset is None:
            self._dataset = self.load() if self.kind == "dataset" or self.own_data else check_dataset()
        return self._dataset

    def federation(self, seed: int = 0):
        from flplat.data.partitions import build_federation

        return build_federation(self.dataset(), self.cfg.partition, seed)


# ---- shared -----------------------------------------------------------------------------------------------------

def check_registry(t: Entry) -> Result:
    from omegaconf import OmegaConf

    from flplat.config import SHARED, field_names
    from flplat.data.registry import NoConfig

    config = t.spec.Config
    if config is not NoConfig and not dataclasses.is_dataclass(config):
        return Result("registry", False, f"its Config {config!r} is not a dataclass")
    clash = set(field_names(config)) & set(field_names(SHARED[t.section]))
    if clash:
        return Result("registry", False, f"its Config redefines the shared key(s) {', '.join(sorted(clash))}")
    if dataclasses.is_dataclass(config):
        default = config()
        back = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(config), OmegaConf.structured(default)))
        if dataclasses.asdict(back) != dataclasses.asdict(default):
            return Result("registry", False, "its Config does not survive the round trip through OmegaConf")
    fn = getattr(t.spec, "load", None) or getattr(t.spec, "labels", None) or t.spec.build
    keys = ", ".join(field_names(config)) or "none"
    return Result("registry", True, f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}; own keys: "
                                    f"{keys}")


def check_invalid_config(t: Entry) -> Result:
    from flplat.configure import load_config

    bad = f"{t.section}.no_such_key_flplat_check=1"
    try:
        load_config(None, [*t.overrides, bad])
    except ConfigError as e:
        text = str(e).strip()
        if "\n" in text or "no_such_key_flplat_check" not in text:
            return Result("invalid_config", False, f"{bad}: the error does not name the key on one line: {text!r}")
        return Result("invalid_config", True, f"{bad} refused with one line (exit 2)")
    except Exception as e:  # noqa: BLE001
        return Result("invalid_config", False, f"{bad}: {type(e).__name__} ({_first(e)}), not a one-line error")
    return Result("invalid_config", False, f"{bad}: accepted")


def _arrays(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Every tensor / array of a dataset or federation by a dotted name (what determinism compares)."""
    import torch

    out: dict[str, Any] = {}
    items = vars(obj).items() if hasattr(obj, "__dict__") else obj.items() if isinstance(obj, dict) else ()
    for k, v in items:
        if isinstance(v, torch.Tensor):
            out[prefix + k] = v.detach().cpu().numpy()
        elif isinstance(v, np.ndarray):
            out[prefix + k] = v
        elif isinstance(v, dict):
            out.update(_arrays(v, f"{prefix}{k}."))
        elif isinstance(v, list) and v and hasattr(v[0], "train"):
            for i, c in enumerate(v):
                out.update(_arrays(c, f"{prefix}{k}[{i}]."))
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):  # e.g. a federation's Drift
            out.update(_arrays(v, f"{prefix}{k}."))
        elif isinstance(v, list) and v and isinstance(v[0], list):  # e.g. a Drift's stages
            out.update(_arrays({str(i): c for i, c in enumerate(v)}, f"{prefix}{k}."))
    return out


def first_difference(a: Any, b: Any) -> str | None:
    """None when two datasets / federations hold equal arrays, else the first name that differs."""
    x, y = _arrays(a), _arrays(b)
    if x.keys() != y.keys():
        return f"arrays {sorted(x.keys() ^ y.keys())} only on one side"
    for k in sorted(x):
        same = x[k].shape == y[k].shape and x[k].dtype == y[k].dtype
        if not same or not np.array_equal(x[k], y[k], equal_nan=x[k].dtype.kind == "f"):
            return k
    return None


def _reseed_globals(value: int) -> None:
    import torch

    np.random.seed(value)
    random.seed(value)
    torch.manual_seed(value)


# ---- datasets ----------------------------------------------------------------------------------------------------

def check_dtypes(t: Entry) -> Result:
    import torch

    ds = t.dataset()
    for tag, x, y in (("", ds.x_train, ds.y_train), ("_test", ds.x_test, ds.y_test)):
        if x is None and y is None:
            continue
        if x is None or y is None:
            return Result("dtypes", False, f"x{tag} and y{tag} go together; one is None")
        if ds.vocab is not None:
            if x.dtype != torch.int64 or (x.numel() and (int(x.min()) < 0 or int(x.max()) >= len(ds.vocab))):
                return Result("dtypes", False, f"x{tag}: token ids are int64 in [0, {len(ds.vocab)})")
        elif x.dtype != torch.float32 or not bool(torch.isfinite(x).all()):
            return Result("dtypes", False, f"x{tag} is {x.dtype}{'' if x.dtype != torch.float32 else ' not finite'}; "
                                           "allowed: finite float32")
        want = torch.float32 if ds.multilabel else torch.int64
        if y.dtype != want or (ds.multilabel and not bool(((y == 0) | (y == 1)).all())):
            return Result("dtypes", False, f"y{tag} is {y.dtype}; allowed: {want}{' of 0/1' if ds.multilabel else ''}")
    for tag, ids, meta in (("", ds.client_ids, ds.meta), ("_test", ds.client_ids_test, ds.meta_test)):
        arrays = {f"client_ids{tag}": ids, **{f"meta{tag}.{k}": v for k, v in (meta or {}).items()}}
        for key, a in arrays.items():
            if a is not None and np.asarray(a).dtype != np.int64:
                return Result("dtypes", False, f"{key} is {np.asarray(a).dtype}; allowed: int64")
    return Result("dtypes", True, f"x {tuple(ds.x_train.shape)} {ds.x_train.dtype}, y {ds.y_train.dtype}")


def check_shapes(t: Entry) -> Result:
    ds = t.dataset()
    n = len(ds.x_train)
    if len(ds.y_train) != n:
        return Result("shapes", False, f"{n} inputs but {len(ds.y_train)} labels")
    if ds.x_test is not None and (len(ds.x_test) != len(ds.y_test) or ds.x_test.shape[1:] != ds.x_train.shape[1:]):
        return Result("shapes", False, f"test set x {tuple(ds.x_test.shape)} / y {len(ds.y_test)} against the pool's "
                                       f"x {tuple(ds.x_train.shape)}")
    if ds.multilabel and tuple(ds.y_train.shape) != (n, ds.num_classes):
        return Result("shapes", False, f"multi-label y is {tuple(ds.y_train.shape)}, not ({n}, {ds.num_classes})")
    if not ds.multilabel and ds.y_train.dim() != 1:
        return Result("shapes", False, f"y is {tuple(ds.y_train.shape)}, not ({n},)")
    n_test = 0 if ds.y_test is None else len(ds.y_test)
    for tag, size, ids, meta in (("", n, ds.client_ids, ds.meta), ("_test", n_test, ds.client_ids_test,
                                                                     ds.meta_test)):
        arrays = {f"client_ids{tag}": ids, **{f"meta{tag}.{k}": v for k, v in (meta or {}).items()}}
        for key, a in arrays.items():
            if a is not None and np.asarray(a).shape != (size,):
                return Result("shapes", False, f"{key} has shape {np.asarray(a).shape}, not ({size},)")
    return Result("shapes", True, f"{n} samples{f', {n_test} test' if n_test else ''}, inputs "
                                  f"{tuple(ds.x_train.shape[1:])}")


def check_classes(t: Entry) -> Result:
    ds = t.dataset()
    c = int(ds.num_classes)
    if c < 1:
        return Result("classes", False, f"num_classes={c}")
    for tag, y in (("", ds.y_train), ("_test", ds.y_test)):
        if y is None or ds.multilabel or not len(y):
            continue
        if int(y.min()) < 0 or int(y.max()) >= c:
            return Result("classes", False, f"y{tag} holds labels in [{int(y.min())}, {int(y.max())}], not in "
                                            f"[0, {c}) (num_classes={c})")
    if ds.class_names is not None and len(ds.class_names) != c:
        return Result("classes", False, f"{len(ds.class_names)} class_names for {c} classes")
    seen = c if ds.multilabel else len(np.unique(ds.y_train.numpy()))
    return Result("classes", True, f"{c} classes ({seen} present in the pool)")


def check_data_determinism(t: Entry) -> Result:
    _reseed_globals(1)
    a = t.load()
    _reseed_globals(2)
    b = t.load()
    diff = first_difference(a, b)
    return Result("determinism", diff is None, f"same seed: {diff} differs" if diff else
                  "same seed, identical data (whatever the global random generators hold)")


# ---- partitions --------------------------------------------------------------------------------------------------

def _clients(fed) -> list:
    """Every client's splits: training, unseen, then the training clients' later drift stages (their own samples)."""
    later = [c for st in fed.drift.stages[1:] for c in st] if getattr(fed, "drift", None) is not None else []
    return [*fed.clients, *fed.unseen, *later]


def check_disjoint(t: Entry) -> Result:
    fed = t.federation()
    owner: dict[int, int] = {}
    for k, c in enumerate(_clients(fed)):
        parts = [set(np.asarray(getattr(c, s)).tolist()) for s in ("train", "val", "test")]
        if parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2]:
            return Result("disjoint", False, f"client {k}: a sample in two of its train / val / test splits")
        for i in set().union(*parts):
            if owner.setdefault(i, k) != k:
                return Result("disjoint", False, f"sample {i} is in client {owner[i]} and client {k}")
    empty = [k for k, c in enumerate(fed.clients) if len(c.train) == 0]
    if empty:
        return Result("disjoint", False, f"training client {empty[0]} has no training sample")
    return Result("disjoint", True, f"{fed.num_clients} training + {len(fed.unseen)} unseen clients, "
                                    f"{len(owner)} samples, no sample in two clients")


def check_in_range(t: Entry) -> Result:
    fed = t.federation()
    n = len(fed.x)
    if len(fed.y) != n:
        return Result("in_range", False, f"the pool has {n} inputs but {len(fed.y)} labels")
    for k, c in enumerate(_clients(fed)):
        idx = np.asarray(c.all())
        if idx.dtype.kind not in "iu" or (len(idx) and (idx.min() < 0 or idx.max() >= n)):
            return Result("in_range", False, f"client {k} holds indices outside [0, {n}) (dtype {idx.dtype})")
    if fed.public_indices is not None:
        m = 0 if fed.x_global_test is None else len(fed.x_global_test)
        pub = np.asarray(fed.public_indices)
        if len(pub) and (pub.min() < 0 or pub.max() >= m):
            return Result("in_range", False, f"the public sample holds rows outside the global test set's {m}")
    return Result("in_range", True, f"every index inside the pool of {n} samples")


def federation_digest(fed) -> str:
    """A hash of everything a federation deals: each client's splits, the pool, planted ids, the public sample."""
    h = hashlib.sha256()
    for name, a in sorted(_arrays(fed).items()):
        h.update(name.encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def check_pure(t: Entry) -> Result:
    _reseed_globals(1)
    a = federation_digest(t.federation(3))
    _reseed_globals(2)
    b = federation_digest(t.federation(3))
    if a != b:
        return Result("pure", False, "the same seed gave other clients (does it read a global random generator?)")
    other = federation_digest(t.federation(4)) != a
    return Result("pure", True, f"same seed, same federation; another seed gives {'other' if other else 'the same'} "
                                "clients")


def check_planted(t: Entry) -> Result:
    fed = t.federation()
    has = "distribution" in fed.meta
    if not t.spec.plants:
        return Result("planted", not has, "gives planted ids without plants=True at its registration" if has else
                      "plants no distribution (not declared), gives none")
    if not has:
        return Result("planted", False, "registered with plants=True but gives no Partition.distribution")
    for key, count in (("distribution", fed.num_clients), ("unseen_distribution", len(fed.unseen))):
        ids = np.asarray(fed.meta.get(key, np.empty(0, np.int64)))
        if ids.shape != (count,) or (count and ids.dtype.kind not in "iu"):
            return Result("planted", False, f"{key} has shape {ids.shape} ({ids.dtype}); allowed: {count} integers")
    ids = fed.meta["distribution"]
    if getattr(fed, "drift", None) is not None:
        ids = np.asarray(fed.drift.distribution if fed.drift.distribution is not None else np.empty(0))
        want = (len(fed.drift.stages), fed.num_clients)
        if ids.shape != want:
            return Result("planted", False, f"drift.distribution has shape {ids.shape}; allowed: {want}, one id per "
                                            "stage and client")
    m = int(fed.meta.get("num_distributions", -1))
    if m != len(np.unique(ids)):
        return Result("planted", False, f"num_distributions={m} is not the {len(np.unique(ids))}"
                                        " distinct ids of the training clients")
    return Result("planted", True, f"{m} planted distributions over {fed.num_clients} training and "
                                   f"{len(fed.unseen)} unseen clients")


# ---- the suites ----------------------------------------------------------------------------------------------------

PROPERTIES: dict[str, dict[str, Callable[[Entry], Result]]] = {
    "dataset": {"registry": check_registry, "dtypes": check_dtypes, "shapes": check_shapes, "classes": check_classes,
                "determinism": check_data_determinism, "invalid_config": check_invalid_config},
    "partition": {"registry": check_registry, "disjoint": check_disjoint, "in_range": check_in_range,
                  "pure": check_pure, "planted": check_planted, "invalid_config": check_invalid_config},
}


def check_entry(kind: str, name: str, overrides: Sequence[str] = (), only: Sequence[str] | None = None,
                report: Callable[[Result], None] | None = None) -> list[Result]:
    """Run the suite of ``kind`` (``dataset`` | ``partition``) on the registered entry ``name``; ``report`` is called
    with each result as it is known. Bad name / overrides / properties: ConfigError."""
    import time

    props = PROPERTIES[kind]
    bad = [p for p in (only or []) if p not in props]
    if bad:
        raise ConfigError(f"--only={','.join(bad)} unknown for a {kind}; allowed: {', '.join(props)}")
    t = Entry(kind, name, overrides)
    results = []
    for prop in [p for p in props if not only or p in only]:
        t0 = time.perf_counter()
        try:
            r = props[prop](t)
        except ConfigError as e:  # e.g. the files are not there, or the protocol refuses the check dataset
            r = Result(prop, False, f"config refused: {_first(e)}")
        except Exception as e:  # noqa: BLE001  (an entry that raises fails the property)
            r = Result(prop, False, f"{type(e).__name__}: {_first(e)}")
        r.seconds = time.perf_counter() - t0
        results.append(r)
        if report:
            report(r)
    return results
