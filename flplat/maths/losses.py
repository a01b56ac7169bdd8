"""The per-sample loss and correctness every training loop and scorer shares: cross-entropy and argmax on class
indices y (B,), or -- multi-label data (CheXpert), y float (B, C) of 0/1 -- binary cross-entropy on the logits and
exact match of every label's prediction (logit > 0). Flux App. B.2: "All models are trained using cross-entropy
loss, except on CheXpert, where a binary cross-entropy loss is used due to the multi-label classification
setting." The loss of a multi-label sample is the mean over its C labels (``BCEWithLogitsLoss``'s default
reduction over a batch of one)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def task_loss(logits: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """The training/evaluation loss: cross-entropy on class indices, or -- multi-label data, y float (B, C) of 0/1 --
    binary cross-entropy on the logits, averaged over the C labels of a sample (``reduction`` then applies over
    samples, so ``"none"`` gives one value per sample either way)."""
    if y.dim() == 2:
        per = F.binary_cross_entropy_with_logits(logits.float(), y.float(), reduction="none").mean(1)
        return per if reduction == "none" else per.sum() if reduction == "sum" else per.mean()
    return F.cross_entropy(logits, y, reduction=reduction)


def hits(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample correctness: argmax == label, or -- multi-label -- every label's prediction (logit > 0) right."""
    if y.dim() == 2:
        return ((logits > 0) == (y > 0.5)).all(1)
    return logits.argmax(1) == y
