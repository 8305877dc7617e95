"""``task:`` and ``criterion``: what y is learned as and with which loss. The tasks, their metrics and the way each
improves are the task registry's (``QuantumGrav.tasks.registry``), read when a config is validated: a task registered
since counts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ...tasks import registry
from ..checks import choice, number, pyobject_of
from .base import Section, setting


def task_type(value: Any) -> str:
    """``auto`` or the name of a registered task."""
    return choice("auto", *registry.task_names())(value)


def early_stopping_metric(value: Any) -> str:
    """A ``val_<metric>`` that a registered task reports."""
    return choice(*registry.early_stopping_metrics())(value)


_CRITERION_DOC = (
    "loss(outputs, target): a torch.nn.Module class (instantiated first), a function of torch.nn.functional, a "
    "function of your own code (a module outside the Python installation) or one marked with "
    "@QuantumGrav.loss_function; null: the task's (cross_entropy, binary_cross_entropy_with_logits, mse_loss). "
    "Another package's function is refused unless marked (see Trust above)")


@dataclass(frozen=True)
class TaskSection(Section):
    """``task:`` and the top-level ``criterion``: what y is learned as, and with which loss."""

    yaml: ClassVar[str] = "task"

    type: str = setting("auto", task_type, registry.tasks_text())
    threshold: float = setting(0.5, number(0.0, 1.0, exclusive_min=True),
                               "a task of two classes by one logit (per graph, element or pair): a graph (an element, "
                               "a pair) is predicted positive when sigmoid(logit) >= threshold")
    criterion: Any = setting(None, pyobject_of("loss"), _CRITERION_DOC, nullable=True, key="criterion")
