"""The optimizer and its learning-rate schedule (``training.optimizer_*``, ``training.scheduler_*``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ..checks import choice, integer, list_of, mapping, pyobject_of
from .base import Section, setting


def _any(value: Any) -> Any:
    return value



@dataclass(frozen=True)
class OptimizerSection(Section):
    """The optimizer and the base learning rate's scaling with the effective batch."""

    yaml: ClassVar[str] = "training"

    type: Any = setting(torch.optim.AdamW, pyobject_of("optimizer"),
                        "optimizer class (a subclass of torch.optim.Optimizer), built with (parameters, "
                        "*optimizer_args, **optimizer_kwargs)", key="training.optimizer_type")
    args: tuple = setting((), list_of(_any), "positional arguments of the optimizer after the parameters",
                          key="training.optimizer_args")
    # The default job's optimizer (configs/train.yaml, the study's best): tests/test_config.py keeps them equal.
    kwargs: dict[str, Any] = setting(
        {"lr": 4.46e-3, "weight_decay": 6.03e-6}, mapping,
        "keyword arguments of the optimizer; lr is the base LR before lr_scaling (a config that sets "
        "optimizer_kwargs replaces the whole mapping: give lr and weight_decay together)",
        key="training.optimizer_kwargs")
    lr_scaling: str = setting("none", choice("none", "linear", "sqrt"),
                              "scale lr and warmup with effective batch / reference_batch_size")
    reference_batch_size: int | None = setting(None, integer(1), "the batch the LR was tuned for (null: batch_size)",
                                               nullable=True)

    @property
    def lr(self) -> float | None:
        """The base learning rate (``optimizer_kwargs.lr``), before ``lr_scaling``; None: the optimizer's default."""
        return self.kwargs.get("lr")



@dataclass(frozen=True)
class SchedulerSection(Section):
    """The learning-rate schedule after a linear warmup."""

    yaml: ClassVar[str] = "training"

    type: Any = setting(
        torch.optim.lr_scheduler.CosineAnnealingLR, pyobject_of("scheduler"),
        "LR scheduler class (a subclass of torch.optim.lr_scheduler.LRScheduler, or ReduceLROnPlateau); null: a "
        "constant LR after the warmup. CosineAnnealingLR without T_max decays over the epochs after the warmup (and "
        "is re-planned when a resumed run changes num_epochs); ReduceLROnPlateau is stepped once per epoch with the "
        "early-stopping metric, in its mode (a scheduler_kwargs.mode that contradicts it is refused)",
        nullable=True, key="training.scheduler_type")
    args: tuple = setting((), list_of(_any), "positional arguments of the scheduler after the optimizer",
                          key="training.scheduler_args")
    kwargs: dict[str, Any] = setting({}, mapping, "keyword arguments of the scheduler, e.g. {T_max: 10} or "
                                                  "{step_size: 5, gamma: 0.5}", key="training.scheduler_kwargs")
    interval: str = setting("epoch", choice("epoch", "step"), "step the scheduler once per epoch or per optimizer step",
                            key="training.scheduler_interval")
    warmup_epochs: int = setting(0, integer(0), "linear LR warmup before the schedule")
