"""The tasks by name: the one module that names them. Config validation (``task.type``, ``early_stopping.metric``
and its mode), the configuration reference, model building, checkpoint restore (a checkpoint's ``model_io`` records
its task's name) and applied runs ask it. A new task is one class (``base.Task``, or a family: ``classification``,
``regression``, ``rows``) registered under its name by ``register_task``: the built-in ones below, yours with the
decorator in your module (imported before its config is loaded).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from ..common.errors import ConfigError
from .base import Task
from .levels import OutputLevel
from .binary import BinaryTask
from .multiclass import MulticlassTask
from .node import NodeBinaryTask
from .regression import RegressionTask
from .relation import RelationBinaryTask

TASKS: dict[str, type[Task]] = {}


def register_task(name: str) -> Callable[[type[Task]], type[Task]]:
    """A class decorator: the task ``cls`` under ``name``, the value of ``task.type`` that selects it (and
    ``cls.type``)."""
    def register(cls: type[Task]) -> type[Task]:
        if not name.isidentifier() or name == "auto":
            raise ValueError(f"register_task: {name!r} is no task name (a Python identifier other than auto)")
        if TASKS.get(name, cls) is not cls:
            raise ValueError(f"register_task: {name!r} names {TASKS[name].__qualname__} already")
        cls.type = name
        TASKS[name] = cls
        return cls

    return register


for _name, _task in (("multiclass", MulticlassTask), ("binary", BinaryTask), ("regression", RegressionTask),
                     ("node_binary", NodeBinaryTask), ("relation_binary", RelationBinaryTask)):
    register_task(_name)(_task)
# What task.type: auto learns when the dataset names no task: a value per set for float y, a class for integer y.
AUTO_FOR_FLOAT_Y, AUTO_FOR_INTEGER_Y = RegressionTask, MulticlassTask


def task_names() -> tuple[str, ...]:
    return tuple(TASKS)


def task_class(name: str) -> type[Task]:
    """The task registered as ``name`` (a ConfigError naming the registered ones if none is)."""
    if name not in TASKS:
        raise ConfigError(f"task {name!r} is not registered; expected one of {task_names()} (a task of your own is "
                          "registered by @QuantumGrav.tasks.registry.register_task in a module imported first)")
    return TASKS[name]


def tasks_at(level: OutputLevel) -> tuple[str, ...]:
    """The names of the tasks whose outputs are at ``level``."""
    return tuple(name for name, task in TASKS.items() if task.level is level)


def _either(names: tuple[str, ...]) -> str:
    return f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else "".join(names)


# --------------------------------------------------------------------------- the config's words
def early_stopping_metrics() -> tuple[str, ...]:
    """Every ``val_<metric>`` a registered task reports: what ``early_stopping.metric`` may name."""
    return tuple(dict.fromkeys(f"val_{m}" for task in TASKS.values() for m in task.reports))


def metric_mode(metric: str) -> str:
    """'max' for metrics that improve upwards (accuracy, F1, R^2, ...), 'min' for loss, MAE, RMSE: as the first task
    that reports ``metric`` (``val_`` or not) declares it."""
    name = metric.removeprefix("val_")
    return next((task.reports[name] for task in TASKS.values() if name in task.reports), "min")


def tasks_text() -> str:
    """``task.type``'s explanation in the configuration reference."""
    return ("; ".join(f"{name}: {task.summary}" for name, task in TASKS.items())
            + f"; auto: the dataset's task attribute (the generator's follows data.target, the stores' reader's "
              f"data.kwargs.target), else {AUTO_FOR_FLOAT_Y.type} for float y, {AUTO_FOR_INTEGER_Y.type} for integer y")


def metrics_text() -> str:
    """``early_stopping.metric``'s explanation: the metrics of each task."""
    return ("one the task reports: " + "; ".join(f"{name} " + ", ".join(f"val_{m}" for m in task.reports)
                                                 for name, task in TASKS.items())
            + " (val_weighted_f1: the F1 of each class weighted by its sets, as upstream QuantumGrav stops on)")


def modes_text() -> str:
    """``early_stopping.mode``'s explanation: which way each metric improves."""
    modes = {name: mode for task in TASKS.values() for name, mode in task.reports.items()}
    return (f"default: max for {', '.join(m for m, mode in modes.items() if mode == 'max')}; min for "
            f"{', '.join(m for m, mode in modes.items() if mode == 'min')}")


# --------------------------------------------------------------------------- a run's task
def check_task_level(task_type: str, dataset: Any, source: str) -> None:
    """A task whose y is per element or per pair on a dataset whose target is per graph, or any other mismatch of
    levels, is one ConfigError naming ``task.type`` and the data's target (the dataset's ``task`` attribute says
    which task its ``y`` is for)."""
    declared = getattr(dataset, "task", None)
    if task_type == "auto" or declared not in TASKS:
        return
    wanted, given = task_class(task_type).level, TASKS[declared].level
    if wanted is given:
        return
    target = getattr(dataset, "target", None)
    target_text = f" (target {target!r}: data.target or data.kwargs.target)" if isinstance(target, str) else ""
    raise ConfigError(f"task.type: {task_type} needs {wanted.labels_text}, but {source}{target_text} "
                      f"gives {given.labels_text}, for the {declared} task; set task.type to "
                      f"{declared} or auto, or choose the data's target for {task_type}")


def resolve_task(task_type: str, threshold: float, dataset: Any, samples: dict[int, Any], source: str) -> Task:
    """The task of the config's ``task.type`` (``auto`` asks the dataset: its ``task`` attribute if it has one, else
    ``AUTO_FOR_FLOAT_Y`` for a floating-point ``y`` and ``AUTO_FOR_INTEGER_Y`` for an integer one) and
    ``task.threshold``. ``samples`` are items by position, already checked to have ``y``; a ``y`` that does not fit
    the task is a ConfigError."""
    first = samples[min(samples)]
    check_task_level(task_type, dataset, source)
    kind = task_type
    if kind == "auto":
        kind = getattr(dataset, "task", None) or (AUTO_FOR_FLOAT_Y if first.y.is_floating_point()
                                                  else AUTO_FOR_INTEGER_Y).type
    if kind not in TASKS:
        raise ConfigError(f"{source}: the dataset's task attribute is {kind!r}; expected one of {task_names()}")
    task = TASKS[kind].for_data(threshold, getattr(dataset, "class_names", None) or (), dataset)
    for position, item in samples.items():
        problem = task.item_problem(item)
        if problem:
            how = (f"set task.type to the task y is meant for ({_either(task_names())}), or fix y"
                   if task_type == "auto" else "fix y, or set task.type to the task y is meant for")
            raise ConfigError(f"{source}: item {position} does not fit the {task.type} task: {problem}; {how}")
    return task


def model_io(in_channels: int, task: Task) -> dict[str, Any]:
    """What a model was built for, as a checkpoint records it: node features in, the task and its classes out."""
    return {"in_channels": int(in_channels), "task": task.type, "class_names": list(task.class_names)}


def task_of_model_io(record: dict[str, Any], threshold: float) -> Task:
    """The task a checkpoint's ``model_io`` records, rebuilt: the same output width, classes in the same order and
    the same metrics (``threshold``: the run's ``task.threshold``)."""
    return task_class(record["task"]).from_model_io(record, threshold)


def check_metric(metric: str, task: Task) -> None:
    """early_stopping.metric must be one the task reports."""
    allowed = [f"val_{m}" for m in task.metric_names]
    if metric not in allowed:
        raise ConfigError(f"early_stopping.metric: {metric} is not reported by the {task.type} task; "
                          f"expected one of {', '.join(allowed)}")


_SOFTMAX_LOSSES = (F.cross_entropy, F.nll_loss, torch.nn.CrossEntropyLoss, torch.nn.NLLLoss)


def build_criterion(criterion: Any, task: Task, device: torch.device):
    """The configured loss (None: the task's), checked once on dummy outputs so that a wrong signature is
    a config error, not a crash in epoch 0. It is called as ``criterion(outputs, task.target(y))``."""
    if criterion is None:
        return task.default_loss
    if not task.softmax_outputs and criterion in _SOFTMAX_LOSSES:
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
                          f"targets shaped like {task.target_description()}") from None
    if not (isinstance(value, torch.Tensor) and value.numel() == 1):
        got = f"a tensor of shape {list(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
        raise ConfigError(f"criterion: expected a scalar loss tensor from criterion(outputs, target), got {got} "
                          "(a reduction='none' loss must be averaged)")
    return criterion
