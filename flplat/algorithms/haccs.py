"""HACCS — Wolfrath, Sreekumar, Kumar, Wang, Chandra, "HACCS: Heterogeneity-Aware Clustered Client Selection for
Accelerated Federated Learning", IPDPS 2022; run as the Clust-PSI-PFL baseline (FedAvg aggregation).

Once, before round 1: clients' normalised label histograms h_k are clustered with OPTICS on the Hellinger
distance H(h_i, h_j) = sqrt(1 − Σ_c sqrt(h_ic h_jc)) (``min_samples``, ``xi``, ``max_eps``); OPTICS noise points
become singleton clusters. ``max_eps`` defaults to 0.5, not scikit-learn's ∞ (= 1 here): with an unbounded
radius the ξ extraction attaches a client that is far from everyone to the cluster that follows it in the
OPTICS ordering (so the result depends on client numbering), and equidistant clients (disjoint label sets)
form one cluster; the authors tuned max_eps by grid search, its value is not published.

Each client k gets a simulated latency l_k, drawn once from the run's Generator: a tier t is assigned to
≈ f_t·K clients (``tier_fractions``, default 60/20/14/6 % fast / medium / slow / very slow, the tiers of the
authors' simulation) and l_k = L_t · exp(σ z_k), z_k ~ N(0, 1), with tier multipliers L_t (``tier_latency``,
default 1, 2, 4, 8 × a unit base latency) and lognormal jitter σ (``latency_jitter``). The Clust-PSI-PFL authors'
code redraws latencies every round; here a device keeps its speed for the whole run (reproducible, and the
"fastest member" of a cluster stays meaningful).

Each round, for every cluster c with fastest member latency l_c and per-client losses F_k:

    score_c = ρ · (1 − l_c / max_k l_k) + (1 − ρ) · F̄_c / Σ_c' F̄_c'      (F̄_c: mean loss of c's members)

and the server samples the clusters without replacement ∝ score_c (zero-score clusters last, uniformly),
then takes the fastest not-yet-chosen client of each cluster in that order, cycling again (second fastest,
...) while fewer than m = max(1, round(q·K)) clients are chosen. With ≥ m clusters no cluster gives two.

Losses (``losses``): ``all`` (default, as the Clust-PSI-PFL authors ran it) evaluates every client's training
loss on the current global model before selecting — a forward pass over all clients' data each round;
``last`` keeps each client's most recent known loss: all clients are evaluated once on the initial model,
then a participant's entry becomes the training loss it reports after local training (FedCLS's loss modes too:
:class:`~flplat.api.LossAwareSelection`); with ρ = 1 the losses are not needed and not evaluated. Clusters,
latencies and losses are the method's state (:class:`HaccsState`: ``group``, ``latency``, ``loss``). The paper's
differentially private histogram estimation is not simulated: the label counts clients report are used as they
are.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from flplat.api import (
    LOSS_MODES,
    LossAwareSelection,
    SelectionState,
    hellinger,
    num_selected,
    param_choice,
    param_out_of_range,
    register_algorithm,
    round_robin,
    sample_proportional,
)


def hellinger_optics(label_counts: np.ndarray, min_samples: int = 2, xi: float = 0.05,
                     max_eps: float = 0.5) -> np.ndarray:
    """Cluster ids (0..G-1) of OPTICS on the pairwise Hellinger distances of the clients' label pmfs;
    noise points (and everyone when K < min_samples) become singleton clusters, numbered after the others."""
    from sklearn.cluster import OPTICS

    c = np.asarray(label_counts, dtype=np.float64)
    tot = c.sum(axis=1, keepdims=True)
    p = np.divide(c, tot, out=np.zeros_like(c), where=tot > 0)
    if len(p) < max(2, min_samples):
        return np.arange(len(p))
    dist = hellinger(p[:, None, :], p[None, :, :])
    np.fill_diagonal(dist, 0.0)
    # identical histograms give zero reachabilities (0/0 ratios); no pair within max_eps: all noise, as meant
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        optics = OPTICS(min_samples=min_samples, xi=xi, max_eps=max_eps, metric="precomputed")
        labels = optics.fit(dist).labels_.copy()
    noise = labels < 0
    labels[noise] = labels.max(initial=-1) + 1 + np.arange(noise.sum())
    return np.unique(labels, return_inverse=True)[1]


def simulate_latency(num_clients: int, fractions, multipliers, jitter: float, rng: np.random.Generator):
    """Per-client latency: tier t for a share ≈ fractions[t] of the (randomly permuted) clients, times
    multipliers[t] · exp(jitter · N(0, 1))."""
    f = np.asarray(fractions, dtype=np.float64)
    edges = np.cumsum(f) / f.sum()
    tier = np.minimum(np.searchsorted(edges, (np.arange(num_clients) + 0.5) / num_clients), len(f) - 1)
    tier = tier[rng.permutation(num_clients)]
    return np.asarray(multipliers, dtype=np.float64)[tier] * np.exp(jitter * rng.standard_normal(num_clients))


def cluster_scores(group: np.ndarray, latency: np.ndarray, loss: np.ndarray, rho: float) -> np.ndarray:
    """score_c = ρ (1 − l_c / max l) + (1 − ρ) · (mean loss of c) / Σ (mean losses); NaN losses count as 0."""
    g = int(group.max()) + 1
    lat_c = np.full(g, np.inf)
    np.minimum.at(lat_c, group, latency)
    size = np.bincount(group, minlength=g)
    mean_loss = np.bincount(group, weights=np.nan_to_num(loss, nan=0.0), minlength=g) / size
    share = mean_loss / mean_loss.sum() if mean_loss.sum() > 0 else np.full(g, 1.0 / g)
    return rho * (1.0 - lat_c / latency.max()) + (1.0 - rho) * share


@dataclass
class HaccsState(SelectionState):
    """The clients' OPTICS clusters ``group`` and simulated latencies ``latency`` (both (K,), fixed at the start)
    beside the known losses of :class:`~flplat.api.SelectionState`."""

    latency: np.ndarray | None = None


@register_algorithm
class HACCS(LossAwareSelection):
    name = "haccs"
    State = HaccsState
    columns = ("group", "latency", "loss")

    @dataclass(frozen=True)
    class Config:
        rho: float = 0.95  # latency vs loss trade-off ρ (Clust-PSI-PFL Table II grid: 0.1, 0.5, 0.95)
        min_samples: int = 2  # OPTICS min_samples
        xi: float = 0.05  # OPTICS xi (steepness that delimits a cluster; scikit-learn's default)
        max_eps: float = 0.5  # OPTICS max_eps on the Hellinger distance (<= 1); see the module docstring
        tier_fractions: list[float] = field(default_factory=lambda: [0.6, 0.2, 0.14, 0.06])
        tier_latency: list[float] = field(default_factory=lambda: [1.0, 2.0, 4.0, 8.0])
        latency_jitter: float = 0.1  # σ of the lognormal factor on each client's tier latency
        losses: str = "all"  # all: evaluate every client each round | last: most recent known losses

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        def bad(key, allowed):
            param_out_of_range(section, cfg, key, allowed)

        if not 0.0 <= cfg.rho <= 1.0:
            bad("rho", "a number in [0, 1]")
        if not cfg.min_samples >= 2:
            bad("min_samples", "an integer >= 2")
        if not 0.0 < cfg.xi < 1.0:
            bad("xi", "a number in (0, 1)")
        if not cfg.max_eps > 0:
            bad("max_eps", "a number > 0 (1 or more: no limit)")
        f, lat = list(cfg.tier_fractions), list(cfg.tier_latency)
        if not f or min(f) < 0 or sum(f) <= 0:
            bad("tier_fractions", "a non-empty list of numbers >= 0 with a positive sum")
        if len(lat) != len(f) or min(lat) <= 0:
            bad("tier_latency", f"a list of {len(f)} numbers > 0 (one per tier_fractions entry)")
        if not cfg.latency_jitter >= 0:
            bad("latency_jitter", "a number >= 0")
        param_choice(section, cfg, "losses", LOSS_MODES)

    def init_state(self, init_weights, rng, ops):
        state = super().init_state(init_weights, rng, ops)
        c = self.cfg
        state.method.group = hellinger_optics(self.info.label_counts, int(c.min_samples), float(c.xi),
                                              float(c.max_eps))
        state.method.latency = simulate_latency(self.info.num_clients, list(c.tier_fractions),
                                                list(c.tier_latency), float(c.latency_jitter), rng)
        return state

    def select(self, state, rng, ops):
        group, latency = state.method.group, state.method.latency
        rho = float(self.cfg.rho)
        loss = self.current_losses(state, ops) if rho < 1 else np.zeros(len(group))
        score = cluster_scores(group, latency, loss, rho)
        order = sample_proportional(rng, score, len(score))
        ranked = [np.flatnonzero(group == g)[np.argsort(latency[group == g], kind="stable")]
                  for g in range(len(score))]
        return round_robin(order, ranked, num_selected(self.info.num_clients, self.info.client_fraction))
