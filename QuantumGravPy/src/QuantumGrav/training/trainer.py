"""The training loop, shared by ``Trainer`` (one process) and ``TrainerDDP`` (many).

fit = for each epoch: train one epoch, evaluate, let the callbacks act, stop when their votes say so.

The run's parts are built in ``components``; the callbacks see the run through one ``RunState``, kept current
here. Rank-specific work goes through ``self.runtime``: in one process its collectives are no-ops, so there is
one copy of the loop for both.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from pathlib import Path
from typing import Any, Sequence

import torch
from torch_geometric.loader import DataLoader

from ..callbacks.base import Callback, CallbackList, Decision, configured_callbacks
from ..callbacks.checkpointing import Checkpointing
from ..callbacks.early_stopping import EarlyStopping
from ..config.schema import ResolvedConfig, resolve_config
from ..config.yaml_io import dump_config
from ..distributed.environment import resolve_device
from ..distributed.preemption import sigterm_requests_a_stop
from ..distributed.runtime import Runtime, names_stalled_ranks
from ..common.errors import Preempted
from ..common.files import shown_path
from ..evaluation.evaluator import Evaluator
from ..common.logging_utils import close_run_log, get_logger
from ..runs.records import write_resolved_config
from ..runs.resume import find_run_to_continue, job_token
from ..tasks.registry import build_criterion
from . import components, loaders
from .batch_norm import recompute_batch_norm_statistics
from .compilation import CompileTime, compiled_for_training
from .memory import MemoryMonitor
from .optimization import check_unused_parameters
from .progress import Progress
from .restore import ResumePoint, read_resume_state, restore
from .testing import evaluate_test_split

logger = get_logger("training")


def seed_step_generators(seed: int, device: torch.device) -> None:
    """Seed what a training step on ``device`` draws from (dropout): the CPU's generator, and the GPU's on CUDA.

    The same streams as ``torch.manual_seed(seed)`` on those generators, without its cost at every step: it
    also seeds every other accelerator type, and where one is not initialised (MPS, XPU, and CUDA in a CPU
    job) it queues the seed with a formatted Python stack, about 1 ms per call on a 2-core machine."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        torch.cuda.default_generators[index].manual_seed(seed)  # the model is on it: CUDA is initialised
    elif device.type != "cpu":
        torch.manual_seed(seed)  # another accelerator: seed every generator
        return
    torch.default_generator.manual_seed(seed)


class EpochTotals:
    """An epoch's training loss sum (float64, on the device: adding a step's loss reads nothing back from a GPU)
    and its graph count (a Python int): one tensor operation per step."""

    def __init__(self, device: torch.device, partial: list[float] | None = None):
        self.device, self.graphs = device, int(partial[1]) if partial else 0
        self.loss = torch.tensor(partial[0] if partial else 0.0, device=device, dtype=torch.float64)

    def add(self, loss: torch.Tensor, graphs: int) -> None:
        self.loss.add_(loss.detach(), alpha=graphs)  # the mean loss of the batch, weighted by its graphs
        self.graphs += graphs

    def summed(self, runtime: Runtime) -> list[float]:
        """[loss sum, graphs] of every rank together (every rank must call it: one all-reduce)."""
        mine = torch.stack([self.loss, torch.tensor(float(self.graphs), device=self.device, dtype=torch.float64)])
        return runtime.sum_across_ranks(mine).tolist()


class Trainer:
    """Train, validate and test a GNN on causal sets in one process; ``TrainerDDP`` is the same on every rank.

    ``prepare_dataloaders()``, ``run_training(train_loader, val_loader)``, ``run_test(test_loader)`` and
    ``close()`` are the whole API. Creating it creates the run directory (``training.path``/``training.run_name``,
    or the one ``training.resume`` continues).

    Args:
        config: a config path, dict or resolved config (``load_config``).
        runtime: the process's place in a job; None: a single process (``TrainerDDP`` passes its own).
        dataset: train on this PyG Dataset or sequence of ``Data`` instead of the configured one.
        callbacks: ``QG.Callback`` instances run with the built-in ones.

    Raises:
        ConfigError: an invalid config, or settings this machine cannot run (``training.amp: fp16`` without CUDA).
        UserError: bad data, or a run directory that cannot be created or is used by another job.

    Example:
        >>> import QuantumGrav as QG
        >>> trainer = QG.Trainer("configs/train.yaml")  # doctest: +SKIP
        >>> train_loader, val_loader, test_loader = trainer.prepare_dataloaders()  # doctest: +SKIP
        >>> trainer.run_training(train_loader, val_loader)  # doctest: +SKIP
        >>> trainer.run_test(test_loader)["accuracy"]  # doctest: +SKIP
        >>> trainer.close()  # doctest: +SKIP
    """

    def __init__(self, config: dict | str | Path, *, runtime: Runtime | None = None, dataset: Any = None,
                 callbacks: Sequence[Callback] = ()):
        self.config = self._config_for_this_job(resolve_config(config))  # validated where it entered, or here
        self.sections = s = self.config.sections  # each component below is handed its own
        self.runtime = runtime or self._runtime()
        self.device = self.runtime.device
        components.prepare_device(s.loop, self.device)
        self.job_token = job_token() if self.runtime.is_main else None
        continued = find_run_to_continue(s.checkpoint, self.runtime, self.job_token)
        resume_state = read_resume_state(continued, self.config, self.device) if continued else None
        torch.manual_seed(s.loop.seed)  # same initial weights on every rank
        data = loaders.load_run_data(s, self.runtime, dataset)
        self.task = data.task
        self.sizes, self.train_batches = components.batch_plan(data, s, self.runtime)
        self.core_model, self.model_io = components.build_run_model(s, data.first, self.task, self.device)
        self.training_range = components.training_range(data, s, self.sizes, self.runtime)
        self.memory_estimate = components.preflight(self.core_model, data, self.sizes, self.train_batches, s,
                                                    self.runtime)
        self.model = self._wrap_model(compiled_for_training(self.core_model, s.loop.compile))  # training steps only
        self.optimization = components.build_optimization(self.core_model, s, self.runtime, len(data.split["train"]),
                                                          self.train_batches)
        self.memory = MemoryMonitor(self.device, s.memory.limit_mb, logger)
        self.progress = Progress(self.runtime, s, self.memory)
        self.criterion = build_criterion(s.task.criterion, self.task, self.device)
        self.evaluator = Evaluator(self.core_model, self.task, self.criterion, self.runtime, s.loaders.validation.mode,
                                   lambda: self.optimization.autocast(self.device.type))
        self.early_stopping = EarlyStopping.from_section(s.early_stopping)
        from_config = configured_callbacks(self.config["callbacks"])  # built here: constructors may refuse kwargs
        declared = components.declared_analyses(s, self.task, data.dataset)
        # Only now, with data, model and optimizer built, is there a run to write: bad input found above leaves
        # nothing on disk.
        self.run_dir, self._run_lock = components.open_run(s.checkpoint, self.runtime, self.job_token, continued)
        if self.memory_estimate is not None:
            logger.debug(f"preflight: {self.memory_estimate.line()}")
        self.state = components.run_state(self.config, self.runtime, self.run_dir, self.core_model,
                                          self.optimization, data, self.training_range)
        self.checkpointing = Checkpointing(self._checkpoint_contents, self.early_stopping, s.checkpoint, self.job_token)
        self.callbacks = CallbackList(components.run_callbacks(s, self.run_dir, self.early_stopping, self.checkpointing,
                                                               declared, [*from_config, *callbacks]),
                                      self.runtime.is_main)
        self._checked_unused_parameters = False
        self.resume_point = restore(self.state, self.optimization, self.callbacks, resume_state) \
            if resume_state else ResumePoint()
        if self.runtime.is_main:
            write_resolved_config(self.run_dir, self.config, self.optimization.derived)

    def _config_for_this_job(self, config: ResolvedConfig) -> ResolvedConfig:
        return config  # TrainerDDP records the job's world size in it

    def _runtime(self) -> Runtime:
        """This process's place in the job: a single process here (TrainerDDP: its rank in the process group)."""
        return Runtime(device=resolve_device(self.sections.loop.device))

    def _wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        return model  # TrainerDDP wraps it in DistributedDataParallel

    def _checkpoint_contents(self, epoch: int, in_epoch: dict[str, Any] | None) -> dict[str, Any]:
        """What a checkpoint holds. ``epoch``: the last completed one; ``in_epoch``: where a mid-epoch
        checkpoint stands in the next."""
        return {
            "in_epoch": in_epoch,
            "model": self.core_model.state_dict(),  # the plain model: loadable without DDP
            **self.optimization.state_dict(),
            "epoch": epoch,
            "callbacks": self.callbacks.state_dict(),
            "config_yaml": dump_config(self.config),
            "world_size": self.runtime.world_size,
            "derived": self.optimization.derived,
            "model_io": self.model_io,
            "training_range": self.training_range,
        }

    # The run's state as attributes, for scripts and notebooks that read them from the trainer.
    dataset = property(lambda self: self.state.dataset)
    split = property(lambda self: self.state.split)
    history = property(lambda self: self.state.history)
    summary = property(lambda self: self.state.summary)
    best_state = property(lambda self: self.state.best_state)
    test_predictions = property(lambda self: self.state.test_predictions)
    baseline_predictions = property(lambda self: self.state.baseline_predictions)
    figures = property(lambda self: self.state.figures)
    epoch = property(lambda self: self.state.epoch)
    start_epoch = property(lambda self: self.resume_point.start_epoch)

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.optimization.optimizer

    @property
    def scheduler(self) -> Any:
        return self.optimization.scheduler

    def prepare_dataloaders(self) -> tuple[DataLoader, DataLoader, DataLoader]:
        """Train (sharded, reshuffled each epoch), validation (sharded or whole on rank 0), test (whole)."""
        return loaders.prepare_dataloaders(self.state.dataset, self.state.split, self.sections.loaders,
                                           self.sections.loop.seed, self.runtime, self.sizes)

    # ------------------------------------------------------------------ the loop
    @names_stalled_ranks  # a collective timeout says which rank did not arrive
    def run_training(self, train_loader: DataLoader, val_loader: DataLoader) -> tuple[list[dict], list[dict]]:
        """Train until ``num_epochs`` or a vote to stop; returns (train_history, val_history) on every rank."""
        self.progress.start_block(self.state, self.optimization, self.train_batches, self.start_epoch, train_loader)
        self.callbacks.call("on_fit_start", self.state)
        loop = self.sections.loop
        decision, self._interrupt_votes = Decision(reason=f"completed {loop.num_epochs} epochs"), []
        compile_time = CompileTime(loop.compile)
        with sigterm_requests_a_stop() as self._sigterm, \
                self.runtime.step_votes(self.sections.parallel.timeout_s) as self._step_votes:
            for epoch in range(self.start_epoch, loop.num_epochs):
                self.state.epoch = epoch
                started = time.perf_counter()
                train = self._train_one_epoch(train_loader, epoch)
                if self.sections.loaders.validation.recompute_batch_norm:
                    recompute_batch_norm_statistics(self.core_model, train_loader, self.device, self.runtime,
                                                    lambda: self.optimization.autocast(self.device.type),
                                                    self.sections.loaders.validation.recompute_batch_norm_sets)
                record = self._epoch_record(epoch, train, self.evaluate(val_loader), time.perf_counter() - started)
                compile_time.report(time.perf_counter() - started)
                voted = self._end_epoch(record)
                if voted.stop:  # the same on every rank: the votes of every rank were gathered
                    decision = voted
                    break
        self.callbacks.call("on_fit_end", self.state, decision)
        # Every rank says where it stopped (in its own log file): they must all agree.
        logger.info(f"training finished at epoch {self.epoch}: {decision.reason}")
        train_history = [{"epoch": r["epoch"], "loss": r["train_loss"]} for r in self.history]
        # A run resumed from an older release's checkpoint has no record of metrics added since (NaN there).
        val_history = [{"epoch": r["epoch"], **{m: r.get(f"val_{m}", math.nan) for m in self.task.metric_names}}
                       for r in self.history]
        return train_history, val_history

    def _train_one_epoch(self, loader: DataLoader, epoch: int) -> dict[str, float]:
        self.model.train()
        for sampler in (loader.sampler, loader.batch_sampler):  # DistributedSampler, or batches by size
            if hasattr(sampler, "set_epoch"):
                # Without set_epoch every epoch would replay the same permutation on every rank.
                sampler.set_epoch(epoch)
        # A mid-epoch checkpoint resumes after its batches, with its partial loss sums (every rank
        # starts from the same batch: the permutation depends on the seed and the epoch only).
        point = self.resume_point
        first_batch, partial = (point.completed_batches, point.train_totals) if epoch == self.start_epoch else (0, None)
        totals = EpochTotals(self.device, partial if self.runtime.is_main else None)  # rank 0 holds the partial sums
        started = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        batches = itertools.islice(loader, first_batch, None)
        with self.progress.bar(batches, epoch, total=len(loader) - first_batch) as progress:
            for step, batch in enumerate(progress, start=first_batch):
                loss = self._train_step(batch, epoch, step, len(loader), totals)
                self.progress.after_batch(progress, epoch, step, loss, totals.graphs, started)
        elapsed = time.perf_counter() - started
        # Sums and counts over all ranks, then divided (DistributedSampler's padding duplicates count too).
        loss_sum, graphs = totals.summed(self.runtime)
        return {"loss": loss_sum / max(graphs, 1), "graphs": graphs, "seconds": elapsed}

    def _train_step(self, batch, epoch: int, step: int, num_batches: int, totals: EpochTotals) -> torch.Tensor:
        accumulation = self.sections.loop.accumulation_steps
        # Dropout differs per rank and step, yet a run resumed at any checkpoint replays it exactly.
        seed_step_generators((self.sections.loop.seed * 1_000_003 + epoch * 10_007 + step) * 1_009 + self.runtime.rank,
                             self.device)
        group_start = step - step % accumulation
        group_size = min(accumulation, num_batches - group_start)
        last_micro_step = step == group_start + group_size - 1
        loss, graphs = self._forward_backward(batch, group_size, sync=last_micro_step)
        totals.add(loss, graphs)
        if last_micro_step:
            self.optimization.step()
            self._after_optimizer_step(epoch, step + 1, totals, last=step + 1 == num_batches)
        return loss

    def _forward_backward(self, batch, group_size: int, sync: bool) -> tuple[torch.Tensor, int]:
        if self.device.type != "cpu":  # the loader's batches are on the CPU already: .to visits every tensor
            batch = batch.to(self.device, non_blocking=True)
        # Gradient accumulation: on all but the last micro-step of a group, skip DDP's
        # gradient all-reduce (no_sync); gradients pile up locally and are reduced once.
        no_sync = getattr(self.model, "no_sync", None)
        with no_sync() if (no_sync is not None and not sync) else contextlib.nullcontext():
            with self.optimization.autocast(self.device.type):
                loss = self.criterion(self.model(batch), self.task.target(batch.y))
            # The mean over the group, as one batch of that size (no division, and none in backward, for one).
            self.optimization.backward(loss / group_size if group_size > 1 else loss)
        if not self._checked_unused_parameters:
            self._checked_unused_parameters = True
            check_unused_parameters(self.model, self.core_model, self.sections.parallel.find_unused_parameters)
        return loss, batch.num_graphs

    def _after_optimizer_step(self, epoch: int, completed_batches: int, totals: EpochTotals, last: bool) -> None:
        """Every rank, at every optimizer step: interrupt when any rank voted so (SIGTERM, a callback's step
        vote), seen by all one step later without a blocking collective (``StepVotes``; the epoch's last step
        waits for its own, so that no vote crosses into evaluation); checkpoint every checkpoint_every_n_steps."""
        votes = self._sigterm.vote() + self.callbacks.votes("on_step_end", self.state, epoch, completed_batches)
        self._interrupt_votes += votes
        interrupt = self._step_votes.exchange(bool(votes))
        interrupt = (self._step_votes.settle() or interrupt) if last else interrupt
        every = self.sections.checkpoint.every_n_steps
        steps_done = math.ceil(completed_batches / self.sections.loop.accumulation_steps)
        if interrupt or (every and steps_done % every == 0):
            partial = totals.summed(self.runtime)  # every rank: the epoch's sums so far
            if self.runtime.is_main:
                self.checkpointing.save_in_epoch(self.state, epoch, completed_batches, partial)
        if interrupt:
            self._step_votes.settle()  # every rank started this step's exchange: let it finish before teardown
            reason = self.runtime.decide(self._interrupt_votes).reason  # every rank learns why, once
            logger.warning(f"{reason}: checkpointed epoch {epoch} after {completed_batches} batches; stopping")
            raise Preempted(f"{reason} after checkpointing epoch {epoch} (batch {completed_batches}) in "
                            f"{shown_path(self.run_dir)}; the same job started again (a requeue) continues from there")

    def evaluate(self, loader: DataLoader) -> dict[str, Any] | None:
        """Exact metrics of the current model on ``loader`` (``evaluation.evaluator``); None on ranks > 0 in rank0 mode."""
        return self.evaluator.evaluate(loader)

    # ------------------------------------------------------------------ end of epoch: one decision
    def _epoch_record(self, epoch: int, train: dict, val: dict | None, seconds: float) -> dict[str, Any]:
        """Rank 0's record of the epoch, broadcast: every rank's callbacks see the same numbers."""
        memory = self.memory.check()  # every rank: each warns once past training.memory_limit_mb
        self.memory.start_new_peak()
        record = None
        if self.runtime.is_main:
            scores = {f"val_{m}": val[m] for m in self.task.metric_names}
            record = {"epoch": epoch, "train_loss": train["loss"], **scores, "lr": self.optimization.lr,
                      "epoch_time_s": seconds,
                      "graphs_per_s": train["graphs"] / max(train["seconds"], 1e-9), **memory}
        return self.runtime.broadcast_from_main(record)

    def _end_epoch(self, record: dict[str, Any]) -> Decision:
        self.optimization.end_epoch(record[self.early_stopping.metric])  # before the checkpoint: resumes continue it
        # No SIGTERM vote here: it is acted on at optimizer steps only, so a stopped job stands inside an epoch.
        votes = self.callbacks.votes("on_epoch_end", self.state, record)
        self.state.history.append(record)
        decision = self.runtime.decide(votes)  # one all-gather of every rank's votes: all stop here, or none
        if decision.resumable:  # an interruption at the epoch's end: its checkpoint is written
            raise Preempted(f"{decision.reason} after checkpointing epoch {record['epoch']} in "
                            f"{shown_path(self.run_dir)}; the same job started again (a requeue) continues from there")
        return decision

    # ------------------------------------------------------------------ test and teardown
    def run_test(self, test_loader: DataLoader) -> dict[str, Any] | None:
        """Evaluate the best model on the whole test split, on rank 0 only (no collectives, so it may be
        called on rank 0 alone). Returns ``test_<metric>`` for each of the task's metrics and what the
        callbacks add (baselines, destroyed-set curves); None on other ranks."""
        if not self.runtime.is_main:
            return None
        if self.state.best_state is not None:
            self.core_model.load_state_dict(self.state.best_state)
        result = evaluate_test_split(self.evaluator, self.task, self.state, test_loader)
        self.callbacks.call("on_test_end", self.state, result)
        return result

    def close(self) -> None:
        """Tear the callbacks down (the W&B run finishes), release the run and close this rank's log file.
        Safe to call twice."""
        callbacks, self.callbacks = self.callbacks, CallbackList([], self.runtime.is_main)
        callbacks.call("teardown", self.state)
        if self._run_lock:
            self._run_lock.release()
            self._run_lock = None
        close_run_log()
