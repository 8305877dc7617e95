"""Where this process stands in a job: its rank, the cores it may use, its device and the backend.

Inside an initialised process group the group is the truth; before that, the launcher's environment
(torchrun sets RANK/LOCAL_RANK/WORLD_SIZE) is.
"""

from __future__ import annotations

import os
import socket

import torch
import torch.distributed as dist

from ..common.errors import ConfigError, UserError

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def get_rank() -> int:
    """The global rank of this process.

    Returns:
        The rank in the process group, 0 when no process group is initialised.
    """
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))



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


def check_devices(device_setting: str, nproc: int) -> None:
    """``nproc`` processes of ``training.device: device_setting`` fit this machine: a CUDA job has a GPU for each."""
    if resolve_device(device_setting).type == "cuda":  # device: cuda without a GPU raises here
        visible = torch.cuda.device_count()
        if nproc > visible:
            raise UserError(f"{nproc} processes asked for but only {visible} CUDA GPU(s) are visible; "
                            f"use nproc <= {visible}, or check CUDA_VISIBLE_DEVICES")


def choose_backend(backend: str | None = None, device_setting: str = "auto") -> str:
    """The one rule for the process group's backend: ``backend`` when given (``parallel.backend``), else NCCL
    for CUDA tensors and gloo for CPU ones (``device_setting``: the config's ``training.device``)."""
    return backend or ("nccl" if configured_device_type(device_setting) == "cuda" else "gloo")
