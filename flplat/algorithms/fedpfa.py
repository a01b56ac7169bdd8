"""FedPFA — PFA, Liu, Guo & Chen, "PFA: Privacy-preserving Federated Adaptation for Effective Model
Personalization", WWW 2021 (the "FedPFA" baseline of DA-PFL, ref. [18]).

Our reading of PFA, as implemented here:

1. **Federated training** (rounds 1..``warmup_rounds``): plain FedAvg produces the federated model.
2. **Representation extraction** (end of round ``warmup_rounds``): every client feeds its training data through
   the federated model and reports, for each unit of a post-ReLU layer, the share of zero activations -- its
   sparsity vector (``ops.compute``, :func:`flplat.maths.fedpfa_similarity.activation_sparsity`). PFA's observation
   is that clients with similar data activate similar units, while the rates reveal little about the samples.
3. **Client grouping**: the server compares the sparsity vectors by Euclidean distance (the distance matrix is
   logged as an artifact) and groups similar clients. PFA derives groups from that similarity matrix; we group with
   K-means on the same vectors (Euclidean geometry), the number of groups chosen by the silhouette
   (:func:`flplat.maths.clustering.silhouette_kmeans`) unless ``num_groups`` fixes it.
4. **Group-wise federated adaptation** (the remaining rounds): every group starts from the federated model and is
   trained by FedAvg among its members; each client is evaluated with its group's model.

Config keys: ``warmup_rounds`` (federated rounds before grouping), ``layer`` (``features``: the penultimate
representation, post-ReLU in every model here; ``latent``: the flattened input of the first dense layer, i.e. the
last conv block), ``zero_eps`` (|a| <= eps counts as zero), ``num_groups`` (null: silhouette over
2..``max_groups``), ``n_init``. With ``warmup_rounds`` >= the number of rounds it is exactly FedAvg.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from flplat.api import (
    ClientPlan,
    ClusteredStrategy,
    ServerState,
    fedavg,
    fedavg_by_group,
    kmeans,
    param_choice,
    param_out_of_range,
    register_algorithm,
    silhouette_kmeans,
)
from flplat.maths.fedpfa_similarity import activation_sparsity, euclidean_distances

LAYERS = ("features", "latent")


@dataclass
class FedPFAState:
    """``seed``: of the grouping's K-means (a child of the server stream); once grouped, the clients' activation
    sparsity ``sparsity`` (K, units) and the grouping's ``silhouette`` (NaN: undefined or a fixed number)."""

    seed: int
    sparsity: np.ndarray | None = None
    silhouette: float = float("nan")


@register_algorithm
class FedPFA(ClusteredStrategy):
    name = "fedpfa"

    @dataclass(frozen=True)
    class Config:
        warmup_rounds: int = 5  # FedAvg rounds that produce the federated model before grouping
        layer: str = "features"  # features | latent: where the sparsity is measured
        zero_eps: float = 0.0  # |activation| <= eps counts as zero
        num_groups: int | None = None  # None: silhouette-selected
        max_groups: int | None = 20  # cap on the silhouette candidates (None: K - 1)
        n_init: int = 10

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        def bad(key, allowed):
            param_out_of_range(section, cfg, key, allowed)

        if cfg.warmup_rounds < 1:
            bad("warmup_rounds", "an integer >= 1")
        param_choice(section, cfg, "layer", LAYERS)
        if not cfg.zero_eps >= 0:
            bad("zero_eps", "a number >= 0")
        if cfg.num_groups is not None and cfg.num_groups < 1:
            bad("num_groups", "an integer >= 1 or null (silhouette)")
        if cfg.max_groups is not None and cfg.max_groups < 2:
            bad("max_groups", "an integer >= 2 or null (K - 1)")
        if cfg.n_init < 1:
            bad("n_init", "an integer >= 1")

    def init_state(self, init_weights, rng, ops):
        seed = int(rng.spawn(1)[0].integers(2**31 - 1))  # child stream: client sampling stays FedAvg's
        return ServerState(weights=init_weights.clone(), method=FedPFAState(seed=seed))

    def plan(self, state, client):
        return ClientPlan(weights=self.eval_weights(state, client))

    def _group(self, state, ops) -> None:
        cfg, K = self.cfg, self.info.num_clients

        def sparsity(view):  # client side: only the per-unit zero rates leave the client
            with view.autocast():
                acts = view.net.features(view.x) if cfg.layer == "features" else view.net.latent(view.x)
            return activation_sparsity(acts.float(), cfg.zero_eps)

        S = torch.stack(ops.compute([(k, state.weights) for k in range(K)], sparsity, "train")).double().numpy()
        rng = np.random.default_rng(state.method.seed)
        if cfg.num_groups is None:
            res = silhouette_kmeans(S, k_max=cfg.max_groups, n_init=cfg.n_init, rng=rng)
            labels, sil = res.labels, res.silhouette
        else:
            labels, _ = kmeans(S, min(cfg.num_groups, K), int(rng.integers(2**31 - 1)), cfg.n_init)
            sil = float("nan")
        tau = int(labels.max()) + 1
        state.clusters = state.weights.clone().repeat(tau, 1)
        state.assignment = labels
        state.method.sparsity, state.method.silhouette = S, sil

    def aggregate(self, state, results, ops):
        if state.assignment is None:
            state.weights = fedavg(results)
            if state.round >= self.cfg.warmup_rounds:
                self._group(state, ops)
        else:
            state.clusters = fedavg_by_group(results, [state.assignment[r.client] for r in results], state.clusters)
        return state

    def global_weights(self, state):
        return state.weights if state.assignment is None else None

    def round_metrics(self, state):
        out = super().round_metrics(state)
        if np.isfinite(state.method.silhouette):
            out["silhouette"] = float(state.method.silhouette)
        return out

    def artifacts(self, state):
        out = super().artifacts(state)
        if state.method.sparsity is not None:
            D = euclidean_distances(state.method.sparsity)
            out["clustering/sparsity_distances.csv"] = "\n".join(",".join(f"{v:.6g}" for v in row) for row in D) + "\n"
        return out
