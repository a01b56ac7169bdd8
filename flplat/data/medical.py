"""CheXpert (Irvin et al. 2019) as Flux uses it (App. B.1, F.4, Table 59): multi-label chest X-rays with the
metadata that plants its distributions.

Files: ``train.csv`` and ``valid.csv`` (columns ``Path, Sex, Age, Frontal/Lateral, AP/PA``, then the 14
observations ``No Finding`` ... ``Support Devices`` with 1 / 0 / -1 (uncertain) / blank) and the images they name.
``Path`` starts with the archive's directory (``CheXpert-v1.0-small/train/patient00001/study1/view1_frontal.jpg``);
an image is looked for at ``<dir>/<Path>``, then ``<dir>/<Path without its first directory>`` (the CSVs inside the
unpacked archive, as Flux's code and the Kaggle copy have them), then ``<dir>/../<Path>``. ``<dir>`` is a searched
directory holding the two CSVs, or its ``CheXpert-v1.0-small/`` (``data.root`` set to the folder the official zip was
unpacked in).

Labels (``data.uncertain``): y is float32 ``(N, 14)`` of 0/1 (``Dataset.multilabel``); an uncertain -1
becomes 1 (``ones``: U-Ones, what Flux's code does: ``replace(-1.0, 1.0).fillna(0.0)``) or 0 (``zeros``: U-Zeros); a
blank is 0 either way. Flux App. B.1 says it keeps "the original data without applying any image augmentations or
label modifications"; its public code applies U-Ones, which is our default.

Images: read with PIL as grey (``L``), resized to ``data.image_size`` (Flux's code: 64) and scaled to
[0, 1] (no standardisation, as Flux's ``ToTensor``): x float32 ``(N, 1, S, S)``. ``train.csv`` is the pool (its
first ``data.max_train_rows`` rows when > 0; Flux's code uses the first 100,000 rows for training and the
next 20,000 as its test rows) and ``valid.csv`` the official test set. The decoded arrays are kept in the
decoded-data cache (``data.cache_dir``), keyed by the two CSVs' contents and the settings above; an image changed
under unchanged CSVs is not noticed (``data.cache=false`` reads them again).

Metadata (``meta`` / ``meta_test``, int64, the codes the metadata partitions read):
``view`` Frontal 0, Lateral 1; ``sex`` Female 0, Male 1, Unknown (or blank) -1 (missing: App. B.1's distributions
are "Male vs. Female", so a metadata partition on ``sex`` leaves such a sample out); ``age`` in years (-1 when blank);
``age_group`` 1 when age >= ``data.age_threshold`` else 0 (App. B.1: "Age (<50 vs. >=50)"; Flux's code
splits at 60); ``ap_pa`` AP 0, PA 1, LL 2, RL 3, blank or other -1.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flplat.data.containers import Dataset
from flplat.data.formats import DataFormatError
from flplat.data.registry import register_dataset
from flplat.data.sources import cached, find_data, load_image, progress
from flplat.errors import check_choice, check_range

CHEXPERT_OBSERVATIONS = [
    "No Finding", "Enlarged Cardiomediastinum", "Cardiomegaly", "Lung Opacity", "Lung Lesion", "Edema",
    "Consolidation", "Pneumonia", "Atelectasis", "Pneumothorax", "Pleural Effusion", "Pleural Other", "Fracture",
    "Support Devices",
]
CHEXPERT_DIR = "CheXpert-v1.0-small"  # the directory the official zip (and the Kaggle copy) unpacks to
CHEXPERT_META_COLUMNS = ["Path", "Sex", "Age", "Frontal/Lateral", "AP/PA"]
CHEXPERT_WHERE = ("CheXpert-v1.0-small from stanfordmlgroup.github.io/competitions/chexpert (or the Kaggle copy "
                  "ashery/chexpert)")
VIEW_CODES = {"Frontal": 0, "Lateral": 1}
SEX_CODES = {"Female": 0, "Male": 1, "Unknown": -1, "": -1}
AP_PA_CODES = {"AP": 0, "PA": 1, "LL": 2, "RL": 3}


@dataclass
class CheXpertConfig:
    """``chexpert`` (train.csv / valid.csv + images)."""

    image_size: int = 64  # images resized to image_size x image_size, grey (Flux's code: 64)
    uncertain: str = "ones"  # ones (U-Ones: -1 -> 1, Flux's code) | zeros (U-Zeros); blank is always 0
    age_threshold: int = 50  # meta['age_group'] = age >= this (Flux App. B.1: < 50 vs >= 50)
    max_train_rows: int = 0  # > 0: only the first rows of train.csv (Flux's code: 100,000); 0: all

    def check(self) -> None:
        check_range(self.image_size >= 8, "data.image_size", self.image_size, "an integer >= 8")
        check_choice("data.uncertain", self.uncertain, ("ones", "zeros"))
        check_range(self.max_train_rows >= 0, "data.max_train_rows", self.max_train_rows, "an integer >= 0 (0: all)")


def _label(value: str, uncertain: str, path: Path, line: int) -> float:
    v = value.strip()
    if v == "":
        return 0.0
    try:
        f = float(v)
    except ValueError:
        f = None
    if f not in (1.0, 0.0, -1.0):
        raise DataFormatError(f"{path}: line {line}: an observation is 1, 0, -1 or blank, got {value!r}")
    return (1.0 if uncertain == "ones" else 0.0) if f == -1.0 else f


def _image_path(d: Path, rel: str) -> Path:
    parts = Path(rel).parts
    for cand in (d / rel, d.joinpath(*parts[1:]) if len(parts) > 1 else d / rel, d.parent / rel):
        if cand.is_file():
            return cand
    raise DataFormatError(f"CheXpert image {rel!r} not found under {d} (looked at {d / rel} and "
                          f"{d.joinpath(*parts[1:]) if len(parts) > 1 else d / rel})")


def _read_split(d: Path, name: str, cfg, max_rows: int = 0):
    path = d / name
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in (*CHEXPERT_META_COLUMNS, *CHEXPERT_OBSERVATIONS) if c not in (reader.fieldnames or [])]
        if missing:
            raise DataFormatError(f"{path}: missing column(s) {', '.join(missing)}")
        rows = []
        for row in reader:
            rows.append(row)
            if max_rows and len(rows) >= max_rows:
                break
    size, unc, thr = int(cfg.image_size), str(cfg.uncertain), int(cfg.age_threshold)
    x = np.empty((len(rows), 1, size, size), dtype=np.float32)
    y = np.empty((len(rows), len(CHEXPERT_OBSERVATIONS)), dtype=np.float32)
    meta = {k: np.empty(len(rows), dtype=np.int64) for k in ("view", "sex", "age", "age_group", "ap_pa")}
    for i, row in enumerate(progress(rows, len(rows), f"chexpert {name}")):
        line = i + 2
        x[i] = load_image(_image_path(d, row["Path"]), size, "L")
        y[i] = [_label(row[c], unc, path, line) for c in CHEXPERT_OBSERVATIONS]
        view = row["Frontal/Lateral"].strip()
        if view not in VIEW_CODES:
            raise DataFormatError(f"{path}: line {line}: Frontal/Lateral is Frontal or Lateral, got {view!r}")
        age = row["Age"].strip()
        meta["view"][i] = VIEW_CODES[view]
        meta["sex"][i] = SEX_CODES.get(row["Sex"].strip(), -1)
        meta["age"][i] = int(float(age)) if age else -1
        meta["age_group"][i] = int(meta["age"][i] >= thr)
        meta["ap_pa"][i] = AP_PA_CODES.get(row["AP/PA"].strip(), -1)
    return x, y, meta


def _find_chexpert(p: Path) -> Path | None:
    """``p``, or its ``CheXpert-v1.0-small/`` (the folder the official zip unpacks to), when it holds both CSVs."""
    for d in (p, p / CHEXPERT_DIR):
        if (d / "train.csv").is_file() and (d / "valid.csv").is_file():
            return d
    return None


@register_dataset("chexpert", CheXpertConfig)
def load_chexpert(cfg: Any, seed: int = 0) -> Dataset:
    """CheXpert: grey x (N, 1, S, S), multi-label y (N, 14), view/sex/age metadata (Flux App. B.1)."""
    c = cfg
    d = find_data(cfg, "chexpert", "chexpert", _find_chexpert,
                  f"train.csv, valid.csv (there or in its {CHEXPERT_DIR}/) and the images they list", CHEXPERT_WHERE)

    def build() -> dict[str, np.ndarray]:
        out = {}
        for split, name, rows in (("train", "train.csv", int(c.max_train_rows)), ("test", "valid.csv", 0)):
            x, y, meta = _read_split(d, name, c, rows)
            out.update({f"x_{split}": x, f"y_{split}": y, **{f"meta_{split}_{k}": v for k, v in meta.items()}})
        return out

    # "sex-1": unknown sex is coded -1 (caches written with the earlier code 2 are not reused)
    settings = (int(c.image_size), str(c.uncertain), int(c.age_threshold), int(c.max_train_rows), "sex-1")
    a = cached(cfg, "chexpert", settings, [d / "train.csv", d / "valid.csv"], build)
    meta = {k[len("meta_train_"):]: v for k, v in a.items() if k.startswith("meta_train_")}
    meta_te = {k[len("meta_test_"):]: v for k, v in a.items() if k.startswith("meta_test_")}
    return Dataset(name="chexpert", x_train=torch.from_numpy(a["x_train"]), y_train=torch.from_numpy(a["y_train"]),
                   num_classes=len(CHEXPERT_OBSERVATIONS), x_test=torch.from_numpy(a["x_test"]),
                   y_test=torch.from_numpy(a["y_test"]), class_names=list(CHEXPERT_OBSERVATIONS), meta=meta,
                   meta_test=meta_te, multilabel=True)
