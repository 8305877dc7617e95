"""Flush denormal floats to zero on the CPU, in the calling thread and in torch's intra-op thread pool.

Why: x86 CPUs compute with denormals (nonzero floats below float32's 1.18e-38) up to a hundred times slower
than with normal numbers. Training the default job makes more of them every epoch (attention weights whose
softmax underflows, then AdamW's first moments: docs/stable_training.md), and its throughput fell to 0.57 of
its first epochs' over 20 epochs. Flushed, they are zero; the losses stay the same to four digits.

The flag (FTZ/DAZ in the MXCSR register) belongs to a thread. A thread starts with its creator's flag, so
setting it before torch starts its pool is enough; a pool that already runs (any parallel op before the
trainer: generating data, a notebook's earlier cells) is released through the OpenMP runtime, and the next
parallel op starts new threads that inherit the flag.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from ..common.logging_utils import get_logger, rank_zero_warn

logger = get_logger("training")
_OMP_PAUSE_HARD = 2  # omp_pause_resource_kind: release the threads, not only idle them
_CHUNK = 1 << 16  # elements per thread in the check: above torch's grain size (32,768), so every thread gets work


def pool_flushes_denormals() -> bool:
    """Whether every thread of torch's pool flushes denormals: a product that underflows to a denormal,
    split over the threads, is zero everywhere."""
    tiny = torch.full((_CHUNK * max(torch.get_num_threads(), 1),), 1e-20)
    return not bool((tiny * tiny).count_nonzero())  # 1e-40 is a denormal float32, 0 when flushed


@functools.cache
def _openmp_runtime() -> ctypes.CDLL | None:
    """The OpenMP runtime torch was loaded with (libgomp on Linux wheels, libomp or libiomp5 elsewhere)."""
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:  # not Linux: ask the symbols already loaded into the process
        maps = []
    for line in maps:
        path = line.split()[-1]
        if any(name in Path(path).name for name in ("libgomp", "libomp", "libiomp5")):
            runtime = ctypes.CDLL(path)
            if hasattr(runtime, "omp_pause_resource_all"):
                return runtime
    try:
        process = ctypes.CDLL(None)
        return process if hasattr(process, "omp_pause_resource_all") else None
    except OSError:
        return None


def flush_denormals() -> bool:
    """Flush denormals to zero in this thread and in torch's intra-op pool; True when every thread does.

    Process-wide for the CPU (a notebook kernel keeps it for later cells); CUDA kernels are not affected.
    False on CPUs without the flag (``torch.set_flush_denormal`` supports x86 with SSE3 and ARM) or where the
    running pool could not be released; a warning says so once.
    """
    if not torch.set_flush_denormal(True):
        return False
    if pool_flushes_denormals():
        return True
    runtime = _openmp_runtime()
    if runtime is not None and runtime.omp_pause_resource_all(_OMP_PAUSE_HARD) == 0 and pool_flushes_denormals():
        return True
    rank_zero_warn(logger, "training.flush_denormals: torch's thread pool was started before the flag was set and "
                           "could not be restarted, so some threads compute with denormal floats (slower epochs on "
                           "the CPU); import QuantumGrav before the first torch operation, or use one thread")
    return False
