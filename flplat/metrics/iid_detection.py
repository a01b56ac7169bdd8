"""Binary detection metrics, e.g. how well CBCC finds the IID clients (CAFA Tables II-III).

The positive class is "IID": with TP = IID clients predicted IID, FP = non-IID predicted IID, FN = IID predicted
non-IID and TN = the rest, ``accuracy = (TP + TN) / n``, ``precision = TP / (TP + FP)``, ``recall = TP / (TP + FN)``
and ``f1 = 2 TP / (2 TP + FP + FN)``. A ratio whose denominator is 0 is reported as 0 (scikit-learn's
``zero_division=0``), e.g. precision when nothing is predicted IID.
"""

from __future__ import annotations

import numpy as np


def detection_metrics(predicted: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """``accuracy``, ``precision``, ``recall``, ``f1`` and the counts ``tp``/``fp``/``fn``/``tn`` of boolean vectors."""
    p = np.asarray(predicted, dtype=bool).reshape(-1)
    t = np.asarray(truth, dtype=bool).reshape(-1)
    if p.shape != t.shape or p.size == 0:
        raise ValueError(f"predicted and truth must be non-empty and of equal length, got {p.size} and {t.size}")
    tp, fp = int((p & t).sum()), int((p & ~t).sum())
    fn, tn = int((~p & t).sum()), int((~p & ~t).sum())

    def ratio(a: int, b: int) -> float:
        return a / b if b else 0.0

    return {"accuracy": (tp + tn) / p.size, "precision": ratio(tp, tp + fp), "recall": ratio(tp, tp + fn),
            "f1": ratio(2 * tp, 2 * tp + fp + fn), "tp": tp, "fp": fp, "fn": fn, "tn": tn}
