"""Office-Home (Venkateswara et al. 2017) as Flux uses it (App. B.1: "we restrict the dataset to images with only
20 classes ... we leverage the four inherent domains of the dataset: Art, Clipart, Product, and Real-World").

Files: the archive's folder layout ``<dir>/<Domain>/<Class>/*.jpg`` (``OfficeHomeDataset_10072016``: domains
``Art``, ``Clipart``, ``Product``, ``Real World`` -- ``Real_World`` is accepted too -- and 65 class folders in each).
Classes: the first ``data.num_classes`` class folders in sorted order (default 20; 0: all 65). Flux does
not name its 20 classes; its code keeps the labels 0..19 of the Hugging Face copy ``flwrlabs/office-home``, whose
labels follow the sorted class names, i.e. the same first 20 (Alarm_Clock ... Fan). Images: PIL, RGB, resized to
``data.image_size`` (Flux's code: 64) and scaled to [0, 1]: x float32 ``(N, 3, S, S)``. No official
test set. ``meta['domain']``: the index of the image's domain in ``data.domains`` (default Art 0,
Clipart 1, Product 2, Real_World 3), which the domain partitions plant as the distributions. The decoded images
are kept in the decoded-data cache (``data.cache_dir``), keyed by the image size and each file's path, size and
modification time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flplat.data.containers import Dataset
from flplat.data.registry import register_dataset
from flplat.data.sources import cached, find_data, load_image, progress
from flplat.errors import check_range

OFFICEHOME_WHERE = "OfficeHomeDataset_10072016.zip from hemanthdv.org/officeHomeDataset.html"
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png"}
DOMAINS = ["Art", "Clipart", "Product", "Real_World"]


@dataclass
class OfficeHomeConfig:
    """``office_home`` (<Domain>/<Class>/*.jpg)."""

    num_classes: int = 20  # the first classes in sorted folder order (Flux App. B.1: 20); 0: all 65
    image_size: int = 64  # Flux's code: 64 x 64
    domains: list[str] = field(default_factory=lambda: list(DOMAINS))

    def check(self) -> None:
        check_range(0 <= self.num_classes <= 65, "data.num_classes", self.num_classes, "an integer in [0, 65]")
        check_range(self.image_size >= 8, "data.image_size", self.image_size, "an integer >= 8")
        check_range(bool(self.domains), "data.domains", [], f"a non-empty subset of {', '.join(DOMAINS)}")


def _domain_dir(d: Path, domain: str) -> Path | None:
    for name in (domain, domain.replace("_", " "), domain.replace(" ", "_")):
        if (d / name).is_dir():
            return d / name
    return None


def _find(d: Path, domains: list[str]) -> dict[str, Path] | None:
    for base in (d, d / "OfficeHomeDataset_10072016"):
        dirs = {dom: _domain_dir(base, dom) for dom in domains}
        if all(dirs.values()):
            return dirs
    return None


@register_dataset("office_home", OfficeHomeConfig)
def load_officehome(cfg: Any, seed: int = 0) -> Dataset:
    """Office-Home: x (N, 3, S, S), 20 classes by default, meta['domain'] (Flux App. B.1)."""
    o = cfg
    domains = [str(x) for x in o.domains]
    dirs = find_data(cfg, "office_home", "office_home", lambda d: _find(d, domains),
                     f"the domain folders {', '.join(domains)} with one folder per class", OFFICEHOME_WHERE)
    classes = sorted({c.name for p in dirs.values() for c in p.iterdir() if c.is_dir()})
    if o.num_classes:
        classes = classes[: int(o.num_classes)]
    label = {c: i for i, c in enumerate(classes)}
    files, ys, doms = [], [], []
    for k, dom in enumerate(domains):
        for cls in classes:
            folder = dirs[dom] / cls
            if not folder.is_dir():
                continue
            for f in sorted(folder.iterdir()):
                if f.suffix.lower() in IMAGE_SUFFIXES:
                    files.append(f)
                    ys.append(label[cls])
                    doms.append(k)
    size = int(o.image_size)

    def build() -> dict[str, np.ndarray]:
        x = np.empty((len(files), 3, size, size), dtype=np.float32)
        for i, f in enumerate(progress(files, len(files), "office_home images")):
            x[i] = load_image(f, size, "RGB")
        return {"x": x}

    listing = [(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files]  # the cache key: which files, as is
    x = cached(cfg, "office_home", (size, listing), [], build)["x"]
    return Dataset(name="office_home", x_train=torch.from_numpy(x), y_train=torch.as_tensor(ys, dtype=torch.int64),
                   num_classes=len(classes), class_names=classes, meta={"domain": np.asarray(doms, dtype=np.int64)})
