"""Preemption: SIGTERM asks the run to checkpoint and stop, instead of killing it.

SLURM sends SIGTERM before preemption and at the time limit (our batch script turns its ``--signal=B:USR1``
notice into one), ``scancel`` sends it, and torchrun passes its own on to the workers. Inside
``run_training`` the signal only sets a flag; the loop turns it into a resumable vote (``Stop(...,
resumable=True)``), exchanged between the ranks at the next optimizer steps (``runtime.StepVotes``), so
every rank stops at the same step, rank 0 checkpoints, and every rank raises ``Preempted``. The same
command started again (a requeue) continues the run from that checkpoint.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

from .votes import Stop


class StopRequest:
    """Set when the process is asked to stop; the loop reads it at every optimizer step and epoch end."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def vote(self) -> list[tuple[str, Stop]]:
        """This process's vote: to interrupt (resumable) when SIGTERM arrived, else none."""
        return [("SIGTERM", Stop("stopped on SIGTERM", resumable=True))] if self.is_set() else []


@contextlib.contextmanager
def sigterm_requests_a_stop() -> Iterator[StopRequest]:
    """While the block runs, SIGTERM sets a StopRequest instead of killing the process, so the loop can
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
