"""What an analysis is to a run: a callback that reads the test's predictions (the model's and its rivals') after the
test, and adds its numbers to the result and its figures to the run's folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ..callbacks.base import Callback
from ..callbacks.state import RunState
from ..evaluation.figures import FIGURE_DIR


class Analysis(Callback):
    """A ``Callback`` run on rank 0 after the test's rivals and before the writers (``Callback.analysis``), however
    it was switched on (a config's ``callbacks:``, a task's declared rivals or analyses): so it sees their
    predictions, and the summary, the log and W&B see what it adds."""

    analysis = True
    main_process_only = True

    @staticmethod
    def add_figure(state: RunState, name: str, plot: Callable[..., Path], *data: Any, **options: Any) -> None:
        """``plot(*data, <run_dir>/figures/<name>.png, **options)`` with ``training.figures`` on, recorded in
        ``state.figures``."""
        if state.config["training"]["figures"]:
            state.figures[name] = plot(*data, state.run_dir / FIGURE_DIR / f"{name}.png", **options)
