"""FedDrift — Jothimurugesan, Hsieh, Wang, Joshi, Gibbons, "Federated Learning under Distributed Concept Drift",
AISTATS 2023 (Algorithm 1, FedDrift with hierarchical clustering).

Loss-based clustering whose number of clusters changes during training. Each round every sampled client scores
all current cluster models on its train split (one batched pass, :func:`~flplat.api.model_losses`; all models are
downloaded and counted in ``bytes_down``), then:

* **creation** (drift detection): a client whose data no existing model fits gets a new cluster of its own,
  started from its best model. ``drift_rule``: ``increase`` (the paper's) — its loss under the model of its
  current cluster exceeds the loss it had when last scored by more than δ (``drift_threshold``);
  ``absolute`` — its lowest loss over all models exceeds δ;
* otherwise the client joins the cluster of lowest loss (among clusters trained at least once, or stays in its
  own untrained one);
* **merging**: with L_i(θ_j) the sample-weighted mean loss of cluster i's scored clients under model j, the
  cluster distance is D(i, j) = max(L_i(θ_j) − L_i(θ_i), L_j(θ_i) − L_j(θ_j), 0); the closest pair is merged while
  D < ``merge_threshold``, a merged cluster's distance to another being the larger of its parts' (hierarchical,
  complete linkage). The merged model is the average of the parts weighted by their members' sample counts.
  Only trained clusters with a scored client this round take part;
* each client trains its cluster's model; per-cluster FedAvg; clusters left without members are dropped.

Start (``init``): ``per_client`` (what Flux's comparison describes, App. E.1: one model per client, merged as the
losses allow) or ``single`` (the paper's start: one cluster). The paper's time steps are our rounds, with static
client data; its per-time-step data windows do not apply.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from flplat.api import (
    ClusteredStrategy,
    ConfigError,
    ServerState,
    fedavg_by_group,
    model_losses,
    param_choice,
    plan_with_all_models,
    register_algorithm,
    sample_uniform,
)
from flplat.maths.feddrift import cluster_losses, drift_distance, merge_groups

CHOICES = {"init": ("per_client", "single"), "drift_rule": ("increase", "absolute")}


@dataclass
class FedDriftState:
    """``trained``: (J,) whether cluster j's model has been trained; ``last_loss``: (K,) each client's loss under
    the model it used when last scored (NaN: never scored)."""

    trained: np.ndarray
    last_loss: np.ndarray


@register_algorithm
class FedDrift(ClusteredStrategy):
    name = "feddrift"

    @dataclass(frozen=True)
    class Config:
        init: str = "per_client"  # per_client (Flux App. E.1) | single (one cluster, the paper's start)
        drift_rule: str = "increase"  # increase (loss rose by > δ) | absolute (best loss > δ)
        drift_threshold: float = 0.5  # δ for creating a new cluster
        merge_threshold: float = 0.1  # merge clusters while D(i, j) < this
        eval_chunk: int = 512  # samples per batched pass of all models (memory bound)

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        for key, allowed in CHOICES.items():
            param_choice(section, cfg, key, allowed)
        for key in ("drift_threshold", "merge_threshold"):
            if not getattr(cfg, key) >= 0:
                raise ConfigError(f"{section}.{key}={getattr(cfg, key)!r} is out of range; allowed: a number >= 0")
        if cfg.eval_chunk < 1:
            raise ConfigError(f"{section}.eval_chunk={cfg.eval_chunk!r} is out of range; allowed: an integer >= 1")

    def init_state(self, init_weights, rng, ops):
        k = self.info.num_clients
        per_client = self.cfg.init == "per_client"
        state = ServerState(clusters=init_weights[None].repeat(k if per_client else 1, 1),
                            assignment=np.arange(k) if per_client else np.zeros(k, dtype=np.int64))
        state.method = FedDriftState(trained=np.zeros(state.clusters.shape[0], dtype=bool),
                                     last_loss=np.full(k, np.nan))
        return state

    def _scores(self, state, ops, clients) -> np.ndarray:
        return model_losses(state.clusters, ops, clients, state.round, self.cfg.eval_chunk)

    def select(self, state, rng, ops):
        chosen = sample_uniform(self.info.num_clients, self.info.client_fraction, rng)
        cfg = self.cfg
        loss = self._scores(state, ops, chosen)  # (m, J)
        trained = state.method.trained
        own = state.assignment[chosen]
        new_models, ref = [], np.empty(len(chosen), dtype=np.int64)  # ref: the scored model now used by client
        for i, k in enumerate(chosen):
            best = int(np.argmin(np.where(trained, loss[i], np.inf))) if trained.any() else int(own[i])
            if cfg.drift_rule == "increase":
                drift = loss[i, own[i]] > state.method.last_loss[k] + cfg.drift_threshold
            else:
                drift = trained.any() and loss[i, best] > cfg.drift_threshold
            ref[i] = own[i]
            if drift:
                ref[i] = int(np.argmin(loss[i]))
                new_models.append(state.clusters[ref[i]])
                state.assignment[k] = state.clusters.shape[0] + len(new_models) - 1
            elif trained[best] or best == own[i]:
                state.assignment[k] = ref[i] = best
        state.method.last_loss[chosen] = loss[np.arange(len(chosen)), ref]
        if new_models:
            state.clusters = torch.cat([state.clusters, torch.stack(new_models)])
            state.method.trained = np.concatenate([trained, np.zeros(len(new_models), dtype=bool)])
        self._merge(state, chosen, loss)
        self._compact(state)
        return chosen

    def _merge(self, state, chosen, loss) -> None:
        j = loss.shape[1]  # models that were scored (new ones are copies of scored ones and untrained)
        groups = state.assignment[chosen]
        scored = groups < j
        cl = cluster_losses(loss[scored], groups[scored], self.info.num_samples[chosen][scored].astype(float), j)
        idx = np.flatnonzero(state.method.trained[:j] & ~np.isnan(cl[:, 0]))  # clusters that can merge
        if len(idx) < 2:
            return
        labels = idx[merge_groups(drift_distance(cl[np.ix_(idx, idx)]), self.cfg.merge_threshold)]
        size = np.bincount(state.assignment, weights=self.info.num_samples, minlength=state.clusters.shape[0])
        for root in np.unique(labels):
            parts = idx[labels == root]
            if len(parts) > 1:
                wts = torch.as_tensor(size[parts] / size[parts].sum(), dtype=state.clusters.dtype,
                                      device=state.clusters.device)
                state.clusters[root] = wts @ state.clusters[torch.as_tensor(parts, device=state.clusters.device)]
                state.assignment[np.isin(state.assignment, parts)] = root

    def _compact(self, state) -> None:
        used = np.unique(state.assignment)
        if len(used) < state.clusters.shape[0]:
            state.clusters = state.clusters[torch.as_tensor(used, device=state.clusters.device)]
            state.method.trained = state.method.trained[used]
            state.assignment = np.searchsorted(used, state.assignment)

    def plan(self, state, client):
        return plan_with_all_models(state, client)

    def aggregate(self, state, results, ops):
        if results:
            groups = [int(state.assignment[r.client]) for r in results]
            state.clusters = fedavg_by_group(results, groups, state.clusters)
            state.method.trained[np.unique(groups)] = True
        return state
