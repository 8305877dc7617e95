"""One of two classes per causal set: ``y`` is 0 or 1, the model returns one logit per set."""

from __future__ import annotations

from typing import Sequence

import torch

from .base import OneLogitThresholded, positive_class_undefined
from .classification import ClassificationTask


class BinaryTask(OneLogitThresholded, ClassificationTask):
    """Outputs one logit per graph ``[graphs, 1]``; target: 0.0 / 1.0 ``[graphs, 1]`` (float); ``BCEWithLogits``;
    accuracy, precision, recall and F1 of the prediction ``sigmoid(logit) >= threshold``, and the weighted F1 of both
    classes."""

    summary = "one of two classes per graph: y 0 or 1, one logit, binary_cross_entropy_with_logits"
    reports = {"loss": "min", "accuracy": "max", "precision": "max", "recall": "max", "f1": "max", "weighted_f1": "max"}
    def __init__(self, threshold: float = 0.5, class_names: Sequence[str] = ()):
        super().__init__(2, 1, class_names)
        self.threshold = threshold

    def positive_scores(self, outputs):
        return torch.sigmoid(outputs.view(-1))

    def target_problem(self, y):
        problem = self._one_value(y)
        if problem is None and float(y) not in (0.0, 1.0):
            return f"a {self.type} task needs y = 0 or 1, got {y.item()}"
        return problem

    def metrics(self, totals):
        result = super().metrics(totals)
        (tn, fp), (fn, tp) = result["confusion"]
        # No predicted (or no true) positives: precision (recall) is 0, as scikit-learn's zero_division=0.
        result.update(precision=tp / (tp + fp) if tp + fp else 0.0, recall=tp / (tp + fn) if tp + fn else 0.0,
                      f1=2 * tp / (2 * tp + fp + fn) if tp else 0.0)
        return result

    def undefined(self, metrics):
        confusion = metrics.get("confusion")
        return {**positive_class_undefined(self, confusion), **super().undefined(metrics)} if confusion else {}

    def describe(self) -> str:
        return f"binary ({' / '.join(self.class_names)}), threshold {self.threshold}"
