"""CAFA — Zhang, Wang, Li, Cardiff, Ranaweera, "Optimizing Federated Learning on Non-IID Data with Clustering and
Model Sharing" (Clustering and Accuracy-based Federated Aggregation, §III, Algorithm 1).

One global model. Before round 1, **CBCC** (§III-A): every client's class proportions v_i (Eqs. 1-2) are clustered
by K-means with the number of clusters k chosen by the mean silhouette over k = 2..n-1 (Eqs. 3-6; the shared
:func:`flplat.maths.clustering.silhouette_kmeans`, smallest k at the maximum); the largest cluster is the IID cluster
(Eq. 7) and each client's CBCC weight is its cluster's size fraction (Eq. 8). Each round, after local training,
**ABFA** (§III-B): every sampled client's model is evaluated on every sampled client's validation split (one
``ops.evaluate`` call with m x m requests) and its weight is its validation-size-weighted accuracy, normalised
(Eqs. 9-10). The global model is sum_i w^K_i w^A_i W_i / sum_j w^K_j w^A_j over the sampled clients (Eq. 11).
The maths are the pure functions of :mod:`flplat.maths.cafa_weights`.

Config keys (the paper's reading is the default):

* ``use_cbcc`` / ``use_abfa``: the ablations CBCC-only and ABFA-only (§V-C) switch one factor off.
* ``sample_weighting`` (False): also multiply by the client's training-set size n_i. Eq. 11 has no n_i; with both
  factors off and this on, CAFA is exactly FedAvg (tested).
* ``k``: a fixed number of clusters (the authors' public code); null: the silhouette search.
* ``max_clusters`` (null = n-1, the paper), ``n_init`` (K-means restarts), ``nonpositive_rule`` (every silhouette
  <= 0: ``one_cluster`` -> every client IID with weight 1, or ``argmax``) -- as in :mod:`flplat.maths.clustering`.
* ``abfa_split`` (``val``): the split the shared models are scored on (the paper: 20% validation). A federation
  where no client has that split (``partition.val_fraction=0``) is a ConfigError when ABFA is on (ABFA would
  silently become equal weights, i.e. CAFA would run as CBCC only). Rounds whose sampled clients have no samples
  on it, or where every model scores 0, give equal ABFA weights.

Model sharing sends each sampled model to the m-1 other sampled clients; that traffic is added to ``bytes_up``.
When the partition knows which clients are IID (``partition.name=cafa``), CBCC's detection accuracy, precision,
recall and F1 (Tables II-III) are logged with every round (``iid_detection_*``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from flplat.api import (
    NONPOSITIVE_RULES,
    ConfigError,
    ServerState,
    Strategy,
    detection_metrics,
    kmeans,
    param_choice,
    param_out_of_range,
    register_algorithm,
    silhouette_kmeans,
    stack,
    weighted_mean,
)
from flplat.maths.cafa_weights import abfa_weights, cbcc_weights, class_proportions

SPLITS = ("val", "train", "test")


@dataclass
class CAFAState:
    """CBCC (``use_cbcc``): the clients' weights ``cbcc_weight`` (K,), which are predicted IID ``predicted_iid``
    (K,), the clustering's ``silhouette`` and ``silhouette_by_k`` [(k, s), ...]; ABFA (``use_abfa``): the last
    round's weights ``abfa_weight`` (m,). None where the component is off or has not run."""

    cbcc_weight: np.ndarray | None = None
    predicted_iid: np.ndarray | None = None
    silhouette: float = float("nan")
    silhouette_by_k: list[tuple[int, float]] = field(default_factory=list)
    abfa_weight: np.ndarray | None = None


@register_algorithm
class CAFA(Strategy):
    name = "cafa"

    @dataclass(frozen=True)
    class Config:
        use_cbcc: bool = True  # cluster-size weights (Eq. 8)
        use_abfa: bool = True  # cross-evaluation accuracy weights (Eqs. 9-10)
        sample_weighting: bool = False  # multiply by n_i too (not in Eq. 11)
        k: int | None = None  # fixed number of clusters; None: silhouette over 2..max_clusters
        max_clusters: int | None = None  # None: n - 1 (the paper)
        n_init: int = 10  # K-means++ restarts per k
        nonpositive_rule: str = "one_cluster"  # one_cluster | argmax, when every silhouette <= 0
        abfa_split: str = "val"  # val | train | test: where the shared models are scored

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        def bad(key, allowed):
            param_out_of_range(section, cfg, key, allowed)

        if cfg.k is not None and cfg.k < 1:
            bad("k", "an integer >= 1 or null (silhouette search)")
        if cfg.max_clusters is not None and cfg.max_clusters < 2:
            bad("max_clusters", "an integer >= 2 or null (n - 1)")
        if cfg.n_init < 1:
            bad("n_init", "an integer >= 1")
        for key, allowed in (("nonpositive_rule", NONPOSITIVE_RULES), ("abfa_split", SPLITS)):
            param_choice(section, cfg, key, allowed)

    def __init__(self, cfg, info):
        super().__init__(cfg, info)
        split = cfg.abfa_split
        sizes = info.num_samples if split == "train" else info.split_samples.get(split)
        if cfg.use_abfa and sizes is not None and not np.sum(sizes) > 0:
            fix = "partition.val_fraction > 0" if split == "val" else f"partition.{split}_fraction > 0"
            raise ConfigError(f"algorithm.abfa_split={split!r}: no client has a {split} split, so ABFA cannot score "
                              f"the shared models; allowed: {fix}, another algorithm.abfa_split "
                              f"({', '.join(s for s in SPLITS if s != split)}), or algorithm.use_abfa=false")

    def init_state(self, init_weights, rng, ops):
        state = ServerState(weights=init_weights.clone(), method=CAFAState())
        if not self.cfg.use_cbcc:
            return state
        cfg, K = self.cfg, self.info.num_clients
        X = class_proportions(self.info.label_counts)
        sub = rng.spawn(1)[0]  # a child stream: the parent's client-sampling sequence stays FedAvg's
        if cfg.k is None:
            res = silhouette_kmeans(X, k_max=cfg.max_clusters, n_init=cfg.n_init, rng=sub,
                                    nonpositive=cfg.nonpositive_rule)
            labels, sil, curve = res.labels, res.silhouette, sorted(res.scores.items())
        else:
            if cfg.k > K:
                raise ValueError(f"algorithm.k={cfg.k} exceeds the number of clients K={K}")
            labels, _ = kmeans(X, cfg.k, int(sub.integers(2**31 - 1)), cfg.n_init)
            sil, curve = float("nan"), []
        w, is_iid, _ = cbcc_weights(labels)
        state.assignment = labels
        state.method = CAFAState(cbcc_weight=w, predicted_iid=is_iid, silhouette=sil, silhouette_by_k=curve)
        return state

    def _abfa(self, results, w: torch.Tensor, ops) -> np.ndarray:
        clients = [r.client for r in results]
        m = len(results)
        requests = [(j, w[i]) for i in range(m) for j in clients]  # model i on client j's split
        res = ops.evaluate(requests, self.cfg.abfa_split)
        correct = np.array([r.correct for r in res], dtype=np.float64).reshape(m, m)
        sizes = np.array([r.num_samples for r in res[:m]], dtype=np.float64)
        return abfa_weights(correct, sizes)

    def aggregate(self, state, results, ops):
        w, n = stack(results)
        factors = []
        if self.cfg.sample_weighting:
            factors.append(n.double().cpu().numpy())
        if self.cfg.use_cbcc:
            factors.append(state.method.cbcc_weight[[r.client for r in results]])
        if self.cfg.use_abfa:
            wa = self._abfa(results, w, ops)
            factors.append(wa)
            state.method.abfa_weight = wa
            model_bytes = w[0].numel() * w.element_size()
            for r in results:  # each model is shared with the m - 1 other sampled clients
                r.extra_bytes_up += (len(results) - 1) * model_bytes
        coef = np.prod(np.stack(factors), axis=0) if factors else np.ones(len(results))
        if not coef.sum() > 0:
            coef = np.ones(len(results))
        state.weights = weighted_mean(w, torch.as_tensor(coef, dtype=w.dtype, device=w.device))
        return state

    def round_metrics(self, state):
        out: dict[str, float] = {}
        st = state.method
        if st.abfa_weight is not None:
            out["abfa_weight_max"] = float(st.abfa_weight.max())
            out["abfa_weight_min"] = float(st.abfa_weight.min())
        if state.assignment is None:
            return out
        out["tau"] = float(state.assignment.max() + 1)
        out["iid_cluster_size"] = float(st.predicted_iid.sum())
        if np.isfinite(st.silhouette):
            out["silhouette"] = float(st.silhouette)
        if self.info.true_iid is not None:
            det = detection_metrics(st.predicted_iid, self.info.true_iid)
            out.update({f"iid_detection_{k}": float(det[k]) for k in ("accuracy", "precision", "recall", "f1")})
        return out

    def series(self, state):
        return {"silhouette_by_k": [(int(j), float(s)) for j, s in state.method.silhouette_by_k]}

    def artifacts(self, state):
        if state.assignment is None:
            return {}
        truth = self.info.true_iid
        st = state.method
        rows = [f"{k},{int(c)},{st.cbcc_weight[k]:.6g},{int(st.predicted_iid[k])},"
                + ("" if truth is None else str(int(truth[k]))) for k, c in enumerate(state.assignment)]
        return {"clustering/cbcc.csv": "client,cluster,cbcc_weight,predicted_iid,true_iid\n" + "\n".join(rows) + "\n"}
