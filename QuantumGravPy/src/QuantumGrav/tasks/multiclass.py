"""One class of several per causal set: ``y`` is a class index, the model returns one logit per class and set."""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F

from .base import _named_rows
from .classification import ClassificationTask


class MulticlassTask(ClassificationTask):
    """Outputs ``[graphs, num_classes]`` logits; target: class indices ``[graphs]`` (long); cross-entropy; accuracy, the
    F1 of each class and their mean weighted by the classes' sets, and the confusion matrix."""

    summary = "one class of several per graph: y a class index, one logit per class, cross_entropy"
    reports = {"loss": "min", "accuracy": "max", "weighted_f1": "max"}
    default_loss = staticmethod(F.cross_entropy)
    softmax_outputs = True

    def __init__(self, num_classes: int, class_names: Sequence[str] = ()):
        super().__init__(num_classes, num_classes, class_names)

    @classmethod
    def for_data(cls, threshold: float, class_names: Sequence[str], dataset: Any) -> "MulticlassTask":
        declared = getattr(dataset, "num_classes", None)
        if isinstance(declared, int) and declared > 0:
            return cls(declared, class_names)
        return cls(int(max(int(item.y.reshape(-1)[0]) for item in dataset)) + 1, class_names)  # a list of Data

    @classmethod
    def from_model_io(cls, record: dict[str, Any], threshold: float) -> "MulticlassTask":
        return cls(len(record["class_names"]), record["class_names"])

    def target(self, y):
        return y.view(-1).long()

    def predict(self, outputs):
        return outputs.argmax(dim=-1)

    def scored_rows(self, outputs, targets):
        """The predicted class and its softmax probability."""
        scores = torch.softmax(outputs, dim=-1).max(dim=-1).values
        return _named_rows(self, targets.view(-1).tolist(), self.predict(outputs).tolist(), scores.tolist())

    def target_description(self) -> str:
        return "class indices [graphs] (long)"

    def describe(self) -> str:
        return f"{self.num_classes} classes: {', '.join(self.class_names)}"
