"""The family of tasks with a 0/1 label per output row below a set (an element, a pair of elements: ``node``,
``relation``) and one logit per row, thresholded after the sigmoid."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, Sequence

import torch

from .base import OneLogitThresholded, Task, positive_class_undefined


class RowBinaryTask(OneLogitThresholded, Task):
    """The common part of the node and the relation task (``min_rows`` is the fewest rows a set's ``y`` may hold).

    Its rivals are the row tasks' own (``analyses.node_rival``, ``analyses.relation_rival``): the baselines of the sets'
    invariants answer nothing about an element or a pair."""

    rivals = ()
    min_rows = 1

    def __init__(self, threshold: float = 0.5, class_names: Sequence[str] = ()):
        super().__init__(1, class_names)
        self.threshold = threshold

    def target_problem(self, y):
        if not isinstance(y, torch.Tensor):
            return f"y must be a tensor, got {type(y).__name__}"
        if y.dim() != 1 or y.numel() < self.min_rows:
            return self.shape_problem(y)
        values = set(torch.unique(y).tolist())
        if not values <= {0, 1}:
            return f"a {self.type} task needs y = 0 or 1 per {self.level.unit}, got {sorted(values - {0, 1})[:3]}"
        return None

    @abstractmethod
    def shape_problem(self, y: torch.Tensor) -> str:
        """What is wrong with the shape of one item's ``y``, in the task's words."""
        raise NotImplementedError

    def undefined(self, metrics: dict[str, Any]) -> dict[str, str]:
        confusion = metrics.get("confusion")
        return positive_class_undefined(self, confusion) if confusion is not None else {}

    def test_extras(self, test: dict[str, Any]) -> dict[str, Any]:
        return {"confusion_matrix": test["confusion"], "class_names": self.class_names}

    def target_description(self) -> str:
        return f"[{self.level.readout}s, 1] (float)"

    def describe(self) -> str:
        names = f" ({' / '.join(self.class_names)})" if self.class_names else ""
        return f"{self.type}{names}: one logit per {self.level.row_text}, threshold {self.threshold}"
