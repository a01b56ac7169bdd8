"""PQFed's client construction (Yue et al., PQFed, §V-A and §V-B), as the ``pqfed`` partition protocol (keys
``partition.rates``, ``sources``, ``target_sources``, ``samples_per_source``, ``target_test_per_source``,
``public_size``, ``pca_components``, ``diff``: :class:`PQFedConfig`).

1. A public sample of ``partition.public_size`` images is drawn from the official (global) test set, as
   in the paper (500 of D_Global^test), so it is held out from every client; a PCA with
   ``pca_components`` components is fitted on it (M_Public).
2. The whole training pool is projected with M_Public and K-means with ``sources`` clusters (15 in the
   paper) defines the latent "sources".
3. The target client (client 0) draws ``target_sources`` (3) distinct sources C_T, and
   ``samples_per_source`` (400) training images from each; its test split is
   ``target_test_per_source`` further images from each source of C_T (the paper's 1,200 MNIST test images in
   the training proportions); it has no validation split.
4. Client ``i ≥ 1`` has dissimilarity rate ``r = rates[i-1]``: for each source c ∈ C_T it takes
   ``round((1−r)·n)`` images from c and ``n − round((1−r)·n)`` from a source c_diff ∉ C_T (n = samples per
   source). The paper's sentence is ambiguous about c_diff; ``diff="per_slot"`` (default) draws one c_diff
   per slot, so every client has 3n images and r = 1 gives images from sources outside C_T only;
   ``"single"`` draws one c_diff per client and takes ``round(r·n)`` images from it in total, the literal
   reading (the client then has ``3·round((1−r)n) + round(r·n)`` images). Its local splits follow the
   ``partition.*_fraction`` keys.

Images are drawn without replacement from per-source shuffled pools, client after client (target first), so
clients are disjoint and a federation whose ``rates`` is a prefix of another's has identical clients
(Tables IV-V add clients one at a time). To keep clients disjoint, C_T is drawn among the sources large enough
for every client's share and each c_diff among the other sources with enough images left.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flplat.data.containers import ClientSplit, Dataset, Partition
from flplat.data.registry import register_partition
from flplat.data.splits import InfeasiblePartitionError
from flplat.errors import ConfigError, check_choice, check_range


@dataclass
class PQFedConfig:
    """``pqfed``: target client 0 from ``target_sources`` sources, one client per rate r (module docstring)."""

    rates: list[float] = field(default_factory=lambda: [round(0.1 * i, 1) for i in range(11)])
    sources: int = 15  # K-means clusters of the public-PCA features ("sources")
    target_sources: int = 3
    samples_per_source: int = 400
    target_test_per_source: int = 400
    public_size: int = 500  # public sample drawn from the official test set
    pca_components: int = 50
    diff: str = "per_slot"  # per_slot | single: how c_diff is drawn (module docstring)

    def check(self) -> None:
        check_range(all(0.0 <= float(r) <= 1.0 for r in self.rates), "partition.rates", list(self.rates),
                    "a list of numbers in [0, 1]")
        for k in ("sources", "target_sources", "samples_per_source", "pca_components"):
            check_range(getattr(self, k) >= 1, f"partition.{k}", getattr(self, k), "an integer >= 1")
        check_range(self.target_test_per_source >= 0, "partition.target_test_per_source",
                    self.target_test_per_source, "an integer >= 0")
        check_range(self.public_size >= 2, "partition.public_size", self.public_size, "an integer >= 2")
        check_range(self.target_sources < self.sources, "partition.target_sources", self.target_sources,
                    "an integer in [1, partition.sources - 1]")
        check_choice("partition.diff", self.diff, ("per_slot", "single"))


def pqfed_sources(dataset: Dataset, cfg: Any, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Steps 1-2: the public sample (test-set rows) and the source (K-means cluster) of every pool sample."""
    from sklearn.cluster import KMeans

    from flplat.maths.pqfed import fit_public_pca, project

    if dataset.x_test is None:
        raise ConfigError(f"partition.name='pqfed' needs a dataset with an official test set for the public sample; "
                          f"data.name={dataset.name!r} has none (use mnist, fmnist, cifar10 or synthetic)")
    if not dataset.x_test.is_floating_point():
        raise ConfigError(f"partition.name='pqfed' clusters PCA projections of the inputs; data.name={dataset.name!r} "
                          "gives token ids (text), which have no such geometry; allowed: an image or tabular dataset")
    n_pub = int(cfg.public_size)
    if n_pub > len(dataset.x_test):
        raise ConfigError(f"partition.public_size={n_pub} exceeds the {len(dataset.x_test)} test images; "
                          "allowed: an integer in [2, test-set size]")
    public = np.sort(rng.choice(len(dataset.x_test), size=n_pub, replace=False))
    mean, comps = fit_public_pca(dataset.x_test[public].numpy(), int(cfg.pca_components))
    z = project(dataset.x_train.numpy(), mean, comps)
    km = KMeans(n_clusters=int(cfg.sources), n_init=1, random_state=int(rng.integers(2**31 - 1)))
    return public, km.fit_predict(z).astype(np.int64)


@register_partition("pqfed", PQFedConfig)
def pqfed_partition(dataset: Dataset, cfg: Any, seed: int) -> Partition:
    """The whole construction (module docstring); raises ConfigError when a source runs out of images. The target's
    splits are fixed here; the other clients' are cut by the builder."""
    rng = np.random.default_rng(np.random.SeedSequence(int(seed)).spawn(2)[0])
    rates = [float(r) for r in cfg.rates]
    if int(cfg.num_clients) != 1 + len(rates):
        raise ConfigError(f"partition.num_clients={cfg.num_clients} must be 1 + len(partition.rates) = "
                          f"{1 + len(rates)} for partition.name='pqfed' (the target plus one client per rate)")
    public, source = pqfed_sources(dataset, cfg, rng)
    n_src, n_t = int(cfg.sources), int(cfg.target_sources)
    pools = [rng.permutation(np.flatnonzero(source == c)) for c in range(n_src)]
    used = np.zeros(n_src, dtype=np.int64)

    def take(c: int, m: int) -> np.ndarray:
        if used[c] + m > len(pools[c]):
            raise InfeasiblePartitionError(
                f"partition.name='pqfed' is infeasible: source {c} has {len(pools[c])} images, {used[c] + m} needed; "
                "lower partition.samples_per_source / target_test_per_source or use fewer clients")
        out = pools[c][used[c]:used[c] + m]
        used[c] += m
        return out

    n = int(cfg.samples_per_source)
    sizes = np.array([len(p) for p in pools])
    need = n + int(cfg.target_test_per_source) + sum(int(np.floor((1.0 - r) * n + 0.5)) for r in rates)
    eligible = np.flatnonzero(sizes >= need)  # the paper draws C_T at random; we draw among sources big enough
    if len(eligible) < n_t:
        raise InfeasiblePartitionError(
            f"partition.name='pqfed' is infeasible: only {len(eligible)} of {n_src} sources hold the {need} images a "
            f"target source needs; lower partition.samples_per_source or use fewer clients")
    target_src = np.sort(rng.choice(eligible, size=n_t, replace=False))
    others = np.setdiff1d(np.arange(n_src), target_src)
    t_train = np.concatenate([take(c, n) for c in target_src])
    t_test = np.concatenate([take(c, int(cfg.target_test_per_source)) for c in target_src])
    parts = [np.sort(np.concatenate([t_train, t_test]))]
    for r in rates:
        same = int(np.floor((1.0 - r) * n + 0.5))
        chunks = [take(c, same) for c in target_src]
        m = n - same if cfg.diff == "per_slot" else int(np.floor(r * n + 0.5))
        for _ in range(n_t if cfg.diff == "per_slot" else 1):
            room = others[sizes[others] - used[others] >= m]  # c_diff: a random other source with m images left
            chunks.append(take(int(rng.choice(room if len(room) else others)), m))
        parts.append(np.sort(np.concatenate(chunks)))
    empty = np.empty(0, dtype=np.int64)
    parts[0] = ClientSplit(train=np.sort(t_train), val=empty, test=np.sort(t_test))  # the target's own splits
    meta = {"pqfed_target_sources": target_src.tolist(), "pqfed_rates": rates,
            "pqfed_source_sizes": [len(p) for p in pools]}
    return Partition(clients=parts, public_indices=public, meta=meta)
