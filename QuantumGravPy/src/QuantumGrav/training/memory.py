"""Memory monitoring: host RSS and CUDA memory of this process, and one warning over a limit."""

from __future__ import annotations

import logging

import psutil
import torch

from ..common.logging_utils import get_logger

MB = 2**20
SNAPSHOT_KEYS = ("rss_mb", "cuda_allocated_mb", "cuda_reserved_mb", "cuda_peak_mb")


class MemoryMonitor:
    """Measures the memory of this process; warns once when it exceeds ``limit_mb``.

    The limit applies to what can run out first: CUDA memory allocated by tensors when
    ``device`` is a CUDA device, the process's resident memory (RSS) otherwise. Each rank
    has its own monitor and its own warning: ranks can differ (e.g. rank 0 holds extra
    copies of the best weights), so one rank's number says nothing about the others.
    """

    def __init__(self, device: torch.device | str, limit_mb: float | None = None,
                 logger: logging.Logger | None = None):
        self.device = torch.device(device)
        self.limit_mb = limit_mb
        self.logger = logger or get_logger("memory")
        self._warned = False

    @property
    def _on_cuda(self) -> bool:
        return self.device.type == "cuda" and torch.cuda.is_available()

    def snapshot(self) -> dict[str, float]:
        """Memory now, in MB; always the same keys (CUDA values are 0.0 on a CPU device)."""
        # A new psutil.Process each time: after a fork it must describe the child, not the parent.
        values = dict.fromkeys(SNAPSHOT_KEYS, 0.0)
        values["rss_mb"] = psutil.Process().memory_info().rss / MB
        if self._on_cuda:
            values["cuda_allocated_mb"] = torch.cuda.memory_allocated(self.device) / MB
            values["cuda_reserved_mb"] = torch.cuda.memory_reserved(self.device) / MB
            values["cuda_peak_mb"] = torch.cuda.max_memory_allocated(self.device) / MB
        return values

    def check(self, snapshot: dict[str, float] | None = None) -> dict[str, float]:
        """Take (or use) a snapshot; warn the first time the watched value exceeds the limit."""
        snapshot = snapshot if snapshot is not None else self.snapshot()
        key = "cuda_allocated_mb" if self._on_cuda else "rss_mb"
        if self.limit_mb is not None and not self._warned and snapshot[key] > self.limit_mb:
            self._warned = True  # once per monitor: a training loop calls this every few steps
            what = f"CUDA memory allocated on {self.device}" if self._on_cuda else "process memory (RSS)"
            self.logger.warning(
                f"{what} is {snapshot[key]:.0f} MB, above the limit of {self.limit_mb:.0f} MB "
                f"(training.memory_limit_mb). Raise training.memory_limit_mb, or lower the batch size "
                f"or the number of DataLoader workers. Not repeated for this run.")
        return snapshot

    def start_new_peak(self) -> None:
        """From now on ``cuda_peak_mb`` is the peak since this call (the trainer calls it every
        epoch, so each metrics row holds that epoch's peak, not the whole process's)."""
        if self._on_cuda:
            torch.cuda.reset_peak_memory_stats(self.device)

    def format(self, snapshot: dict[str, float] | None = None) -> str:
        """One short line, e.g. ``RSS 812 MB`` or ``RSS 812 MB, CUDA 950/1024 MB allocated/reserved (peak 990)``."""
        snapshot = snapshot if snapshot is not None else self.snapshot()
        text = f"RSS {snapshot['rss_mb']:.0f} MB"
        if self._on_cuda:
            text += (f", CUDA {snapshot['cuda_allocated_mb']:.0f}/{snapshot['cuda_reserved_mb']:.0f} MB"
                     f" allocated/reserved (peak {snapshot['cuda_peak_mb']:.0f})")
        return text
