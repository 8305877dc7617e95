"""The base of every task (``tasks``): what a task fixes (the loss, the output width, the metrics from summable totals)
and what one output is about (a causal set, an element or a pair of elements)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Sequence

import torch

from ..config.sections.task import TASK_METRICS


class Task(ABC):
    """The common part: loss sum and count are the first two totals; subclasses add their own."""

    type: str = ""
    default_loss = None
    # What one output and one y are about: a causal set ("graph"), an element ("node") or a candidate pair of
    # elements ("pair"); below graph level batch_totals needs each output's graph (``levels.OutputLevel.row_graphs``).
    level = "graph"

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
