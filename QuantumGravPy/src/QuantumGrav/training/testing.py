"""A run's last measurement: the model's metrics on the whole test split, on rank 0, with what each task adds
(the training mean as a yardstick for regression, the confusion matrix for classes)."""

from __future__ import annotations

from typing import Any

import numpy as np
from torch_geometric.loader import DataLoader

from ..callbacks.state import RunState
from ..evaluation.evaluator import Evaluator
from ..evaluation.scores import classification_metrics
from ..tasks.base import Task
from ..tasks.classification import ClassificationTask
from ..tasks.regression import RegressionTask, train_mean_metrics


def evaluate_test_split(evaluator: Evaluator, task: Task, state: RunState, loader: DataLoader) -> dict[str, Any]:
    """``test_<metric>`` for each of the task's metrics, ``num_test`` and the task's extras (``Task.test_extras``);
    for a value per set the training mean as a yardstick, for classes of sets the ranking metrics. Fills
    ``state.test_predictions`` and ``state.test_order`` for the callbacks."""
    state.test_predictions, scores = [], []
    # The loader's batches in the order its predictions come (packed by size under a batch budget).
    state.test_order = [state.split["test"][i] for batch in loader.batch_sampler for i in batch]
    test = task.metrics(evaluator.local_totals(loader, state.test_predictions, scores))
    result = {**{f"test_{m}": test[m] for m in task.metric_names}, "num_test": test["count"]}
    if isinstance(task, RegressionTask):
        result.update(train_mean_metrics(targets(task, state, "train"), targets(task, state, "test")))
    result.update(task.test_extras(test))
    if isinstance(task, ClassificationTask):
        result.update(ranking_metrics(task, state.test_predictions, scores))
    return result


def ranking_metrics(task: ClassificationTask, predictions: list, scores: list[float]) -> dict[str, Any]:
    """``test_balanced_accuracy`` and, for a binary task, ``test_roc_auc`` (None with one class in the test split):
    the words of ``evaluation.scores``, beside the task's own metrics."""
    if not predictions:
        return {}
    truth = np.array([int(t) for _, t, _ in predictions], dtype=np.int64)
    predicted = np.array([int(p) for p, _, _ in predictions], dtype=np.int64)
    positive = np.array(scores) if scores else None  # a binary task's probability of the positive class per set
    found = classification_metrics(truth, predicted, task.num_classes, positive)
    return {"test_balanced_accuracy": found["balanced_accuracy"],
            **({"test_roc_auc": found["roc_auc"]} if positive is not None else {})}


def targets(task: Task, state: RunState, split: str) -> list[float]:
    """The values of one split's targets, as the task reads them from ``y``."""
    return [float(task.target(state.dataset[i].y).reshape(-1)[0]) for i in state.split[split]]
