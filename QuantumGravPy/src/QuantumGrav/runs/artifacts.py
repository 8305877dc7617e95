"""The files of a run: directory, metrics CSV, summary (checkpoints: checkpoint_files.py; figures: evaluation/figures.py).

Only rank 0 calls the writers. Every file is written to a temporary name and
renamed, so an interrupted run never leaves a half-written file behind.
"""

from __future__ import annotations

import csv
import datetime
import importlib.metadata
import json
import os
import secrets
from pathlib import Path
from typing import Any, Callable, Iterable

from ..errors import UserError

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

    return {"world_size": world_size, "started_at": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "versions": {"python": platform.python_version(), "torch": torch.__version__,
                         "torch_geometric": torch_geometric.__version__,
                         "QuantumGrav": importlib.metadata.version("QuantumGrav")}}


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
