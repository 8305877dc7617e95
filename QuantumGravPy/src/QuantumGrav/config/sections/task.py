"""``task:`` and ``criterion``: what y is learned as and with which loss, and the metrics each task type reports."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..checks import choice, number, pyobject_of
from .base import Section, setting


TASK_TYPES: tuple[str, ...] = ("multiclass", "binary", "regression", "node_binary", "relation_binary")



TASK_METRICS: dict[str, tuple[str, ...]] = {
    "multiclass": ("loss", "accuracy", "weighted_f1"),
    "binary": ("loss", "accuracy", "precision", "recall", "f1", "weighted_f1"),
    "regression": ("loss", "mae", "rmse", "r2"),
    # per element: is it inside the inserted block? Node accuracy .. F1, and the mean block IoU per set
    "node_binary": ("loss", "accuracy", "precision", "recall", "f1", "iou"),
    # per pair of elements: was its relation toggled? The pairs' F1, precision, recall; per set: every changed pair
    # found (all_found), and exactly the changed pairs marked (exact)
    "relation_binary": ("loss", "f1", "precision", "recall", "all_found", "exact"),
}



_MAXIMISED = ("accuracy", "precision", "recall", "f1", "weighted_f1", "r2", "iou", "all_found", "exact")



EARLY_STOPPING_METRICS: tuple[str, ...] = tuple(dict.fromkeys(f"val_{m}" for ms in TASK_METRICS.values() for m in ms))



def metric_mode(metric: str) -> str:
    """'max' for metrics that improve upwards (accuracy, F1, R^2, ...), 'min' for loss, MAE, RMSE."""
    return "max" if metric.removeprefix("val_") in _MAXIMISED else "min"



_CRITERION_DOC = (
    "loss(outputs, target): a torch.nn.Module class (instantiated first), a function of torch.nn.functional, a "
    "function of your own code (a module outside the Python installation) or one marked with "
    "@QuantumGrav.loss_function; null: the task's (cross_entropy, binary_cross_entropy_with_logits, mse_loss). "
    "Another package's function is refused unless marked (see Trust above)")



@dataclass(frozen=True)
class TaskSection(Section):
    """``task:`` and the top-level ``criterion``: what y is learned as, and with which loss."""

    yaml: ClassVar[str] = "task"

    type: str = setting("auto", choice("auto", *TASK_TYPES),
                        "multiclass | binary | regression (one y per graph) | node_binary (one 0/1 y per element: "
                        "one logit per element, its metrics per element, and the mean block IoU per set) | "
                        "relation_binary (one 0/1 y per pair of elements: one logit per pair, its metrics per pair, "
                        "and per set whether every changed pair was found); auto: the "
                        "dataset's task attribute (the generator's follows data.target, the stores' reader's "
                        "data.kwargs.target), else regression for float y, multiclass for integer y")
    threshold: float = setting(0.5, number(0.0, 1.0, exclusive_min=True),
                               "binary, node_binary, relation_binary: a graph (an element, a pair) is predicted "
                               "positive when sigmoid(logit) >= threshold")
    criterion: Any = setting(None, pyobject_of("loss"), _CRITERION_DOC, nullable=True, key="criterion")
