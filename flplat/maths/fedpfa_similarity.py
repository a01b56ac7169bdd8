"""Privacy-preserving client representations from activation sparsity (PFA, Liu, Guo & Chen, WWW 2021, §4.1-4.2).

* :func:`activation_sparsity` -- a client's representation: for each unit (channel) of a post-ReLU layer, the share
  of its activations that are zero over the client's samples (and spatial positions for ``(B, C, H, W)`` maps).
  Only these rates leave the client, never the data.
* :func:`euclidean_distances` -- the matrix of Euclidean distances between clients' sparsity vectors, from which
  PFA judges which clients have similar data.
"""

from __future__ import annotations

import numpy as np
import torch


def activation_sparsity(acts: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """``(C,)`` share of entries with ``|a| <= eps`` per unit: dim 1 of ``(B, C)`` or ``(B, C, *spatial)`` tensors."""
    if acts.dim() < 2:
        raise ValueError(f"activations must be (B, C, ...), got shape {tuple(acts.shape)}")
    zero = (acts.abs() <= eps).float().transpose(0, 1).reshape(acts.shape[1], -1)
    return zero.mean(dim=1)


def euclidean_distances(S: np.ndarray) -> np.ndarray:
    """``(K, K)`` matrix ``||s_i - s_j||_2`` of the rows of ``S``."""
    S = np.asarray(S, dtype=np.float64)
    sq = (S ** 2).sum(1)
    return np.sqrt(np.maximum(sq[:, None] + sq[None, :] - 2 * S @ S.T, 0.0))
