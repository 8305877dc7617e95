"""What rank 0 adds after training and testing in every run: the baselines fitted and scored beside the model (the
rivals of a task with one output per set), and the run's figures (PNGs in ``run_dir/figures/``). What a study asks
beyond them (the node and relation tasks' rivals, the destroyed-set curves, the recall per kind and their figures) are
analyses (``QuantumGrav.analyses``), loaded only where a run switches them on."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ..evaluation.baselines import flatten_baselines, predict_baselines, score_baselines
from ..evaluation.figures import FIGURE_DIR, plot_confusion_matrix, plot_predictions, plot_training_curves
from ..tasks.classification import ClassificationTask
from .base import Callback, Decision
from .state import RunState


class Baselines(Callback):
    """After the test (rank 0, with ``testing.baselines``): the baselines (with ``testing.strongest_baseline`` the
    strongest rival too) fitted on the training split and scored on the test split, next to the model's result. Their predictions on the test split are kept in
    ``state.baseline_predictions`` (the destroyed-set curves compare them with the model's)."""

    main_process_only = True

    def on_test_end(self, state: RunState, result: dict[str, Any]) -> None:
        if getattr(state.dataset[0], "invariants", None) is None:  # the generator's per-set invariants
            return
        classification = isinstance(state.task, ClassificationTask)
        features, strongest = state.config["testing"]["strong_baseline"], state.config["testing"]["strongest_baseline"]
        test = predict_baselines(state.dataset, state.split["train"], state.split["test"],
                                 "classifier" if classification else "regressor", features, strongest)
        baselines = score_baselines(test.estimator, test.truth, test.predictions,
                                    state.task.num_classes if classification else None, features, test.positive_scores)
        result.update(**flatten_baselines(baselines), baselines=baselines)
        state.baseline_predictions = test.predictions


class Figures(Callback):
    """The run's own figures (rank 0, with ``training.figures``): the training curves when training ends, the test's
    confusion matrix (classification) or its predictions against the truth (regression); the analyses draw theirs."""

    main_process_only = True

    def on_fit_end(self, state: RunState, decision: Decision) -> None:
        if state.history:
            self._draw(state, "training_curves", plot_training_curves, state.history,
                       metric=f"val_{state.task.metric_names[1]}")

    def on_test_end(self, state: RunState, result: dict[str, Any]) -> None:
        if "confusion_matrix" in result:
            self._draw(state, "confusion_matrix", plot_confusion_matrix, result["confusion_matrix"],
                       result["class_names"])
        else:
            self._draw(state, "predictions", plot_predictions, [(p, t) for p, t, _ in state.test_predictions])

    @staticmethod
    def _draw(state: RunState, name: str, plot: Callable[..., Path], *data: Any, **options: Any) -> None:
        state.figures[name] = plot(*data, state.run_dir / FIGURE_DIR / f"{name}.png", **options)
