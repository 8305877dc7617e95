"""Learning-rate rules: scaling with the effective batch size, warmup, the configured schedule.

The usual DDP scaling rules: when the effective batch grows k-fold (more processes, more
accumulation), scale the learning rate by k (linear) or sqrt(k), and stretch the
warmup by the same factor. The reference is ``training.reference_batch_size``
(default: the batch of one process without accumulation). Each function takes the typed sections it
reads (``config.sections``: ``optimizer``, ``scheduler``, ``loop``).

A resumed run may change ``num_epochs``; a cosine whose length follows it is then re-planned for
the new length (``fit_schedule_to_num_epochs``), so extending a finished run does not restart
its learning rate from zero.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.optim.lr_scheduler import ConstantLR, CosineAnnealingLR, LinearLR, ReduceLROnPlateau, SequentialLR

from ..config.layout import ConfigSections
from ..config.sections.training import LoopSection
from ..config.sections.optimizer import SchedulerSection
from ..common.errors import ConfigError


def derive_hyperparameters(sections: ConfigSections, world_size: int) -> dict[str, Any]:
    """Effective batch size, scaled learning rate and warmup of a job of ``world_size`` processes; logged and
    stored in the run's config. ``sections``: a config's ``sections`` (``QG.load_config(...).sections``)."""
    per_process = sections.loaders.training.batch_size
    effective = per_process * sections.loop.accumulation_steps * world_size
    reference = sections.optimizer.reference_batch_size or per_process
    ratio = effective / reference
    factor = {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[sections.optimizer.lr_scaling]
    base_lr = float(sections.optimizer.kwargs.get("lr", 1e-3))
    return {
        "effective_batch_size": effective,
        "reference_batch_size": reference,
        "lr_scale_factor": factor,
        "base_lr": base_lr,
        "lr": base_lr * factor,
        "warmup_epochs": int(round(sections.scheduler.warmup_epochs * factor)),
    }


def schedule_spans_num_epochs(scheduler: SchedulerSection) -> bool:
    """True when the schedule's length is derived from num_epochs (CosineAnnealingLR without T_max)."""
    return scheduler.type is CosineAnnealingLR and "T_max" not in scheduler.kwargs and not scheduler.args


def scheduler_steps_per_epoch(scheduler: SchedulerSection, loop: LoopSection, batches_per_epoch: int) -> int:
    if scheduler.interval == "epoch":
        return 1
    return math.ceil(batches_per_epoch / loop.accumulation_steps)


def build_scheduler(optimizer: torch.optim.Optimizer, scheduler: SchedulerSection, loop: LoopSection,
                    derived: dict[str, Any], batches_per_epoch: int, monitored_mode: str = "min"):
    """The configured scheduler, preceded by a linear warmup when ``warmup_epochs`` > 0.

    The scheduler steps once per epoch or once per optimizer step (``scheduler_interval``);
    warmup is counted in the same unit. CosineAnnealingLR without ``T_max`` decays over the
    epochs (or steps) after the warmup. ReduceLROnPlateau is stepped with the early-stopping
    metric, once per epoch, and gets its mode (``monitored_mode``, early_stopping.mode): in its
    default mode "min" a rising val_accuracy would count as no improvement and cut the LR.
    A constructor that rejects the configured arguments is a ConfigError.
    """
    per_epoch = scheduler_steps_per_epoch(scheduler, loop, batches_per_epoch)
    warmup = derived["warmup_epochs"] * per_epoch
    scheduler_type = scheduler.type
    on_plateau = isinstance(scheduler_type, type) and issubclass(scheduler_type, ReduceLROnPlateau)
    if on_plateau and (warmup or scheduler.interval == "step"):
        raise ConfigError("training.scheduler_type: ReduceLROnPlateau steps once per epoch on the validation "
                          "metric; use scheduler_interval: epoch and warmup_epochs: 0 with it")
    main = None
    if scheduler_type is not None:
        kwargs = dict(scheduler.kwargs)
        if on_plateau:
            kwargs["mode"] = _plateau_mode(kwargs.get("mode"), monitored_mode)
        if schedule_spans_num_epochs(scheduler):
            kwargs["T_max"] = max(1, loop.num_epochs * per_epoch - warmup)
        try:
            main = scheduler_type(optimizer, *scheduler.args, **kwargs)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"training.scheduler_kwargs: {scheduler_type.__name__} rejects "
                              f"args={list(scheduler.args)} kwargs={kwargs}: {err}") from None
    if warmup == 0:
        return main
    ramp = LinearLR(optimizer, start_factor=1.0 / (warmup + 1), end_factor=1.0, total_iters=warmup)
    after = main or ConstantLR(optimizer, factor=1.0, total_iters=0)
    return SequentialLR(optimizer, [ramp, after], milestones=[warmup])


def _plateau_mode(configured: Any, monitored_mode: str) -> str:
    if configured is not None and configured != monitored_mode:
        raise ConfigError(f"training.scheduler_kwargs.mode: ReduceLROnPlateau is stepped with the early-stopping "
                          f"metric, whose mode is '{monitored_mode}', got '{configured}'; remove mode from "
                          "scheduler_kwargs (it then follows early_stopping.metric)")
    return monitored_mode


def fit_schedule_to_num_epochs(scheduler, settings: SchedulerSection, loop: LoopSection, derived: dict[str, Any],
                               batches_per_epoch: int, planned_epochs: int) -> str | None:
    """Re-plan a restored cosine for a resumed run's new ``num_epochs``; returns what was done (or None).

    The cosine whose length follows num_epochs (CosineAnnealingLR without ``T_max``) is restored from
    the checkpoint with the length of the run as first planned. Left so, a longer run would go past
    its end, where a cosine is periodic: the LR would climb from ``eta_min`` again. Instead the
    schedule follows the new ``num_epochs``: from the resumed epoch on, the LR is that of a run
    planned for the new ``num_epochs`` from the start (the warmup unchanged), decaying to ``eta_min``
    at the new last epoch. A finished 40-epoch run extended to 45 thus continues at the LR a
    45-epoch run has at epoch 40, not at zero. Call it after the scheduler's and the optimizer's
    states are restored.
    """
    if scheduler is None or not schedule_spans_num_epochs(settings) or planned_epochs == loop.num_epochs:
        return None
    per_epoch = scheduler_steps_per_epoch(settings, loop, batches_per_epoch)
    warmup = derived["warmup_epochs"] * per_epoch
    end = loop.num_epochs * per_epoch  # optimizer steps of the whole run, as planned now
    if scheduler.last_epoch >= end:
        return None  # nothing left to train
    cosine = scheduler._schedulers[-1] if isinstance(scheduler, SequentialLR) else scheduler
    cosine.T_max = max(1, end - warmup)
    if scheduler.last_epoch >= warmup:  # the cosine is under way: continue from its point on the new curve
        progress = (1 + math.cos(math.pi * cosine.last_epoch / cosine.T_max)) / 2
        for group, base_lr in zip(cosine.optimizer.param_groups, cosine.base_lrs):
            # CosineAnnealingLR's recursive form continues from group["lr"].
            group["lr"] = cosine.eta_min + (base_lr - cosine.eta_min) * progress
        cosine._last_lr = [group["lr"] for group in cosine.optimizer.param_groups]
    return (f"the cosine schedule follows the new length: LR {cosine.optimizer.param_groups[0]['lr']:.3g} now, "
            f"{cosine.eta_min:g} at epoch {loop.num_epochs - 1}")


def fast_forward(scheduler, steps: int) -> None:
    """Advance a freshly built scheduler by ``steps`` of its unit (epochs or optimizer steps), so that
    it stands where the run being continued stood, in this run's own terms (batches per epoch, LR)."""
    import warnings

    with warnings.catch_warnings():  # "lr_scheduler.step() before optimizer.step()": intended here
        warnings.simplefilter("ignore", UserWarning)
        for _ in range(steps):
            scheduler.step()
