"""Your own data without code: ``data.name=imagefolder | npz | table`` read a user's files into a
:class:`~flplat.data.containers.Dataset`, with the natural client of every sample and metadata columns kept.

``data.path`` is the folder (``imagefolder``) or the file (``npz``, ``table``); a relative path is taken under
``data.root`` when that is set, else under the current directory. Nothing is searched for or downloaded: a path
that does not exist is a one-line :class:`~flplat.data.files.DataUnavailableError` naming it, and a file without a
needed column / array is a one-line :class:`~flplat.data.formats.DataFormatError` naming the file, the column and
the columns it has (both exit 2).

Natural clients and metadata (the same two keys for the three formats)
-----------------------------------------------------------------------
``data.client_column`` names where the client of each sample is (a table column, an npz array, an imagefolder
folder level or index-file column); its values (numbers or text) become ``Dataset.client_ids`` as codes
``0..K-1`` in the sorted order of the distinct values of the training and test files together, so a client has
one code in both. ``partition.name=natural`` keeps these clients. ``data.meta_columns`` lists metadata columns
kept as ``Dataset.meta`` (int64 per sample) for ``partition.name=metadata``: integer columns keep their values
(an age stays an age, to be cut by ``partition.bins``), text columns become codes of their sorted distinct
values; an empty cell (text ``""`` / a missing number) becomes ``-1`` (missing: the metadata partition leaves the
sample out). The test file's client / metadata columns are optional (``client_ids_test`` / ``meta_test`` are then
``None``).

``table`` (CSV, or Parquet with the ``parquet`` extra)
------------------------------------------------------
A header row, one sample per row. ``.parquet`` / ``.pq`` files are read with pyarrow (``pip install
'flplat[parquet]'``), anything else as CSV (``,``-separated, standard quoting, read with the csv module). The label
is ``data.label_column``; its distinct values (numbers or text, over the training and test files) sorted are the
classes ``0..C-1`` (``class_names`` keeps them as text). The features are ``data.feature_columns``, or every other
column when the list is empty (the client and metadata columns are never features unless listed). A column whose
every non-empty cell is a number is numeric, any other is categorical:

* numeric columns are z-scored with the training file's mean and standard deviation (a constant column is only
  centred) when ``data.standardize`` (default), else used as they are; an empty cell in a numeric feature is an
  error naming the file, column and row (fill or drop it: no silent imputation);
* categorical columns are encoded with the categories of the **training** file, sorted: ``data.categorical=onehot``
  (default) gives one 0/1 column per category (a test value the training file never had is all zeros),
  ``ordinal`` gives one column of category codes ``0..k-1`` (an unseen test value is ``-1``); neither is
  standardised. An empty cell is a category of its own.

The features come in the order of ``data.feature_columns`` (else the file's), a one-hot column expanded in place.
``data.test_path`` is an optional official test table with the same label and feature columns.

``npz``
-------
``numpy.savez`` arrays (read with ``allow_pickle=False``): ``x`` (N, ...) and ``y``, optional ``x_test`` /
``y_test`` (both or neither). ``x`` is cast to float32 as stored (``uint8`` arrays are divided by 255), no other
rescaling. ``y`` is int class indices (N,) (``num_classes`` = largest + 1), or a 0/1 matrix (N, C) for multi-label
data (``Dataset.multilabel``). The client array is ``data.client_column`` (its test counterpart
``<name>_test``), each metadata column an array of that name (``<name>_test``); an optional ``class_names`` array
of text names the classes.

``imagefolder``
---------------
torchvision's ImageFolder layout ``data.path/<class>/<image>`` (``.png``, ``.jpg``, ``.jpeg``, ``.bmp``, ``.gif``,
``.ppm``, ``.pgm``, ``.tif``, ``.tiff``, ``.webp``), with optional named folder levels above the classes:
``data.folder_levels=[domain]`` reads ``data.path/<domain>/<class>/<image>`` (Office-Home's layout) and
``[writer]`` ``data.path/<writer>/<class>/<image>``. A level named by ``data.client_column`` gives the clients, a
level in ``data.meta_columns`` a metadata column (folder names -> sorted codes). Alternatively
``data.index_file`` is a CSV with a ``path`` column (the image's path relative to ``data.path``) and the client /
metadata columns. Classes are the sorted class-folder names of the training folder (``data.test_path``, an
optional test folder in the same layout, may hold only those). Images are read with PIL, converted to RGB (or
``data.grey=true``: one grey channel), resized to ``data.image_size`` squared with bilinear filtering when
``> 0`` (else every image must have the same size), scaled to [0, 1] and, when ``data.standardize``, standardised
per channel with the training pool's mean and standard deviation. The decoded pixels are kept in the decoded-data
cache of :mod:`flplat.data.files` (``data.cache``, ``data.cache_dir``), keyed by the images' SHA-256 and these
keys, so a later run maps them instead of decoding every image again.
"""

from __future__ import annotations

import csv
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flplat.data.containers import Dataset
from flplat.data.files import DataUnavailableError, _cached_arrays
from flplat.data.formats import DataFormatError
from flplat.data.registry import register_dataset
from flplat.errors import ConfigError, check_choice, check_range

log = logging.getLogger("flplat")

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".ppm", ".pgm", ".tif", ".tiff", ".webp")
PARQUET_SUFFIXES = (".parquet", ".pq")
PARQUET_HINT = "pip install 'flplat[parquet]' (or pip install pyarrow)"


@dataclass
class NPZConfig:
    """``npz``: your ``numpy.savez`` file."""

    path: str | None = None  # the file; relative: under data.root
    client_column: str | None = None  # the array holding each sample's natural client
    meta_columns: list[str] = field(default_factory=list)  # arrays kept as metadata for partition.name=metadata


@dataclass
class TableConfig:
    """``table``: your CSV / Parquet table with a label column."""

    path: str | None = None  # the file (.csv / .parquet); relative: under data.root
    test_path: str | None = None  # an official test table with the same columns (optional)
    label_column: str = "label"
    feature_columns: list[str] = field(default_factory=list)  # [] : every other column
    categorical: str = "onehot"  # text feature columns -> onehot | ordinal (categories of the training file)
    standardize: bool = True  # numeric features z-scored with the training file's stats
    client_column: str | None = None  # the column holding each sample's natural client
    meta_columns: list[str] = field(default_factory=list)  # columns kept as metadata for partition.name=metadata

    def check(self) -> None:
        check_choice("data.categorical", self.categorical, ("onehot", "ordinal"))


@dataclass
class ImageFolderConfig:
    """``imagefolder``: your images in ``<class>/<image>`` folders, optionally under named levels."""

    path: str | None = None  # the folder; relative: under data.root
    test_path: str | None = None  # an official test folder in the same layout (optional)
    folder_levels: list[str] = field(default_factory=list)  # names of folder levels above the classes
    index_file: str | None = None  # CSV with a `path` column (relative to data.path) + client / metadata columns
    image_size: int = 0  # resize every image to image_size x image_size (0: keep; sizes must agree)
    grey: bool = False  # one grey channel (else RGB)
    standardize: bool = True  # channels z-scored with the training pool's stats
    client_column: str | None = None  # the folder level or index-file column of each sample's natural client
    meta_columns: list[str] = field(default_factory=list)  # levels / columns kept as metadata

    def check(self) -> None:
        check_range(self.image_size >= 0, "data.image_size", self.image_size,
                    "an integer >= 0 (0: keep the files' size)")

# ------------------------------------------------------------------------------------------------------ paths


def resolve_path(cfg: Any, key: str, what: str, required: bool = True) -> Path | None:
    """``data.<key>`` as a path (under ``data.root`` when relative and the root is set); it must exist."""
    value = getattr(cfg, key, None)
    if not value:
        if required:
            raise ConfigError(f"data.name={cfg.name!r} needs data.{key}=PATH ({what})")
        return None
    p = Path(str(value)).expanduser()
    if not p.is_absolute() and cfg.root:
        p = Path(str(cfg.root)).expanduser() / p
    if not p.exists():
        raise DataUnavailableError(f"data.{key}={str(value)!r}: {os.path.abspath(p)} does not exist "
                                   f"(data.name={cfg.name} needs {what})")
    return p


# ------------------------------------------------------------------------------------------------- encodings


def _sort_key(v: Any) -> tuple:
    return (0, float(v), "") if isinstance(v, (int, float, np.integer, np.floating)) else (1, 0.0, str(v))


def codes(*columns: np.ndarray | None) -> tuple[list[np.ndarray | None], list]:
    """Each column's values as int64 codes into the sorted distinct values of all the columns together (numbers
    before text when a column mixes them)."""
    present = [np.asarray(c) for c in columns if c is not None]
    if all(c.dtype.kind in "iubf" for c in present) or all(c.dtype.kind not in "iubf" for c in present):
        cat = np.concatenate([c if c.dtype.kind in "iubf" else c.astype(str) for c in present])
        values, inverse = np.unique(cat, return_inverse=True)
        cuts = np.cumsum([len(c) for c in present])[:-1]
        it = iter(np.split(inverse.astype(np.int64).reshape(-1), cuts))
        return [None if c is None else next(it) for c in columns], [v.item() for v in values]
    values = sorted({v.item() if hasattr(v, "item") else v for c in present for v in c}, key=_sort_key)
    index = {v: i for i, v in enumerate(values)}
    out = [None if c is None else np.fromiter((index[v.item() if hasattr(v, "item") else v] for v in c),
                                              dtype=np.int64, count=len(c)) for c in columns]
    return out, values


def client_codes(col: np.ndarray, col_test: np.ndarray | None, where: str, name: str
                 ) -> tuple[np.ndarray, np.ndarray | None]:
    """``data.client_column``'s values as client codes shared by the training and test files; no empty cells."""
    for c in (col, col_test):
        if c is None:
            continue
        empty = np.isnan(c) if c.dtype.kind == "f" else (c.astype(str) == "")
        if empty.any():
            raise DataFormatError(f"{where}: column {name!r} (data.client_column) is empty for sample "
                                  f"{int(np.flatnonzero(empty)[0])}; every sample needs a client")
    (ids, ids_test), _ = codes(col, col_test)
    return ids, ids_test


def _name(v: Any) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


class Table:
    """A file's columns: numeric ones as float64 arrays (NaN: empty), text ones as object arrays of str."""

    def __init__(self, path: Path, columns: dict[str, np.ndarray]):
        self.path, self.columns = path, columns

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def has(self, name: str) -> bool:
        return name in self.columns

    def get(self, name: str, key: str) -> np.ndarray:
        if name not in self.columns:
            raise DataFormatError(f"{self.path} has no column {name!r} ({key}); its columns: "
                                  f"{', '.join(self.columns) or 'none'}")
        return self.columns[name]

    def numeric(self, name: str) -> bool:
        return self.columns[name].dtype != object


def _typed(values: list[str]) -> np.ndarray:
    """A CSV column: float64 when every non-empty cell is a number (empty: NaN), else text."""
    try:
        return np.array([float(v) if v.strip() else np.nan for v in values], dtype=np.float64)
    except ValueError:
        return np.array(values, dtype=object)


def read_csv(path: Path) -> Table:
    with open(path, newline="", encoding="utf-8-sig") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        raise DataFormatError(f"{path} is empty (a header row is needed)")
    header, body = rows[0], rows[1:]
    bad = next((i for i, r in enumerate(body) if len(r) != len(header)), None)
    if bad is not None:
        raise DataFormatError(f"{path}: row {bad + 2} has {len(body[bad])} cells, the header {len(header)}")
    return Table(path, {h: _typed([r[j] for r in body]) for j, h in enumerate(header)})


def read_parquet(path: Path) -> Table:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataUnavailableError(f"reading the Parquet file {path} needs pyarrow: {PARQUET_HINT}") from None
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow's ArrowInvalid & co.
        raise DataFormatError(f"cannot read Parquet file {path}: {str(e).splitlines()[0] if str(e) else e}") from None
    import pyarrow as pa

    cols = {}
    for name, col in zip(table.column_names, table.columns):
        t = col.type
        if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
            cols[name] = np.array([np.nan if v is None else float(v) for v in col.to_pylist()], dtype=np.float64) \
                if col.null_count else np.asarray(col.to_numpy(), dtype=np.float64)
        else:
            cols[name] = np.array(["" if v is None else str(v) for v in col.to_pylist()], dtype=object)
    return Table(path, cols)


def read_table(path: Path) -> Table:
    return read_parquet(path) if path.suffix.lower() in PARQUET_SUFFIXES else read_csv(path)


def _meta_values(col: np.ndarray, where: str, name: str) -> np.ndarray:
    """A numeric metadata column as int64 (NaN -> -1); non-integer numbers are refused."""
    missing = np.isnan(col)
    if not np.all(np.mod(col[~missing], 1) == 0):
        raise DataFormatError(f"{where}: metadata column {name!r} holds non-integer numbers; allowed: integers or "
                              "text categories")
    out = np.where(missing, -1, col).astype(np.int64)
    return out


def keyed_columns(train: dict[str, np.ndarray | None], test: dict[str, np.ndarray | None], where: str
                  ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray] | None]:
    """Metadata columns (train / test values by name) as int64: integer columns kept, text coded (missing -1)."""
    meta, meta_test = {}, {}
    for name, tr in train.items():
        te = test.get(name)
        if tr.dtype.kind in "iubf" and (te is None or te.dtype.kind in "iubf"):
            meta[name] = _meta_values(tr.astype(np.float64), where, name)
            if te is not None:
                meta_test[name] = _meta_values(te.astype(np.float64), where, name)
            continue
        tr_s, te_s = tr.astype(str).astype(object), None if te is None else te.astype(str).astype(object)
        (c_tr, c_te), values = codes(tr_s, te_s)
        # an empty cell is missing (-1), not a category
        if "" in values:
            empty = values.index("")
            c_tr = np.where(c_tr == empty, -1, c_tr - (c_tr > empty))
            c_te = None if c_te is None else np.where(c_te == empty, -1, c_te - (c_te > empty))
        meta[name] = c_tr
        if c_te is not None:
            meta_test[name] = c_te
        log.info("data.meta_columns: %s codes %s", name, {v: i for i, v in enumerate(x for x in values if x != "")})
    return meta, (meta_test if meta_test and len(meta_test) == len(meta) else None)


# ------------------------------------------------------------------------------------------------------- table


def _features(tab: Table, names: list[str], cfg: Any, fit: dict | None) -> tuple[np.ndarray, dict]:
    """Feature matrix of ``tab``; ``fit`` None: fit the encodings/statistics on it (training file) and return them."""
    fit = {} if fit is None else fit
    blocks = []
    for name in names:
        col = tab.get(name, "data.feature_columns")
        spec = fit.get(name)
        if spec is None:
            if tab.numeric(name):
                mean = float(np.nanmean(col)) if len(col) else 0.0
                std = float(np.nanstd(col)) if len(col) else 1.0
                spec = ("num", mean, std if std > 0 else 1.0)
            else:
                spec = ("cat", sorted(set(col.tolist())))
            fit[name] = spec
        if spec[0] == "num":
            if not tab.numeric(name):
                raise DataFormatError(f"{tab.path}: column {name!r} holds text, the training file's numbers")
            empty = np.flatnonzero(np.isnan(col))
            if len(empty):
                raise DataFormatError(f"{tab.path}: column {name!r} data row {int(empty[0]) + 1} is empty; fill or "
                                      "drop the rows with empty numeric features")
            blocks.append(((col - spec[1]) / spec[2] if cfg.standardize else col)[:, None])
        else:
            text = col.astype(str) if tab.numeric(name) else col
            index = {v: i for i, v in enumerate(spec[1])}
            code = np.array([index.get(v, -1) for v in text.tolist()], dtype=np.int64)
            if cfg.categorical == "ordinal":
                blocks.append(code[:, None].astype(np.float64))
            else:
                onehot = np.zeros((len(code), len(spec[1])))
                onehot[np.flatnonzero(code >= 0), code[code >= 0]] = 1.0
                blocks.append(onehot)
    x = np.concatenate(blocks, axis=1) if blocks else np.zeros((len(tab), 0))
    return x.astype(np.float32), fit


def _label_values(tab: Table, name: str) -> np.ndarray:
    col = tab.get(name, "data.label_column")
    if tab.numeric(name):
        empty = np.flatnonzero(np.isnan(col))
        if len(empty):
            raise DataFormatError(f"{tab.path}: column {name!r} (data.label_column) data row {int(empty[0]) + 1} "
                                  "is empty")
    return col


@register_dataset("table", TableConfig)
def load_table(cfg: Any, seed: int = 0) -> Dataset:
    """``data.name=table``: a CSV / Parquet file with a label column (module docstring)."""
    train = read_table(resolve_path(cfg, "path", "a CSV or Parquet file with a header row"))
    test_path = resolve_path(cfg, "test_path", "a CSV or Parquet test file", required=False)
    test = read_table(test_path) if test_path is not None else None
    label, client = cfg.label_column, cfg.client_column
    meta_names = list(cfg.meta_columns)
    if cfg.feature_columns:
        names = list(cfg.feature_columns)
    else:
        skip = {label, client, *meta_names}
        names = [c for c in train.columns if c not in skip]
    if label in names:
        raise ConfigError(f"data.feature_columns lists the label column {label!r} (data.label_column)")
    y_tr = _label_values(train, label)
    y_te = _label_values(test, label) if test is not None else None
    if test is not None and train.numeric(label) != test.numeric(label):
        y_tr, y_te = y_tr.astype(str), y_te.astype(str)
    (c_tr, c_te), classes = codes(y_tr, y_te)
    x_tr, fit = _features(train, names, cfg, None)
    x_te = _features(test, names, cfg, fit)[0] if test is not None else None
    ids = ids_test = None
    if client:
        col = train.get(client, "data.client_column")
        col_te = test.columns.get(client) if test is not None else None
        ids, ids_test = client_codes(col, col_te, str(train.path), client)
    meta = meta_test = None
    if meta_names:
        meta, meta_test = keyed_columns({m: train.get(m, "data.meta_columns") for m in meta_names},
                                        {m: test.columns.get(m) for m in meta_names} if test is not None else {},
                                        str(train.path))
    return Dataset(
        name="table", x_train=torch.from_numpy(x_tr), y_train=torch.from_numpy(c_tr), num_classes=len(classes),
        x_test=None if x_te is None else torch.from_numpy(x_te),
        y_test=None if c_te is None else torch.from_numpy(c_te),
        class_names=[_name(v) for v in classes], client_ids=ids, client_ids_test=ids_test, meta=meta,
        meta_test=meta_test)


# --------------------------------------------------------------------------------------------------------- npz


@register_dataset("npz", NPZConfig)
def load_npz(cfg: Any, seed: int = 0) -> Dataset:
    """``data.name=npz``: arrays ``x``, ``y`` (optional ``x_test`` / ``y_test``) of one ``.npz`` (module docstring)."""
    path = resolve_path(cfg, "path", "an .npz file with arrays x and y")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise DataFormatError(f"cannot read {path} as .npz: {str(e).splitlines()[0] if str(e) else e}") from None

    def get(name: str, key: str) -> np.ndarray:
        if name not in arrays:
            raise DataFormatError(f"{path} has no array {name!r} ({key}); its arrays: {', '.join(arrays) or 'none'}")
        return arrays[name]

    x, y = get("x", "the inputs"), get("y", "the labels")
    if ("x_test" in arrays) != ("y_test" in arrays):
        raise DataFormatError(f"{path}: x_test and y_test go together; it has only "
                              f"{'x_test' if 'x_test' in arrays else 'y_test'}")
    x_te, y_te = arrays.get("x_test"), arrays.get("y_test")
    for xs, ys, tag in ((x, y, ""), (x_te, y_te, "_test")):
        if xs is not None and len(xs) != len(ys):
            raise DataFormatError(f"{path}: x{tag} has {len(xs)} rows, y{tag} {len(ys)}")

    def inputs(a: np.ndarray | None) -> torch.Tensor | None:
        if a is None:
            return None
        return torch.from_numpy(a.astype(np.float32) / (255.0 if a.dtype == np.uint8 else 1.0))

    multilabel = y.ndim == 2
    if multilabel:
        if not np.isin(y, (0, 1)).all() or (y_te is not None and not np.isin(y_te, (0, 1)).all()):
            raise DataFormatError(f"{path}: a 2-D y is multi-label and must hold only 0/1")
        num_classes = int(y.shape[1])
        labels = [None if a is None else torch.from_numpy(a.astype(np.float32)) for a in (y, y_te)]
    else:
        if y.ndim != 1 or (y.size and (np.any(np.mod(y, 1) != 0) or y.min() < 0)):
            raise DataFormatError(f"{path}: y must be class indices >= 0 (N,) or a 0/1 matrix (N, C); got shape "
                                  f"{y.shape}, dtype {y.dtype}")
        num_classes = int(max(y.max(initial=-1), -1 if y_te is None else y_te.max(initial=-1))) + 1
        labels = [None if a is None else torch.from_numpy(a.astype(np.int64)) for a in (y, y_te)]
    ids = ids_test = None
    if cfg.client_column:
        ids, ids_test = client_codes(get(cfg.client_column, "data.client_column"),
                                     arrays.get(f"{cfg.client_column}_test"), str(path), cfg.client_column)
    meta = meta_test = None
    if cfg.meta_columns:
        meta, meta_test = keyed_columns({m: get(m, "data.meta_columns") for m in cfg.meta_columns},
                                        {m: arrays.get(f"{m}_test") for m in cfg.meta_columns}, str(path))
    names = [str(n) for n in arrays["class_names"]] if "class_names" in arrays else [str(i) for i in range(num_classes)]
    return Dataset(name="npz", x_train=inputs(x), y_train=labels[0], num_classes=num_classes, x_test=inputs(x_te),
                   y_test=labels[1], class_names=names, client_ids=ids, client_ids_test=ids_test, meta=meta,
                   meta_test=meta_test, multilabel=multilabel)


# -------------------------------------------------------------------------------------------------- imagefolder


def _scan_images(root: Path, depth: int) -> list[tuple[str, ...]]:
    """Relative path parts of every image ``depth`` folders below ``root`` (sorted)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel = Path(dirpath).relative_to(root).parts
        if len(rel) != depth:
            continue
        out += [(*rel, f) for f in sorted(filenames) if f.lower().endswith(IMAGE_EXTENSIONS)]
    return out


def _read_image(path: Path, cfg: Any) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im = im.convert("L" if cfg.grey else "RGB")
            if cfg.image_size:
                im = im.resize((int(cfg.image_size), int(cfg.image_size)), Image.Resampling.BILINEAR)
            a = np.asarray(im, dtype=np.uint8)
    except (OSError, UnidentifiedImageError) as e:
        raise DataFormatError(f"cannot read image {path}: {e}") from None
    return a[None] if a.ndim == 2 else a.transpose(2, 0, 1)


def _image_folder(root: Path, cfg: Any, index: Table | None, classes: list[str] | None):
    """The images under ``root`` (relative path parts, sorted), their labels, the classes and the named columns."""
    levels = list(cfg.folder_levels)
    found = _scan_images(root, len(levels) + 1)
    if not found:
        layout = "/".join([f"<{lv}>" for lv in levels] + ["<class>", "<image>"])
        raise DataFormatError(f"{root} holds no images in the layout {root}/{layout} (data.folder_levels="
                              f"{levels}; extensions {', '.join(IMAGE_EXTENSIONS)})")
    names = sorted({parts[len(levels)] for parts in found})
    if classes is None:
        classes = names
    elif set(names) - set(classes):
        raise DataFormatError(f"{root}: class folder(s) {sorted(set(names) - set(classes))} are not classes of the "
                              "training folder (data.path)")
    y = np.array([classes.index(parts[len(levels)]) for parts in found], dtype=np.int64)
    columns: dict[str, np.ndarray] = {lv: np.array([p[i] for p in found], dtype=object) for i, lv in enumerate(levels)}
    if index is not None:
        where = {str(v).replace("\\", "/"): i for i, v in enumerate(index.get("path", "data.index_file").tolist())}
        rows = []
        for parts in found:
            rel = "/".join(parts)
            if rel not in where:
                raise DataFormatError(f"{index.path} has no row for the image {rel} (column 'path')")
            rows.append(where[rel])
        for name, col in index.columns.items():
            if name != "path" and name not in columns:
                columns[name] = col[np.asarray(rows, dtype=np.int64)]
    return [root.joinpath(*parts) for parts in found], y, classes, columns


def _decode(paths: list[Path], cfg: Any) -> np.ndarray:
    """(N, C, H, W) uint8 pixels of the images; every image the same size (or ``data.image_size``)."""
    pix, shape0 = [], None
    for path in paths:
        a = _read_image(path, cfg)
        if shape0 is None:
            shape0 = a.shape
        elif a.shape != shape0:
            raise DataFormatError(f"{path} is {a.shape[2]}x{a.shape[1]}, the first image {shape0[2]}x{shape0[1]}; "
                                  "set data.image_size=N to resize them all")
        pix.append(a)
    return np.stack(pix)


@register_dataset("imagefolder", ImageFolderConfig)
def load_imagefolder(cfg: Any, seed: int = 0) -> Dataset:
    """``data.name=imagefolder``: class sub-folders of images, optionally under named levels (module docstring).

    The decoded (and standardised) pixels go to the decoded-data cache of :mod:`flplat.data.files` (``data.cache``,
    ``data.cache_dir``), keyed by the images' SHA-256 and ``data.image_size`` / ``grey`` / ``standardize``; the
    labels, clients and metadata are read from the paths every time.
    """
    root = resolve_path(cfg, "path", "a folder of class sub-folders of images")
    if not root.is_dir():
        raise DataFormatError(f"data.path={str(cfg.path)!r}: {root} is not a folder (data.name=imagefolder)")
    ipath = resolve_path(cfg, "index_file", "a CSV with a path column", required=False)
    index = read_csv(ipath) if ipath is not None else None
    paths, y, classes, cols = _image_folder(root, cfg, index, None)
    tpath = resolve_path(cfg, "test_path", "a test folder in the layout of data.path", required=False)
    paths_te: list[Path] = []
    y_te = None
    cols_te: dict[str, np.ndarray] = {}
    if tpath is not None:
        paths_te, y_te, _, cols_te = _image_folder(tpath, cfg, None, classes)

    def column(cols: dict, name: str, key: str, src: Path) -> np.ndarray:
        if name not in cols:
            raise DataFormatError(f"{src} gives no column {name!r} ({key}); allowed: a level of data.folder_levels="
                                  f"{list(cfg.folder_levels)} or a column of data.index_file")
        return cols[name]

    ids = ids_test = None
    if cfg.client_column:
        ids, ids_test = client_codes(column(cols, cfg.client_column, "data.client_column", root),
                                     cols_te.get(cfg.client_column), str(root), cfg.client_column)
    meta = meta_test = None
    if cfg.meta_columns:
        meta, meta_test = keyed_columns({m: column(cols, m, "data.meta_columns", root) for m in cfg.meta_columns},
                                        {m: cols_te.get(m) for m in cfg.meta_columns}, str(root))

    def build() -> dict[str, torch.Tensor]:
        x = torch.from_numpy(_decode(paths, cfg).astype(np.float32) / 255.0)
        out = {"x_train": x}
        if paths_te:
            x_te = torch.from_numpy(_decode(paths_te, cfg).astype(np.float32) / 255.0)
            if x_te.shape[1:] != x.shape[1:]:
                raise DataFormatError(f"{tpath}: images are {tuple(x_te.shape[1:])}, the training folder's "
                                      f"{tuple(x.shape[1:])}; set data.image_size=N")
            out["x_test"] = x_te
        if cfg.standardize:
            mean = x.mean(dim=(0, 2, 3), keepdim=True)
            std = x.std(dim=(0, 2, 3), keepdim=True).clamp_min(1e-6)
            out = {k: (v - mean) / std for k, v in out.items()}
        return out

    key = f"imagefolder-s{int(cfg.image_size)}-{'L' if cfg.grey else 'RGB'}-z{int(bool(cfg.standardize))}"
    arrays = _cached_arrays(cfg, key, [*paths, *paths_te], build)

    return Dataset(name="imagefolder", x_train=arrays["x_train"], y_train=torch.from_numpy(y),
                   num_classes=len(classes), x_test=arrays.get("x_test"),
                   y_test=None if y_te is None else torch.from_numpy(y_te), class_names=classes,
                   client_ids=ids, client_ids_test=ids_test, meta=meta, meta_test=meta_test)
