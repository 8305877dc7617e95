"""The vocabulary of a classifier's result, shared by the run, ``evaluate``, the baselines and the studies.

With 7 of QuantumGrav.jl's 9 kinds not manifold-like, calling every set "not manifold-like" scores an accuracy of
7/9 = 0.78 (0.68 weighted F1 on the test splits here): accuracy and weighted F1 reward the majority. Beside them,
the **balanced accuracy** (the mean of the recalls of the classes present: 1/2 for calling everything one class of
two) and, for two classes, the **ROC-AUC** (how well the model's score ranks the sets of class 1 above those of
class 0, whatever the threshold: 1/2 for a constant score) say what was learned.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def classification_metrics(truth: np.ndarray, predicted: np.ndarray, num_classes: int | None = None,
                           positive_score: np.ndarray | None = None) -> dict[str, Any]:
    """The classification vocabulary shared by the run, ``evaluate`` and the studies: accuracy, balanced accuracy
    (the mean recall over the classes: 1/2 for calling everything one class of two), weighted F1, per-class recall
    and F1, and for two classes with ``positive_score`` (a score that ranks class 1 above class 0) the ROC-AUC; None
    where a metric is undefined (ROC-AUC with one class present)."""
    from sklearn.metrics import accuracy_score, f1_score, recall_score, roc_auc_score

    labels = list(range(num_classes if num_classes is not None else int(max(truth.max(), predicted.max())) + 1))
    recall = recall_score(truth, predicted, labels=labels, average=None, zero_division=0.0)
    present = np.unique(truth)
    metrics = {"accuracy": float(accuracy_score(truth, predicted)),
               "balanced_accuracy": float(np.mean(recall[present])),
               "per_class_recall": [float(r) for r in recall],
               "per_class_f1": [float(f) for f in f1_score(truth, predicted, labels=labels, average=None,
                                                           zero_division=0.0)],
               "weighted_f1": float(f1_score(truth, predicted, labels=labels, average="weighted", zero_division=0.0))}
    if len(labels) == 2 and positive_score is not None:
        metrics["roc_auc"] = float(roc_auc_score(truth, positive_score)) if len(present) == 2 else None
    return metrics
