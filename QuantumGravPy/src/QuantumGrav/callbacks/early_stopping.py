"""Early stopping: a callback whose vote ends the run, and whose whole state fits in a checkpoint, so a
resumed run continues it."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from ..config.sections.early_stopping import EarlyStoppingSection
from .base import Callback, Stop
from .state import RunState
from ..common.logging_utils import get_logger, rank_zero_warn

logger = get_logger("early_stopping")


@dataclass
class EarlyStopping(Callback):
    """Stop when ``metric``, averaged over the last ``window`` epochs, has not improved by ``min_delta`` for
    ``patience`` epochs.

    The average keeps one lucky epoch (a validation set of a few hundred sets has them) from being the best
    and ending the run ``patience`` epochs later; the best epoch is the last of the best window, and best.pt
    its weights. ``window`` 1: each epoch's own value. In the first ``grace`` epochs an epoch without improvement
    does not count toward ``patience`` (upstream QuantumGrav's grace period); the best epoch is tracked as always.

    Every rank updates it with the same record (rank 0's, broadcast), so every rank holds the same state
    and casts the same vote. ``improved`` says whether the last epoch was the best so far (the
    checkpointing writes best.pt then). It tracks the best epoch even when ``enabled`` is false.
    """

    metric: str = "val_loss"
    mode: str = "min"
    patience: int = 5
    min_delta: float = 0.0
    enabled: bool = True
    window: int = 1
    grace: int = 0
    best_value: float = math.nan
    best_epoch: int = -1
    epochs_without_improvement: int = 0
    epochs_seen: int = 0
    recent: list[float] = field(default_factory=list)  # the metric of the last ``window`` epochs
    improved: bool = field(default=False, compare=False)

    state_key = "early_stopping"

    def on_epoch_end(self, state: RunState, record: dict[str, Any]) -> Stop | None:
        self.improved = self.update(record[self.metric], record["epoch"])
        return Stop(self.reason()) if self.should_stop else None

    def is_improvement(self, value: float) -> bool:
        if math.isnan(value):  # a diverged epoch (NaN loss) is never the best one
            return False
        if self.best_epoch < 0:
            return True
        if self.mode == "min":
            return value < self.best_value - self.min_delta
        return value > self.best_value + self.min_delta

    def update(self, value: float, epoch: int) -> bool:
        """Record this epoch's value; True when the mean of the last ``window`` values is the best so far."""
        self.recent = [*self.recent, value][-self.window:]
        value = math.fsum(self.recent) / len(self.recent)
        self.epochs_seen += 1
        if self.is_improvement(value):
            self.best_value, self.best_epoch, self.epochs_without_improvement = value, epoch, 0
            return True
        if self.epochs_seen > self.grace:
            self.epochs_without_improvement += 1
        return False

    @property
    def should_stop(self) -> bool:
        return self.enabled and self.epochs_without_improvement >= self.patience

    def reason(self) -> str:
        averaged = f" (its mean over {self.window} epochs)" if self.window > 1 else ""
        grace = f" after a grace of {self.grace} epoch(s)" if self.grace else ""
        return (f"early stopping: {self.metric} did not improve by more than {self.min_delta} for "
                f"{self.patience} epoch(s){averaged}{grace}; best {self.metric}{averaged}={self.best_value:.4f} at epoch "
                f"{self.best_epoch}")

    def state_dict(self) -> dict:
        state = asdict(self)
        state.pop("improved")
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore the progress only: patience, min_delta, ... come from the config of the resumed run.

        A different metric or mode makes the stored best value meaningless: the count starts afresh."""
        if (state["metric"], state["mode"]) != (self.metric, self.mode):
            rank_zero_warn(logger, f"early_stopping: the resumed run tracked {state['metric']} ({state['mode']}), "
                                   f"this config tracks {self.metric} ({self.mode}); its best value starts afresh")
            return
        for key in ("best_value", "best_epoch", "epochs_without_improvement"):
            setattr(self, key, state[key])
        # absent from checkpoints written before the grace period existed: their epochs all counted, so it is over
        self.epochs_seen = state.get("epochs_seen", self.grace)
        self.recent = list(state.get("recent", []))[-self.window:]  # absent from checkpoints without a window

    @classmethod
    def from_section(cls, section: EarlyStoppingSection) -> "EarlyStopping":
        """The config's ``early_stopping`` section (``sections.early_stopping``), its mode resolved."""
        return cls(section.metric, section.mode, section.patience, section.min_delta, section.enabled, section.window,
                   section.grace)

    @classmethod
    def from_config(cls, es_cfg: dict) -> "EarlyStopping":
        """An ``early_stopping`` mapping written by hand; keys it leaves out keep the defaults above."""
        keys = ("metric", "mode", "patience", "min_delta", "enabled", "window", "grace")
        return cls(**{k: es_cfg[k] for k in keys if k in es_cfg})  # a section written by hand may leave keys out
