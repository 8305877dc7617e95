"""Learning-rate rules: scaling with the effective batch size, warmup, the configured schedule.

The usual DDP scaling rules: when the effective batch grows k-fold (more processes, more
accumulation), scale the learning rate by k (linear) or sqrt(k), and stretch the
warmup by the same factor. The reference is ``training.reference_batch_size``
(default: the batch of one process without accumulation).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.optim.lr_scheduler import ConstantLR, CosineAnnealingLR, LinearLR, ReduceLROnPlateau, SequentialLR

from .errors import ConfigError


def derive_hyperparameters(training_cfg: dict[str, Any], world_size: int) -> dict[str, Any]:
    """Effective batch size, scaled learning rate and warmup; logged and stored in the run's config."""
    per_process = training_cfg["batch_size"]
    effective = per_process * training_cfg["accumulation_steps"] * world_size
    reference = training_cfg["reference_batch_size"] or per_process
    ratio = effective / reference
    factor = {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[training_cfg["lr_scaling"]]
    base_lr = float(training_cfg["optimizer_kwargs"].get("lr", 1e-3))
    return {
        "effective_batch_size": effective,
        "reference_batch_size": reference,
        "lr_scale_factor": factor,
        "base_lr": base_lr,
        "lr": base_lr * factor,
        "warmup_epochs": int(round(training_cfg["warmup_epochs"] * factor)),
    }


def schedule_spans_num_epochs(training_cfg: dict[str, Any]) -> bool:
    """True when the schedule's length is derived from num_epochs (CosineAnnealingLR without T_max)."""
    return (training_cfg["scheduler_type"] is CosineAnnealingLR and "T_max" not in training_cfg["scheduler_kwargs"]
            and not training_cfg["scheduler_args"])


def build_scheduler(optimizer: torch.optim.Optimizer, training_cfg: dict[str, Any], derived: dict[str, Any],
                    batches_per_epoch: int):
    """The configured scheduler, preceded by a linear warmup when ``warmup_epochs`` > 0.

    The scheduler steps once per epoch or once per optimizer step (``scheduler_interval``);
    warmup is counted in the same unit. CosineAnnealingLR without ``T_max`` decays over the
    epochs (or steps) after the warmup. ReduceLROnPlateau is stepped with the early-stopping
    metric, once per epoch. A constructor that rejects the configured arguments is a ConfigError.
    """
    per_epoch = 1 if training_cfg["scheduler_interval"] == "epoch" else math.ceil(
        batches_per_epoch / training_cfg["accumulation_steps"])
    warmup = derived["warmup_epochs"] * per_epoch
    scheduler_type = training_cfg["scheduler_type"]
    on_plateau = isinstance(scheduler_type, type) and issubclass(scheduler_type, ReduceLROnPlateau)
    if on_plateau and (warmup or training_cfg["scheduler_interval"] == "step"):
        raise ConfigError("training.scheduler_type: ReduceLROnPlateau steps once per epoch on the validation "
                          "metric; use scheduler_interval: epoch and warmup_epochs: 0 with it")
    main = None
    if scheduler_type is not None:
        kwargs = dict(training_cfg["scheduler_kwargs"])
        if schedule_spans_num_epochs(training_cfg):
            kwargs["T_max"] = max(1, training_cfg["num_epochs"] * per_epoch - warmup)
        try:
            main = scheduler_type(optimizer, *training_cfg["scheduler_args"], **kwargs)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"training.scheduler_kwargs: {scheduler_type.__name__} rejects "
                              f"args={training_cfg['scheduler_args']} kwargs={kwargs}: {err}") from None
    if warmup == 0:
        return main
    ramp = LinearLR(optimizer, start_factor=1.0 / (warmup + 1), end_factor=1.0, total_iters=warmup)
    after = main or ConstantLR(optimizer, factor=1.0, total_iters=0)
    return SequentialLR(optimizer, [ramp, after], milestones=[warmup])


def fast_forward(scheduler, steps: int) -> None:
    """Advance a freshly built scheduler by ``steps`` of its unit (epochs or optimizer steps), so that
    it stands where the run being continued stood, in this run's own terms (batches per epoch, LR)."""
    import warnings

    with warnings.catch_warnings():  # "lr_scheduler.step() before optimizer.step()": intended here
        warnings.simplefilter("ignore", UserWarning)
        for _ in range(steps):
            scheduler.step()
