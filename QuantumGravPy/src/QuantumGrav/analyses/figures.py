"""The analyses' figures (rank 0, with ``training.figures``), PNGs in ``run_dir/figures/`` beside the run's own
(``evaluation.figures``, whose helpers draw them without pyplot): the destroyed sets recognised per flip fraction
(``destroyed_sets``), the recall per kind and against each defect's size (``kind_breakdown``), and for the node task
one test set's true and predicted inserted block (``InsertedBlockFigure``, the node task's declared analysis)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch_geometric.data import Batch

from ..callbacks.state import RunState
from ..data.orders import transitive_closure
from ..evaluation.figures import new_figure, save_figure
from .base import Analysis


def plot_destroyed_by_flip_fraction(curves: dict[str, Any], labels: dict[str, str], path: Path) -> Path:
    """Share of the destroyed test sets recognised, per log-spaced flip-fraction bin (``analyses.destroyed_sets``),
    one line per model, at the geometric centre of each bin; empty bins are left out."""
    edges = curves["bin_edges"]
    centres = [(low * high) ** 0.5 for low, high in zip(edges, edges[1:])]
    figure, ax = new_figure(5.5, 4.0)
    for name, shares in curves["share"].items():
        points = [(x, s) for x, s in zip(centres, shares) if s is not None]
        ax.plot(*zip(*points), marker="o", label=labels.get(name, name))
    for x, count in zip(centres, curves["destroyed_sets"]):  # above the curves: how many sets each point has
        ax.annotate(f"n={count}", (x, 1.08), ha="center", fontsize=7, color="grey")
    ax.set_xscale("log")
    ax.set(xlim=(edges[0], edges[-1]), ylim=(-0.02, 1.15), xlabel="flip fraction (share of pairs flipped)",
           ylabel="share recognised as destroyed", title="Destroyed test sets")
    ax.legend(loc="center left")  # the curves rise from the lower left to the upper right
    return save_figure(figure, path)


def plot_recall_by_kind(by_kind: dict[str, Any], by_defect_size: dict[str, Any], labels: dict[str, str],
                        path: Path, absent: Sequence[str] = ()) -> Path:
    """Top: each model's recall per kind (``analyses.kind_breakdown``); a kind of the data with no test set
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
    return save_figure(figure, path)


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
    relation, true_block, predicted_block = (np.asarray(a, dtype=bool) for a in (relation, true_block, predicted_block))
    figure, ax = new_figure(5.2, 5.0)
    ax.imshow(relation, cmap="Greys", vmin=0, vmax=1.6, interpolation="nearest")
    elements = np.arange(len(relation))
    ax.scatter(elements[true_block], elements[true_block], marker="s", s=60, facecolors="none",
               edgecolors="tab:green", linewidths=1.5, label=f"true block ({int(true_block.sum())})")
    ax.scatter(elements[predicted_block], elements[predicted_block], marker="x", s=30, color="tab:red",
               label=f"predicted ({int(predicted_block.sum())})")
    ax.set(xlabel="element j", ylabel="element i", title=title or "Inserted block: i precedes j")
    ax.legend(loc="lower left", fontsize=8)
    return save_figure(figure, path)


class InsertedBlockFigure(Analysis):
    """After the test of a node task (its declared analysis), with ``training.figures``: one test set's relation matrix
    with its true and its predicted inserted block, ``figures/inserted_block.png``."""

    def on_test_end(self, state: RunState, result: dict[str, Any]) -> None:
        if state.config["training"]["figures"]:
            *example, title = inserted_block_example(state)
            self.add_figure(state, "inserted_block", plot_inserted_block, *example, title=title)


@torch.no_grad()
def inserted_block_example(state: RunState) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """The first test set with an inserted block (else the first test set): its relation matrix, true block, the
    block the model predicts, and a title naming the set."""
    test = state.split["test"]
    index = next((i for i in test if float(state.dataset[i].y.sum()) > 0), test[0])
    item = state.dataset[index]
    was_training = state.model.training
    state.model.eval()
    outputs = state.model(Batch.from_data_list([item]).to(next(state.model.parameters()).device))
    state.model.train(was_training)
    links = np.zeros((item.num_nodes, item.num_nodes), dtype=bool)
    links[item.edge_index[0].numpy(), item.edge_index[1].numpy()] = True
    predicted = state.task.predict(outputs.float()).cpu().numpy() > 0
    kind = state.dataset.describe(index)["kind"] if hasattr(state.dataset, "describe") else "causal set"
    return (transitive_closure(links), item.y.view(-1).numpy() > 0.5, predicted,
            f"Test set {index} ({kind}, {item.num_nodes} elements)")
