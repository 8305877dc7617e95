"""Continuing a run from its last checkpoint: check that the config trains the same thing, then put the
weights, optimizer and schedule, callbacks, epoch and records back."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..callbacks.base import CallbackList
from ..callbacks.state import RunState
from ..config.schema import load_config
from ..config.yaml_io import load_yaml_text
from ..common.errors import ConfigError
from ..common.files import shown_path
from ..common.logging_utils import get_logger, rank_zero_warn
from ..runs.artifacts import CHECKPOINT_DIR, records_before
from ..runs.checkpoint_files import load_checkpoint, load_resume_checkpoint
from .optimization import Optimization

logger = get_logger("training")  # the run's own lines, in one channel whatever module writes them


@dataclass(frozen=True)
class ResumePoint:
    """Where the loop starts: its first epoch, and inside it the batches done with their loss sums."""

    start_epoch: int = 0
    completed_batches: int = 0
    train_totals: list[float] | None = None


@dataclass(frozen=True)
class ResumeState:
    """What a run continues from: its last checkpoint, and the config that wrote it (validated)."""

    checkpoint: dict[str, Any]
    stored: dict[str, Any]


def read_resume_state(run_dir: Path, config: dict[str, Any], device: torch.device) -> ResumeState:
    """The last checkpoint of the run to continue (every rank reads it from the shared run directory), after
    checking that ``config`` trains the same model on the same data for the same task."""
    state, _ = load_resume_checkpoint(run_dir, device)  # last.pt, or previous.pt if it is damaged
    try:  # the stored config is validated like any (a run directory may come from someone else)
        stored = load_config(load_yaml_text(state["config_yaml"]))
    except ConfigError as err:
        raise ConfigError(f"{run_dir}: the config stored in its checkpoint is refused; {err}") from None
    changed = [f"{section}.{key}" for section in ("data", "model", "task")
               for key, value in config[section].items() if key != "root" and value != stored[section][key]]
    changed += ["criterion"] if config["criterion"] is not stored["criterion"] else []
    if changed:
        training = config["training"]
        source = "training.resume" if training["resume"] else "training.run_name" if training["run_name"] else ""
        raise ConfigError(f"{source or run_dir}: this config changes {', '.join(changed)} of the run being "
                          f"continued ({run_dir}); a resumed run trains the same model on the same data for "
                          f"the same task. Resume with the run's own config (--config {run_dir / 'config.yaml'} "
                          "--resume ...) or start a new run (another training.run_name)")
    return ResumeState(state, stored)


def restore(run: RunState, optimization: Optimization, callbacks: CallbackList, resume: ResumeState) -> ResumePoint:
    """Continue a run from its last checkpoint: weights, optimizer and schedule, callbacks, epoch, records."""
    checkpoint = resume.checkpoint
    run.model.load_state_dict(checkpoint["model"])
    old_world = checkpoint.get("world_size", run.runtime.world_size)
    optimization.load_state_dict(
        checkpoint, world_size=old_world, derived=checkpoint.get("derived") or {},
        completed_epochs=checkpoint["epoch"] + 1, planned_epochs=resume.stored["training"]["num_epochs"])
    # Checkpoints written before callbacks had states of their own kept these two at the top level.
    legacy = {"early_stopping": checkpoint.get("early_stopping"),
              "wandb": {"run_id": checkpoint.get("wandb_run_id") or None}}
    callbacks.load_state_dict(checkpoint.get("callbacks") or legacy)
    run.scheduler = optimization.scheduler  # rebuilt when the resumed run plans other epochs
    run.epoch = checkpoint["epoch"]
    point = ResumePoint(start_epoch=checkpoint["epoch"] + 1)
    in_epoch = checkpoint.get("in_epoch")
    if in_epoch and old_world != run.runtime.world_size:
        rank_zero_warn(logger, f"the checkpoint stands inside epoch {in_epoch['epoch']} of a run on {old_world} "
                               f"processes; on {run.runtime.world_size} the batches differ, so that epoch "
                               "starts again from its first batch")
    elif in_epoch:  # a mid-epoch checkpoint: continue that epoch after its completed batches
        point = ResumePoint(in_epoch["epoch"], in_epoch["completed_batches"], in_epoch["train_totals"])
    best = run.run_dir / CHECKPOINT_DIR / "best.pt"
    if best.is_file():
        run.best_state = load_checkpoint(best)["model"]
    # The summary and history of the epochs before the resumed one; what the interrupted run reported stays
    # until it is superseded.
    summary, run.history[:] = records_before(run.run_dir, point.start_epoch, prune=run.runtime.is_main)
    run.summary.update({**summary, **run.summary})
    logger.info(f"resuming {shown_path(run.run_dir)} at epoch {point.start_epoch}"
                + (f", batch {point.completed_batches}" if point.completed_batches else ""))
    return point

