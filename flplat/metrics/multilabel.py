"""Multi-label metrics: macro ROC AUC, the metric Flux reports on CheXpert (App. F.4: "Since CheXpert is a
multi-label classification task, we use macro-averaged ROC AUC as the evaluation metric instead of accuracy").

``macro_auroc(scores, targets)`` is torchmetrics' per-label ROC AUC (``multilabel_auroc(..., average=None)``, the
per-label values of ``MultilabelAUROC(average="macro")``) averaged over the labels that have both a positive and a
negative target in the scored set. A label with only one class has no ROC curve; torchmetrics would count it as
0 (with a warning), which on a client's small test split (a rare finding absent) would drag the mean down for a
reason that has nothing to do with the model, so it is left out (as scikit-learn refuses it); NaN when no label
qualifies. Scores may be logits or probabilities (ROC AUC depends on their order only).

Where accuracy is reported for single-label data, a multi-label run reports (flplat/engine/orchestrator.py):
``global_auroc`` (the pooled test predictions of every client, each with the model it uses), ``mean_local_auroc``
(the unweighted mean of the clients' own AUROCs -- Flux's "known association" number is this mean, logged as
``known_association_auroc``), ``ad_auroc`` / ``sdad_auroc`` (Clust-PSI-PFL's AD / SDAD of §IV-A-e with a client's
AUROC in place of its accuracy: mean and population std of ``|AUROC_k - 1|``), ``global_test_auroc`` (one
global model on the pooled global test set), ``test_phase_auroc`` and ``val_auroc``. The ``*_accuracy`` keys keep
their meaning and are computed too: for multi-label data a sample counts as correct when every label's
prediction (logit > 0) is right (exact-match, or subset, accuracy).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torchmetrics.functional.classification import binary_auroc, multilabel_auroc

from flplat.metrics.evaluation import ad_sdad


def per_label_auroc(scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """ROC AUC of each label (C,), NaN where the label's targets are all 0 or all 1."""
    s, t = scores.detach().float().cpu(), targets.detach().cpu().round().long()
    c = s.shape[1]
    both = (t.sum(0) > 0) & (t.sum(0) < t.shape[0])
    out = torch.full((c,), float("nan"))
    if both.any():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the labels it warns about are the ones masked out here
            if c == 1:
                out[0] = binary_auroc(s[:, 0], t[:, 0]).float()
            else:
                out[both] = multilabel_auroc(s, t, num_labels=c, average=None).float()[both]
    return out


def macro_auroc(scores: torch.Tensor, targets: torch.Tensor) -> float:
    """Mean ROC AUC over the labels with both classes present (module docstring); NaN when none."""
    if scores.ndim != 2 or scores.shape != targets.shape:
        raise ValueError(f"scores {tuple(scores.shape)} and targets {tuple(targets.shape)} must both be (N, C)")
    if scores.shape[0] == 0:
        return float("nan")
    v = per_label_auroc(scores, targets)
    v = v[~torch.isnan(v)]
    return float(v.mean()) if v.numel() else float("nan")


def summarize_auroc(per_client: np.ndarray, scores: list[torch.Tensor], targets: list[torch.Tensor]
                    ) -> dict[str, float]:
    """``global_auroc`` (pooled predictions), ``mean_local_auroc``, ``ad_auroc``, ``sdad_auroc`` from the clients'
    AUROCs (NaN ones left out) and their test predictions."""
    a = np.asarray(per_client, dtype=np.float64)
    valid = a[~np.isnan(a)]
    ad, sdad = ad_sdad(a)
    pooled = (macro_auroc(torch.cat(scores), torch.cat(targets)) if scores and sum(len(s) for s in scores)
              else float("nan"))
    return {"global_auroc": pooled, "mean_local_auroc": float(valid.mean()) if valid.size else float("nan"),
            "ad_auroc": ad, "sdad_auroc": sdad}
