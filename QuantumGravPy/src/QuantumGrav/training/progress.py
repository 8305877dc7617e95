"""What a run shows while it trains: the start block, the progress bar (rank 0), and every
``log_every_n_steps`` batches the loss, throughput and memory (every rank checks its own memory)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from typing import Any, Iterable, Iterator

import torch

from ..callbacks.state import RunState
from ..config.layout import ConfigSections
from ..distributed.runtime import Runtime
from .advice import config_advice
from .memory import MemoryMonitor
from .optimization import Optimization
from ..data.batching import BatchBudget
from ..common.logging_utils import PACKAGE_LOGGER, get_logger
from ..common.files import shown_path
from ..models.gnn import count_parameters

logger = get_logger("training")  # the run's own lines, in one channel whatever module writes them


class Progress:
    """The trainer's console: ``start_block`` once, ``bar`` around each epoch's batches, ``after_batch``."""

    def __init__(self, runtime: Runtime, sections: ConfigSections, memory: MemoryMonitor):
        self.runtime, self.sections, self.memory = runtime, sections, memory
        self.every = sections.logging.log_every_n_steps

    def start_block(self, run: RunState, optimization: Optimization, train_batches: Any, start_epoch: int,
                    train_loader: Any) -> None:
        """The set-up of the run in one block (rank 0), and advice on the config; counts the parameters into
        the summary on every rank."""
        counts = count_parameters(run.model)
        run.summary["parameters"] = counts
        if not self.runtime.is_main:
            return
        d, rt, s = optimization.derived, self.runtime, self.sections
        sizes = {name: len(idx) for name, idx in run.split.items()}
        lines = [
            f"run directory     {shown_path(run.run_dir)}",
            f"processes         world_size={rt.world_size}  backend={rt.backend or 'none (single process)'}"
            f"  device={rt.device}",
            self._batch_line(d, train_batches),
            f"learning rate     {optimization.lr:.3g} at the first step (peak {d['lr']:.3g}, base {d['base_lr']:.3g},"
            f" scaling {s.optimizer.lr_scaling}, warmup {d['warmup_epochs']} epochs)  amp={s.loop.amp}",
            f"model             {counts['total_params']:,} parameters ({counts['trainable_params']:,} trainable,"
            f" {counts['size_mb']:.2f} MB)",
            f"data              train {sizes['train']}  val {sizes['val']}  test {sizes['test']} causal sets, "
            f"{run.task.describe()}",
            f"epochs            {start_epoch}..{s.loop.num_epochs - 1}  "
            f"({len(train_loader)} train batches per process per epoch)",
        ]
        logger.info("training set-up\n  " + "\n  ".join(lines))
        for advice in config_advice(s, rt.world_size, rt.device.type):
            logger.warning(f"config advice: {advice}")

    def _batch_line(self, derived: dict[str, Any], train_batches: Any) -> str:
        loader, accumulation, world_size = self.sections.loaders.training, self.sections.loop.accumulation_steps, \
            self.runtime.world_size
        if train_batches is None:
            return (f"batch size        {loader.batch_size} per process x {accumulation} accumulation x "
                    f"{world_size} processes = {derived['effective_batch_size']} effective")
        graphs = [len(batch) for batch in train_batches.batches]
        budget = BatchBudget.from_section(loader.batch_budget).describe()
        return (f"batches by size   within training.batch_budget {budget}: "
                f"{len(graphs)} batches of {min(graphs)} to {max(graphs)} graphs, {len(train_batches)} steps "
                f"per process and epoch x {accumulation} accumulation x {world_size} processes")

    @contextlib.contextmanager
    def bar(self, batches: Iterable, epoch: int, total: int) -> Iterator[Iterable]:
        """``batches``, drawn as a progress bar on rank 0 when ``training.progress_bar`` says so; while it is
        drawn, console log lines go through tqdm.write so they do not cut the bar."""
        setting = self.sections.logging.progress_bar
        interactive = sys.stderr.isatty() and not os.environ.get("CI")
        if not self.runtime.is_main or setting is False or (setting == "auto" and not interactive):
            yield batches
            return
        from tqdm.auto import tqdm
        from tqdm.contrib.logging import logging_redirect_tqdm

        package = logging.getLogger(PACKAGE_LOGGER)
        consoles = [h for h in package.handlers if type(h) is not logging.FileHandler]
        level = min((h.level for h in consoles), default=logging.NOTSET)
        with logging_redirect_tqdm(loggers=[package]):
            package.handlers[-1].setLevel(level)  # tqdm's handler (appended last) keeps the console's level
            yield tqdm(batches, desc=f"epoch {epoch}", total=total, leave=False, unit="batch", dynamic_ncols=True)

    def after_batch(self, progress: Any, epoch: int, step: int, loss: torch.Tensor, graphs: int,
                    started: float) -> None:
        """Every ``log_every_n_steps`` batches: memory (each rank warns once past its limit), and on rank 0
        the local loss and throughput in the bar and the log. ``.item()`` waits for the GPU, which is why
        this is not done every batch."""
        if (step + 1) % self.every:
            return
        memory = self.memory
        snapshot = memory.check()
        if not self.runtime.is_main:
            return
        rate = graphs / max(time.perf_counter() - started, 1e-9)
        value = loss.item()  # one wait for the GPU, not two
        if hasattr(progress, "set_postfix"):
            progress.set_postfix(loss=f"{value:.4f}", graphs_per_s=f"{rate:.0f}")
        logger.info(f"epoch {epoch} step {step}: loss {value:.4f}, {rate:.0f} graphs/s on rank 0, "
                    f"{memory.format(snapshot)}")
