"""Figures of a run (rank 0, with ``training.figures``): training curves when training ends; the test's
confusion matrix (classification) or predicted against true values (regression), the destroyed sets
recognised per flip fraction, and for the node task one test set's true and predicted inserted block, after the
test. PNGs in ``run_dir/figures/``, drawn by the ``Figures``
callback (``callbacks/results.py``).

Drawn without pyplot (no backend switch), so a notebook's inline plots keep working.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..common.files import atomic_replace

FIGURE_DIR = "figures"


def _new_figure(width: float, height: float, columns: int = 1):
    """A figure drawn without pyplot: no backend switch, so a notebook's inline plots keep working."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height))
    return figure, figure.subplots(1, columns)


def _save_figure(figure, path: Path) -> Path:
    figure.tight_layout()
    atomic_replace(Path(path), lambda tmp: figure.savefig(tmp, format="png", dpi=90))
    return Path(path)


def plot_training_curves(rows: list[dict[str, Any]], path: Path, metric: str = "val_accuracy") -> Path:
    """Loss, a validation ``metric`` (the task's first after the loss) and learning rate per epoch."""
    from matplotlib.ticker import MaxNLocator

    epochs = [int(r["epoch"]) for r in rows]
    series = lambda key: [float(r[key]) for r in rows]  # noqa: E731
    figure, axes = _new_figure(13, 3.6, columns=3)
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
    return _save_figure(figure, path)


def plot_confusion_matrix(matrix: list[list[int]], class_names: list[str], path: Path) -> Path:
    figure, ax = _new_figure(1.1 * len(class_names) + 2.5, 1.0 * len(class_names) + 2)
    ax.imshow(matrix, cmap="Blues")
    ax.set(xticks=range(len(class_names)), yticks=range(len(class_names)), xlabel="predicted", ylabel="true",
           title="Test confusion matrix")
    ax.set_xticklabels(class_names, rotation=45, ha="right")
    ax.set_yticklabels(class_names)
    largest = max((max(row) for row in matrix), default=0)
    for i, row in enumerate(matrix):
        for j, count in enumerate(row):  # white on dark cells, black on light ones
            ax.text(j, i, str(count), ha="center", va="center", color="white" if count > largest / 2 else "black")
    return _save_figure(figure, path)


def plot_predictions(pairs: list[tuple[float, float]], path: Path) -> Path:
    """Regression: predicted against true value of every test set, with the diagonal of perfect predictions."""
    predicted, true = zip(*pairs) if pairs else ((), ())
    figure, ax = _new_figure(4.5, 4.2)
    ax.scatter(true, predicted, s=8, alpha=0.6)
    low, high = (min(true + predicted), max(true + predicted)) if pairs else (0.0, 1.0)
    ax.plot([low, high], [low, high], color="black", linewidth=0.8, label="predicted = true")
    ax.set(xlabel="true", ylabel="predicted", title="Test predictions")
    ax.legend()
    return _save_figure(figure, path)


def plot_destroyed_by_flip_fraction(curves: dict[str, Any], labels: dict[str, str], path: Path) -> Path:
    """Share of the destroyed test sets recognised, per log-spaced flip-fraction bin (``destroyed_sets``),
    one line per model, at the geometric centre of each bin; empty bins are left out."""
    edges = curves["bin_edges"]
    centres = [(low * high) ** 0.5 for low, high in zip(edges, edges[1:])]
    figure, ax = _new_figure(5.5, 4.0)
    for name, shares in curves["share"].items():
        points = [(x, s) for x, s in zip(centres, shares) if s is not None]
        ax.plot(*zip(*points), marker="o", label=labels.get(name, name))
    for x, count in zip(centres, curves["destroyed_sets"]):  # above the curves: how many sets each point has
        ax.annotate(f"n={count}", (x, 1.08), ha="center", fontsize=7, color="grey")
    ax.set_xscale("log")
    ax.set(xlim=(edges[0], edges[-1]), ylim=(-0.02, 1.15), xlabel="flip fraction (share of pairs flipped)",
           ylabel="share recognised as destroyed", title="Destroyed test sets")
    ax.legend(loc="center left")  # the curves rise from the lower left to the upper right
    return _save_figure(figure, path)


def plot_recall_by_kind(by_kind: dict[str, Any], by_defect_size: dict[str, Any], labels: dict[str, str],
                        path: Path, absent: Sequence[str] = ()) -> Path:
    """Top: each model's recall per kind (``evaluation/kinds.py``); a kind of the data with no test set
    (``absent``) keeps its place, marked "no test set". Below, one panel per kind with a drawn defect, since each has
    its own axis (relations changed, elements of the inserted block, cuts): the recall against the defect's realised
    size at its bins' centres, each bin's count of test sets above it. Each model keeps its colour in every panel; a
    row with nothing to draw says why."""
    from matplotlib.figure import Figure

    defects = list(by_defect_size)
    figure = Figure(figsize=(max(13, 3.6 * len(defects)), 8.6))
    grid = figure.add_gridspec(2, max(len(defects), 1))
    bars = figure.add_subplot(grid[0, :])
    colour = {name: f"C{k}" for k, name in enumerate(by_kind)}  # one colour per model, the same in every panel
    kinds = [*next(iter(by_kind.values())), *absent]
    width = 0.8 / len(by_kind)
    for k, (name, rows) in enumerate(by_kind.items()):
        bars.bar([i + k * width for i in range(len(kinds))], [rows[kind]["recall"] if kind in rows else 0.0
                                                             for kind in kinds], width, color=colour[name],
                 label=labels.get(name, name))
    for i, kind in enumerate(kinds):
        if kind in absent:
            bars.text(i + 0.4 - width / 2, 0.5, "no test set", rotation=90, ha="center", va="center", fontsize=8,
                      color="grey")
    bars.set_xticks([i + 0.4 - width / 2 for i in range(len(kinds))])
    bars.set_xticklabels(kinds, rotation=20, ha="right")
    bars.set(ylim=(0, 1.05), ylabel="recall (share classified correctly)", title="Test sets per kind")
    bars.legend(loc="lower left", fontsize=8)
    if not defects:
        empty = figure.add_subplot(grid[1, 0])
        empty.set(xticks=[], yticks=[])
        label_empty(empty, "no test set of a kind with a drawn defect\n(destroyed, merged and their ambiguous kinds, "
                           "at least 4 sets of one kind): nothing to draw")
    for column, kind in enumerate(defects):
        _plot_recall_by_defect_size(figure.add_subplot(grid[1, column]), kind, by_defect_size[kind], colour, labels)
    return _save_figure(figure, path)


def _plot_recall_by_defect_size(ax, kind: str, models: dict[str, Any], colour: dict[str, str],
                                labels: dict[str, str]) -> None:
    """One kind's panel: each model's recall per bin of the defect's size, and each bin's count of test sets (the
    bins are the kind's test sets by size, the same for every model) above the curves."""
    names = [name for name in colour if name in models]
    rows = models[names[0]]["bins"]
    centres = [(row["low"] * row["high"]) ** 0.5 if row["low"] > 0 else row["high"] / 2 for row in rows]
    for name in names:
        ax.plot(centres, [row["recall"] for row in models[name]["bins"]], marker="o", color=colour[name],
                label=labels.get(name, name))
    for centre, row in zip(centres, rows):
        ax.annotate(f"n={row['sets']}", (centre, 1.08), ha="center", fontsize=7, color="grey")
    if all(centre > 0 for centre in centres):
        ax.set_xscale("log")
    ax.set(ylim=(-0.02, 1.15), xlabel=f"realised {models['size'].replace('_', ' ')}", ylabel="recall", title=kind)
    ax.legend(fontsize=7, loc="lower right")


def label_empty(ax, why: str) -> None:
    """A panel with nothing to draw says so in its middle, instead of standing blank."""
    ax.text(0.5, 0.5, why, transform=ax.transAxes, ha="center", va="center", fontsize=9, color="grey")


def plot_inserted_block(relation: Any, true_block: Any, predicted_block: Any, path: Path, title: str = "") -> Path:
    """One causal set's relation matrix (element i precedes j: a dark cell at row i, column j) with the inserted
    block marked on the diagonal: the true block's elements as squares, the predicted ones as crosses."""
    import numpy as np

    relation, true_block, predicted_block = (np.asarray(a, dtype=bool) for a in (relation, true_block, predicted_block))
    figure, ax = _new_figure(5.2, 5.0)
    ax.imshow(relation, cmap="Greys", vmin=0, vmax=1.6, interpolation="nearest")
    elements = np.arange(len(relation))
    ax.scatter(elements[true_block], elements[true_block], marker="s", s=60, facecolors="none",
               edgecolors="tab:green", linewidths=1.5, label=f"true block ({int(true_block.sum())})")
    ax.scatter(elements[predicted_block], elements[predicted_block], marker="x", s=30, color="tab:red",
               label=f"predicted ({int(predicted_block.sum())})")
    ax.set(xlabel="element j", ylabel="element i", title=title or "Inserted block: i precedes j")
    ax.legend(loc="lower left", fontsize=8)
    return _save_figure(figure, path)
