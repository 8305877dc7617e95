"""Where this process stands in a job: its rank, the cores it may use, its device and the backend.

Inside an initialised process group the group is the truth; before that, the launcher's environment
(torchrun sets RANK/LOCAL_RANK/WORLD_SIZE) is.
"""

from __future__ import annotations

import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..errors import ConfigError

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")

# What a worker process imports before it can train: seconds of CPU each (4 s on a slow 2-core machine). The
# package alone: it imports torch and PyG itself, with the garbage collector paused (QuantumGrav/__init__.py),
# which importing torch first would not be.
WORKER_PRELOAD = ("QuantumGrav",)


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


def choose_backend(backend: str | None = None, device_setting: str = "auto") -> str:
    """The one rule for the process group's backend: ``backend`` when given (``parallel.backend``), else NCCL
    for CUDA tensors and gloo for CPU ones (``device_setting``: the config's ``training.device``)."""
    return backend or ("nccl" if configured_device_type(device_setting) == "cuda" else "gloo")
