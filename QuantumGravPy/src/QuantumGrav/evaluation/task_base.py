"""The base of every task (``tasks``): what a task fixes (the loss, the output width, the metrics from summable totals)
and what one output is about (a causal set, an element or a pair of elements)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from ..config.sections.task import TASK_METRICS


class Task(ABC):
    """The common part: loss sum and count are the first two totals; subclasses add their own."""

    type: str = ""
    default_loss = None
    # What one output and one y are about: a causal set ("graph"), an element ("node") or a candidate pair of
    # elements ("pair"); below graph level batch_totals needs each output's graph (``levels.OutputLevel.row_graphs``).
    level = "graph"
    # What the run fits and scores beside the model (with testing.baselines) and what it analyses after the test,
    # each a callback named by its path, loaded only when the run switches it on (training.components).
    rivals: tuple[str, ...] = ("QuantumGrav.callbacks.results.Baselines",)
    analyses: tuple[str, ...] = ()

    def __init__(self, output_width: int, class_names: Sequence[str] = ()):
        self.output_width = output_width
        self.class_names = list(class_names)

    @property
    def metric_names(self) -> tuple[str, ...]:
        return TASK_METRICS[self.type]

    @abstractmethod
    def target(self, y: torch.Tensor) -> torch.Tensor:
        """The batch's ``y`` in the form the loss takes (see the subclasses)."""
        raise NotImplementedError

    @abstractmethod
    def target_problem(self, y: Any) -> str | None:
        """What is wrong with one item's ``y`` for this task, or None."""
        raise NotImplementedError

    @abstractmethod
    def batch_totals(self, outputs: torch.Tensor, target: torch.Tensor, loss: torch.Tensor) -> torch.Tensor:
        """float64 sums of one batch; adding them over batches and ranks, then ``metrics``, is exact."""
        raise NotImplementedError

    @abstractmethod
    def metrics(self, totals: torch.Tensor) -> dict[str, Any]:
        raise NotImplementedError

    def zero_totals(self, device: torch.device) -> torch.Tensor:
        return torch.zeros(self.num_totals, device=device, dtype=torch.float64)

    @property
    def node_level(self) -> bool:
        return self.level == "node"

    def item_problem(self, item: Any) -> str | None:
        """What is wrong with one item (a ``Data``) for this task, or None: its ``y`` (``target_problem``)."""
        return self.target_problem(item.y)

    def describe(self) -> str:
        return self.type

    @staticmethod
    def _one_value(y: Any) -> str | None:
        if not isinstance(y, torch.Tensor):
            return f"y must be a tensor, got {type(y).__name__}"
        if y.numel() != 1:
            return f"y must hold one value per graph, got shape {list(y.shape)}"
        return None


class RowBinaryTask(Task):
    """A 0/1 label per output row (an element, a pair of elements) and one logit per row, thresholded after the
    sigmoid: the common part of the node and the relation task (``unit`` names a row in messages, ``min_rows`` is the
    fewest rows a set's ``y`` may hold)."""

    default_loss = staticmethod(F.binary_cross_entropy_with_logits)
    unit, min_rows = "row", 1

    def __init__(self, threshold: float = 0.5, class_names: Sequence[str] = ()):
        super().__init__(1, class_names)
        self.threshold = threshold

    def target(self, y):
        return y.view(-1, 1).float()

    def predict(self, outputs: torch.Tensor) -> torch.Tensor:
        return (torch.sigmoid(outputs.float().view(-1)) >= self.threshold).long()

    def target_problem(self, y):
        if not isinstance(y, torch.Tensor):
            return f"y must be a tensor, got {type(y).__name__}"
        if y.dim() != 1 or y.numel() < self.min_rows:
            return self.shape_problem(y)
        values = set(torch.unique(y).tolist())
        if not values <= {0, 1}:
            return f"a {self.type} task needs y = 0 or 1 per {self.unit}, got {sorted(values - {0, 1})[:3]}"
        return None

    @abstractmethod
    def shape_problem(self, y: torch.Tensor) -> str:
        """What is wrong with the shape of one item's ``y``, in the task's words."""
        raise NotImplementedError
