"""Critic evaluation metrics: VOC (GVL), negative-delta rate and done-detection AUC (docs/algorithms.md
§9)."""

from __future__ import annotations

import numpy as np


def voc(values: np.ndarray) -> float:
    """Value-order correlation: Spearman rho between predicted per-frame values (T,) and frame order.

    GVL (Ma et al. 2024): an expert demo's progress should rise with time, so VOC near 1; a reversed or
    failed episode should score lower. A constant curve has no order and scores 0 (not NaN).
    """
    from scipy.stats import spearmanr

    values = np.asarray(values, dtype=np.float64).reshape(-1)
    if len(values) < 2 or np.ptp(values) == 0:
        return 0.0
    return float(spearmanr(np.arange(len(values)), values).statistic)


def negative_delta_rate(deltas: np.ndarray, tol: float = 1e-3) -> float:
    """Share of consecutive-pair deltas (T-1,) below ``-tol``: how often the critic says 'going backwards'."""
    deltas = np.asarray(deltas, dtype=np.float64).reshape(-1)
    return float(np.mean(deltas < -tol)) if len(deltas) else 0.0


def done_auc(done_prob: np.ndarray, done_label: np.ndarray) -> float | None:
    """ROC AUC of the done head against 0/1 frame labels; None when only one class is present."""
    from sklearn.metrics import roc_auc_score

    labels = np.asarray(done_label).reshape(-1).astype(bool)
    if labels.all() or not labels.any():
        return None
    return float(roc_auc_score(labels, np.asarray(done_prob, dtype=np.float64).reshape(-1)))
