"""Checkpoints of a run, written by rank 0 (``runs/checkpoint_files.py`` makes every write atomic and keeps
``previous.pt``).

A checkpoint holds all a resumed run needs (``training/trainer.py`` assembles it): the plain model's weights,
the optimizer, schedule and gradient scaler, the last completed epoch and, inside an epoch, how far it got,
every callback's state, the config, the world size and the derived hyper-parameters. When: at every epoch end
``last.pt``, ``best.pt`` when the early-stopping metric improved, ``epoch_K.pt`` every ``checkpoint_at``
epochs; inside an epoch every ``checkpoint_every_n_steps`` optimizer steps and when the run is interrupted.
"""

from __future__ import annotations

from typing import Any, Callable

from ..config.sections.training import CheckpointSection
from ..runs.artifacts import CHECKPOINT_DIR
from ..runs.checkpoint_files import save_checkpoint, save_last_checkpoint
from ..runs.resume import forget_run
from .base import Callback, Decision
from .early_stopping import EarlyStopping
from .state import RunState

# (last completed epoch, where a mid-epoch checkpoint stands or None) -> the checkpoint's contents
Contents = Callable[[int, "dict[str, Any] | None"], "dict[str, Any]"]


class Checkpointing(Callback):
    """Rank 0 saves the epoch's checkpoints (after the metrics row: a resume drops rows after its checkpoint)."""

    main_process_only = True

    def __init__(self, contents: Contents, early_stopping: EarlyStopping, settings: CheckpointSection,
                 job_token: str | None):
        self.contents, self.early_stopping = contents, early_stopping
        self.settings, self.job_token = settings, job_token

    def on_epoch_end(self, state: RunState, record: dict[str, Any]) -> None:
        self.save(state, record["epoch"], improved=self.early_stopping.improved)

    def on_fit_end(self, state: RunState, decision: Decision) -> None:
        forget_run(self.settings, self.job_token)  # finished: a later job with the same token starts afresh

    def save(self, state: RunState, epoch: int, improved: bool, in_epoch: dict[str, Any] | None = None) -> None:
        """last.pt, and best.pt / epoch_K.pt when due. ``epoch``: the last completed epoch; ``in_epoch``: where
        a mid-epoch checkpoint stands in the next."""
        contents = self.contents(epoch, in_epoch)
        folder = state.run_dir / CHECKPOINT_DIR
        if improved:
            save_checkpoint(folder / "best.pt", contents)
            state.best_state = {k: v.detach().cpu().clone() for k, v in contents["model"].items()}
        save_last_checkpoint(folder, contents)
        every = self.settings.every_k_epochs
        if every and not in_epoch and (epoch + 1) % every == 0:
            save_checkpoint(folder / f"epoch_{epoch}.pt", contents)

    def save_in_epoch(self, state: RunState, epoch: int, completed_batches: int, train_totals: list[float]) -> None:
        """A checkpoint inside ``epoch`` after ``completed_batches`` batches, with the epoch's loss sums over
        every rank so far (a resumed epoch continues them)."""
        self.save(state, epoch - 1, improved=False, in_epoch={
            "epoch": epoch, "completed_batches": completed_batches, "train_totals": train_totals})
