"""Checkpoints of a run, and continuing a run from them.

What a checkpoint holds: the plain model's weights, the optimizer, schedule and gradient scaler
(``optimization``), the last completed epoch and, inside an epoch, how far it got, every callback's state
(early stopping, the W&B run id, the users' own), the config, the world size and the derived
hyper-parameters. All a resumed run needs, nothing more.

When rank 0 writes one (``runs/checkpoint_files.py`` makes every write atomic and keeps ``previous.pt``): at every epoch
end ``last.pt``, ``best.pt`` when the early-stopping metric improved, ``epoch_K.pt`` every
``checkpoint_at`` epochs; inside an epoch every ``checkpoint_every_n_steps`` optimizer steps and when the
run is interrupted (SIGTERM, a resumable vote). Which run a job continues is ``runs/resume.py``'s business.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..callbacks import Callback, Decision
from ..runs.checkpoint_files import load_checkpoint, load_resume_checkpoint, save_checkpoint, save_last_checkpoint
from ..config.schema import dump_config, load_config, load_yaml_text
from ..errors import ConfigError
from ..logging_utils import get_logger, rank_zero_warn
from ..runs.resume import forget_run
from ..runs.artifacts import CHECKPOINT_DIR, MetricsCSV

if TYPE_CHECKING:
    from .trainer import Trainer

logger = get_logger("training")  # the run's own lines, in one channel whatever module writes them


class Checkpointing(Callback):
    """Rank 0 saves the epoch's checkpoints (after the metrics row: a resume drops rows after its checkpoint)."""

    main_process_only = True

    def on_epoch_end(self, trainer: "Trainer", record: dict[str, Any]) -> None:
        save_checkpoints(trainer, record["epoch"], improved=trainer.early_stopping.improved)

    def on_fit_end(self, trainer: "Trainer", decision: Decision) -> None:
        forget_run(trainer.tcfg, trainer.job_token)  # finished: a later job with the same token starts afresh


def checkpoint_state(trainer: "Trainer", epoch: int, in_epoch: dict[str, Any] | None = None) -> dict[str, Any]:
    """``epoch``: the last completed epoch; ``in_epoch``: where a mid-epoch checkpoint stands in the next."""
    return {
        "in_epoch": in_epoch,
        "model": trainer.core_model.state_dict(),  # the plain model: loadable without DDP
        **trainer.optimization.state_dict(),
        "epoch": epoch,
        "callbacks": trainer.callbacks.state_dict(),
        "config_yaml": dump_config(trainer.config),
        "world_size": trainer.runtime.world_size,
        "derived": trainer.optimization.derived,
    }


def save_checkpoints(trainer: "Trainer", epoch: int, improved: bool, in_epoch: dict[str, Any] | None = None) -> None:
    """Rank 0: last.pt, and best.pt / epoch_K.pt when due."""
    state = checkpoint_state(trainer, epoch, in_epoch)
    folder, every = trainer.run_dir / CHECKPOINT_DIR, trainer.tcfg["checkpoint_at"]
    if improved:
        save_checkpoint(folder / "best.pt", state)
        trainer.best_state = {k: v.detach().cpu().clone() for k, v in state["model"].items()}
    save_last_checkpoint(folder, state)
    if every and not in_epoch and (epoch + 1) % every == 0:
        save_checkpoint(folder / f"epoch_{epoch}.pt", state)


def save_in_epoch(trainer: "Trainer", epoch: int, completed_batches: int, train_totals: list[float]) -> None:
    """Rank 0: a checkpoint inside ``epoch`` after ``completed_batches`` batches, with the epoch's loss sums
    over every rank so far (a resumed epoch continues them)."""
    save_checkpoints(trainer, epoch - 1, improved=False, in_epoch={
        "epoch": epoch, "completed_batches": completed_batches, "train_totals": train_totals})


def read_resume_state(run_dir: Path, config: dict[str, Any], device: torch.device) -> dict[str, Any]:
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
    return state


def restore(trainer: "Trainer", state: dict[str, Any]) -> None:
    """Continue a run from its last checkpoint: weights, optimizer and schedule, callbacks, epoch, records."""
    trainer.core_model.load_state_dict(state["model"])
    old_world = state.get("world_size", trainer.runtime.world_size)
    trainer.optimization.load_state_dict(
        state, world_size=old_world, derived=state.get("derived") or {}, completed_epochs=state["epoch"] + 1,
        planned_epochs=load_yaml_text(state["config_yaml"])["training"]["num_epochs"])
    # Checkpoints written before callbacks existed kept these two states at the top level.
    legacy = {"early_stopping": state.get("early_stopping"), "wandb": {"run_id": state.get("wandb_run_id") or None}}
    trainer.callbacks.load_state_dict(state.get("callbacks") or legacy)
    trainer.epoch, trainer.start_epoch = state["epoch"], state["epoch"] + 1
    in_epoch = state.get("in_epoch")
    if in_epoch and old_world != trainer.runtime.world_size:
        rank_zero_warn(logger, f"the checkpoint stands inside epoch {in_epoch['epoch']} of a run on {old_world} "
                               f"processes; on {trainer.runtime.world_size} the batches differ, so that epoch "
                               "starts again from its first batch")
    elif in_epoch:  # a mid-epoch checkpoint: continue that epoch after its completed batches
        trainer.start_epoch = in_epoch["epoch"]
        trainer.resume_in_epoch = (in_epoch["completed_batches"], in_epoch["train_totals"])
    best = trainer.run_dir / CHECKPOINT_DIR / "best.pt"
    if best.is_file():
        trainer.best_state = load_checkpoint(best)["model"]
    _restore_records(trainer)
    first_batch = trainer.resume_in_epoch[0]
    logger.info(f"resuming {trainer.run_dir} at epoch {trainer.start_epoch}"
                + (f", batch {first_batch}" if first_batch else ""))


def _restore_records(trainer: "Trainer") -> None:
    """The summary and history of the epochs before the resumed one; later rows (written after the
    checkpoint) are dropped."""
    summary_file = trainer.run_dir / "summary.json"
    if summary_file.is_file():  # keep what the interrupted run reported until it is superseded
        trainer.summary = {**json.loads(summary_file.read_text()), **trainer.summary}
    metrics_csv = MetricsCSV(trainer.run_dir / "metrics.csv")
    rows = [r for r in metrics_csv.rows() if int(r["epoch"]) < trainer.start_epoch]
    trainer.history = [{k: (float(v) if k != "epoch" else int(v)) for k, v in r.items() if v != ""} for r in rows]
    if trainer.runtime.is_main:
        metrics_csv.keep_epochs_before(trainer.start_epoch)
