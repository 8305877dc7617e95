"""Everything that knows about ranks and process groups lives here.

Rank handling is read from one place (nanoGPT's `is_main_process` idea):
inside an initialised process group the group is the truth; before that,
the launcher's environment (torchrun sets RANK/LOCAL_RANK/WORLD_SIZE) is.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import functools
import gc
import os
import socket
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterator, TypeVar

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..errors import ConfigError, UserError
from .votes import Decision


def get_rank() -> int:
    """The global rank of this process.

    Returns:
        The rank in the process group, 0 when no process group is initialised.
    """
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))


def get_world_size() -> int:
    """The number of processes in the job.

    Returns:
        The process group's size, 1 when no process group is initialised.
    """
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return int(os.environ.get("WORLD_SIZE", "1"))


def get_local_rank() -> int:
    """Rank on this node: the index of the GPU this process drives."""
    return int(os.environ.get("LOCAL_RANK", str(get_rank())))


def is_main_process() -> bool:
    """Whether this process is rank 0, the one that writes files, logs and decides.

    Returns:
        True on rank 0 and when not distributed.
    """
    return get_rank() == 0


# --------------------------------------------------------------------------- process group
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def launched_by_torchrun() -> bool:
    """torchrun (and torch.distributed.launch --use-env) export these for every worker."""
    return all(v in os.environ for v in TORCHRUN_VARIABLES)


def usable_cpu_count() -> int:
    """Cores this process may run on: the affinity mask, not the machine (SLURM and cgroups give fewer)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cores_per_process(local_processes: int | None = None) -> int:
    """This process's share of the cores it may use: split among the job's processes on this node
    (``local_processes``, else torchrun's LOCAL_WORLD_SIZE, else the world size); at least 1."""
    local = local_processes or int(os.environ.get("LOCAL_WORLD_SIZE", get_world_size()))
    return max(1, usable_cpu_count() // max(1, local))


def find_free_port(host: str = "localhost") -> int:
    """A TCP port that is free right now, for a single-node rendezvous.

    The OS picks the port; another program may take it before the job binds it, so pass it to the
    processes at once.

    Args:
        host: the address to bind on.

    Returns:
        The port number.

    Example:
        >>> import QuantumGrav as QG
        >>> 0 < QG.find_free_port() < 65536
        True
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


# What a worker process imports before it can train: seconds of CPU each (4 s on a slow 2-core machine). The
# package alone: it imports torch and PyG itself, with the garbage collector paused (QuantumGrav/__init__.py),
# which importing torch first would not be.
WORKER_PRELOAD = ("QuantumGrav",)


def worker_context():
    """The multiprocessing context for the worker processes this library starts (``launch``, the doctor).

    Workers are forked from a server process that imported ``WORKER_PRELOAD`` once, so a job of N
    processes no longer pays N imports of torch and PyG. Forked from that clean server, and not from the
    caller (a Jupyter kernel that may hold CUDA, threads or a notebook's state), they are as safe as
    spawned ones, and like spawned ones they get the caller's ``sys.path`` and main module. What the server
    does not share with the caller is its environment at the time of a later call: ``launch`` hands its
    workers ``os.environ`` explicitly. Where fork does not exist (Windows), this is plain spawn.
    """
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(list(WORKER_PRELOAD))  # only read when the server starts (once)
    return context


def configured_device_type(device_setting: str) -> str:
    """'cuda' or 'cpu' for the config's ``training.device`` ('auto': CUDA when present)."""
    uses_cuda = device_setting == "cuda" or (device_setting == "auto" and torch.cuda.is_available())
    return "cuda" if uses_cuda else "cpu"


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """The config's ``training.device`` for this process: 'auto' -> CUDA when present; each process drives
    GPU ``local_rank`` of its node (never the global rank)."""
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("training.device: 'cuda' was asked for but no CUDA GPU is visible; use device: auto "
                          "(the GPUs where there are some, else the CPU) or cpu, or check CUDA_VISIBLE_DEVICES")
    if configured_device_type(name) == "cuda":
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def default_backend(device_type: str | None = None) -> str:
    """NCCL for CUDA tensors, gloo for CPU: the one rule for choosing the backend."""
    uses_cuda = torch.cuda.is_available() if device_type is None else device_type == "cuda"
    return "nccl" if uses_cuda else "gloo"


def initialize_ddp(rank: int | None = None, worldsize: int | None = None, master_addr: str = "localhost",
                   master_port: int | str | None = None, backend: str | None = None,
                   timeout_s: float = 300.0, local_rank: int | None = None) -> None:
    """Join the process group of this job; does nothing when this process has joined one already.

    Under torchrun the launcher's environment is the truth and is not overwritten (``rank``, ``worldsize``,
    ``master_addr``, ``master_port`` and ``local_rank`` are then ignored); otherwise MASTER_ADDR/MASTER_PORT
    are set from the arguments, and LOCAL_RANK from ``local_rank``. With NCCL each process is bound to GPU
    ``LOCAL_RANK`` of its node before NCCL starts.

    Args:
        rank: this process's global rank (without torchrun).
        worldsize: the number of processes of the job (without torchrun).
        master_addr: the rendezvous host.
        master_port: the rendezvous port, e.g. from ``find_free_port()`` (without torchrun).
        backend: ``"nccl"`` or ``"gloo"``; None: NCCL where CUDA is available, else gloo.
        timeout_s: bounds every collective operation: a rank that died makes the others fail after this
            many seconds instead of after PyTorch's default of 30 minutes.
        local_rank: the rank on this node; None: ``rank``, right on one node (a multi-node job without
            torchrun must pass it).

    Raises:
        UserError: ``rank``/``worldsize`` or ``master_port`` missing without torchrun, fewer GPUs on the node
            than the local rank needs, or the rendezvous port in use.

    Example:
        >>> from QuantumGrav.train_ddp import initialize_ddp, cleanup_ddp
        >>> initialize_ddp()      # under torchrun  # doctest: +SKIP
        >>> cleanup_ddp()         # doctest: +SKIP
    """
    if dist.is_initialized():
        return
    if launched_by_torchrun():
        rank, worldsize = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    else:
        if rank is None or worldsize is None:
            raise UserError("initialize_ddp: pass rank and worldsize, or start the script with torchrun")
        if master_port is None:
            raise UserError("initialize_ddp: master_port is missing; pass a free port "
                            "(QuantumGrav.distributed.runtime.find_free_port()) or set parallel.master_port")
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = str(master_addr), str(master_port)
        os.environ["LOCAL_RANK"] = str(rank if local_rank is None else local_rank)
    backend = backend or default_backend()
    if backend == "nccl":
        local_rank, visible = get_local_rank(), torch.cuda.device_count()
        if local_rank >= visible:
            raise UserError(f"local rank {local_rank} needs GPU {local_rank} but only {visible} CUDA GPU(s) are "
                            "visible on this node; start at most that many processes per node "
                            "(--nproc_per_node), or check CUDA_VISIBLE_DEVICES")
        # Bind this process to its own GPU *before* NCCL starts: LOCAL_RANK, not the
        # global rank, indexes the GPUs of this node.
        torch.cuda.set_device(local_rank)
    timeout = datetime.timedelta(seconds=timeout_s)
    try:
        dist.init_process_group(backend=backend, rank=rank, world_size=worldsize, timeout=timeout,
                                store=_store_of_this_attempt(rank, worldsize, timeout))
        # A script that never calls cleanup_ddp() still tears down in the safe order, before the
        # interpreter is finalised (gloo's threads cannot take the GIL once it is).
        atexit.register(cleanup_ddp)
    except dist.DistNetworkError as err:
        if "EADDRINUSE" not in str(err):
            raise
        address = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
        raise UserError(f"the rendezvous port {address} is already in use (another job, or one that has not "
                        "exited yet); set parallel.master_port: null to pick a free port, or choose another "
                        "(torchrun: --master_port)") from None


# torchrun's own store (the agent's, shared by every restart of the job), when torchrun started us.
_torchrun_store: dist.Store | None = None


def torchrun_store() -> dist.Store | None:
    """The key-value store that outlives a torchrun worker's restarts (None outside torchrun)."""
    return _torchrun_store


def _store_of_this_attempt(rank: int, world_size: int, timeout: datetime.timedelta) -> dist.Store | None:
    """Under torchrun: its store, seen through a prefix naming this restart attempt.

    torchrun's agent keeps one store for every attempt of a job, and gloo finds its peers through
    keys in it: after a restart, a new process group (the default one, or the subgroup of
    main_process_first) could read the dead attempt's addresses and fail with "connectFullMesh
    failed ... Connection refused". A prefix per attempt gives every group fresh keys; the
    unprefixed store stays reachable (torchrun_store()) for what must outlive an attempt.
    """
    global _torchrun_store
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if attempt is None or not launched_by_torchrun():
        return None  # env:// as usual: a store hosted by rank 0 that lives as long as this attempt
    agent_hosts_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    _torchrun_store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
                                    is_master=not agent_hosts_store and rank == 0, timeout=timeout,
                                    multi_tenant=not agent_hosts_store)
    return dist.PrefixStore(f"QuantumGrav/attempt_{attempt}", _torchrun_store)


# Objects holding a DistributedDataParallel wrapper (TrainerDDP), held weakly: cleanup_ddp() makes
# each drop its wrapper *before* it destroys the process group. Why: DDP's C++ Reducer holds a
# reference to the group. If the Reducer is the last holder, the group's destructor runs from the
# Reducer's, with the GIL held, and joins gloo's worker threads; a worker still retiring a finished
# collective needs the GIL to free that collective's Python-owned tensors, so both wait forever (the
# hang after `cleanup_ddp()` in a script whose trainer outlives the call). Freed first, the Reducer
# lets go of a group that is still registered; destroy_process_group() then drops the last
# reference from Python, whose binding releases the GIL while the worker threads finish.
_ddp_holders: "weakref.WeakSet[Any]" = weakref.WeakSet()


def release_before_teardown(holder: Any) -> None:
    """Have cleanup_ddp() call ``holder.release_ddp()`` before it destroys the process group."""
    _ddp_holders.add(holder)


def cleanup_ddp() -> None:
    """Leave the process group; does nothing when this process is in none.

    Safe to call twice, in any order with the trainer's lifetime, and after a failure (no barrier: a
    dead peer would make it hang).
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    for holder in list(_ddp_holders):
        holder.release_ddp()
    _ddp_holders.clear()
    gc.collect()  # a wrapper caught in a reference cycle is freed now, while the group still exists
    with contextlib.suppress(Exception):
        dist.destroy_process_group()


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
        group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s)) if self.distributed \
            else None
        votes = StepVotes(group)
        try:
            yield votes
            votes.settle()  # all ranks started it: it completes
        finally:
            # After an error, the exchange under way may wait for a rank that failed before starting it:
            # not waited for (it would hide the error behind a timeout), dropped with the group.
            if group is not None:
                dist.destroy_process_group(group)

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
        group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))
        try:
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
        finally:
            dist.destroy_process_group(group)

    @contextlib.contextmanager
    def every_rank_then_all(self, timeout_s: float) -> Iterator[None]:
        """Every rank runs the block (its share of a job, e.g. generating data), then all wait for all.
        When the block raises on any rank, every rank raises that rank's message: none goes on alone and
        none waits for a failed one. The wait uses a gloo group of its own with ``timeout_s``, as
        ``main_process_first`` does."""
        if not self.distributed:
            yield
            return
        group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))
        try:
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
        finally:
            dist.destroy_process_group(group)

    @contextlib.contextmanager
    def naming_stalled_ranks(self) -> Iterator[None]:
        """A collective that times out inside the block raises CollectiveTimeout naming the ranks
        that did not arrive, instead of gloo's bare "Timed out waiting ... for recv".

        How: every rank whose collective timed out checks in through the process group's store
        and waits a short while (at most STALL_CHECK_IN_S) for the others; a rank that is stuck
        (sleeping, deadlocked, in a debugger) cannot check in, so the ranks missing from the
        store are the ones the job waited for. (NCCL's watchdog usually aborts the process before
        Python sees its timeout; then the launcher's message is all there is.)
        """
        try:
            yield
        except RuntimeError as err:
            if not (self.distributed and _is_collective_timeout(err)):
                raise
            checked_in = _check_in_after_timeout(self.rank, self.world_size)
            if checked_in is None:  # the store is gone too (its host process died): nothing to add
                raise
            missing, timeout_s = checked_in
            raise CollectiveTimeout(_timeout_message(missing, timeout_s)) from err


class StepVotes:
    """Whether any rank wants to interrupt the run (a SIGTERM, a callback's step vote), known to every rank
    at the same optimizer step, without a blocking collective per step.

    A blocking all-reduce of a flag at every step (the old check) syncs the host with the GPU (the flag's
    copy and ``.item()``) and waits for the slowest rank, every step. Here each step starts an asynchronous
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


STALL_CHECK_IN_S = 10.0


class CollectiveTimeout(RuntimeError):
    """A collective operation timed out; the message names the ranks that did not arrive."""


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
