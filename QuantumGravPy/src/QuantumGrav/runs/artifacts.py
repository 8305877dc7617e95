"""The files of a run: directory, metrics CSV, summary (checkpoints: checkpoint_files.py; figures: evaluation/figures.py).

Only rank 0 calls the writers. Every file is written to a temporary name and
renamed, so an interrupted run never leaves a half-written file behind.
"""

from __future__ import annotations

import csv
import datetime
import json
import secrets
from pathlib import Path
from typing import Any, Iterable

from ..common.errors import UserError
from ..common.version import __version__
from ..common.files import atomic_replace, atomic_write_text

CHECKPOINT_DIR = "checkpoints"


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


def write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, default=str) + "\n")


def run_provenance(world_size: int) -> dict[str, Any]:
    """What a reader of a result needs to reproduce it: processes, start time, and the versions that ran."""
    import platform

    import torch
    import torch_geometric

    return {"world_size": world_size, "started_at": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "versions": {"python": platform.python_version(), "torch": torch.__version__,
                         "torch_geometric": torch_geometric.__version__,
                         "QuantumGrav": __version__}}


class MetricsCSV:
    """One row per epoch; a key first seen in a later row (a callback's, a resumed run's) adds a column, empty
    in the earlier rows."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def rows(self) -> list[dict[str, str]]:
        if not self.path.is_file():
            return []
        with self.path.open(newline="") as f:
            return list(csv.DictReader(f))

    def append(self, row: dict[str, Any]) -> None:
        rows = self.rows()
        columns = list(rows[0].keys()) if rows else []
        columns += [k for k in row if k not in columns]
        self._write(columns, [*rows, row])

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


def records_before(run_dir: Path, epoch: int, prune: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A run's summary and its metrics rows of the epochs before ``epoch``, read back to resume it there.
    ``prune`` (rank 0): drop the later rows from metrics.csv too (written after the checkpoint)."""
    summary_file = run_dir / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    metrics_csv = MetricsCSV(run_dir / "metrics.csv")
    rows = [r for r in metrics_csv.rows() if int(r["epoch"]) < epoch]
    if prune:
        metrics_csv.keep_epochs_before(epoch)
    return summary, [{k: (float(v) if k != "epoch" else int(v)) for k, v in r.items() if v != ""} for r in rows]
