"""The run's W&B logging as a callback (rank 0, with ``logger.wandb``); ``runs/wandb_logger.py`` talks to W&B."""

from __future__ import annotations

from typing import Any

from ..runs.wandb_logger import WandbLogger
from .base import Callback
from .state import RunState


class WandbCallback(Callback):
    """The run's W&B logging (rank 0, with ``logger.wandb``): the run opens when training starts (a resumed
    training continues the W&B run of its checkpoint: ``state_dict`` keeps its id), gets the model's size
    and, with ``watch``, its gradients; one history row per epoch (the metrics.csv row); the figures; the
    summary after the test; finished when the trainer closes."""

    main_process_only = True
    state_key = "wandb"

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.run_id: str | None = None
        self.experiment: WandbLogger | None = None
        self._logged_figures: set[str] = set()

    def on_fit_start(self, state: RunState) -> None:
        if self.experiment is None:
            resolved = {**state.config, "derived": state.derived}
            self.experiment = WandbLogger(self.cfg, state.run_dir, resolved, resume_id=self.run_id)
            self.run_id = self.experiment.run_id
        self.experiment.log_model_info(state.summary["parameters"])
        self.experiment.watch(state.model)

    def on_epoch_end(self, state: RunState, record: dict[str, Any]) -> None:
        if self.experiment:
            self.experiment.log_epoch(record, record["epoch"])

    def on_fit_end(self, state: RunState, decision: Any) -> None:
        self._log_new_figures(state)

    def on_test_end(self, state: RunState, result: dict[str, Any]) -> None:
        if self.experiment:
            self._log_new_figures(state)
            self.experiment.log_summary({k: v for k, v in state.summary.items() if not isinstance(v, (list, dict))})

    def _log_new_figures(self, state: RunState) -> None:
        new = {name: path for name, path in state.figures.items() if name not in self._logged_figures}
        if self.experiment and new:  # none with training.figures false: no empty image row
            self.experiment.log_images(new)
            self._logged_figures.update(new)

    def teardown(self, state: RunState) -> None:
        if self.experiment:
            self.experiment.finish()
            self.experiment = None

    def state_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.run_id = state.get("run_id") or None
