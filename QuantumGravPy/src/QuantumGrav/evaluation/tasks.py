"""What is learned from each causal set: the task fixes the loss, the model's output width and the metrics.

* ``multiclass``: ``y`` is a class index; the model returns ``[graphs, num_classes]`` logits; cross-entropy;
  accuracy, the F1 of each class and their mean weighted by the classes' sets, and the confusion matrix.
* ``binary``: ``y`` is 0 or 1; the model returns one logit per graph, ``[graphs, 1]``; ``BCEWithLogits``;
  accuracy, precision, recall and F1 of the prediction ``sigmoid(logit) >= threshold``, and the weighted F1 of
  both classes.
* ``regression``: ``y`` is one number per graph; the model returns ``[graphs, 1]``; mean squared error;
  MAE, RMSE and R^2.
* ``node_binary``: ``y`` is 0 or 1 per element (inside the inserted block or not); the model returns one logit per
  element, ``[nodes, 1]``; ``BCEWithLogits`` over the elements; the elements' accuracy, precision, recall and F1,
  and the mean over the sets that have a block of its intersection over union (``NodeBinaryTask``).
* ``relation_binary``: ``y`` is 0 or 1 per candidate pair of elements (its relation toggled or not,
  ``data.relation_targets``); the model returns one logit per pair, ``[pairs, 1]``; ``BCEWithLogits`` over the
  pairs; the pairs' precision, recall and F1, the share of changed sets whose every changed pair is found, and the
  share of sets whose marked pairs are exactly the changed ones (``RelationBinaryTask``).

Every metric is computed from sums that can be added across ranks (a confusion matrix, or sums of
errors, of y and of y^2, and the count): each rank sums its shard, the sums are reduced, then the
metrics are computed once. So they are exact under DDP, never an average of per-rank averages.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from ..config.sections.task import TASK_TYPES, TaskSection
from ..common.errors import ConfigError
from .relation_task import RelationBinaryTask
from .task_base import RowBinaryTask, Task



class ClassificationTask(Task, ABC):
    """Totals: loss sum, count, then the confusion matrix (true x predicted), flattened."""

    def __init__(self, num_classes: int, output_width: int, class_names: Sequence[str] = ()):
        names = list(class_names) if len(class_names) == num_classes else [str(i) for i in range(num_classes)]
        super().__init__(output_width, names)
        self.num_classes = num_classes
        self.num_totals = 2 + num_classes**2

    @abstractmethod
    def predict(self, outputs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

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


def f1_scores(confusion: list[list[int]]) -> tuple[list[float], float]:
    """Each class's F1 (2 tp / (2 tp + fp + fn), 0 for a class never true nor predicted, as scikit-learn's
    zero_division=0) and their mean weighted by each class's true sets (scikit-learn's average="weighted",
    what upstream QuantumGrav reports), from a confusion matrix (true x predicted): exact under DDP."""
    k = len(confusion)
    true = [sum(confusion[i]) for i in range(k)]
    predicted = [sum(confusion[i][j] for i in range(k)) for j in range(k)]
    f1 = [2 * confusion[j][j] / (true[j] + predicted[j]) if confusion[j][j] else 0.0 for j in range(k)]
    return f1, sum(f * n for f, n in zip(f1, true)) / max(sum(true), 1)


class MulticlassTask(ClassificationTask):
    """Outputs ``[graphs, num_classes]`` logits; target: class indices ``[graphs]`` (long)."""

    type = "multiclass"
    default_loss = staticmethod(F.cross_entropy)

    def __init__(self, num_classes: int, class_names: Sequence[str] = ()):
        super().__init__(num_classes, num_classes, class_names)

    def target(self, y):
        return y.view(-1).long()

    def predict(self, outputs):
        return outputs.argmax(dim=-1)

    def describe(self) -> str:
        return f"{self.num_classes} classes: {', '.join(self.class_names)}"


class BinaryTask(ClassificationTask):
    """Outputs one logit per graph ``[graphs, 1]``; target: 0.0 / 1.0 ``[graphs, 1]`` (float).
    Positive: ``sigmoid(logit) >= threshold``."""

    type = "binary"
    default_loss = staticmethod(F.binary_cross_entropy_with_logits)

    def __init__(self, threshold: float = 0.5, class_names: Sequence[str] = ()):
        super().__init__(2, 1, class_names)
        self.threshold = threshold

    def target(self, y):
        return y.view(-1, 1).float()

    def predict(self, outputs):
        return (torch.sigmoid(outputs.float().view(-1)) >= self.threshold).long()

    def target_problem(self, y):
        problem = self._one_value(y)
        if problem is None and float(y) not in (0.0, 1.0):
            return f"a binary task needs y = 0 or 1, got {y.item()}"
        return problem

    def metrics(self, totals):
        result = super().metrics(totals)
        (tn, fp), (fn, tp) = result["confusion"]
        # No predicted (or no true) positives: precision (recall) is 0, as scikit-learn's zero_division=0.
        result.update(precision=tp / (tp + fp) if tp + fp else 0.0, recall=tp / (tp + fn) if tp + fn else 0.0,
                      f1=2 * tp / (2 * tp + fp + fn) if tp else 0.0)
        return result

    def describe(self) -> str:
        return f"binary ({' / '.join(self.class_names)}), threshold {self.threshold}"


class RegressionTask(Task):
    """Outputs ``[graphs, 1]``; target ``[graphs, 1]`` (float). Totals: loss sum, count, sum |error|,
    sum error^2, sum y, sum y^2 (R^2 = 1 - SS_res / SS_tot with SS_tot = sum y^2 - (sum y)^2 / n)."""

    type = "regression"
    default_loss = staticmethod(F.mse_loss)
    num_totals = 6

    def __init__(self):
        super().__init__(1)

    def target(self, y):
        return y.view(-1, 1).float()

    def target_problem(self, y):
        problem = self._one_value(y)
        if problem is None and not bool(torch.isfinite(y.double()).all()):
            return f"a regression task needs a finite number in y, got {y.tolist()}"
        return problem

    def batch_totals(self, outputs, target, loss):
        predicted, true = outputs.double().view(-1), target.double().view(-1)
        error = predicted - true
        count = torch.tensor(float(true.numel()), device=outputs.device, dtype=torch.float64)
        return torch.stack([loss.detach().double() * count, count, error.abs().sum(), (error**2).sum(),
                            true.sum(), (true**2).sum()])

    def metrics(self, totals):
        loss_sum, count, abs_sum, sq_sum, y_sum, y_sq_sum = totals.tolist()
        n = max(count, 1.0)
        total_variation = y_sq_sum - y_sum**2 / n
        return {"loss": loss_sum / n, "mae": abs_sum / n, "rmse": math.sqrt(sq_sum / n),
                "r2": 1.0 - sq_sum / total_variation if total_variation > 0 else math.nan, "count": int(count)}


def train_mean_metrics(train_y: Sequence[float], test_y: Sequence[float]) -> dict[str, float]:
    """The trivial regressor (always the training mean) on the test split: what a model must beat."""
    mean = sum(train_y) / len(train_y)
    task = RegressionTask()
    true = torch.tensor(test_y, dtype=torch.float64).view(-1, 1)
    outputs = torch.full_like(true, mean)
    totals = task.batch_totals(outputs, true, F.mse_loss(outputs, true))
    return {f"train_mean_{k}": v for k, v in task.metrics(totals).items() if k in ("mae", "rmse", "r2")}


def _num_classes(dataset) -> int:
    declared = getattr(dataset, "num_classes", None)
    if isinstance(declared, int) and declared > 0:
        return declared
    return int(max(int(item.y.reshape(-1)[0]) for item in dataset)) + 1  # a plain list of Data


def resolve_task(settings: TaskSection, dataset, samples: dict[int, Any], source: str) -> Task:
    """The task of the config's ``task`` section (``type: auto`` asks the dataset: its ``task`` attribute if it has one,
    else regression for a floating-point ``y`` and multiclass for an integer one). ``samples`` are items
    by position, already checked to have ``y``; a ``y`` that does not fit the task is a ConfigError."""
    kind = settings.type
    first = samples[min(samples)]
    check_task_level(settings.type, dataset, source)
    if kind == "auto":
        kind = getattr(dataset, "task", None) or ("regression" if first.y.is_floating_point() else "multiclass")
    if kind not in TASK_TYPES:
        raise ConfigError(f"{source}: the dataset's task attribute is {kind!r}; expected one of {TASK_TYPES}")
    names = getattr(dataset, "class_names", None) or ()
    if kind == "regression":
        task: Task = RegressionTask()
    elif kind == "binary":
        task = BinaryTask(settings.threshold, names)
    elif kind == "node_binary":
        task = NodeBinaryTask(settings.threshold, names)
    elif kind == "relation_binary":
        task = RelationBinaryTask(settings.threshold, names)
    else:
        task = MulticlassTask(_num_classes(dataset), names)
    for position, item in samples.items():
        problem = task.item_problem(item)
        if problem:
            how = ("set task.type to the task y is meant for (multiclass, binary, regression, node_binary or "
                   "relation_binary), or fix y"
                   if settings.type == "auto" else "fix y, or set task.type to the task y is meant for")
            raise ConfigError(f"{source}: item {position} does not fit the {task.type} task: {problem}; {how}")
    return task


def model_io(in_channels: int, task: Task) -> dict[str, Any]:
    """What a model was built for, as a checkpoint records it: node features in, the task and its classes out."""
    return {"in_channels": int(in_channels), "task": task.type, "class_names": list(task.class_names)}


def task_of_model_io(record: dict[str, Any], threshold: float) -> Task:
    """The task a checkpoint's ``model_io`` records, rebuilt: the same output width, classes in the same order and
    the same metrics (``threshold``: the run's ``task.threshold``)."""
    names = record["class_names"]
    if record["task"] == "regression":
        return RegressionTask()
    if record["task"] == "binary":
        return BinaryTask(threshold, names)
    if record["task"] == "node_binary":
        return NodeBinaryTask(threshold, names)
    if record["task"] == "relation_binary":
        return RelationBinaryTask(threshold, names)
    return MulticlassTask(len(names), names)


def check_metric(metric: str, task: Task) -> None:
    """early_stopping.metric must be one the task reports."""
    allowed = [f"val_{m}" for m in task.metric_names]
    if metric not in allowed:
        raise ConfigError(f"early_stopping.metric: {metric} is not reported by the {task.type} task; "
                          f"expected one of {', '.join(allowed)}")


def build_criterion(criterion: Any, task: Task, device: torch.device):
    """The configured loss (None: the task's), checked once on dummy outputs so that a wrong signature is
    a config error, not a crash in epoch 0. It is called as ``criterion(outputs, task.target(y))``."""
    if criterion is None:
        return task.default_loss
    if task.type != "multiclass" and criterion in _MULTICLASS_LOSSES:
        # With one output per graph these give a constant loss (a softmax over one class): nothing is learned.
        raise ConfigError(f"criterion: {criterion.__name__} is a multiclass loss, but the task is {task.type}; "
                          f"remove criterion (or set it to null) to use the task's loss, "
                          f"{task.default_loss.__name__}")
    if isinstance(criterion, type):
        try:
            criterion = criterion()
        except (TypeError, ValueError) as err:
            raise ConfigError(f"criterion: {criterion.__name__} rejects being built without arguments: {err}") from None
    outputs = torch.zeros(2, task.output_width, device=device)
    target = task.target(torch.zeros(2, device=device))
    try:
        value = criterion(outputs, target)
    except Exception as err:  # noqa: BLE001 - any failure here is a wrong criterion
        raise ConfigError(f"criterion: calling it as criterion(outputs, target) failed ({type(err).__name__}: "
                          f"{err}); for the {task.type} task it must take outputs [graphs, {task.output_width}] and "
                          f"targets shaped like {_target_text(task)}") from None
    if not (isinstance(value, torch.Tensor) and value.numel() == 1):
        got = f"a tensor of shape {list(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
        raise ConfigError(f"criterion: expected a scalar loss tensor from criterion(outputs, target), got {got} "
                          "(a reduction='none' loss must be averaged)")
    return criterion


_MULTICLASS_LOSSES = (F.cross_entropy, F.nll_loss, torch.nn.CrossEntropyLoss, torch.nn.NLLLoss)


def _target_text(task: Task) -> str:
    if task.level != "graph":
        return f"[{task.level}s, 1] (float)"
    return "class indices [graphs] (long)" if task.type == "multiclass" else "[graphs, 1] (float)"


# What one y is about, for each task type (a dataset's ``task`` attribute names its type).
TASK_LEVELS = {"node_binary": "node", "relation_binary": "pair"}
_LEVEL_LABELS = {"graph": "one label per causal set", "node": "one label per element",
                 "pair": "one label per pair of elements"}


def check_task_level(task_type: str, dataset, source: str) -> None:
    """A task whose y is per element or per pair on a dataset whose target is per graph, or any other mismatch of
    levels, is one ConfigError naming ``task.type`` and the data's target (the dataset's ``task`` attribute says
    which task its ``y`` is for)."""
    declared = getattr(dataset, "task", None)
    if task_type == "auto" or declared not in TASK_TYPES:
        return
    wanted, given = TASK_LEVELS.get(task_type, "graph"), TASK_LEVELS.get(declared, "graph")
    if wanted == given:
        return
    target = getattr(dataset, "target", None)
    target_text = f" (target {target!r}: data.target or data.kwargs.target)" if isinstance(target, str) else ""
    raise ConfigError(f"task.type: {task_type} needs {_LEVEL_LABELS[wanted]}, but {source}{target_text} "
                      f"gives {_LEVEL_LABELS[given]}, for the {declared} task; set task.type to "
                      f"{declared} or auto, or choose the data's target for {task_type}")


# The node task's totals, in this order. All but the loss sum are integers (the IoU in units of 1 / IOU_SCALE), so
# adding them over batches and ranks in any order gives the same bits: world size 2 reports what world size 1 does.
NODE_TOTALS = ("loss_sum", "nodes", "true_negatives", "false_positives", "false_negatives", "true_positives",
               "iou_units", "sets", "block_sets", "blockless_sets_marked")
IOU_SCALE = 2**32


class NodeBinaryTask(RowBinaryTask):
    """Outputs one logit per element ``[nodes, 1]``; target: 0.0 / 1.0 per element ``[nodes, 1]`` (float), 1 inside
    the inserted block. Positive: ``sigmoid(logit) >= threshold``. The loss is averaged over elements, the
    accuracy, precision, recall and F1 are the elements', and ``iou`` is the mean over the sets that have a true
    block (``block_sets`` of them) of |predicted block and true block| / |predicted or true block|: undefined (NaN)
    without such a set. A set without a block is reported apart: ``blockless_sets_marked`` counts those where some
    element was marked (an empty prediction there is right, and no IoU of 1 rewards a model that marks nothing).

    Under DDP the metrics are exact (integer sums), but training is not one process on the combined batch: each
    rank's loss is the mean over its own batch's elements and DDP averages the ranks' gradients, so the elements
    of a rank whose sets are smaller weigh more (equal only when the ranks hold equally many elements)."""

    type = "node_binary"
    level = "node"
    rivals = ("QuantumGrav.analyses.node_rival.NodeRival",)
    analyses = ("QuantumGrav.analyses.figures.InsertedBlockFigure",)
    num_totals = len(NODE_TOTALS)
    unit, min_rows = "element", 2

    def shape_problem(self, y):
        return (f"a node_binary task needs one 0/1 label per element (y of shape [nodes]), got shape "
                f"{list(y.shape)}, one value per causal set")

    def batch_totals(self, outputs, target, loss, graph_index: torch.Tensor | None = None):
        """The batch's totals (``NODE_TOTALS``); ``graph_index``: each element's graph in the batch (None: one)."""
        true, predicted = target.view(-1).long(), self.predict(outputs)
        graph_index = torch.zeros_like(true) if graph_index is None else graph_index.view(-1)
        confusion = torch.bincount(true * 2 + predicted, minlength=4).double()  # tn, fp, fn, tp
        iou, has_block, marked = block_iou(predicted.bool(), true.bool(), graph_index)
        count = float(true.numel())
        head = torch.tensor([count], device=outputs.device, dtype=torch.float64)
        tail = torch.stack([torch.round(iou[has_block] * IOU_SCALE).sum(), torch.tensor(float(iou.numel()),
                            device=iou.device, dtype=torch.float64), has_block.sum().double(),
                            (marked & ~has_block).sum().double()])
        return torch.cat([(loss.detach().double() * count).view(1), head, confusion, tail])

    def metrics(self, totals):
        loss_sum, nodes, tn, fp, fn, tp, iou_units, sets, block_sets, blockless_marked = totals.tolist()
        tn, fp, fn, tp = (int(round(v)) for v in (tn, fp, fn, tp))
        return {"loss": loss_sum / max(nodes, 1.0), "accuracy": (tp + tn) / max(nodes, 1.0),
                "precision": tp / (tp + fp) if tp + fp else 0.0, "recall": tp / (tp + fn) if tp + fn else 0.0,
                "f1": 2 * tp / (2 * tp + fp + fn) if tp else 0.0,
                "iou": iou_units / IOU_SCALE / block_sets if block_sets else math.nan, "block_sets": int(block_sets),
                "blockless_sets_marked": int(blockless_marked), "count": int(sets), "nodes": int(nodes),
                "confusion": [[tn, fp], [fn, tp]]}

    def describe(self) -> str:
        names = f" ({' / '.join(self.class_names)})" if self.class_names else ""
        return f"node_binary{names}: one logit per element, threshold {self.threshold}"


def block_iou(predicted: torch.Tensor, true: torch.Tensor, graph_index: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per graph (boolean per element, ``graph_index`` 0..graphs-1 per element): the float64 intersection over union
    of the predicted and the true block (1 where both are empty: read it where there is a true block), whether the
    graph has a true block, and whether any of its elements is predicted."""
    graphs = int(graph_index.max()) + 1 if graph_index.numel() else 0
    intersection = torch.zeros(graphs, dtype=torch.float64, device=true.device)
    union = torch.zeros_like(intersection)
    intersection.index_add_(0, graph_index, (predicted & true).double())
    union.index_add_(0, graph_index, (predicted | true).double())
    true_size = torch.zeros_like(intersection).index_add_(0, graph_index, true.double())
    iou = torch.where(union > 0, intersection / union.clamp(min=1.0), torch.ones_like(union))
    return iou, true_size > 0, union > true_size

