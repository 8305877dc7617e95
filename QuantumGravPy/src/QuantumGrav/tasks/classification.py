"""The family of tasks with one class per causal set (``multiclass``, ``binary``): their totals are the confusion
matrix, their metrics the accuracy, the F1 of each class and their mean weighted by the classes' sets."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, Sequence

import torch

from .base import Task


class ClassificationTask(Task):
    """Totals: loss sum, count, then the confusion matrix (true x predicted), flattened."""

    def __init__(self, num_classes: int, output_width: int, class_names: Sequence[str] = ()):
        names = list(class_names) if len(class_names) == num_classes else [str(i) for i in range(num_classes)]
        super().__init__(output_width, names)
        self.num_classes = num_classes
        self.num_totals = 2 + num_classes**2

    @abstractmethod
    def predict(self, outputs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def predicted(self, outputs: torch.Tensor) -> torch.Tensor:
        return self.predict(outputs)

    def target_problem(self, y: Any) -> str | None:
        problem = self._one_value(y)
        if problem:
            return problem
        if y.is_floating_point() or y.is_complex():
            return f"a {self.type} task needs an integer class index in y, got dtype {y.dtype}"
        if not 0 <= int(y) < self.num_classes:
            return f"y = {int(y)} is not a class index of the {self.num_classes} classes (0..{self.num_classes - 1})"
        return None

    def batch_totals(self, outputs, target, loss):
        true = target.view(-1).long()
        predicted = self.predict(outputs)
        k = self.num_classes
        confusion = torch.bincount(true * k + predicted, minlength=k * k).double()
        head = torch.stack([loss.detach().double() * true.numel(), torch.tensor(float(true.numel()),
                                                                               device=outputs.device).double()])
        return torch.cat([head, confusion])

    def _confusion(self, totals: torch.Tensor) -> list[list[int]]:
        k = self.num_classes
        return totals[2:].round().long().view(k, k).tolist()

    def metrics(self, totals: torch.Tensor) -> dict[str, Any]:
        loss_sum, count = totals[0].item(), totals[1].item()
        confusion = self._confusion(totals)
        correct = sum(confusion[i][i] for i in range(self.num_classes))
        per_class_f1, weighted_f1 = f1_scores(confusion)
        return {"loss": loss_sum / max(count, 1.0), "accuracy": correct / max(count, 1.0), "count": int(count),
                "confusion": confusion, "per_class_f1": per_class_f1, "weighted_f1": weighted_f1}

    def undefined(self, metrics: dict[str, Any]) -> dict[str, str]:
        """The F1 of a class that no set is and none was predicted as (``per_class_f1.<class>``)."""
        confusion = metrics.get("confusion")
        if confusion is None:
            return {}
        names = self.class_names or [str(k) for k in range(len(confusion))]
        return {f"per_class_f1.{name}": f"no set is {name}, and none was predicted {name}"
                for k, name in enumerate(names) if sum(confusion[k]) == 0 and sum(row[k] for row in confusion) == 0}

    def test_extras(self, test: dict[str, Any]) -> dict[str, Any]:
        return {"confusion_matrix": test["confusion"], "class_names": self.class_names,
                **({"per_class_f1": test["per_class_f1"]} if "per_class_f1" in test else {})}


def f1_scores(confusion: list[list[int]]) -> tuple[list[float], float]:
    """Each class's F1 (2 tp / (2 tp + fp + fn), 0 for a class never true nor predicted, as scikit-learn's
    zero_division=0) and their mean weighted by each class's true sets (scikit-learn's average="weighted",
    what upstream QuantumGrav reports), from a confusion matrix (true x predicted): exact under DDP."""
    k = len(confusion)
    true = [sum(confusion[i]) for i in range(k)]
    predicted = [sum(confusion[i][j] for i in range(k)) for j in range(k)]
    f1 = [2 * confusion[j][j] / (true[j] + predicted[j]) if confusion[j][j] else 0.0 for j in range(k)]
    return f1, sum(f * n for f, n in zip(f1, true)) / max(sum(true), 1)
