"""CReFF's maths (Shang et al., "Federated Learning on Heterogeneous and Long-Tailed Data via Classifier
Re-training with Federated Features", IJCAI 2022, §4) as pure tensor functions.

The classifier is a linear head ``logits = f W^T + b`` on features f. For one class c with samples f_1..f_n:

* :func:`class_head_gradients` -- the gradient of the mean cross-entropy of the class's samples with respect to
  (W, b), in closed form: ``dW = (1/n) sum_i (softmax(f_i W^T + b) - e_c) f_i^T``, ``db = (1/n) sum_i (softmax - e_c)``.
  Clients compute it on real features of the global model's extractor; the server on its federated features
  (differentiably in the features).
* :func:`matching_distance` -- the gradient-matching distance of dataset condensation that CReFF uses: the sum over
  the rows r of the weight gradient (one per output class) of ``1 - cos(dW_syn[r], dW_real[r])``, plus the same
  for the bias vector when ``with_bias``.
* :func:`match_features` -- a few SGD steps on the federated features minimising the sum over classes of the
  distance between their synthetic gradient and the aggregated real one (only classes with a real gradient).
* :func:`retrain_head` -- the classifier re-training: mini-batch SGD of the cross-entropy of (W, b) on the
  federated features and their labels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def class_head_gradients(feats: torch.Tensor, y: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None,
                         num_classes: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dW (C, C, d), db (C, C), counts (C,))``: per-class mean-CE gradients of the head (zero for absent classes)."""
    logits = feats @ W.T + (b if b is not None else 0.0)
    err = torch.softmax(logits.float(), dim=1) - F.one_hot(y, logits.shape[1]).float()  # (B, C_out)
    onehot = F.one_hot(y, num_classes).float()  # (B, C)
    counts = onehot.sum(0)
    denom = counts.clamp(min=1.0)
    dW = torch.einsum("bc,bk,bd->ckd", onehot, err, feats.float()) / denom[:, None, None]
    db = (onehot.T @ err) / denom[:, None]
    return dW, db, counts


def matching_distance(dW_syn: torch.Tensor, dW_real: torch.Tensor, db_syn: torch.Tensor | None = None,
                      db_real: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    """Sum over the rows of ``1 - cos`` between synthetic and real weight gradients (``(..., C_out, d)``), plus
    ``1 - cos`` of the bias gradients (``(..., C_out)``) when given."""
    d = (1 - F.cosine_similarity(dW_syn, dW_real, dim=-1, eps=eps)).sum()
    if db_syn is not None and db_real is not None:
        d = d + (1 - F.cosine_similarity(db_syn, db_real, dim=-1, eps=eps)).sum()
    return d


def match_features(feats: torch.Tensor, dW_real: torch.Tensor, db_real: torch.Tensor, have: torch.Tensor,
                   W: torch.Tensor, b: torch.Tensor | None, steps: int, lr: float, momentum: float,
                   with_bias: bool) -> tuple[torch.Tensor, float]:
    """Update the federated features ``feats`` (C, M, d) by ``steps`` SGD steps on the matching distance of the
    classes in ``have`` (bool (C,)); returns the new features and the last distance."""
    feats = feats.detach().clone().requires_grad_(True)
    opt = torch.optim.SGD([feats], lr=lr, momentum=momentum)
    classes = torch.nonzero(have).reshape(-1)
    W, b = W.detach(), None if b is None else b.detach()
    C, M, d = feats.shape
    labels = torch.arange(C).repeat_interleave(M)
    dist = torch.zeros(())
    for _ in range(steps):
        dW, db, _ = class_head_gradients(feats.reshape(C * M, d), labels, W, b, C)
        dist = matching_distance(dW[classes], dW_real[classes], db[classes] if with_bias else None,
                                 db_real[classes] if with_bias else None)
        opt.zero_grad()
        dist.backward()
        opt.step()
    return feats.detach(), float(dist.detach())


def retrain_head(feats: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None, steps: int, lr: float,
                 batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``steps`` mini-batch SGD steps of the cross-entropy of the head (W, b) on the features (C, M, d)."""
    C, M, d = feats.shape
    x, y = feats.reshape(C * M, d).detach(), torch.arange(C).repeat_interleave(M)
    params = [t.detach().clone().requires_grad_(True) for t in ((W,) if b is None else (W, b))]
    opt = torch.optim.SGD(params, lr=lr)
    for _ in range(steps):
        idx = torch.randint(0, C * M, (min(batch_size, C * M),), generator=generator)
        logits = x[idx] @ params[0].T + (params[1] if b is not None else 0.0)
        loss = F.cross_entropy(logits, y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return params[0].detach(), None if b is None else params[1].detach()
