"""FedSoft — Ruan & Joe-Wong, "FedSoft: Soft Clustered Federated Learning with Proximal Local Updating",
AAAI 2022 (Algorithm 1).

S cluster models c_1..c_S (``num_clusters``). Every τ rounds (``tau``) each client k estimates its importance
weights u_ks = max(n_ks / n_k, σ), n_ks being the number of its samples for which c_s has the lowest loss and σ
(``sigma``) a smoother. The server forms v_sk = u_ks n_k / Σ_k u_ks n_k and, for every cluster s, draws
``clients_per_cluster`` clients ∝ v_sk (Table II's n; without replacement, at most the clients with v_sk > 0);
the round's participants are the union of these draws (the federation's client fraction is not used). Each
participant minimises the proximal objective

    h_k(w) = f_k(w) + (λ/2) Σ_s u_ks ‖w − c_s‖²                                      (Eq. 4, λ = ``lam``)

and the server sets c_s = Σ_{k∈S_s} u_ks n_k w_k / Σ_{k∈S_s} u_ks n_k over the clients S_s drawn for s.

The proximal term is one :class:`~flplat.api.ProximalTerm` around the mixture centre, exact for
the gradient: with U = Σ_s u_s and c̄ = Σ_s u_s c_s / U,

    Σ_s u_s ‖w − c_s‖² = U ‖w − c̄‖² + Σ_s u_s ‖c_s‖² − U ‖c̄‖²,

so (λ/2) Σ_s u_s ‖w − c_s‖² = (λU/2) ‖w − c̄‖² + const, i.e. ProximalTerm(c̄, μ = λU); only c̄ is sent down.

Importance estimation (Algorithm 1, line "estimate u_ks"): the server sends the S centres to every client; each
client computes the per-sample losses of all S centres on its train split in one batched pass
(``ops.compute`` with :func:`~flplat.api.losses_fn`, as IFCA and FedEM) and counts, for every s,
the samples n_ks whose smallest loss is under c_s; u_ks = max(n_ks / n_k, σ) (:func:`importance_weights`). A
client without training samples gets u_ks = 1/S. This broadcast (S models to each of the K clients) and the
S importance weights sent back are logged as ``importance_bytes_down`` / ``importance_bytes_up`` in the rounds
that estimate (0 otherwise); they are not part of ``bytes_down`` / ``bytes_up``, which count the training
traffic. Choices the paper leaves open, as config keys:

* ``selection``: ``importance`` (the paper's per-cluster draws) or ``uniform`` (the federation's client
  fraction q, every participant contributing to every cluster with weight u_ks n_k);
* ``local_start``: local training starts from the mixture centre c̄_k (``mixture``) or from the client's last
  personalised model w_k (``personal``; c̄_k until it has one);
* ``eval_model``: each client is scored with the cluster model of largest u_ks (``cluster``) or its own
  personalised model w_k (``personal``; the cluster model until it has one).

The centres are initialised as S independent draws from the model's initialisation distribution: c_1 is the
initial model, c_s (s > 1) permutes the entries of every parameter tensor of it (PyTorch initialises each tensor
i.i.d.), so the centres differ and argmin ties do not collapse every client onto c_1. Defaults: Clust-PSI-PFL's
setting (5 clusters, τ = 2, σ = 1e-4, λ = 0.1, n = 5).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from flplat.api import (
    ClientPlan,
    ClusteredStrategy,
    ConfigError,
    EvalModels,
    ProximalTerm,
    ServerState,
    derive_seed,
    losses_fn,
    param_choice,
    permuted_init,
    register_algorithm,
    sample_uniform,
    stack,
)

CHOICES = {"selection": ("importance", "uniform"), "local_start": ("mixture", "personal"),
           "eval_model": ("cluster", "personal")}


def importance_weights(losses: torch.Tensor, sigma: float) -> torch.Tensor:
    """u_s = max(share of samples whose lowest loss is under model s, σ) for a ``(..., S, n)`` loss table."""
    s, n = losses.shape[-2], losses.shape[-1]
    best = torch.nn.functional.one_hot(losses.argmin(dim=-2), s).to(torch.float64)  # (..., n, S)
    return (best.sum(dim=-2) / n).clamp_min(sigma)


def mixture_center(u: torch.Tensor, centers: torch.Tensor) -> tuple[torch.Tensor, float]:
    """(c̄, U): the u-weighted mean of the ``(S, P)`` centres and U = Σ_s u_s."""
    total = float(u.sum())
    return (u / total).to(centers.dtype) @ centers, total


@dataclass
class FedSoftState:
    """``importance``: (K, S) the importance weights u_ks last estimated (1/S at start); ``drawn``: (S, K) which
    clients this round's draw gave each cluster; ``importance_bytes``: the estimate's (down, up) traffic this round
    (0 in rounds that do not estimate)."""

    importance: np.ndarray
    drawn: np.ndarray
    importance_bytes: tuple[float, float] = (0.0, 0.0)


@register_algorithm
class FedSoft(ClusteredStrategy):
    name = "fedsoft"
    eval_models = ClusteredStrategy.eval_models  # eval_model=personal: set in __init__

    @dataclass(frozen=True)
    class Config:
        num_clusters: int = 5  # S
        tau: int = 2  # importance weights re-estimated every tau rounds
        sigma: float = 1e-4  # smoother: u_ks >= sigma
        lam: float = 0.1  # proximal coefficient λ
        clients_per_cluster: int = 5  # n: clients drawn per cluster (Clust-PSI-PFL grid: 5, 10, 50)
        selection: str = "importance"  # importance | uniform
        local_start: str = "mixture"  # mixture | personal
        eval_model: str = "cluster"  # cluster | personal

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        for key in ("num_clusters", "tau", "clients_per_cluster"):
            if getattr(cfg, key) < 1:
                raise ConfigError(f"{section}.{key}={getattr(cfg, key)!r} is out of range; allowed: an integer >= 1")
        for key in ("sigma", "lam"):
            if not getattr(cfg, key) >= 0:
                raise ConfigError(f"{section}.{key}={getattr(cfg, key)!r} is out of range; allowed: a number >= 0")
        for key, allowed in CHOICES.items():
            param_choice(section, cfg, key, allowed)

    def __init__(self, cfg, info):
        super().__init__(cfg, info)
        if cfg.eval_model == "personal":  # a client with a personal model is scored with it
            self.eval_models = EvalModels("personal", "cluster_ensemble", ClusteredStrategy.eval_models.note)

    @property
    def _personal(self) -> bool:
        return "personal" in (self.cfg.local_start, self.cfg.eval_model)

    def init_state(self, init_weights, rng, ops):
        k, s = self.info.num_clients, self.cfg.num_clusters
        centers = [init_weights.clone()] + [permuted_init(init_weights, self.info.layout, rng) for _ in range(s - 1)]
        state = ServerState(clusters=torch.stack(centers), assignment=np.zeros(k, dtype=np.int64))
        state.method = FedSoftState(importance=np.full((k, s), 1.0 / s), drawn=np.zeros((s, k), dtype=bool))
        if self._personal:
            state.personal = self.info.client_store()
        return state

    def estimate_importance(self, state, ops) -> None:
        """u_ks = max(n_ks / n_k, σ) from every client's per-sample losses of the S centres on its train split."""
        k, s = self.info.num_clients, state.clusters.shape[0]
        out = ops.compute([(c, None) for c in range(k)], losses_fn(state.clusters), "train",
                          seed=derive_seed(0, "fedsoft_importance", state.round))
        u = np.stack([importance_weights(o.double(), self.cfg.sigma).numpy() if o.shape[1]
                      else np.full(s, 1.0 / s) for o in out])  # (K, S)
        state.method.importance = u
        state.assignment = u.argmax(axis=1).astype(np.int64)
        w = state.clusters
        state.method.importance_bytes = (float(k * s * w[0].numel() * w.element_size()), float(k * s * 8))

    def select(self, state, rng, ops):
        cfg, k = self.cfg, self.info.num_clients
        state.method.importance_bytes = (0.0, 0.0)
        if (state.round - 1) % cfg.tau == 0:
            self.estimate_importance(state, ops)
        if cfg.selection == "uniform":
            chosen = sample_uniform(k, self.info.client_fraction, rng)
            drawn = np.zeros((cfg.num_clusters, k), dtype=bool)
            drawn[:, chosen] = True
        else:
            v = state.method.importance.T * self.info.num_samples[None, :]  # (S, K) ∝ v_sk
            drawn = np.zeros(v.shape, dtype=bool)
            for s, row in enumerate(v):
                m = min(cfg.clients_per_cluster, int((row > 0).sum()))
                drawn[s, rng.choice(k, size=m, replace=False, p=row / row.sum())] = True
        state.method.drawn = drawn
        return np.flatnonzero(drawn.any(axis=0))

    def plan(self, state, client):
        u = torch.as_tensor(state.method.importance[client])
        center, total = mixture_center(u, state.clusters)
        own = self.cfg.local_start == "personal" and state.personal.has(client)
        hooks = (ProximalTerm(center, self.cfg.lam * total),) if self.cfg.lam > 0 else ()
        return ClientPlan(weights=state.personal.get(client) if own else center, hooks=hooks)

    def aggregate(self, state, results, ops):
        if not results:
            return state
        w, n = stack(results)
        clients = np.array([r.client for r in results])
        u, drawn = state.method.importance, state.method.drawn
        coef = torch.as_tensor(u[clients].T * drawn[:, clients], dtype=w.dtype, device=w.device) * n  # (S, m)
        total = coef.sum(dim=1)
        hit = total > 0
        clusters = state.clusters.clone()  # clusters without a drawn participant keep their model
        clusters[hit] = (coef[hit] / total[hit, None]) @ w
        state.clusters = clusters
        if state.personal is not None:
            for r in results:
                state.personal.set(r.client, r.weights)
        return state

    def round_metrics(self, state):
        down, up = state.method.importance_bytes
        return {**super().round_metrics(state), "importance_bytes_down": down, "importance_bytes_up": up}

    def eval_weights(self, state, client):
        if self.cfg.eval_model == "personal" and state.personal.has(client):
            return state.personal.get(client)
        return super().eval_weights(state, client)
