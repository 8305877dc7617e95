"""Which run a job continues: the same run after a restart, a requeue or a rerun, with no extra flag.

A run's identity, the first that applies:

1. ``training.resume: RUN_DIR`` (``--resume``): that run.
2. ``training.run_name``: the run of that name under ``training.path``, continued from its last
   checkpoint when it has one (a rerun of the same command continues it).
3. torchrun's job (``TORCHELASTIC_RUN_ID``, set by ``--rdzv-id``; the SLURM script passes the job id,
   so a requeued job finds its run; or, without a run id, a token kept in torchrun's store, which
   every restart of the job shares): the run directory that the job's first attempt created, found
   through ``training.path/.jobs/<token>``.

Anything else (a plain new job) starts a new run directory, as always.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import threading
from pathlib import Path
from typing import Iterator

from .distributed import torchrun_store
from .run_artifacts import CHECKPOINT_DIR, atomic_write_text

JOBS_DIR = ".jobs"


def job_token() -> str | None:
    """A name for this job that every restart of it shares; None outside torchrun."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if run_id and run_id != "none":
        return f"torchrun-{run_id}"
    store = torchrun_store()
    if store is None:
        return None
    # The first attempt's rank 0 draws the token; later attempts read it back from the store.
    return "torchrun-" + store.compare_set("QuantumGrav/job_token", "", secrets.token_hex(8)).decode()


def has_checkpoint(run_dir: Path) -> bool:
    return any((run_dir / CHECKPOINT_DIR / name).is_file() for name in ("last.pt", "previous.pt"))


def run_to_continue(training: dict, token: str | None) -> Path | None:
    """The run directory this job continues, or None for a new run (called on rank 0)."""
    if training["resume"]:
        return Path(training["resume"]).expanduser().resolve()
    parent = Path(training["path"]).expanduser().resolve()
    if training["run_name"]:
        named = parent / training["run_name"]
        return named if has_checkpoint(named) else None
    if token:
        pointer = parent / JOBS_DIR / token
        if pointer.is_file():
            earlier = Path(pointer.read_text().strip())
            return earlier if has_checkpoint(earlier) else None
    return None


def remember_run(training: dict, token: str | None, run_dir: Path) -> None:
    """Rank 0, for a new run of a job with a token: where a restart of this job will find it."""
    if token and not training["run_name"]:
        atomic_write_text(Path(training["path"]).expanduser().resolve() / JOBS_DIR / token, f"{run_dir}\n")


def forget_run(training: dict, token: str | None) -> None:
    """Rank 0, once the run has finished: a later job with the same token starts afresh."""
    if token:
        (Path(training["path"]).expanduser().resolve() / JOBS_DIR / token).unlink(missing_ok=True)


class StopRequest:
    """Set when the process is asked to stop; the training loop reads it at every optimizer step."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()


@contextlib.contextmanager
def sigterm_requests_a_stop() -> Iterator[StopRequest]:
    """While the block runs, SIGTERM (SLURM's notice before preemption or the time limit, ``scancel``,
    torchrun passing on its own) sets a StopRequest instead of killing the process, so the loop can
    checkpoint first. Signal handlers belong to the main thread: elsewhere SIGTERM keeps its default."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: request.set())
    try:
        yield request
    finally:
        signal.signal(signal.SIGTERM, previous)
