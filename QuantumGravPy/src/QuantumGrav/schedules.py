"""Learning-rate rules: scaling with the effective batch size, warmup, the configured schedule.

Seed 002's rules: when the effective batch grows k-fold (more processes, more
accumulation), scale the learning rate by k (linear) or sqrt(k), and stretch the
warmup by the same factor. The reference is ``training.reference_batch_size``
(default: the batch of one process without accumulation).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.optim.lr_scheduler import ConstantLR, LinearLR, SequentialLR


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


def build_scheduler(optimizer: torch.optim.Optimizer, training_cfg: dict[str, Any], derived: dict[str, Any],
                    steps_per_epoch: int):
    """The configured scheduler, preceded by a linear warmup when ``warmup_epochs`` > 0.

    The scheduler steps once per epoch or once per optimizer step
    (``scheduler_interval``); warmup is counted in the same unit.
    """
    main = None
    if training_cfg["scheduler_type"] is not None:
        main = training_cfg["scheduler_type"](optimizer, *training_cfg["scheduler_args"],
                                              **training_cfg["scheduler_kwargs"])
    warmup = derived["warmup_epochs"]
    if warmup == 0:
        return main
    if training_cfg["scheduler_interval"] == "step":
        optimizer_steps = math.ceil(steps_per_epoch / training_cfg["accumulation_steps"])
        warmup *= optimizer_steps
    ramp = LinearLR(optimizer, start_factor=1.0 / (warmup + 1), end_factor=1.0, total_iters=warmup)
    after = main or ConstantLR(optimizer, factor=1.0, total_iters=0)
    return SequentialLR(optimizer, [ramp, after], milestones=[warmup])
