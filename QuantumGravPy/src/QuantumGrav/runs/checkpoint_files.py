"""Checkpoint files and the run-directory lock: what survives a kill, a full disk or a second job.

- ``save_last_checkpoint`` keeps the previous complete checkpoint: the new one is written and
  flushed to disk under a temporary name, the old ``last.pt`` is renamed to ``previous.pt``, then
  the new one is renamed to ``last.pt``. A process killed at any moment leaves ``last.pt`` or
  ``previous.pt`` (or both) complete; ``load_resume_checkpoint`` takes the first that loads.
- A save that the file system refuses (disk full, quota, file size limit) is one ``UserError``
  naming the file; the earlier checkpoints stay as they were and no temporary file is left.
- ``RunLock``: one job at a time per run directory (``run_dir/.lock``), so two jobs never write
  the same checkpoints and metrics.
"""

from __future__ import annotations

import datetime
import errno
import json
import os
import secrets
import socket
import weakref
import zipfile
from pathlib import Path
from typing import Any, Callable

import torch

from ..common.errors import UserError
from ..common.logging_utils import get_logger, rank_zero_warn
from ..common.files import atomic_replace
from .artifacts import CHECKPOINT_DIR

logger = get_logger("checkpoint")

LAST, PREVIOUS, BEST = "last.pt", "previous.pt", "best.pt"
LOCK_FILE = ".lock"


# --------------------------------------------------------------------------- saving
def _torch_save(state: dict[str, Any], path: str) -> None:
    with open(path, "wb") as file:
        try:
            torch.save(state, file)
        except RuntimeError as err:
            # torch's zip writer turns the file's OSError (EFBIG, ENOSPC, EDQUOT) into a RuntimeError
            # ("unexpected pos ..."); the OSError is its context: raise that, it says what happened.
            if isinstance(err.__context__, OSError):
                raise err.__context__ from None
            raise


def _fsync_folder(folder: Path) -> None:
    """Make the renames in ``folder`` durable (a file's fsync does not cover its directory entry)."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _saving(path: Path, save: Callable[[], None]) -> None:
    """Run ``save``; a refusal of the file system becomes one UserError that says what to do."""
    try:
        save()
        _fsync_folder(path.parent)
    except OSError as err:
        code = errno.errorcode.get(err.errno, "") if err.errno else ""
        reason = f"{err.strerror or err}{f' ({code})' if code else ''}"
        run_dir = path.parent.parent
        raise UserError(f"cannot write the checkpoint '{path}': {reason}. The checkpoints saved before are "
                        "intact. Free space on that file system (or raise the quota or the file size limit, "
                        f"ulimit -f), then continue the run with --resume {run_dir}") from None


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """Write ``state`` (only tensors, numbers, strings and containers: loadable with weights_only=True)
    atomically to ``path``: readers see the old file or the new one, never half of one."""
    path = Path(path)
    _saving(path, lambda: atomic_replace(path, lambda tmp: _torch_save(state, tmp)))


def save_last_checkpoint(folder: str | Path, state: dict[str, Any]) -> None:
    """``folder/last.pt`` := ``state``, keeping the checkpoint it replaces as ``folder/previous.pt``."""
    last, previous = Path(folder) / LAST, Path(folder) / PREVIOUS

    def write_then_keep_previous(tmp: str) -> None:
        _torch_save(state, tmp)
        with open(tmp, "rb") as written:
            os.fsync(written.fileno())  # the new checkpoint is complete on disk before the old one moves
        if zipfile.is_zipfile(last):  # a damaged last.pt (a resume fell back past it) never replaces previous.pt
            os.replace(last, previous)
        # atomic_replace renames tmp to last.pt next: in between only previous.pt exists, which the
        # resume takes when last.pt is missing.

    _saving(last, lambda: atomic_replace(last, write_then_keep_previous))


# --------------------------------------------------------------------------- loading
def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    return torch.load(Path(path), map_location=map_location, weights_only=True)


def has_checkpoint(run_dir: str | Path) -> bool:
    """Whether ``run_dir`` holds a checkpoint to resume from (complete or not)."""
    folder = Path(run_dir) / CHECKPOINT_DIR
    return (folder / LAST).is_file() or (folder / PREVIOUS).is_file()


def _why_unusable(path: Path, map_location) -> tuple[dict[str, Any] | None, str]:
    """(state, "") when ``path`` loads as a checkpoint of ours, else (None, what is wrong with it)."""
    if not path.is_file():
        return None, "missing"
    if not zipfile.is_zipfile(path):  # torch.load's own message would blame weights_only or miniz
        return None, "truncated or corrupt (not a complete archive written by torch.save)"
    try:
        state = load_checkpoint(path, map_location)
    except Exception as err:  # noqa: BLE001 - whatever torch.load says, the file cannot be resumed from
        first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
        return None, f"truncated or corrupt ({first_line[:160]})"
    if not (isinstance(state, dict) and "model" in state and "epoch" in state):
        return None, "not a QuantumGrav checkpoint (no model and epoch in it)"
    return state, ""


def load_resume_checkpoint(run_dir: str | Path,
                           map_location: str | torch.device = "cpu") -> tuple[dict[str, Any], Path]:
    """The newest complete checkpoint of ``run_dir`` and its path: ``last.pt``, else ``previous.pt``
    (with a warning naming the bad file). Neither loads: a UserError naming each file and what is
    wrong with it; nothing is changed on disk."""
    folder = Path(run_dir) / CHECKPOINT_DIR
    problems: list[str] = []
    for name in (LAST, PREVIOUS):
        state, problem = _why_unusable(folder / name, map_location)
        if state is not None:
            if problems:
                rank_zero_warn(logger, f"resume: {problems[0]}; falling back to {folder / name} (epoch "
                                       f"{state['epoch']}): the epochs after it are trained again")
            return state, folder / name
        problems.append(f"{folder / name} is {problem}")
    if not folder.is_dir() or not any(folder.glob("*.pt")):
        raise UserError(f"training.resume: '{run_dir}' has no {CHECKPOINT_DIR}/{LAST}; pass the directory of "
                        "an earlier run")
    others = sorted(p.name for p in folder.glob("*.pt") if p.name not in (LAST, PREVIOUS))
    other_hint = (f"copy one of the other checkpoints of the run ({', '.join(others)}) to {folder / LAST} "
                  "to resume from it, or ") if others else ""
    raise UserError(f"training.resume: no checkpoint of '{run_dir}' can be loaded: {'; '.join(problems)}. "
                    f"Nothing was changed. To continue, {other_hint}start a new run (without --resume)")


def load_best_checkpoint(run_dir: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """The best epoch's checkpoint of ``run_dir`` (what its test evaluated), for applying the run to new data.
    Missing or unreadable: one UserError naming what the run holds instead and what to do."""
    folder = Path(run_dir) / CHECKPOINT_DIR
    state, problem = _why_unusable(folder / BEST, map_location)
    if state is not None:
        return state
    if problem != "missing":
        raise UserError(f"run '{run_dir}': {folder / BEST} is {problem}; train the run again, or copy another of "
                        f"its checkpoints there")
    others = sorted(p.name for p in folder.glob("*.pt")) if folder.is_dir() else []
    if not others:
        raise UserError(f"run '{run_dir}': no checkpoint was written (it stopped before its first epoch ended); "
                        "train it again, or pass another run")
    raise UserError(f"run '{run_dir}': no {CHECKPOINT_DIR}/{BEST} (it holds {', '.join(others)}); best.pt is written "
                    f"at the end of an epoch: continue the run (python -m QuantumGrav train --resume {run_dir}), or "
                    f"copy one of those to {folder / BEST} to apply it")


# --------------------------------------------------------------------------- the run-directory lock
def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


class RunLock:
    """``run_dir/.lock``, created exclusively, holding {host, pid, job_token, started}.

    A lock left by a process of this host that no longer runs, or by an earlier attempt of the
    same job (same ``job_token``, e.g. a torchrun restart or a requeued SLURM job), is taken
    over with a warning; one held by this very process (a notebook that reopens a run without
    closing its first trainer) silently. Any other lock refuses the run with a UserError.
    """

    def __init__(self, path: Path, content: dict[str, Any]):
        self.path, self.content = path, content
        # Released when the lock is garbage-collected or the interpreter exits, too: a trainer whose
        # __init__ failed after taking it, or that was never closed, does not leave it behind.
        self._release = weakref.finalize(self, _remove_if_ours, path, content)

    @classmethod
    def acquire(cls, run_dir: str | Path, job_token: str | None = None) -> "RunLock":
        path = Path(run_dir) / LOCK_FILE
        content = {"host": socket.gethostname(), "pid": os.getpid(), "job_token": job_token,
                   "started": datetime.datetime.now().isoformat(timespec="seconds"), "id": secrets.token_hex(4)}
        if not _create_exclusively(path, content):
            _take_over_or_refuse(path, content, take_over=True)
            if not _create_exclusively(path, content):  # another job took it in between
                _take_over_or_refuse(path, content, take_over=False)
        return cls(path, content)

    def release(self) -> None:
        self._release()


def _create_exclusively(path: Path, content: dict[str, Any]) -> bool:
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
    except FileExistsError:
        return False
    with os.fdopen(descriptor, "w") as file:
        file.write(json.dumps(content) + "\n")
    return True


def _read_lock(path: Path) -> dict[str, Any] | None:
    try:
        owner = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return None
    return owner if isinstance(owner, dict) else None


def _take_over_or_refuse(path: Path, ours: dict[str, Any], take_over: bool) -> None:
    """Remove a lock we may take over (so that the caller creates ours); else raise UserError."""
    owner = _read_lock(path)
    if owner == {} and take_over:  # released meanwhile
        return
    if not owner:  # unreadable, or it vanished while another job raced us for it
        raise UserError(f"run directory '{path.parent}': its lock file {path} cannot be read or changes while "
                        f"this job starts. If no other job runs on this directory, delete {path} and start again")
    same_host = owner.get("host") == ours["host"]
    pid = owner.get("pid")
    if take_over and same_host and pid == ours["pid"]:
        path.unlink(missing_ok=True)  # our own process reopens the run: not a second job
        return
    stale = same_host and isinstance(pid, int) and not _process_alive(pid)
    restart = ours["job_token"] is not None and owner.get("job_token") == ours["job_token"]
    who = f"process {pid} on host {owner.get('host')}, started {owner.get('started')}"
    if take_over and (stale or restart):
        why = "no longer runs" if stale else f"belongs to an earlier attempt of this job ({ours['job_token']})"
        logger.warning(f"taking over the lock {path} of {who}: that process {why}")
        path.unlink(missing_ok=True)
        return
    raise UserError(f"run directory '{path.parent}' is in use by another job: {who} (lock file {path}). Two jobs "
                    "writing one run would mix their checkpoints and metrics. Wait for that job to end or stop "
                    f"it; if no job runs on this directory any more, delete {path} and start again")


def _remove_if_ours(path: Path, content: dict[str, Any]) -> None:
    if _read_lock(path) == content:  # never remove a lock another job took over
        path.unlink(missing_ok=True)
