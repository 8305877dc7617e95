"""The optimizer side of a run: the learning rate derived for this job, the schedule, mixed precision, the step.

Kept together because they must stay consistent: the optimizer, its schedule (built for this job's world size
and batches per epoch) and the AMP gradient scaler are saved and restored together, and a run continued on
another number of processes rebuilds the schedule for that number (``load_state_dict``).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import ReduceLROnPlateau

from ..config.sections.training import LoopSection
from ..config.sections.optimizer import OptimizerSection, SchedulerSection
from ..config.sections.loaders import TrainingLoaderSection
from ..common.errors import ConfigError
from ..common.logging_utils import get_logger, rank_zero_warn
from .schedules import build_scheduler, fast_forward, fit_schedule_to_num_epochs, scheduler_steps_per_epoch

logger = get_logger("training")  # the run's own lines, in one channel whatever module writes them


def build_named(key: str, constructor: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a constructor named in the config; arguments it rejects are reported as that key's error."""
    try:
        return constructor(*args, **kwargs)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{key}: {getattr(constructor, '__name__', constructor)} rejects the configured "
                          f"arguments: {err}") from None


def autocast(amp: str, device_type: str):
    """The forward pass's precision under ``training.amp`` (``off``, ``bf16``, ``fp16``) on ``device_type``."""
    if amp == "off":
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=torch.bfloat16 if amp == "bf16" else torch.float16)


def batches_per_epoch(loader: TrainingLoaderSection, train_size: int, world_size: int) -> int:
    """Training batches per process and epoch, as the DataLoader of prepare_dataloaders will have."""
    per_rank = math.ceil(train_size / world_size)  # DistributedSampler pads every rank to the same length
    return per_rank // loader.batch_size if loader.drop_last else math.ceil(per_rank / loader.batch_size)


class Optimization:
    """Optimizer, scheduler and gradient scaler of one run, and the optimizer step.

    Args:
        model: the plain model whose parameters are optimised.
        optimizer, scheduler, loop: the config's sections of the same names.
        derived: ``derive_hyperparameters``'s result for this job (effective batch, scaled LR, warmup).
        monitored_mode: early stopping's mode, which ReduceLROnPlateau follows.
        world_size, num_batches: the job's processes, and training batches per process and epoch.
    """

    def __init__(self, model: torch.nn.Module, *, optimizer: OptimizerSection, scheduler: SchedulerSection,
                 loop: LoopSection, derived: dict[str, Any], monitored_mode: str, world_size: int, num_batches: int):
        self.settings, self.schedule, self.loop = optimizer, scheduler, loop
        self.derived, self.monitored_mode = derived, monitored_mode
        self.world_size, self.num_batches = world_size, num_batches
        self.parameters = list(model.parameters())
        self.optimizer = build_named("training.optimizer_kwargs", optimizer.type, self.parameters, *optimizer.args,
                                     **{**optimizer.kwargs, "lr": derived["lr"]})
        self.scheduler = build_scheduler(self.optimizer, scheduler, loop, derived, num_batches, monitored_mode)
        self.scaler = torch.amp.GradScaler("cuda") if loop.amp == "fp16" else None

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def autocast(self, device_type: str):
        return autocast(self.loop.amp, device_type)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def step(self) -> None:
        """Clip, step, zero the gradients; a per-step schedule advances."""
        if self.scaler:
            self.scaler.unscale_(self.optimizer)  # clip the true gradients, not the scaled ones
        if self.loop.grad_clip_norm:
            torch.nn.utils.clip_grad_norm_(self.parameters, self.loop.grad_clip_norm)
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.scheduler is not None and self.schedule.interval == "step":
            self.scheduler.step()

    def end_epoch(self, monitored_value: float) -> None:
        """Every rank, before the epoch's checkpoint, so that a resumed run continues the schedule."""
        if isinstance(self.scheduler, ReduceLROnPlateau):
            self.scheduler.step(monitored_value)
        elif self.scheduler is not None and self.schedule.interval == "epoch":
            self.scheduler.step()

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
                "scaler": self.scaler.state_dict() if self.scaler else None}

    def load_state_dict(self, state: dict[str, Any], *, world_size: int, derived: dict[str, Any],
                        completed_epochs: int, planned_epochs: int) -> None:
        """Restore a checkpoint's state, written by a job of ``world_size`` processes that had derived
        ``derived`` and planned ``planned_epochs``, after ``completed_epochs`` epochs."""
        if world_size == self.world_size:
            if self.scheduler is not None and state.get("scheduler"):
                self.scheduler.load_state_dict(state["scheduler"])
            # After the scheduler: building one resets the optimizer's LR (SequentialLR does).
            self.optimizer.load_state_dict(state["optimizer"])
            self._fit_schedule_to_num_epochs(planned_epochs)
        else:
            self._rebuild_for_this_world_size(state["optimizer"], world_size, derived, completed_epochs)
        if self.scaler and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])

    def _rebuild_for_this_world_size(self, optimizer_state: dict[str, Any], old_world: int, old: dict[str, Any],
                                     completed_epochs: int) -> None:
        """A run continued on another number of processes: the optimizer's moments carry over, but what
        depends on the world size (effective batch, scaled LR and warmup, steps per epoch) is this job's,
        and the schedule is rebuilt for it and advanced to where the run stood."""
        self.optimizer.load_state_dict(optimizer_state)
        for group in self.optimizer.param_groups:  # the LR this job derived, before the schedule scales it
            group["lr"] = group["initial_lr"] = self.derived["lr"]
        self.scheduler = build_scheduler(self.optimizer, self.schedule, self.loop, self.derived, self.num_batches,
                                         self.monitored_mode)
        if self.scheduler is not None:
            steps = scheduler_steps_per_epoch(self.schedule, self.loop, self.num_batches)
            fast_forward(self.scheduler, completed_epochs * steps)
        rank_zero_warn(logger, f"continuing a run of {old_world} processes on {self.world_size}: effective "
                               f"batch {old.get('effective_batch_size')} -> {self.derived['effective_batch_size']}, "
                               f"learning rate {old.get('lr', float('nan')):.3g} -> {self.derived['lr']:.3g} "
                               f"(training.lr_scaling: {self.settings.lr_scaling}), warmup "
                               f"{old.get('warmup_epochs')} -> {self.derived['warmup_epochs']} epochs")

    def _fit_schedule_to_num_epochs(self, planned_epochs: int) -> None:
        """A resume that changes num_epochs: a cosine whose length follows it is re-planned for the new length."""
        done = fit_schedule_to_num_epochs(self.scheduler, self.schedule, self.loop, self.derived, self.num_batches,
                                          planned_epochs)
        if done:
            logger.info(f"training.num_epochs: the resumed run was planned for {planned_epochs} epochs, now "
                        f"{self.loop.num_epochs}; {done}")


def check_unused_parameters(model: torch.nn.Module, core_model: torch.nn.Module, find_unused: bool) -> None:
    """After the first backward of a DDP model: name parameters that got no gradient (DDP would otherwise
    fail later with 'Expected to have finished reduction in the prior iteration')."""
    if not isinstance(model, DistributedDataParallel):
        return
    unused = [n for n, p in core_model.named_parameters() if p.requires_grad and p.grad is None]
    if unused and not find_unused:
        raise ConfigError(
            f"these model parameters received no gradient: {', '.join(unused)}. DDP must be told: set "
            "parallel.find_unused_parameters: true (slower), or remove the parameters from the model")
    if not unused and find_unused:
        rank_zero_warn(logger, "parallel.find_unused_parameters is true but every parameter received a "
                               "gradient; set it to false: DDP is faster without the extra graph traversal")
