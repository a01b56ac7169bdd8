"""FedEM — Marfoq, Neglia, Bellet, Kameni, Vidal, "Federated Multi-Task Learning under a Mixture of
Distributions", NeurIPS 2021 (Algorithm 1).

Each client's distribution is a mixture of M shared components: D_t = Σ_m π_tm D̃_m, with component models
θ_1..θ_M (``num_components``) shared by all clients and mixture weights π_t ∈ Δ^M kept per client (a (K, M)
array in ``state.extra["pi"]``, uniform at start). Per round, each sampled client t

* E-step (Eq. 10): q_t(z_i = m) ∝ π_tm exp(−ℓ(h_θm(x_i), y_i)) for each of its train samples i (per-sample losses
  of all M components in one batched pass, :func:`flplat.maths.multimodel.losses_fn`);
* π_tm ← (1/n_t) Σ_i q_t(z_i = m)  (Eq. 11);
* M-step: trains every component m from θ_m on the q-weighted loss (1/n_t) Σ_i q_t(z_i = m) ℓ(h_θ(x_i), y_i);

and the server sets θ_m = Σ_t n_t θ_m,t / Σ_t n_t over the sampled clients (Eq. 13).

The weighted local loss, as done here (choice): every sample i is given to one component z_i drawn from
q_t(·| i) with the server rng, and component m trains E epochs on its samples {i: z_i = m} through the ordinary
client loop (``Strategy.plan_round``: one job per (client, component)). In expectation each epoch's summed
gradient is Σ_i q_t(z_i = m) ∇ℓ_i, the paper's; the batch size and optimizer are the federation's. A component
that draws fewer than ``min_component_samples`` samples is not trained on that client (it contributes θ_m
unchanged, weighted as the paper's average prescribes). All M models are downloaded (counted in ``bytes_down``).

Evaluation: the paper's personalised predictor is the mixture Σ_m π_tm p(y | x; θ_m); it is scored each round
on every client's test split and logged as ``mixture_accuracy`` (``mixture_eval``). The platform's per-client
table, ``global_accuracy`` and the cluster metrics use one model per client: the component of largest π_tm
(``assignment``; τ = M). With M = 1 FedEM is FedAvg.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from flplat.api import (
    TRUE_M,
    ClientPlan,
    ClusteredStrategy,
    ServerState,
    derive_seed,
    register_algorithm,
    sample_uniform,
    true_m,
)
from flplat.errors import param_choice, param_out_of_range
from flplat.maths.aggregation import weighted_mean
from flplat.maths.multimodel import mixture_correct, random_models, responsibilities, sample_losses, stacked_logits

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


@register_algorithm
class FedEM(ClusteredStrategy):
    name = "fedem"
    m_key = "num_components"  # the config key holding M (FedRC: num_clusters)

    @dataclass(frozen=True)
    class Config:
        num_components: int = 3  # M; 0: the partition's true M (Flux App. E.1)
        min_component_samples: int = 2  # a component with fewer drawn samples is not trained on that client
        aggregation: str = "samples"  # server weights of client t for component m: samples (n_t) | responsibility
        mixture_eval: bool = True  # log the mixture predictor's test accuracy each round (mixture_accuracy)

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        if cfg.num_components < 0:
            param_out_of_range(section, cfg, "num_components", f"an integer >= 1, or {TRUE_M}")
        if cfg.min_component_samples < 1:
            param_out_of_range(section, cfg, "min_component_samples", "an integer >= 1")
        param_choice(section, cfg, "aggregation", AGGREGATIONS)

    def __init__(self, cfg, info):
        k = self.m_key
        super().__init__(replace(cfg, **{k: true_m(getattr(cfg, k), info, f"algorithm.{k}")}), info)

    @property
    def num_models(self) -> int:
        return self.cfg.num_components

    def init_state(self, init_weights, rng, ops):
        k, m = self.info.num_clients, self.num_models
        state = ServerState(clusters=random_models(init_weights, self.info.layout, m, rng),
                            assignment=np.zeros(k, dtype=np.int64))
        state.extra["pi"] = np.full((k, m), 1.0 / m)
        state.extra["mass"] = self.info.num_samples[:, None] / m * np.ones((1, m))  # Σ_i q_t(z_i = m)
        self._jobs: list[tuple[int, int, np.ndarray]] = []  # this round's (client, component, indices)
        self._chosen: list[int] = []
        return state

    def log_prior(self, state, client: int, y: torch.Tensor) -> torch.Tensor:
        """log π_t as (M,) (FedRC adds a per-sample label term)."""
        return torch.as_tensor(np.log(np.maximum(state.extra["pi"][client], 1e-300)))

    def e_step(self, state, clients, ops) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(q, y) per client: the responsibilities (M, n) and its labels; updates π (and the masses)."""
        out = ops.compute([(int(c), None) for c in clients], _losses_and_labels(state.clusters), "train",
                          seed=derive_seed(0, "estep", state.round))
        qs = []
        for c, (losses, y) in zip(clients, out):
            q = responsibilities(losses, self.log_prior(state, int(c), y))
            if q.shape[1]:
                state.extra["pi"][c] = q.mean(dim=1).numpy()
                state.extra["mass"][c] = q.sum(dim=1).numpy()
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
        state.assignment = state.extra["pi"].argmax(axis=1)
        return chosen

    def plan(self, state, client):
        """A single job for ``client`` (when one is asked for outside the round): its component of largest π on
        its whole train split. The round's M-step jobs come from :meth:`plan_round`."""
        return ClientPlan(weights=state.clusters[int(state.extra["pi"][client].argmax())])

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
            coef = state.extra["mass"][clients]
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
            pi = torch.as_tensor(state.extra["pi"], dtype=torch.float32)
            res = ops.compute([(k, None) for k in range(self.info.num_clients)], _mixture_fn(state.clusters, pi),
                              "test")
            correct, n = np.array(res, dtype=float).sum(axis=0)
            state.extra["mixture_accuracy"] = correct / max(n, 1.0)
        return state

    def round_metrics(self, state):
        out = super().round_metrics(state)
        if "mixture_accuracy" in state.extra:
            out["mixture_accuracy"] = float(state.extra["mixture_accuracy"])
        return out
