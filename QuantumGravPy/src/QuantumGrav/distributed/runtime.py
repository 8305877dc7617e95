"""The ``Runtime`` helper: where this process stands in the job, and every decision the ranks take together.

Every cross-rank decision goes through a collective that every rank calls (a reduce, a broadcast from rank 0,
an all-gather of votes), so no rank ever waits at a collective the others skipped. Waits that may take far
longer or shorter than a training collective (generating data, per-step votes) use a gloo group of their own.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
from dataclasses import dataclass
from typing import Any, Callable, Iterator, TypeVar

import torch
import torch.distributed as dist

from ..common.errors import UserError
from .environment import get_local_rank, resolve_device
from .stalls import naming_stalled_ranks
from .votes import Decision


@contextlib.contextmanager
def side_group(timeout_s: float) -> Iterator[Any]:
    """A gloo group of every rank beside the job's own, with a timeout of its own: CPU tensors under NCCL jobs
    too. Destroyed when the block ends; after an error, an exchange still under way is dropped with it, not
    waited for (it may wait for a rank that failed before starting it)."""
    group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))
    try:
        yield group
    finally:
        dist.destroy_process_group(group)


@dataclass
class Runtime:
    """Where this process stands in the job, and the few collectives the trainer uses.

    Every cross-rank decision goes through ``sum_across_ranks`` (reduce) or
    ``broadcast_from_main`` (decide on rank 0, then tell everyone): no rank leaves a
    loop on its own, so no rank ever waits at a collective the others skipped.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    backend: str | None = None

    @classmethod
    def in_process_group(cls, device_setting: str) -> "Runtime":
        """This process's place in the initialised process group, on its node's GPU ``LOCAL_RANK`` (or the CPU)
        as ``device_setting`` (``training.device``) says."""
        local_rank = get_local_rank()
        device = resolve_device(device_setting, local_rank)
        backend = dist.get_backend()
        if backend == "nccl" and device.type != "cuda":
            raise UserError("the process group uses NCCL but training.device is CPU; use backend gloo "
                            "(parallel.backend: gloo) or device: cuda")
        return cls(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank, device=device,
                   backend=backend)

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def _collective_device(self) -> torch.device:
        # NCCL only moves CUDA tensors, gloo only CPU ones.
        return self.device if self.backend == "nccl" else torch.device("cpu")

    def sum_across_ranks(self, values: torch.Tensor) -> torch.Tensor:
        """Element-wise sum over ranks (sums and counts together; divide afterwards)."""
        if not self.distributed:
            return values
        buffer = values.detach().to(self._collective_device, torch.float64).clone()
        dist.all_reduce(buffer, op=dist.ReduceOp.SUM)
        return buffer.to(values.device)

    def gather_to_main(self, obj: Any) -> list[Any] | None:
        """Every rank's ``obj`` in rank order on rank 0 (what one process writes for the job), None on the others."""
        if not self.distributed:
            return [obj]
        gathered: list[Any] | None = [None] * self.world_size if self.is_main else None
        dist.gather_object(obj, gathered, dst=0)
        return gathered

    def decide(self, votes: list[tuple[str, Any]]) -> Decision:
        """The one decision of every rank from each rank's callback votes ((callback name, Stop) pairs):
        one all-gather, so a vote cast on any rank stops every rank at the same point."""
        if not self.distributed:
            return Decision.from_votes((0, name, stop) for name, stop in votes)
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, votes)
        return Decision.from_votes((rank, name, stop) for rank, local in enumerate(gathered) for name, stop in local)

    @contextlib.contextmanager
    def step_votes(self, timeout_s: float) -> Iterator["StepVotes"]:
        """Votes to interrupt, exchanged at every optimizer step without making the step wait (StepVotes)."""
        with side_group(timeout_s) if self.distributed else contextlib.nullcontext() as group:
            votes = StepVotes(group)
            yield votes
            votes.settle()  # all ranks started it: it completes

    def broadcast_from_main(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (the others' argument is ignored)."""
        if not self.distributed:
            return obj
        box = [obj if self.is_main else None]
        dist.broadcast_object_list(box, src=0, device=self._collective_device)
        return box[0]

    @contextlib.contextmanager
    def main_process_first(self, timeout_s: float) -> Iterator[None]:
        """Rank 0 runs the block first (e.g. generates and caches data), then the rest.

        The others may wait far longer than a training collective should (generating a large
        data set), so they wait on a gloo group of their own with ``timeout_s``: the job's
        collective timeout stays short, and this works under NCCL jobs too. When rank 0's block
        raises, the others raise the same message at once instead of waiting.
        """
        if not self.distributed:
            yield
            return
        with side_group(timeout_s) as group:
            if self.is_main:
                try:
                    yield
                except BaseException as err:
                    _send_outcome(group, err)
                    raise
                _send_outcome(group, None)
            else:
                _raise_if_main_failed(group)
                yield

    @contextlib.contextmanager
    def every_rank_then_all(self, timeout_s: float) -> Iterator[None]:
        """Every rank runs the block (its share of a job, e.g. generating data), then all wait for all.
        When the block raises on any rank, every rank raises that rank's message: none goes on alone and
        none waits for a failed one. The wait uses a gloo group of its own with ``timeout_s``, as
        ``main_process_first`` does."""
        if not self.distributed:
            yield
            return
        with side_group(timeout_s) as group:
            outcome = None
            try:
                yield
            except BaseException as err:
                outcome = _outcome(err)
                raise
            finally:
                outcomes: list[Any] = [None] * self.world_size
                dist.all_gather_object(outcomes, outcome, group=group)
            failed = [(rank, o) for rank, o in enumerate(outcomes) if o is not None]
            if failed:
                rank, outcome = failed[0]
                _raise_outcome(outcome, f"rank {rank} failed, so every rank stops")

    def naming_stalled_ranks(self) -> contextlib.AbstractContextManager[None]:
        """A collective that times out inside the block raises CollectiveTimeout naming the ranks that did
        not arrive (``stalls.naming_stalled_ranks``)."""
        return naming_stalled_ranks(self.rank, self.world_size) if self.distributed else contextlib.nullcontext()


class StepVotes:
    """Whether any rank wants to interrupt the run (a SIGTERM, a callback's step vote), known to every rank
    at the same optimizer step, without a blocking collective per step.

    A blocking all-reduce of a flag at every step would sync the host with the GPU (the flag's
    copy and ``.item()``) and wait for the slowest rank, every step. Here each step starts an asynchronous
    all-reduce of its flag on a gloo group of CPU tensors, and reads the one started a step earlier: it
    finished long ago, so nothing waits, and no CUDA stream is touched. Every rank runs the same number of
    optimizer steps per epoch (DistributedSampler pads), so every rank reads the same result at the same
    step: all stop there together, one step after the vote.
    """

    def __init__(self, group: Any):
        self.group = group
        self._pending: tuple[Any, torch.Tensor] | None = None

    def exchange(self, local: bool) -> bool:
        """Start the exchange of this step's vote; return the result of the previous step's (one process:
        this step's own vote, at once)."""
        if self.group is None:
            return local
        previous = self.settle()
        flag = torch.tensor([float(local)])
        self._pending = (dist.all_reduce(flag, group=self.group, async_op=True), flag)
        return previous

    def settle(self) -> bool:
        """Wait for the exchange under way (the last step of an epoch) and return its result."""
        if self._pending is None:
            return False
        work, flag = self._pending
        self._pending = None
        work.wait()
        return bool(flag.item() > 0)


Method = TypeVar("Method", bound=Callable[..., Any])


def names_stalled_ranks(method: Method) -> Method:
    """Decorate a method of an object with a ``runtime``: it runs inside runtime.naming_stalled_ranks()."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self.runtime.naming_stalled_ranks():
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _outcome(err: BaseException | None) -> tuple[bool, str] | None:
    """What the other ranks are told of a block's end: None, or (is a UserError, the message)."""
    return None if err is None else (isinstance(err, UserError), f"{type(err).__name__}: {err}")


def _send_outcome(group, err: BaseException | None) -> None:
    dist.broadcast_object_list([_outcome(err)], src=0, group=group)


def _raise_if_main_failed(group) -> None:
    box: list[Any] = [None]
    dist.broadcast_object_list(box, src=0, group=group)  # waits for rank 0's block to end
    if box[0] is not None:
        _raise_outcome(box[0], "rank 0 failed before the other ranks could start")


def _raise_outcome(outcome: tuple[bool, str], context: str) -> None:
    """Raise another rank's failure here: its UserError as the same one-line error, anything else as a
    RuntimeError saying ``context``."""
    is_user_error, message = outcome
    if is_user_error:
        raise UserError(message.split(": ", 1)[-1])
    raise RuntimeError(f"{context}: {message}")
