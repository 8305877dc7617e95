"""The votes of callbacks to stop a run, and the one decision every rank takes from them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Stop:
    """A callback's vote to stop, returned from a hook.

    Args:
        reason: why; the run's summary and log name it.
        resumable: True: an interruption (every rank checkpoints and stops with ``Preempted``; the run
            continues when started again), not the end of the run.
    """

    reason: str
    resumable: bool = False


@dataclass(frozen=True)
class Decision:
    """What the votes of every rank decided; ``on_fit_end`` receives it.

    Args:
        stop: whether the run stops.
        reason: why (the first vote's reason).
        resumable: whether the stop is an interruption the run continues from.
        stopped_by: the callback whose vote gave the reason.
        voters: every voter, as ``"rank R: Callback"``.
    """

    stop: bool = False
    reason: str = ""
    resumable: bool = False
    stopped_by: str = ""
    voters: tuple[str, ...] = ()

    @classmethod
    def from_votes(cls, votes: Iterable[tuple[int, str, Stop]]) -> "Decision":
        """``votes``: (rank, callback name, Stop) from every rank, in rank order. The first resumable
        vote wins (an interruption must keep the run resumable), else the first vote."""
        votes = list(votes)
        if not votes:
            return cls()
        _, name, chosen = next((v for v in votes if v[2].resumable), votes[0])
        return cls(True, chosen.reason, chosen.resumable, name, tuple(f"rank {r}: {n}" for r, n, _ in votes))
