"""The feature cache of QuantumGrav.jl's stores built ahead of a job, in shares: ``python -m QuantumGrav generate``
on a stores config, once per task of a SLURM job or a torchrun group, each task computing every W-th set."""

from __future__ import annotations

import inspect
import os
from typing import Any

from ...common.errors import UserError
from ..zarr_store import QuantumGravJLDataset


def task_share() -> tuple[int, int]:
    """(rank, world size) of this task among those that build one cache together: torchrun's RANK and
    WORLD_SIZE, else SLURM's SLURM_PROCID and SLURM_NTASKS (``srun``), else (0, 1)."""
    for rank_name, size_name in (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS")):
        if rank_name in os.environ and size_name in os.environ:
            try:
                rank, size = int(os.environ[rank_name]), int(os.environ[size_name])
            except ValueError:
                rank, size = -1, 0
            if not 0 <= rank < size:
                raise UserError(f"{rank_name}={os.environ[rank_name]!r} and {size_name}={os.environ[size_name]!r}: "
                                f"expected integers with 0 <= {rank_name} < {size_name}")
            return rank, size
    return 0, 1


def build_cache_share(kwargs: dict[str, Any], workers: int, dataset_class: type | None = None) -> str:
    """Build this task's share (``task_share``) of the feature cache of ``dataset_class(**kwargs)`` (default
    ``QuantumGravJLDataset``; ``KindsDataset`` generates its stores first) with ``workers`` processes; a line
    saying what was done and how fast."""
    import time

    if not kwargs.get("cache", True):
        raise UserError("data.kwargs.cache is false: there is no feature cache to build; remove it or set it true")
    dataset_class = dataset_class or QuantumGravJLDataset
    if "workers" in inspect.signature(dataset_class).parameters:  # KindsDataset: its missing stores, made in parallel
        kwargs = {**kwargs, "workers": workers}
    start = time.perf_counter()
    try:
        dataset = dataset_class(**kwargs)
    except (TypeError, ValueError) as err:
        raise UserError(f"data.kwargs: {dataset_class.__name__}(**data.kwargs) failed: {err}") from None
    rank, world_size = task_share()
    done = dataset.build_cache(workers=workers, rank=rank, world_size=world_size)
    seconds = time.perf_counter() - start
    share = f" (task {rank} of {world_size}: items {rank}, {rank} + {world_size}, ...)" if world_size > 1 else ""
    where = kwargs["path"] if len(dataset.stores) == 1 else dataset.stores[0].parent
    return (f"{where}: {len(dataset.stores)} stores, {done} of {len(dataset)} causal sets cached{share} in "
            f"{seconds:.1f} s with {workers} processes: {done / max(seconds, 1e-9):,.1f} sets/s (stores written "
            f"and items cached before are read, not computed)")
