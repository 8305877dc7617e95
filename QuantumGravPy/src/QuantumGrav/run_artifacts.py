"""The files of a run: directory, metrics CSV, summary, figures (checkpoints: checkpoint.py).

Only rank 0 calls the writers. Every file is written to a temporary name and
renamed, so an interrupted run never leaves a half-written file behind.
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import secrets
from pathlib import Path
from typing import Any, Callable, Iterable

from .errors import UserError

CHECKPOINT_DIR = "checkpoints"
FIGURE_DIR = "figures"


def create_run_dir(parent: str | Path, run_name: str | None = None) -> Path:
    """A new, empty run directory under ``parent`` (a timestamped name unless given)."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = run_name or f"run-{stamp}-{secrets.token_hex(2)}"
    run_dir = Path(parent).expanduser().resolve() / name
    if run_dir.exists() and any(run_dir.iterdir()):
        raise UserError(f"run directory '{run_dir}' already exists and is not empty; choose another "
                        f"training.run_name, or continue it with training.resume={run_dir}")
    try:
        (run_dir / CHECKPOINT_DIR).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"training.path: cannot create the run directory '{run_dir}' ({err.strerror}); "
                        "set training.path to a folder you can write to") from None
    return run_dir


def atomic_replace(path: Path, write: Callable[[str], None]) -> None:
    """``write(tmp)`` a temporary file in the same folder, flush it to disk, then rename it to
    ``path``: readers never see half a file, and a write that raises leaves nothing behind
    (a process killed mid-write may leave a hidden ``.name.*.tmp``, never a damaged ``path``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = str(path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp")
    # Created with mode 0o666 minus the umask, like any file the user writes (mkstemp's 0o600
    # would make a shared data cache or run unreadable to the group).
    os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    try:
        write(tmp)
        with open(tmp, "rb") as written:
            os.fsync(written.fileno())  # on disk before the rename, so a crash cannot leave an empty file
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_replace(Path(path), lambda tmp: Path(tmp).write_text(text))


def write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, default=str) + "\n")


def run_provenance(world_size: int) -> dict[str, Any]:
    """What a reader of a result needs to reproduce it: processes, start time, and the versions that ran."""
    import platform

    import torch
    import torch_geometric

    from . import __version__

    return {"world_size": world_size, "started_at": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "versions": {"python": platform.python_version(), "torch": torch.__version__,
                         "torch_geometric": torch_geometric.__version__, "QuantumGrav": __version__}}


class MetricsCSV:
    """One row per epoch; the header is fixed by the first row written."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def rows(self) -> list[dict[str, str]]:
        if not self.path.is_file():
            return []
        with self.path.open(newline="") as f:
            return list(csv.DictReader(f))

    def append(self, row: dict[str, Any]) -> None:
        rows = self.rows()
        columns = list(rows[0].keys()) if rows else list(row.keys())
        self._write(columns, [*rows, {k: row.get(k, "") for k in columns}])

    def keep_epochs_before(self, epoch: int) -> None:
        """Drop rows of epochs >= ``epoch`` (written after the checkpoint a resume starts from)."""
        rows = self.rows()
        if rows:
            self._write(list(rows[0].keys()), [r for r in rows if int(r["epoch"]) < epoch])

    def _write(self, columns: list[str], rows: Iterable[dict[str, Any]]) -> None:
        def write(tmp: str) -> None:
            with open(tmp, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=columns)
                writer.writeheader()
                writer.writerows(rows)

        atomic_replace(self.path, write)


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
