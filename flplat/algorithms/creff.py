"""CReFF — Shang, Lu, Huang, Wang, "Federated Learning on Heterogeneous and Long-Tailed Data via Classifier
Re-training with Federated Features", IJCAI 2022 (§4, Algorithm 1).

Clients train the whole model as in FedAvg. In addition, each sampled client computes, with the global model it
received (w_t), the gradient of the mean cross-entropy of the classifier head for each class it holds, on the real
features of w_t's feature extractor (``ops.compute`` on the train split; :func:`class_head_gradients`). The server

1. averages the real gradients per class over the clients holding it, weighted by their class counts;
2. updates its federated features -- ``features_per_class`` learnable vectors per class, initialised N(0, 1) -- by
   ``match_steps`` SGD steps (``feature_lr``, ``feature_momentum``) that minimise the gradient-matching distance
   (sum over rows of 1 - cos, :func:`matching_distance`) between the gradients the same head w_t gets on the federated
   features and the aggregated real ones;
3. aggregates the client models with FedAvg into w_{t+1};
4. re-trains a copy of w_{t+1}'s classifier on the federated features (``retrain_steps`` mini-batch SGD steps of
   ``retrain_batch`` features, ``retrain_lr``). The global model with the re-trained classifier is the one evaluated
   (every client and the pooled test set).

Choices where the paper leaves room (config keys): ``send_retrained`` (False) -- whether next round starts from the
re-trained classifier; in our reading the re-trained classifier serves inference and training continues from the
FedAvg model. ``match_bias`` (False) -- dataset condensation's distance ignores bias gradients; True matches them
too. Classes that no sampled client holds this round keep their features. The per-class gradients travel up as
``C x C x (d + 1)`` floats per client (counted in ``bytes_up``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from flplat.api import ConfigError, EvalModels, ServerState, Strategy, fedavg, register_algorithm
from flplat.maths.creff_features import class_head_gradients, match_features, retrain_head


def _head_slices(layout) -> tuple[tuple[int, int, tuple], tuple[int, int, tuple] | None]:
    """Offsets and shapes of ``head.weight`` / ``head.bias`` in the flat vector."""
    out = {}
    for name, a, b, shape in zip(layout.names, layout.offsets[:-1], layout.offsets[1:], layout.shapes):
        if name in ("head.weight", "head.bias"):
            out[name] = (int(a), int(b), shape)
    if "head.weight" not in out:
        raise ValueError("CReFF needs a model with a linear `head` classifier (a SplitModel)")
    return out["head.weight"], out.get("head.bias")


@dataclass
class CReFFState:
    """``features``: the (C, features_per_class, d) federated features; ``eval``: the model with the re-trained
    classifier (what clients are scored with); ``seed``: of the re-training's batch order (plus the round);
    ``match_distance``: the gradient-matching distance of the last round (None before round 1)."""

    features: torch.Tensor
    eval: torch.Tensor
    seed: int
    match_distance: float | None = None


@register_algorithm
class CReFF(Strategy):
    name = "creff"
    eval_models = EvalModels("global", "global", "the global model with the re-trained classifier")
    multilabel_unsupported = "it re-trains the classifier on per-class federated features (one class per sample)"

    @dataclass(frozen=True)
    class Config:
        features_per_class: int = 100  # federated features per class
        match_steps: int = 100  # gradient-matching SGD steps per round
        feature_lr: float = 0.1  # learning rate of the federated features
        feature_momentum: float = 0.5
        retrain_steps: int = 300  # classifier re-training steps per round
        retrain_lr: float = 0.01
        retrain_batch: int = 32
        match_bias: bool = False  # include the bias gradient in the matching distance
        send_retrained: bool = False  # start next round from the re-trained classifier

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        for key in ("features_per_class", "retrain_batch"):
            if getattr(cfg, key) < 1:
                raise ConfigError(f"{section}.{key}={getattr(cfg, key)!r} is out of range; allowed: an integer >= 1")
        for key in ("match_steps", "retrain_steps"):
            if getattr(cfg, key) < 0:
                raise ConfigError(f"{section}.{key}={getattr(cfg, key)!r} is out of range; allowed: an integer >= 0")
        for key in ("feature_lr", "retrain_lr"):
            if not getattr(cfg, key) > 0:
                raise ConfigError(f"{section}.{key}={getattr(cfg, key)!r} is out of range; allowed: a number > 0")
        if not 0 <= cfg.feature_momentum < 1:
            raise ConfigError(f"{section}.feature_momentum={cfg.feature_momentum!r} is out of range; "
                              "allowed: a number in [0, 1)")

    def _head(self, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        (a, b, shape), bias = _head_slices(self.info.layout)
        return w[a:b].view(shape), None if bias is None else w[bias[0]:bias[1]].view(bias[2])

    def init_state(self, init_weights, rng, ops):
        W, _ = self._head(init_weights)
        C, d = self.info.num_classes, W.shape[1]
        sub = rng.spawn(1)[0]  # a child stream: the parent's client-sampling sequence stays FedAvg's
        feats = torch.as_tensor(sub.standard_normal((C, self.cfg.features_per_class, d)), dtype=torch.float32)
        return ServerState(weights=init_weights.clone(), method=CReFFState(features=feats, eval=init_weights.clone(),
                                                                           seed=int(sub.integers(2**31 - 1))))

    def aggregate(self, state, results, ops):
        cfg, C = self.cfg, self.info.num_classes
        W, b = self._head(state.weights)

        def real_gradients(view):  # client side, with the received global model
            return class_head_gradients(view.net.features(view.x), view.y, view.net.head.weight,
                                        view.net.head.bias, C)

        grads = ops.compute([(r.client, state.weights) for r in results], real_gradients, "train")
        dW = torch.stack([g[0] for g in grads])  # (m, C, C, d)
        db = torch.stack([g[1] for g in grads])
        n = torch.stack([g[2] for g in grads])  # (m, C)
        have = n.sum(0) > 0
        wts = n / n.sum(0).clamp(min=1.0)
        dW_real = torch.einsum("mc,mckd->ckd", wts, dW)
        db_real = torch.einsum("mc,mck->ck", wts, db)
        for r in results:
            r.extra_bytes_up += (dW[0].numel() + db[0].numel() + C) * 4
        with torch.enable_grad():
            feats, dist = match_features(state.method.features, dW_real, db_real, have, W.cpu(),
                                         None if b is None else b.cpu(), cfg.match_steps, cfg.feature_lr,
                                         cfg.feature_momentum, cfg.match_bias)
            new = fedavg(results)
            gen = torch.Generator().manual_seed(state.method.seed + state.round)
            W2, b2 = retrain_head(feats, *[None if t is None else t.cpu() for t in self._head(new)],
                                  cfg.retrain_steps, cfg.retrain_lr, cfg.retrain_batch, gen)
        retrained = new.clone()
        (a, e, _), bias = _head_slices(self.info.layout)
        retrained[a:e] = W2.reshape(-1).to(new.device)
        if bias is not None:
            retrained[bias[0]:bias[1]] = b2.reshape(-1).to(new.device)
        state.weights = retrained if cfg.send_retrained else new
        state.method.features, state.method.eval, state.method.match_distance = feats, retrained, dist
        return state

    def eval_weights(self, state, client):
        return state.method.eval

    def global_weights(self, state):
        return state.method.eval

    def round_metrics(self, state):
        d = state.method.match_distance
        return {} if d is None or not np.isfinite(d) else {"match_distance": float(d)}
