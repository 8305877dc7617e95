"""The run as the callbacks see it: one object that every hook receives, and through which callbacks pass
results to each other (the baselines' predictions to the destroyed-set curves, the figures to W&B)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch


@dataclass
class RunState:
    """What a hook may read (and, for the shared results below, write). The trainer keeps it current.

    Attributes:
        runtime: this process's place in the job: ``rank``, ``world_size``, ``is_main``, ``device``.
        config: the run's resolved config (read it; changing it changes nothing).
        run_dir: the run directory (rank 0 writes into it).
        model: the plain model, not wrapped by DDP: its weights are the run's.
        optimizer: the optimizer; ``scheduler``: the LR schedule (None without one).
        task: the task (classification or regression) with its metric names.
        dataset, split: the data and its ``train``/``val``/``test`` indices.
        derived: the hyper-parameters derived at the start (scaled LR, effective batch size, warmup).
        epoch: the current epoch (the last completed one after training).
        history: one record per completed epoch, as in metrics.csv.
        summary: what summary.json holds (rank 0 writes it).
        best_state: the best epoch's weights (best.pt's), which ``run_test`` evaluates.
        test_predictions: after the test, ``(prediction, truth, flip fraction)`` per test set (for a node task the
            lists of its elements' predicted and true labels; for a relation task the positions of its marked and
            of its changed pairs in the set's candidate pairs).
        test_order: the dataset index of each of ``test_predictions``.
        baseline_predictions: after the test, each baseline's predictions on the test split.
        figures: figure name -> PNG file, as they are drawn.
    """

    runtime: Any
    config: dict[str, Any]
    run_dir: Path
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    task: Any
    dataset: Any
    split: dict[str, list[int]]
    derived: dict[str, Any] = field(default_factory=dict)
    epoch: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    best_state: dict[str, torch.Tensor] | None = None
    test_predictions: list[tuple[Any, Any, float]] = field(default_factory=list)
    test_order: list[int] = field(default_factory=list)
    baseline_predictions: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Path] = field(default_factory=dict)
