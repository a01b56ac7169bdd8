"""The mixture-of-components machinery FedEM and FedRC share (FedEM's Algorithm 1; FedRC's robust clustering).

M component models shared by all clients (``state.clusters``, ``(M, P)``) and per-client mixture weights π_t (a
``(K, M)`` array in the method's state, :class:`MixtureState`, uniform at start). Per round each sampled client t
runs an E-step -- responsibilities q_t(z_i = m) ∝ π_tm exp(−ℓ_m(i)) from the per-sample losses of all M components
(one batched pass, :mod:`flplat.blocks.multimodel`), π_t ← their mean over its samples -- and an M-step: every
sample is given to one component drawn from q_t(·| i) with the server rng (:func:`draw_components`) and component m
trains E epochs on its samples through the ordinary client loop (one job per (client, component),
``Strategy.plan_round``; a component with fewer than ``min_component_samples`` draws is not trained there and
contributes θ_m unchanged). The server averages each component over the sampled clients with weights n_t
(``aggregation: samples``) or the responsibility masses Σ_i q_t(z_i = m) (``responsibility``). All M models are
downloaded (counted in ``bytes_down``).

Evaluation: each client uses its component of largest π_tm (``assignment``); the mixture predictor
Σ_m π_tm p(y | x; θ_m) is scored on every client's test split each round as ``mixture_accuracy`` (``mixture_eval``).

A subclass gives ``name``, its ``Config`` (with the key :attr:`MixtureStrategy.m_key` holding M, and
``min_component_samples``, ``aggregation``, ``mixture_eval``) and may change the prior of the E-step
(:meth:`MixtureStrategy.log_prior`: FedRC divides by each component's label marginal) and its state class.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import torch

from flplat.blocks.aggregation import weighted_mean
from flplat.blocks.multimodel import mixture_correct, random_models, responsibilities, sample_losses, stacked_logits
from flplat.protocol.seeding import derive_seed
from flplat.protocol.state import ServerState
from flplat.protocol.strategy import ClientPlan, ClusteredStrategy, sample_uniform, true_m

__all__ = ["AGGREGATIONS", "MixtureState", "MixtureStrategy", "draw_components"]

AGGREGATIONS = ("samples", "responsibility")


def _losses_and_labels(models):
    def fn(view):
        with view.autocast():
            return sample_losses(view.net, view.layout, models, view.x, view.y).cpu(), view.y.cpu()

    return fn


def _mixture_fn(models, pi):
    def fn(view):
        with view.autocast():
            logits = stacked_logits(view.net, view.layout, models, view.x)
        return (mixture_correct(logits, pi[view.client], view.y) if len(view.y) else 0), len(view.y)

    return fn


def draw_components(q: torch.Tensor, rng: np.random.Generator) -> np.ndarray:
    """z_i ~ Categorical(q[:, i]) for the (M, n) responsibilities (inverse-CDF with one uniform per sample)."""
    cdf = np.cumsum(q.numpy(), axis=0)
    u = rng.random(q.shape[1]) * cdf[-1]
    return np.minimum((cdf < u[None, :]).sum(axis=0), q.shape[0] - 1)


@dataclass
class MixtureState:
    """``pi``: (K, M) mixture weights π_t; ``mass``: (K, M) responsibility masses Σ_i q_t(z_i = m) (n_t / M at
    start); ``mixture_accuracy``: the mixture predictor's last test accuracy (None before it is scored)."""

    pi: np.ndarray
    mass: np.ndarray
    mixture_accuracy: float | None = None


class MixtureStrategy(ClusteredStrategy):
    """FedEM's rounds (see the module docstring); ``m_key`` names the config key holding M."""

    m_key: ClassVar[str] = "num_components"
    State: ClassVar[type[MixtureState]] = MixtureState

    def __init__(self, cfg, info):
        k = self.m_key
        super().__init__(replace(cfg, **{k: true_m(getattr(cfg, k), info, f"algorithm.{k}")}), info)

    @property
    def num_models(self) -> int:
        return int(getattr(self.cfg, self.m_key))

    def init_state(self, init_weights, rng, ops):
        k, m = self.info.num_clients, self.num_models
        state = ServerState(clusters=random_models(init_weights, self.info.layout, m, rng),
                            assignment=np.zeros(k, dtype=np.int64))
        state.method = self.State(pi=np.full((k, m), 1.0 / m),
                                  mass=self.info.num_samples[:, None] / m * np.ones((1, m)))  # Σ_i q_t(z_i = m)
        self._jobs: list[tuple[int, int, np.ndarray]] = []  # this round's (client, component, indices)
        self._chosen: list[int] = []
        return state

    def log_prior(self, state, client: int, y: torch.Tensor) -> torch.Tensor:
        """log π_t as (M,) (FedRC adds a per-sample label term)."""
        return torch.as_tensor(np.log(np.maximum(state.method.pi[client], 1e-300)))

    def e_step(self, state, clients, ops) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(q, y) per client: the responsibilities (M, n) and its labels; updates π (and the masses)."""
        out = ops.compute([(int(c), None) for c in clients], _losses_and_labels(state.clusters), "train",
                          seed=derive_seed(0, "estep", state.round))
        qs = []
        for c, (losses, y) in zip(clients, out):
            q = responsibilities(losses, self.log_prior(state, int(c), y))
            if q.shape[1]:
                state.method.pi[c] = q.mean(dim=1).numpy()
                state.method.mass[c] = q.sum(dim=1).numpy()
            qs.append((q, y))
        return qs

    def select(self, state, rng, ops):
        chosen = sample_uniform(self.info.num_clients, self.info.client_fraction, rng)
        self._jobs, self._chosen = [], [int(c) for c in chosen]
        if self.num_models == 1:  # q ≡ 1: every sample trains the single model (FedAvg)
            self._jobs = [(int(c), 0, self.info.train_indices(int(c))) for c in chosen]
            return chosen
        for c, (q, _) in zip(chosen, self.e_step(state, chosen, ops)):
            z = draw_components(q, rng)
            idx = self.info.train_indices(int(c))
            for m in range(self.num_models):
                if (z == m).sum() >= self.cfg.min_component_samples:
                    self._jobs.append((int(c), m, idx[z == m]))
        state.assignment = state.method.pi.argmax(axis=1)
        return chosen

    def plan(self, state, client):
        """A single job for ``client`` (when one is asked for outside the round): its component of largest π on
        its whole train split. The round's M-step jobs come from :meth:`plan_round`."""
        return ClientPlan(weights=state.clusters[int(state.method.pi[client].argmax())])

    def plan_round(self, state, clients):
        jobs, first = [], set()
        size = state.clusters[0].numel() * state.clusters.element_size()
        trained = {c: sum(1 for j in self._jobs if j[0] == c) for c in clients}
        for c, m, idx in self._jobs:
            extra = 0 if c in first else (self.num_models - trained[c]) * size  # the other models it received
            first.add(c)
            jobs.append((c, ClientPlan(weights=state.clusters[m], indices=idx, extra_bytes_down=extra)))
        return jobs

    def aggregate(self, state, results, ops):
        if not results:
            return state
        clients = self._chosen  # a sampled client without a job for m contributes θ_m unchanged
        if self.cfg.aggregation == "samples":
            coef = np.repeat(self.info.num_samples[clients].astype(float)[:, None], self.num_models, axis=1)
        else:
            coef = state.method.mass[clients]
        row = {c: i for i, c in enumerate(clients)}
        trained = {(c, m): r for (c, m, _), r in zip(self._jobs, results)}
        clusters = state.clusters.clone()
        for m in range(self.num_models):
            w = torch.stack([trained[(c, m)].weights if (c, m) in trained else state.clusters[m] for c in clients])
            cm = torch.as_tensor(coef[[row[c] for c in clients], m], dtype=w.dtype, device=w.device)
            if cm.sum() > 0:
                clusters[m] = weighted_mean(w, cm)
        state.clusters = clusters
        if self.cfg.mixture_eval:
            pi = torch.as_tensor(state.method.pi, dtype=torch.float32)
            res = ops.compute([(k, None) for k in range(self.info.num_clients)], _mixture_fn(state.clusters, pi),
                              "test")
            correct, n = np.array(res, dtype=float).sum(axis=0)
            state.method.mixture_accuracy = correct / max(n, 1.0)
        return state

    def round_metrics(self, state):
        out = super().round_metrics(state)
        if state.method.mixture_accuracy is not None:
            out["mixture_accuracy"] = float(state.method.mixture_accuracy)
        return out
