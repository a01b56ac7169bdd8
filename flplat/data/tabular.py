"""Tabular datasets of Clust-PSI-PFL (Table I): ACSIncome and Snapshot Serengeti. ``x`` is float32 ``(N, F)``.

ACSIncome (``data.name=acs_income``: ``data.year``, ``horizon``, ``states``, ``scaler``)
----------------------------------------------------------------------------------------
Table I: "ACSIIncome [32] Tabular Classify high/low salary 2 1,664,500" -- folktables' ACSIncome task (Ding et al.
2021) on the 2018 1-Year ACS PUMS person files of the 50 states and Puerto Rico, which is exactly 1,664,500 people
(the authors' earlier PSI-PFL code loads it that way: ``ACSDataSource(survey_year="2018", horizon="1-Year")`` over
all 51 "states", then ``RobustScaler`` on the features). Files: folktables' layout
``<dir>/<year>/<horizon>/psam_p<FIPS>.csv`` (``ss<yy>p<st>.csv`` before 2017), the Census zip ``csv_p<st>.zip``
in the same places, or the CSVs directly in ``<dir>``. The task, as folktables defines it: features AGEP, COW, SCHL,
MAR, OCCP, POBP, RELP, WKHP, SEX, RAC1P; label PINCP > 50,000; rows kept when AGEP > 16, PINCP > 100, WKHP > 0 and
PWGTP >= 1. Categoricals (COW, SCHL, MAR, OCCP, POBP, RELP, SEX, RAC1P) keep their integer ACS codes as numbers and
a missing value is 0, as folktables fills it: ACSIncome's ``postprocess`` is ``lambda x: np.nan_to_num(x, -1)`` in
its release 0.0.12 (``np.nan_to_num``'s second positional argument is ``copy``, so NaN becomes the default
``nan=0.0``; its repository now spells it ``np.nan_to_num(x, copy=True, nan=0.0)``), applied to the feature array
of ``df_to_numpy``. Then every column is scaled with ``data.scaler`` (robust: (x - median) / IQR, the authors'
choice; standard; none), fitted on the pool. A state file where no row passes the filter is an error naming the
file and the filter (not a real PUMS file). There is no official test set. ``meta``: ``state`` (the FIPS code),
``sex`` (1 male, 2 female) and ``race`` (RAC1P, 1..9): ACS codes as they are (-1 if missing, the metadata
partitions' code for it). The result is kept in the decoded-data cache (``data.cache_dir``), keyed by the files'
contents and these keys.

Serengeti (``data.name=serengeti``: ``data.num_classes``, ``classes``, ``features``, ``scaler``)
------------------------------------------------------------------------------------------------
Table I: "Serengeti [33] Tabular Detect animal type 13 286,586" citing Swanson et al. 2015 (Snapshot Serengeti,
Scientific Data; the tables are on Dryad, doi:10.5061/dryad.5pt92). Neither the paper nor any public code of the
authors that we could find says which table or columns were used, or which 13 classes. Our choice: the Dryad
*consensus* table (``consensus_data.csv``: CaptureEventID, NumImages, DateTime, SiteID, ..., Species, Count,
Standing, Resting, Moving, Eating, Interacting, Babies, ...; one row per species per capture event), label =
``Species``, kept for the ``data.num_classes`` most frequent species (default 13; ties alphabetical) or the
species listed in ``data.classes`` (in that label order). Features (``data.features``): any
numeric column of the table, plus the derived ``Hour`` and ``Month`` (of DateTime), ``Site`` (SiteID as its index
in the sorted list of sites) and ``Count`` (the counts 1..10 as numbers, "11-50" as 11, "51+" as 12); scaled with
``data.scaler`` (standard by default). The number of rows need not match Table I's 286,586. ``meta``:
``site`` (the same site index).
"""

from __future__ import annotations

import csv
import io
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flplat.data.containers import Dataset
from flplat.data.formats import DataFormatError
from flplat.data.registry import register_dataset
from flplat.data.sources import cached, find_data
from flplat.errors import ConfigError, check_choice, check_range

ACS_FEATURES = ["AGEP", "COW", "SCHL", "MAR", "OCCP", "POBP", "RELP", "WKHP", "SEX", "RAC1P"]
ACS_FIPS = {"AL": "01", "AK": "02", "AZ": "04", "AR": "05", "CA": "06", "CO": "08", "CT": "09", "DE": "10",
            "FL": "12", "GA": "13", "HI": "15", "ID": "16", "IL": "17", "IN": "18", "IA": "19", "KS": "20",
            "KY": "21", "LA": "22", "ME": "23", "MD": "24", "MA": "25", "MI": "26", "MN": "27", "MS": "28",
            "MO": "29", "MT": "30", "NE": "31", "NV": "32", "NH": "33", "NJ": "34", "NM": "35", "NY": "36",
            "NC": "37", "ND": "38", "OH": "39", "OK": "40", "OR": "41", "PA": "42", "RI": "44", "SC": "45",
            "SD": "46", "TN": "47", "TX": "48", "UT": "49", "VT": "50", "VA": "51", "WA": "53", "WV": "54",
            "WI": "55", "WY": "56", "PR": "72"}
ACS_WHERE = ("the ACS PUMS person files (www2.census.gov/programs-surveys/acs/data/pums/<year>/<horizon>/"
             "csv_p<st>.zip, or folktables' ACSDataSource(...).get_data(download=True))")
SERENGETI_WHERE = "consensus_data.csv of Swanson et al. 2015 on Dryad (doi:10.5061/dryad.5pt92)"
SERENGETI_COUNTS = {**{str(i): float(i) for i in range(1, 11)}, "11-50": 11.0, "51+": 12.0}
ACS_STATES = list(ACS_FIPS)  # the 50 states + PR in folktables' order
SCALERS = ("none", "robust", "standard")


@dataclass
class ACSIncomeConfig:
    """``acs_income`` (folktables' ACSIncome task on ACS PUMS person files)."""

    year: int = 2018
    horizon: str = "1-Year"  # 1-Year | 5-Year
    states: list[str] = field(default_factory=lambda: list(ACS_STATES))  # 50 states + PR: 1,664,500 people (2018)
    scaler: str = "robust"  # robust (median / IQR) | standard (mean / std) | none: per feature, fitted on the pool

    def check(self) -> None:
        check_choice("data.horizon", self.horizon, ("1-Year", "5-Year"))
        check_range(self.year >= 2014, "data.year", self.year, "a survey year >= 2014")
        bad = [s for s in self.states if s not in ACS_STATES]
        check_range(bool(self.states) and not bad, "data.states", list(self.states),
                    f"a non-empty list of: {', '.join(ACS_STATES)}")
        check_choice("data.scaler", self.scaler, SCALERS)


@dataclass
class SerengetiConfig:
    """``serengeti`` (Snapshot Serengeti consensus table, Swanson et al. 2015)."""

    num_classes: int = 13  # the most frequent species (ties: alphabetical); used when `classes` is empty
    classes: list[str] = field(default_factory=list)  # explicit species names, in label order
    features: list[str] = field(default_factory=lambda: [
        "NumImages", "Count", "Standing", "Resting", "Moving", "Eating", "Interacting", "Babies", "Hour", "Month",
        "Site"])
    scaler: str = "standard"  # robust | standard | none

    def check(self) -> None:
        check_range(self.num_classes >= 2 or len(self.classes) >= 2, "data.num_classes", self.num_classes,
                    "an integer >= 2 (or data.classes with at least 2 species)")
        check_range(bool(self.features), "data.features", [], "a non-empty list of columns")
        check_choice("data.scaler", self.scaler, SCALERS)


def scale(x: np.ndarray, how: str) -> np.ndarray:
    """Per-column scaling fitted on ``x``: robust ((x - median) / IQR), standard ((x - mean) / std) or none; a
    constant column is only centred."""
    if how == "none":
        return x
    from sklearn.preprocessing import RobustScaler, StandardScaler

    return (RobustScaler() if how == "robust" else StandardScaler()).fit_transform(x)


# --------------------------------------------------------------------------------------------------- ACSIncome


def _acs_file_names(year: int, state: str) -> list[str]:
    if year >= 2017:
        return [f"psam_p{ACS_FIPS[state]}.csv"]
    return [f"ss{str(year)[-2:]}p{state.lower()}.csv"]


def _find_acs(d: Path, year: int, horizon: str, states: list[str]) -> list[Path] | None:
    """One CSV or zip per state, all in one of ``d/<year>/<horizon>`` and ``d``; None unless every state is there."""
    for base in (d / str(year) / horizon, d):
        paths = []
        for st in states:
            names = _acs_file_names(year, st)
            path = next((base / n for n in names if (base / n).is_file()), None)
            path = path or (base / f"csv_p{st.lower()}.zip" if (base / f"csv_p{st.lower()}.zip").is_file() else None)
            if path is None:
                break
            paths.append(path)
        else:
            return paths
    return None


def _read_acs_csv(path: Path, year: int, state: str):
    import pandas as pd

    cols = [*ACS_FEATURES, "PINCP", "PWGTP"]
    try:
        if path.suffix == ".zip":
            with zipfile.ZipFile(path) as zf:
                member = next((n for n in zf.namelist() if n in _acs_file_names(year, state)), None)
                if member is None:
                    raise DataFormatError(f"{path}: no {_acs_file_names(year, state)[0]} inside")
                df = pd.read_csv(io.BytesIO(zf.read(member)), usecols=cols)
        else:
            df = pd.read_csv(path, usecols=cols)
    except ValueError as e:  # a missing column
        raise DataFormatError(f"{path}: not an ACS PUMS person file ({e})") from None
    return df.apply(pd.to_numeric, errors="coerce")


@register_dataset("acs_income", ACSIncomeConfig)
def load_acs_income(cfg: Any, seed: int = 0) -> Dataset:
    """folktables' ACSIncome on ACS PUMS person CSVs (Clust-PSI-PFL Table I): x (N, 10), 2 classes."""
    a = cfg
    year, horizon, states = int(a.year), str(a.horizon), [str(s) for s in a.states]
    needed = f"{year} {horizon} person files {', '.join(_acs_file_names(year, s)[0] for s in states[:3])}" + \
        (", ..." if len(states) > 3 else "")
    paths = find_data(cfg, "acs_income", "acs_income", lambda d: _find_acs(d, year, horizon, states), needed,
                      ACS_WHERE)

    def build() -> dict[str, np.ndarray]:
        xs, ys, fips, sex, race = [], [], [], [], []
        for path, st in zip(paths, states):
            df = _read_acs_csv(path, year, st)
            rows = len(df)
            df = df[(df.AGEP > 16) & (df.PINCP > 100) & (df.WKHP > 0) & (df.PWGTP >= 1)]  # folktables' adult_filter
            if df.empty:
                raise DataFormatError(f"{path}: none of its {rows} rows passes folktables' ACSIncome filter "
                                      f"(AGEP > 16, PINCP > 100, WKHP > 0, PWGTP >= 1)")
            xs.append(df[ACS_FEATURES].fillna(0).to_numpy(np.float64))  # folktables: np.nan_to_num(x, -1) -> 0
            ys.append((df.PINCP > 50000).to_numpy(np.int64))
            fips.append(np.full(len(df), int(ACS_FIPS[st]), np.int64))
            sex.append(df.SEX.fillna(-1).to_numpy(np.int64))
            race.append(df.RAC1P.fillna(-1).to_numpy(np.int64))
        return {"x": scale(np.concatenate(xs), str(a.scaler)).astype(np.float32), "y": np.concatenate(ys),
                "state": np.concatenate(fips), "sex": np.concatenate(sex), "race": np.concatenate(race)}

    # "fill0": missing features are 0, as folktables (caches written with the earlier -1 are not reused)
    arr = cached(cfg, "acs_income", (year, horizon, states, str(a.scaler), "fill0"), list(paths), build)
    return Dataset(name="acs_income", x_train=torch.from_numpy(arr["x"]), y_train=torch.from_numpy(arr["y"]),
                   num_classes=2, class_names=["<=50K", ">50K"],
                   meta={k: arr[k] for k in ("state", "sex", "race")})


# --------------------------------------------------------------------------------------------------- Serengeti


def _serengeti_value(row: dict, col: str, sites: dict[str, int], path: Path, line: int) -> float:
    try:
        if col == "Count":
            return SERENGETI_COUNTS[row["Count"].strip()]
        if col in ("Hour", "Month"):
            date, _, time = row["DateTime"].strip().partition(" ")
            return float(time.split(":")[0]) if col == "Hour" else float(date.split("-")[1])
        if col == "Site":
            return float(sites[row["SiteID"]])
        value = row[col].strip()
        return float(value) if value not in ("", "NA") else float("nan")
    except (KeyError, ValueError, IndexError):
        raise DataFormatError(f"{path}: line {line}: cannot read column {col!r} "
                              f"(value {row.get(col, row.get('DateTime'))!r})") from None


@register_dataset("serengeti", SerengetiConfig)
def load_serengeti(cfg: Any, seed: int = 0) -> Dataset:
    """Snapshot Serengeti's consensus table (Clust-PSI-PFL Table I): x (N, F), 13 species by default."""
    s = cfg
    path = find_data(cfg, "serengeti", "serengeti",
                     lambda d: d / "consensus_data.csv" if (d / "consensus_data.csv").is_file() else None,
                     "consensus_data.csv", SERENGETI_WHERE)
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        header = set(reader.fieldnames or [])
        rows = list(reader)
    derived = {"Hour": "DateTime", "Month": "DateTime", "Site": "SiteID", "Count": "Count"}
    missing = [c for c in ["Species", *s.features] if derived.get(c, c) not in header]
    if missing:
        raise DataFormatError(f"{path}: no column(s) {', '.join(missing)} (data.features needs them)")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["Species"]] = counts.get(r["Species"], 0) + 1
    if s.classes:
        classes = [str(c) for c in s.classes]
        absent = [c for c in classes if c not in counts]
        if absent:
            raise ConfigError(f"data.classes names species absent from {path}: {', '.join(absent)}; "
                              f"allowed: {', '.join(sorted(counts))}")
    else:
        classes = sorted(counts, key=lambda c: (-counts[c], c))[: int(s.num_classes)]
    label = {c: i for i, c in enumerate(classes)}
    sites = {site: i for i, site in enumerate(sorted({r.get("SiteID", "") for r in rows}))}
    keep = [(i, r) for i, r in enumerate(rows) if r["Species"] in label]
    x = np.array([[_serengeti_value(r, c, sites, path, i + 2) for c in s.features] for i, r in keep],
                 dtype=np.float64).reshape(len(keep), len(s.features))
    x = np.where(np.isnan(x), np.nanmedian(x, axis=0) if len(x) else 0.0, x)  # a missing number: the column median
    y = np.array([label[r["Species"]] for _, r in keep], dtype=np.int64)
    meta = {"site": np.array([sites[r.get("SiteID", "")] for _, r in keep], dtype=np.int64)}
    return Dataset(name="serengeti", x_train=torch.from_numpy(scale(x, str(s.scaler)).astype(np.float32)),
                   y_train=torch.from_numpy(y), num_classes=len(classes), class_names=classes, meta=meta)
