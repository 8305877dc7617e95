"""Files written whole or not at all: a reader never sees half a file, a crash never leaves one."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Callable


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


def shown_path(path: str | os.PathLike) -> str:
    """A path as a log line or summary shows it: relative to the working directory when it lies inside it
    (``runs/run-...``, as ``training.path: runs`` asked; a notebook's ``_runs/...``), else absolute. So the
    output of a run (a notebook's stored outputs included) does not carry the machine's folders."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):  # outside the working directory, or no working directory any more
        return str(path)
