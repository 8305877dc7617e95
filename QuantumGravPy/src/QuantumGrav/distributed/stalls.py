"""Naming the ranks a timed-out collective waited for, instead of gloo's bare "Timed out waiting ... for recv"."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Iterator

import torch.distributed as dist

STALL_CHECK_IN_S = 10.0


class CollectiveTimeout(RuntimeError):
    """A collective operation timed out; the message names the ranks that did not arrive."""


@contextlib.contextmanager
def naming_stalled_ranks(rank: int, world_size: int) -> Iterator[None]:
    """A collective that times out inside the block raises CollectiveTimeout naming the ranks that did not
    arrive.

    How: every rank whose collective timed out checks in through the process group's store and waits a
    short while (at most STALL_CHECK_IN_S) for the others; a rank that is stuck (sleeping, deadlocked, in a
    debugger) cannot check in, so the ranks missing from the store are the ones the job waited for. (NCCL's
    watchdog usually aborts the process before Python sees its timeout; then the launcher's message is all
    there is.)
    """
    try:
        yield
    except RuntimeError as err:
        if not _is_collective_timeout(err):
            raise
        checked_in = _check_in_after_timeout(rank, world_size)
        if checked_in is None:  # the store is gone too (its host process died): nothing to add
            raise
        missing, timeout_s = checked_in
        raise CollectiveTimeout(_timeout_message(missing, timeout_s)) from err


def _is_collective_timeout(err: RuntimeError) -> bool:
    """gloo's "Timed out waiting ... for recv/send operation", or a backend error about a timeout (not,
    say, a DataLoader's own timeout, which says nothing about the other ranks)."""
    text = str(err).lower()
    return "timed out waiting" in text or (isinstance(err, dist.DistBackendError) and "timeout" in text)


def _check_in_after_timeout(rank: int, world_size: int) -> tuple[list[int], float] | None:
    """(ranks that did not check in within the grace, the group's timeout in s), or None when the
    store cannot be used. Every wait is bounded: this runs when something already went wrong."""
    try:
        store = dist.distributed_c10d._get_default_store()
        timeout_s = store.timeout.total_seconds()
        # One namespace per torchrun attempt: a restarted job never reads its predecessor's check-ins.
        prefix = f"quantumgrav/collective_timeout/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        store.set(f"{prefix}/{rank}", "arrived")
        deadline = time.monotonic() + min(timeout_s, STALL_CHECK_IN_S)
        while True:
            missing = [r for r in range(world_size) if not store.check([f"{prefix}/{r}"])]
            if not missing or time.monotonic() > deadline:
                return missing, timeout_s
            time.sleep(0.1)
    except Exception:  # noqa: BLE001 - any store failure: fall back to the original timeout error
        return None


def _timeout_message(missing: list[int], timeout_s: float) -> str:
    if not missing:
        return (f"a collective operation timed out after {timeout_s:.0f} s (parallel.timeout_s), yet every rank "
                "checked in right after: one rank was slower than the timeout (an uneven epoch, slow I/O) rather "
                "than stuck; raise parallel.timeout_s")
    ranks = ", ".join(map(str, missing))
    return (f"rank {ranks} did not arrive at a collective operation within {timeout_s:.0f} s (parallel.timeout_s) "
            f"and did not answer afterwards: stalled (a hung data loader or file system, a deadlock, a debugger) "
            f"or stopped; the other ranks gave up. See what rank {missing[0]} was doing: its log "
            f"(logs/rank_{missing[0]}.log in the run directory) or `py-spy dump --pid PID` on its node. If its work "
            "legitimately takes that long, raise parallel.timeout_s")
