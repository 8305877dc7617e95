"""Know before the first epoch (``training.preflight``): the largest training batch is run once, forward and
backward, and its peak memory measured; a batch that would not fit is refused with one line saying what would.

Measured, not modelled: the peak of CUDA's allocator (``torch.cuda.max_memory_allocated``) on a GPU, the process's
peak resident memory on the CPU (Linux's VmHWM, reset before the batch through ``/proc/self/clear_refs``). The limit
is ``training.memory_limit_mb`` when set, else the GPU's memory, else this process's share of the machine's available
memory. The trainer runs it before DDP wraps the model (DDP's hooks would take its backward for a training step) and
before the run directory exists (a refused run leaves nothing on disk); ``python -m QuantumGrav doctor --config``
prints the same estimate.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import psutil
import torch
from torch_geometric.data import Batch

from ..config.layout import ConfigSections
from ..config.sections.training import MemorySection
from ..config.sections.loaders import TrainingLoaderSection
from ..data import sources as data_sources
from ..data.batching import EDGES, NODES, BatchBudget, DistributedBudgetBatchSampler
from ..distributed.environment import resolve_device
from ..distributed.runtime import Runtime
from ..common.errors import UserError
from . import loaders
from .memory import MB
from .model_builder import build_configured_model

SAFETY = 0.8  # the suggested batch uses this share of the room measured: allocators fragment, RSS is noisy


@dataclass
class MemoryEstimate:
    """The largest batch's measured peak against the limit, with what this rank held before the batch."""

    graphs: int
    nodes: int
    edges: int
    peak_mb: float
    before_mb: float
    limit_mb: float
    limit_source: str
    measured: str  # "CUDA peak allocation on cuda:0" or "peak RSS"
    largest_set: tuple[int, int] = (0, 0)  # (nodes, edges) of the training split's largest set

    @property
    def fits(self) -> bool:
        return self.peak_mb <= self.limit_mb

    def batch_text(self) -> str:
        return f"{self.graphs} graph{'s' if self.graphs != 1 else ''}, {self.nodes} nodes, {self.edges} edges"

    def line(self) -> str:
        return (f"the largest training batch ({self.batch_text()}) peaks at {self.peak_mb:.0f} MB ({self.measured}, "
                f"forward and backward, {self.before_mb:.0f} MB of it held before the batch) against a limit of "
                f"{self.limit_mb:.0f} MB ({self.limit_source})")

    def room_factor(self) -> float:
        """How much larger (or smaller) the batch could be: the room under the limit over what the batch took."""
        batch_mb = max(self.peak_mb - self.before_mb, 1e-3)
        return SAFETY * (self.limit_mb - self.before_mb) / batch_mb

    def advice(self, loader: TrainingLoaderSection) -> str:
        """What would fit: a budget or batch size scaled by the room measured."""
        factor = self.room_factor()
        if factor <= 0:
            return (f"this process holds {self.before_mb:.0f} MB before any batch, already past the limit: raise "
                    "the limit, use a smaller model, or data.storage: disk")
        budget = BatchBudget.from_section(loader.batch_budget)
        if budget is not None:
            suggested = BatchBudget(*(None if v is None else max(1, math.floor(m * factor))
                                      for v, m in ((budget.nodes, self.nodes), (budget.edges, self.edges))),
                                    budget.graphs)
            if not suggested.fits(*self.largest_set, 1):  # a budget must hold every set on its own
                return (f"even the largest set alone ({self.largest_set[0]} nodes, {self.largest_set[1]} edges) "
                        "would not fit: use a smaller model, a device with more memory, or raise the limit")
            return f"set training.batch_budget to {suggested.describe()} (measured to fit), or raise the limit"
        batch_size = math.floor(loader.batch_size * factor)
        if batch_size < 1:
            return ("even one batch of the largest sets would not fit: set training.batch_budget to pack batches "
                    "by size, use a smaller model, or a device with more memory")
        return (f"set training.batch_size to {batch_size} (measured to fit) or training.batch_budget to pack batches "
                "by size, or raise the limit")


# --------------------------------------------------------------------------- the largest batch
def largest_batch(train_sizes: np.ndarray, batch_size: int,
                  train_batches: DistributedBudgetBatchSampler | None) -> list[int]:
    """Positions (in the training split) of the largest batch the sampler will build: the budget's batch of
    most edges, or the ``batch_size`` sets of most edges."""
    if train_batches is not None:
        return max(train_batches.batches, key=lambda b: (train_sizes[b, EDGES].sum(), train_sizes[b, NODES].sum())
                   ).tolist()
    order = np.lexsort((train_sizes[:, NODES], train_sizes[:, EDGES]))[::-1]
    return order[:batch_size].tolist()


# --------------------------------------------------------------------------- measuring
def _reset_peak_rss() -> bool:
    """Start a new peak of this process's resident memory (Linux >= 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as control:
            control.write("5")
        return True
    except OSError:
        return False


def _peak_rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024 / MB
    raise OSError("no VmHWM in /proc/self/status")


@contextlib.contextmanager
def _sampled_peak_rss(result: list[float]):
    """Fallback without /proc: the largest RSS sampled every millisecond while the block runs."""
    process, done = psutil.Process(), threading.Event()

    def sample() -> None:
        while not done.is_set():
            result[0] = max(result[0], process.memory_info().rss / MB)
            done.wait(0.001)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def measure_peak(run: Callable[[], None], device: torch.device) -> tuple[float, float, str]:
    """(peak MB, MB held before, what was measured) of ``run()``."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device) / MB
        run()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) / MB, before, f"CUDA peak allocation on {device}"
    before = psutil.Process().memory_info().rss / MB
    if _reset_peak_rss():
        run()
        return _peak_rss_mb(), before, "peak RSS"
    sampled = [before]
    with _sampled_peak_rss(sampled):
        run()
    return sampled[0], before, "peak RSS, sampled"


def forward_backward(model: torch.nn.Module, batch: Batch, amp: str, device: torch.device) -> Callable[[], None]:
    """One training step's forward and backward on ``batch`` (no optimizer step), leaving no trace: the random
    state, the normalisation statistics and the gradients are as they were."""
    def run() -> None:
        buffers = {name: buffer.clone() for name, buffer in model.named_buffers()}
        cuda = [device.index or 0] if device.type == "cuda" else []
        was_training = model.training
        with torch.random.fork_rng(devices=cuda):
            model.train()
            dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
            with torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext():
                outputs = model(batch.to(device))
            # The sum, not the configured loss: the same backward through the model, whose memory this is,
            # without calling the user's loss outside training (it may count or log its calls).
            outputs.float().sum().backward()
        model.zero_grad(set_to_none=True)
        model.train(was_training)
        with torch.no_grad():
            for name, buffer in model.named_buffers():
                buffer.copy_(buffers[name])
    return run


def device_limit(device: torch.device, memory_limit_mb: float | None, local_processes: int) -> tuple[float, str]:
    """The limit in MB and where it comes from."""
    if memory_limit_mb is not None:
        return memory_limit_mb, "training.memory_limit_mb"
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        return properties.total_memory / MB, f"the memory of {device} ({properties.name})"
    available = psutil.virtual_memory().available / MB
    share = available / max(1, local_processes) + psutil.Process().memory_info().rss / MB
    return share, (f"this process's share of the {available:.0f} MB of memory available on this machine, "
                   f"for {local_processes} process(es)")


def estimate(model: torch.nn.Module, train: Any, train_sizes: np.ndarray, positions: list[int], amp: str,
             memory: MemorySection, device: torch.device, local_processes: int) -> MemoryEstimate:
    """Measure the batch of the training items at ``positions`` against this process's limit."""
    batch = Batch.from_data_list([train[i] for i in positions])
    peak, before, measured = measure_peak(forward_backward(model, batch, amp, device), device)
    del batch
    limit, source = device_limit(device, memory.limit_mb, local_processes)
    chosen = train_sizes[np.asarray(positions, dtype=np.int64)]
    largest_set = (int(train_sizes[:, NODES].max()), int(train_sizes[:, EDGES].max()))
    return MemoryEstimate(len(positions), int(chosen[:, NODES].sum()), int(chosen[:, EDGES].sum()), peak, before,
                          limit, source, measured, largest_set)


def local_processes(runtime: Runtime) -> int:
    """Processes of this job on this node (they share its memory): torchrun's LOCAL_WORLD_SIZE, else all."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", runtime.world_size))


def run_preflight(model: torch.nn.Module, train: Any, train_sizes: np.ndarray,
                  train_batches: DistributedBudgetBatchSampler | None, sections: ConfigSections,
                  runtime: Runtime) -> MemoryEstimate:
    """Every rank: measure the largest training batch; return the estimate of the rank with the least room.
    ``sections``: the config's, of which it reads the training loader, the loop's AMP and the memory limit."""
    positions = largest_batch(train_sizes, sections.loaders.training.batch_size, train_batches)
    mine = estimate(model, train, train_sizes, positions, sections.loop.amp, sections.memory, runtime.device,
                    local_processes(runtime))
    return worst_across_ranks(mine, runtime)


def worst_across_ranks(mine: MemoryEstimate, runtime: Runtime) -> MemoryEstimate:
    """The estimate of the rank with the least room (every rank gets the same one: they all refuse together)."""
    if not runtime.distributed:
        return mine
    rows = torch.zeros(runtime.world_size, 3, dtype=torch.float64)
    rows[runtime.rank] = torch.tensor([mine.peak_mb, mine.before_mb, mine.limit_mb], dtype=torch.float64)
    rows = runtime.sum_across_ranks(rows)
    worst = int(torch.argmax(rows[:, 0] - rows[:, 2]))
    peak, before, limit = rows[worst].tolist()
    source = mine.limit_source if worst == runtime.rank else f"{mine.limit_source}, rank {worst}"
    return MemoryEstimate(mine.graphs, mine.nodes, mine.edges, peak, before, limit, source, mine.measured,
                          mine.largest_set)


def refuse_if_too_large(found: MemoryEstimate, loader: TrainingLoaderSection) -> None:
    if not found.fits:
        raise UserError(f"training.preflight: {found.line()}; {found.advice(loader)} "
                        "(training.preflight: false skips this check)")


def estimate_for_config(sections: ConfigSections, nproc: int) -> MemoryEstimate:
    """The preflight of a config's job (its ``sections``) in this process, as one of ``nproc`` on this machine (the
    doctor): its data (generated and cached if missing), its model, its largest training batch."""
    runtime = Runtime(device=resolve_device(sections.loop.device))
    data = loaders.load_run_data(sections, runtime)
    sizes = loaders.split_sizes(data.dataset, data.split, runtime)
    train_batches = loaders.training_batches(sizes, sections.loaders.training, sections.loop.seed, runtime)
    torch.manual_seed(sections.loop.seed)
    model = build_configured_model(sections.model, data.first.x.size(1), data.task)
    train = data_sources.subset(data.dataset, data.split["train"])
    positions = largest_batch(sizes["train"], sections.loaders.training.batch_size, train_batches)
    return estimate(model.to(runtime.device), train, sizes["train"], positions, sections.loop.amp, sections.memory,
                    runtime.device, nproc)
