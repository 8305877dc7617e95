"""A task: what is learned from each causal set, as one type. Its class declares everything the library asks of it:
its level (``levels``), how it reads its target (``target``, checked item by item: ``item_problem``), its loss
(``default_loss``), its metrics and which way each improves (``reports``: early stopping's default mode), the readout
it needs (its level's), the rivals a run fits beside it and the analyses it runs after the test (callbacks named by
path, loaded only when a run switches them on), and a line for the configuration reference (``summary``). Its name is
the registry's (``registry``): the one place a task is named.

Every metric is computed from sums that can be added across ranks (a confusion matrix, or sums of errors, of y and of
y^2, and the count): each rank sums its shard, the sums are reduced, then the metrics are computed once. So they are
exact under DDP, never an average of per-rank averages.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, Callable, ClassVar, Sequence

import torch
import torch.nn.functional as F

from .levels import SET, OutputLevel


class Task(ABC):
    """The common part: loss sum and count are the first two totals; subclasses add their own."""

    type: ClassVar[str] = ""  # the task's name, the value of task.type: given by the registry (registry.register_task)
    summary: ClassVar[str] = ""  # what y is learned as, in one line of the configuration reference
    level: ClassVar[OutputLevel] = SET  # what one output row and one y are about: a set, an element, a pair
    # The metrics the task reports, loss first, each with the way it improves ("min" or "max"): the metrics of
    # validation, the test and an applied run, what early stopping may watch and the mode it defaults to.
    reports: ClassVar[dict[str, str]] = {"loss": "min"}
    default_loss: ClassVar[Callable | None] = None  # the loss when the config names none (criterion: null)
    softmax_outputs: ClassVar[bool] = False  # one output per class: a softmax loss (cross_entropy) fits it
    # What a run fits and scores beside the model (with testing.baselines) and analyses after the test: callbacks
    # named by path, loaded only when a run switches them on (training.components).
    rivals: ClassVar[tuple[str, ...]] = ("QuantumGrav.callbacks.results.Baselines",)
    analyses: ClassVar[tuple[str, ...]] = ()
    # The key of a set's describe(i) that gives the size of its defect: an applied run reports its metrics in bins of
    # it too (None: none).
    defect_size: ClassVar[str | None] = None
    num_totals: ClassVar[int] = 2

    def __init__(self, output_width: int, class_names: Sequence[str] = ()):
        self.output_width = output_width
        self.class_names = list(class_names)

    @classmethod
    def for_data(cls, threshold: float, class_names: Sequence[str], dataset: Any) -> "Task":
        """The task for ``dataset`` (its ``class_names``), with the config's ``task.threshold``."""
        return cls()

    @classmethod
    def from_model_io(cls, record: dict[str, Any], threshold: float) -> "Task":
        """The task a checkpoint's ``model_io`` records, rebuilt: the same output width, classes in the same order and
        the same metrics (``threshold``: the run's ``task.threshold``)."""
        return cls()

    @property
    def metric_names(self) -> tuple[str, ...]:
        return tuple(self.reports)

    @property
    def node_level(self) -> bool:
        return self.level.unit == "element"

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

    @abstractmethod
    def scored_rows(self, outputs: torch.Tensor, targets: torch.Tensor) -> list[dict[str, Any]]:
        """Each output row's ``truth`` (left out where unknown: NaN) and ``score`` (and the ``predicted`` class), as
        an applied run's predictions CSV writes them."""
        raise NotImplementedError

    def zero_totals(self, device: torch.device) -> torch.Tensor:
        return torch.zeros(self.num_totals, device=device, dtype=torch.float64)

    def item_problem(self, item: Any) -> str | None:
        """What is wrong with one item (a ``Data``) for this task, or None: its ``y`` (``target_problem``)."""
        return self.target_problem(item.y)

    def predicted(self, outputs: torch.Tensor) -> torch.Tensor:
        """What a set-level prediction records of each set's outputs (the run's test predictions): the value."""
        return outputs.view(-1)

    def positive_scores(self, outputs: torch.Tensor) -> torch.Tensor | None:
        """For two classes with one logit, each set's probability of the positive class (what a ROC-AUC ranks)."""
        return None

    def undefined(self, metrics: dict[str, Any]) -> dict[str, str]:
        """Metric name -> why the sets cannot define it, for ``metrics`` (``metrics(totals)``); empty: all defined."""
        return {}

    def test_extras(self, test: dict[str, Any]) -> dict[str, Any]:
        """What a run's test reports besides ``test_<metric>`` and ``num_test``, from ``metrics(totals)``."""
        return {}

    def target_description(self) -> str:
        """The target the loss takes, in words (a criterion that refuses it names them)."""
        return "[graphs, 1] (float)"

    def describe(self) -> str:
        return self.type

    @staticmethod
    def _one_value(y: Any) -> str | None:
        if not isinstance(y, torch.Tensor):
            return f"y must be a tensor, got {type(y).__name__}"
        if y.numel() != 1:
            return f"y must hold one value per graph, got shape {list(y.shape)}"
        return None


class OneLogitThresholded:
    """What a task with one logit per output row, thresholded after the sigmoid, shares (the binary task on sets,
    the node and relation tasks on rows): its threshold from the config or the checkpoint, the float 0/1 target,
    the prediction, the binary cross-entropy and the scored rows. Listed before the task's base class."""

    default_loss = staticmethod(F.binary_cross_entropy_with_logits)
    threshold: float
    class_names: list[str]

    @classmethod
    def for_data(cls, threshold: float, class_names: Sequence[str], dataset: Any):
        return cls(threshold, class_names)

    @classmethod
    def from_model_io(cls, record: dict[str, Any], threshold: float):
        return cls(threshold, record["class_names"])

    def target(self, y):
        return y.view(-1, 1).float()

    def predict(self, outputs: torch.Tensor) -> torch.Tensor:
        return (torch.sigmoid(outputs.float().view(-1)) >= self.threshold).long()

    def scored_rows(self, outputs, targets):
        return scored_by_probability(self, outputs, targets)


def positive_class_undefined(task: Task, confusion: list[list[int]]) -> dict[str, str]:
    """The precision, recall and F1 of the positive class of two that the rows measured cannot define, and why."""
    (_, fp), (fn, tp) = confusion
    unit = task.level.unit
    positive = task.class_names[1] if len(task.class_names) == 2 else "positive"
    found = {}
    if tp + fp == 0:
        found["precision"] = f"no {unit} was predicted {positive} (precision divides by them)"
    if tp + fn == 0:
        found["recall"] = f"no {unit} is {positive} (recall divides by them)"
    if tp + fp + fn == 0:
        found["f1"] = f"no {unit} is {positive}, and none was predicted {positive}"
    return found


def scored_by_probability(task: Task, outputs: torch.Tensor, targets: torch.Tensor) -> list[dict[str, Any]]:
    """``scored_rows`` of one logit per row: the probability of the positive class and the prediction."""
    scores = torch.sigmoid(outputs.float().view(-1))
    return _named_rows(task, targets.double().view(-1).tolist(), task.predict(outputs).tolist(), scores.tolist())


def _named_rows(task: Task, truths: list[float], predicted: list[int], scores: list[float]) -> list[dict[str, Any]]:
    names = task.class_names if len(task.class_names) >= 2 else ["0", "1"]
    return [{**({"truth": names[int(truth)]} if not math.isnan(truth) else {}), "predicted": names[guess],
             "score": score} for truth, guess, score in zip(truths, predicted, scores)]
