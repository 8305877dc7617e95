"""Figures of a run (rank 0, with ``training.figures``): training curves when training ends; the test's
confusion matrix (classification) or predicted against true values (regression) after the test. PNGs in
``run_dir/figures/``, drawn by the ``Figures`` callback (``callbacks/results.py``); the analyses draw theirs
(``analyses.figures``) with the helpers here.

Drawn without pyplot (no backend switch), so a notebook's inline plots keep working.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..common.files import atomic_replace

FIGURE_DIR = "figures"


def new_figure(width: float, height: float, columns: int = 1):
    """A figure drawn without pyplot: no backend switch, so a notebook's inline plots keep working."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height))
    return figure, figure.subplots(1, columns)


def save_figure(figure, path: Path) -> Path:
    figure.tight_layout()
    atomic_replace(Path(path), lambda tmp: figure.savefig(tmp, format="png", dpi=90))
    return Path(path)


def plot_training_curves(rows: list[dict[str, Any]], path: Path, metric: str = "val_accuracy") -> Path:
    """Loss, a validation ``metric`` (the task's first after the loss) and learning rate per epoch."""
    from matplotlib.ticker import MaxNLocator

    epochs = [int(r["epoch"]) for r in rows]
    series = lambda key: [float(r[key]) for r in rows]  # noqa: E731
    figure, axes = new_figure(13, 3.6, columns=3)
    axes[0].plot(epochs, series("train_loss"), label="train")
    axes[0].plot(epochs, series("val_loss"), label="validation")
    axes[0].set(xlabel="epoch", ylabel="loss", title="Loss")
    axes[0].legend()
    name = metric.removeprefix("val_")
    axes[1].plot(epochs, series(metric), color="tab:green")
    axes[1].set(xlabel="epoch", ylabel=name, title=f"Validation {name}")
    if name in ("accuracy", "precision", "recall", "f1"):
        axes[1].set_ylim(0, 1)
    axes[2].plot(epochs, series("lr"), color="tab:orange")
    axes[2].set(xlabel="epoch", ylabel="learning rate", title="Learning rate")
    axes[2].ticklabel_format(axis="y", useOffset=False, style="sci", scilimits=(-3, 3))
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole numbers
    return save_figure(figure, path)


def plot_confusion_matrix(matrix: list[list[int]], class_names: list[str], path: Path) -> Path:
    figure, ax = new_figure(1.1 * len(class_names) + 2.5, 1.0 * len(class_names) + 2)
    ax.imshow(matrix, cmap="Blues")
    ax.set(xticks=range(len(class_names)), yticks=range(len(class_names)), xlabel="predicted", ylabel="true",
           title="Test confusion matrix")
    ax.set_xticklabels(class_names, rotation=45, ha="right")
    ax.set_yticklabels(class_names)
    largest = max((max(row) for row in matrix), default=0)
    for i, row in enumerate(matrix):
        for j, count in enumerate(row):  # white on dark cells, black on light ones
            ax.text(j, i, str(count), ha="center", va="center", color="white" if count > largest / 2 else "black")
    return save_figure(figure, path)


def plot_predictions(pairs: list[tuple[float, float]], path: Path) -> Path:
    """Regression: predicted against true value of every test set, with the diagonal of perfect predictions."""
    predicted, true = zip(*pairs) if pairs else ((), ())
    figure, ax = new_figure(4.5, 4.2)
    ax.scatter(true, predicted, s=8, alpha=0.6)
    low, high = (min(true + predicted), max(true + predicted)) if pairs else (0.0, 1.0)
    ax.plot([low, high], [low, high], color="black", linewidth=0.8, label="predicted = true")
    ax.set(xlabel="true", ylabel="predicted", title="Test predictions")
    ax.legend()
    return save_figure(figure, path)
