"""Joining and leaving the job's process group: ``initialize_ddp`` and ``cleanup_ddp``."""

from __future__ import annotations

import atexit
import contextlib
import datetime
import gc
import os
import weakref
from typing import Any

import torch
import torch.distributed as dist

from ..common.errors import UserError
from .environment import choose_backend, get_local_rank, launched_by_torchrun


def initialize_ddp(rank: int | None = None, worldsize: int | None = None, master_addr: str = "localhost",
                   master_port: int | str | None = None, backend: str | None = None,
                   timeout_s: float = 300.0, local_rank: int | None = None, store: dist.Store | None = None) -> None:
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
        store: the key-value store the ranks meet through; None: torchrun's store of this restart attempt
            under torchrun, else one hosted by rank 0 at MASTER_ADDR:MASTER_PORT.

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
    rank, worldsize = _rendezvous(rank, worldsize, master_addr, master_port, local_rank)
    backend = choose_backend(backend)
    if backend == "nccl":
        _bind_to_local_gpu()
    try:
        dist.init_process_group(backend=backend, rank=rank, world_size=worldsize,
                                timeout=datetime.timedelta(seconds=timeout_s),
                                store=store if store is not None else store_of_this_attempt(timeout_s))
    except dist.DistNetworkError as err:
        if "EADDRINUSE" not in str(err):
            raise
        address = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
        raise UserError(f"the rendezvous port {address} is already in use (another job, or one that has not "
                        "exited yet); set parallel.master_port: null to pick a free port, or choose another "
                        "(torchrun: --master_port)") from None
    # A script that never calls cleanup_ddp() still tears down in the safe order, before the interpreter
    # is finalised (gloo's threads cannot take the GIL once it is); once, however often a process joins.
    atexit.unregister(cleanup_ddp)
    atexit.register(cleanup_ddp)


def _rendezvous(rank: int | None, worldsize: int | None, master_addr: str, master_port: int | str | None,
                local_rank: int | None) -> tuple[int, int]:
    """(rank, world size): torchrun's, or the arguments', which then go into the environment."""
    if launched_by_torchrun():
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if rank is None or worldsize is None:
        raise UserError("initialize_ddp: pass rank and worldsize, or start the script with torchrun")
    if master_port is None:
        raise UserError("initialize_ddp: master_port is missing; pass a free port "
                        "(QuantumGrav.find_free_port()) or set parallel.master_port")
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = str(master_addr), str(master_port)
    os.environ["LOCAL_RANK"] = str(rank if local_rank is None else local_rank)
    return rank, worldsize


def _bind_to_local_gpu() -> None:
    """Bind this process to its own GPU *before* NCCL starts: LOCAL_RANK, not the global rank, indexes the
    GPUs of this node."""
    local_rank, visible = get_local_rank(), torch.cuda.device_count()
    if local_rank >= visible:
        raise UserError(f"local rank {local_rank} needs GPU {local_rank} but only {visible} CUDA GPU(s) are "
                        "visible on this node; start at most that many processes per node "
                        "(--nproc_per_node), or check CUDA_VISIBLE_DEVICES")
    torch.cuda.set_device(local_rank)


# torchrun's own store (the agent's, shared by every restart of the job), when torchrun started us.
_torchrun_store: dist.Store | None = None


def torchrun_store() -> dist.Store | None:
    """The key-value store that outlives a torchrun worker's restarts (None outside torchrun)."""
    return _torchrun_store


def store_of_this_attempt(timeout_s: float) -> dist.Store | None:
    """Under torchrun: its store, seen through a prefix naming this restart attempt; None otherwise.

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
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    _torchrun_store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
                                    is_master=not agent_hosts_store and rank == 0,
                                    timeout=datetime.timedelta(seconds=timeout_s), multi_tenant=not agent_hosts_store)
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
