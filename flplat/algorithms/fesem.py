"""FeSEM — Long, Xie, Shen, Zhou, Wang, Jiang, "Multi-center federated learning: clients clustering for better
personalization", World Wide Web 26, 2023 (first as Xie et al., arXiv:2005.01026, 2020; the federated stochastic
EM "FeSEM"; Flux cites it as long2023multi).

K centres W̃_1..W̃_K (``num_clusters``). The objective is the multi-centre distance
Σ_i Σ_k r_ik n_i ‖W_i − W̃_k‖² between the clients' local models W_i and the centres, minimised alternately:

* local update: client i trains E epochs from the centre of its cluster W̃_{r_i};
* E-step (assignment by parameter distance): r_i = argmin_k ‖W_i − W̃_k‖₂ over the model parameters;
* M-step: W̃_k = Σ_{i: r_i = k} n_i W_i / Σ_{i: r_i = k} n_i (a centre without a member this round keeps its model).

``em_iters`` E/M alternations are run per round on the participants' models (1: the paper's one step per round;
more: k-means on the round's models started from the current centres). Only the centre a client is assigned to
travels back to it.

Initialisation (``init``): ``clients`` (default) — in round 1 all clients train from the run's initial model and
the centres are K distinct participants' models drawn at random (Forgy, as in k-means); ``random`` — K random
initialisations drawn from the server rng (with them every trained model tends to stay nearest the centre it
started from). A client not yet assigned (not sampled so far) trains from and is evaluated with the centre of
the largest cluster (the paper assumes full participation).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from flplat.api import (
    TRUE_M,
    ClientPlan,
    ClusteredStrategy,
    ConfigError,
    ServerState,
    derive_seed,
    param_choice,
    random_models,
    register_algorithm,
    stack,
    true_m,
)

INITS = ("clients", "random")


@dataclass
class FeSEMState:
    """``seed``: drawn from the server rng at the start, seeds the Forgy pick of the first centres."""

    seed: int


def nearest_center(w: torch.Tensor, centers: torch.Tensor) -> np.ndarray:
    """argmin_k ‖w_i − c_k‖₂ for the rows of ``w`` (m, P) and ``centers`` (K, P); ties go to the lower k."""
    return torch.cdist(w.double(), centers.double()).argmin(dim=1).cpu().numpy()


def weighted_kmeans_step(w: torch.Tensor, n: torch.Tensor, centers: torch.Tensor,
                         mask: torch.Tensor | None = None) -> tuple[np.ndarray, torch.Tensor]:
    """One E/M step: assignment by distance (on the ``mask`` entries), then the n-weighted mean of each cluster's
    rows (whole vectors); an empty cluster keeps its centre."""
    sel = slice(None) if mask is None else mask
    r = nearest_center(w[:, sel], centers[:, sel])
    out = centers.clone()
    for k in np.unique(r):
        idx = torch.as_tensor(np.flatnonzero(r == k), device=w.device)
        out[int(k)] = (n[idx] / n[idx].sum()) @ w[idx]
    return r, out


@register_algorithm
class FeSEM(ClusteredStrategy):
    name = "fesem"

    @dataclass(frozen=True)
    class Config:
        num_clusters: int = 2  # K; 0: the partition's true M (Flux App. E.1)
        em_iters: int = 1  # E/M alternations per round on the participants' models
        init: str = "clients"  # clients: K random participants' models after round 1 | random

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        if cfg.num_clusters < 0:
            raise ConfigError(f"{section}.num_clusters={cfg.num_clusters!r} is out of range; allowed: an integer >= 1, "
                              f"or {TRUE_M}")
        if cfg.em_iters < 1:
            raise ConfigError(f"{section}.em_iters={cfg.em_iters!r} is out of range; allowed: an integer >= 1")
        param_choice(section, cfg, "init", INITS)

    def __init__(self, cfg, info):
        super().__init__(replace(cfg, num_clusters=true_m(cfg.num_clusters, info, "algorithm.num_clusters")), info)

    def init_state(self, init_weights, rng, ops):
        state = ServerState(weights=init_weights.clone(), assignment=np.full(self.info.num_clients, -1, np.int64))
        state.method = FeSEMState(seed=int(rng.integers(2**31)))
        if self.cfg.init == "random":
            state.clusters = random_models(init_weights, self.info.layout, self.cfg.num_clusters, rng)
        return state

    def unassigned_weights(self, state) -> torch.Tensor:
        """The model of an unassigned client: the largest cluster's centre (the initial model before any)."""
        if state.clusters is None:
            return state.weights
        counts = np.bincount(state.assignment[state.assignment >= 0], minlength=state.clusters.shape[0])
        return state.clusters[int(counts.argmax())]

    def plan(self, state, client):
        return ClientPlan(weights=self.eval_weights(state, client))

    def aggregate(self, state, results, ops):
        if not results:
            return state
        w, n = stack(results)
        clients = np.array([r.client for r in results])
        if state.clusters is None:  # Forgy initialisation from this round's models
            rng = np.random.default_rng(derive_seed(state.method.seed, "init", state.round))
            pick = rng.choice(len(results), size=min(self.cfg.num_clusters, len(results)), replace=False)
            centers = w[torch.as_tensor(np.sort(pick), device=w.device)]
            if centers.shape[0] < self.cfg.num_clusters:  # fewer participants than K: random further centres
                extra = random_models(state.weights, self.info.layout, self.cfg.num_clusters - centers.shape[0] + 1,
                                      rng)[1:]
                centers = torch.cat([centers, extra.to(w.device)])
            state.clusters = centers
        mask = self.info.layout.mask("", params_only=True).to(w.device)
        centers = state.clusters
        for _ in range(self.cfg.em_iters):
            r, centers = weighted_kmeans_step(w, n, centers, mask)
        state.clusters = centers
        state.assignment[clients] = r
        return state
