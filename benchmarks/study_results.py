"""The results file of every study script (``--json``, ``--results``): read where it exists, so that a stopped
study continues where it stopped (rows or seeds in it are not run again), and written whole and atomically after
every row, so that a study cut short keeps what it measured and nobody reads half a file."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "QuantumGravPy" / "src"))


def add_arguments(parser: argparse.ArgumentParser, unit: str) -> None:
    """``--json`` (written after every ``unit``: a row, a seed) and ``--results`` (print its tables, run nothing)."""
    parser.add_argument("--json", help=f"results file: written after every {unit}; {unit}s in it are not run again")
    parser.add_argument("--results", help="print the tables of a results file and exit")


def load(path: str | Path | None) -> tuple[Path | None, dict]:
    """The results file's path and what it holds (no runs where it does not exist yet)."""
    path = Path(path) if path else None
    return path, json.loads(path.read_text()) if path and path.exists() else {"runs": []}


def write_json(path: str | Path, data: object, **dumps_kwargs) -> None:
    """``json.dumps(data, **dumps_kwargs)`` and a newline written to ``path`` whole or not at all (a temporary file in the
    same folder, renamed over ``path``): a run killed mid-write leaves the previous file, never half of one, for
    the next ``--results`` or ``--append`` to read. The results file of every script in benchmarks/. Its first call
    imports QuantumGrav (and torch): a script that writes while other processes are timed imports
    ``QuantumGrav.common.files`` before it starts them."""
    from QuantumGrav.common.files import atomic_write_text

    atomic_write_text(Path(path), json.dumps(data, **dumps_kwargs) + "\n")


def save(path: Path | None, results: dict) -> None:
    if path is not None:
        write_json(path, results, indent=1)
