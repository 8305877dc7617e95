"""The one training loop, shared by ``Trainer`` (one process) and ``TrainerDDP`` (many).

Everything rank-specific goes through ``self.runtime`` (see distributed.Runtime):
in one process its collectives are no-ops, so the code below reads the same for
both and there is exactly one copy of the loop.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import ReduceLROnPlateau
from torch.utils.data import DistributedSampler
from torch_geometric.loader import DataLoader

from .advice import config_advice
from .baseline import describe_baselines, flatten_baselines, predict_baselines, score_baselines
from .callbacks import Callback, CallbackList, Decision, Stop, configured_callbacks
from .checkpoint import RunLock, load_checkpoint, load_resume_checkpoint, save_checkpoint, save_last_checkpoint
from .config import dump_config, load_config, load_yaml_text
from . import data_sources, tasks
from .data import split_indices
from .derived_invariants import with_order_invariants
from .destroyed_sets import MODEL_LABELS, describe_curves, destroyed_curves, flip_fractions
from .distributed import Runtime, configured_device_type, names_stalled_ranks
from .early_stopping import EarlyStopping
from .errors import ConfigError, Preempted, UserError
from .logging_utils import PACKAGE_LOGGER, close_run_log, get_logger, rank_zero_warn, setup_logging
from .memory import MemoryMonitor
from .models import build_model, check_model_forward, count_parameters
from .resume import StopRequest, forget_run, job_token, remember_run, run_to_continue, sigterm_requests_a_stop
from .run_artifacts import (CHECKPOINT_DIR, FIGURE_DIR, MetricsCSV, atomic_write_text, create_run_dir,
                            plot_confusion_matrix, plot_destroyed_by_flip_fraction, plot_predictions,
                            plot_training_curves, run_provenance, write_json)
from .schedules import (build_scheduler, derive_hyperparameters, fast_forward, fit_schedule_to_num_epochs,
                        scheduler_steps_per_epoch)
from .wandb_logger import WandbLogger

logger = get_logger("training")


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """'auto' -> CUDA when present. Each process drives GPU ``local_rank`` of its node."""
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("training.device: 'cuda' was asked for but no CUDA GPU is visible; "
                          "use device: cpu (or auto), or check CUDA_VISIBLE_DEVICES")
    if configured_device_type(name) == "cuda":
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


class Trainer:
    """Train, validate and test a GNN on causal sets in one process.

    ``prepare_dataloaders()``, ``run_training(train_loader, val_loader)`` and
    ``run_test(test_loader)`` are the whole API; ``TrainerDDP`` has the same.
    ``dataset``: train on this PyG Dataset or sequence of ``Data`` instead of the configured one
    (see ``data_sources``).
    """

    def __init__(self, config: dict | str | Path, *, runtime: Runtime | None = None, dataset: Any = None,
                 callbacks: Sequence[Callback] = ()):
        self.config = load_config(config)
        self.tcfg = self.config["training"]
        self.runtime = runtime or Runtime(device=resolve_device(self.tcfg["device"]))
        self.device = self.runtime.device
        if self.tcfg["amp"] == "fp16" and self.device.type != "cuda":
            raise ConfigError("training.amp: fp16 needs a CUDA device (its gradient scaler is CUDA-only); "
                              "use amp: bf16 on CPU, or amp: off")
        self.epoch, self.start_epoch, self._best_state = 0, 0, None
        self._resume_in_epoch: tuple[int, list[float] | None] = (0, None)
        self._stop_request = StopRequest()
        self.job_token = job_token() if self.runtime.is_main else None
        self._resume_dir = self._find_run_to_continue()
        self._resume_state = self._read_resume_checkpoint(self._resume_dir) if self._resume_dir else None
        torch.manual_seed(self.tcfg["seed"])  # same initial weights on every rank
        self.dataset = with_order_invariants(data_sources.load_dataset(self.config, self.runtime, dataset), self.config,
                                             data_sources.source_name(self.config, dataset))
        source = data_sources.source_name(self.config, dataset)
        samples = data_sources.check_samples(self.dataset, source)
        self.task = tasks.resolve_task(self.config["task"], self.dataset, samples, source)
        first = samples[0]
        tasks.check_metric(self.config["early_stopping"]["metric"], self.task)
        self.split = dict(zip(("train", "val", "test"), split_indices(
            len(self.dataset), self.config["data"]["split"], self.config["data"]["split_seed"])))
        model_key = "model.kwargs" if self.config["model"]["type"] is not None else "model"
        core = self._build(model_key, build_model, self.config["model"], first.x.size(1), self.task.output_width)
        self.core_model = core.to(self.device)  # move to the device *before* any DDP wrapping
        self._check_model_forward(first)
        self.model = self._wrap_model(self.core_model)
        self.criterion = tasks.build_criterion(self.config["criterion"], self.task, self.device)
        self.derived = derive_hyperparameters(self.tcfg, self.runtime.world_size)
        self.optimizer = self._build("training.optimizer_kwargs", self.tcfg["optimizer_type"],
                                     self.core_model.parameters(), *self.tcfg["optimizer_args"],
                                     **{**self.tcfg["optimizer_kwargs"], "lr": self.derived["lr"]})
        self.scheduler = build_scheduler(self.optimizer, self.tcfg, self.derived, self._batches_per_epoch(),
                                         self.config["early_stopping"]["mode"])
        self.scaler = torch.amp.GradScaler("cuda") if self.tcfg["amp"] == "fp16" else None
        self.early_stopping = EarlyStopping.from_config(self.config["early_stopping"])
        self.callbacks = CallbackList([*configured_callbacks(self.config), *callbacks], self.runtime.is_main)
        # Only now, with data, model and optimizer built, is there a run to write: bad input found
        # above leaves nothing on disk.
        self.run_dir = self._open_run_dir()
        # One job per run; a restart of this job (same token) takes over the lock its first attempt left.
        self._run_lock = RunLock.acquire(self.run_dir, self.job_token) if self.runtime.is_main else None
        setup_logging(self.runtime.rank, self.run_dir)
        self.memory = MemoryMonitor(self.device, self.tcfg["memory_limit_mb"], logger)
        self.metrics_csv = MetricsCSV(self.run_dir / "metrics.csv")
        self.history: list[dict[str, Any]] = []
        self.summary: dict[str, Any] = {"run_dir": str(self.run_dir), **run_provenance(self.runtime.world_size)}
        self._started = time.perf_counter()
        self._checked_unused_parameters = False
        self.experiment = None
        if self._resume_state:
            self._restore(self._resume_state)
        if self.runtime.is_main:
            self._write_resolved_config()
            self.experiment = self._open_experiment_logger()

    @staticmethod
    def _build(key: str, constructor, *args, **kwargs):
        """Call a constructor named in the config; arguments it rejects are reported as that key's error."""
        try:
            return constructor(*args, **kwargs)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"{key}: {getattr(constructor, '__name__', constructor)} rejects the configured "
                              f"arguments: {err}") from None

    def _batches_per_epoch(self) -> int:
        """Training batches per process and epoch, as the DataLoader of prepare_dataloaders will have."""
        per_rank = math.ceil(len(self.split["train"]) / self.runtime.world_size)  # DistributedSampler pads
        batch = self.tcfg["batch_size"]
        return per_rank // batch if self.tcfg["drop_last"] else math.ceil(per_rank / batch)

    # ------------------------------------------------------------------ set-up pieces
    def _wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        return model  # TrainerDDP wraps it in DistributedDataParallel

    def _open_run_dir(self) -> Path:
        """Rank 0 creates (or reopens) the run directory; every rank gets its path."""
        if self._resume_dir:
            return self._resume_dir
        path = None
        if self.runtime.is_main:
            path = create_run_dir(self.tcfg["path"], self.tcfg["run_name"])
            remember_run(self.tcfg, self.job_token, path)
        return Path(self.runtime.broadcast_from_main(str(path) if path else None))

    def _find_run_to_continue(self) -> Path | None:
        """Rank 0 decides which run this job continues (resume.py: --resume, the run name, or this job's
        first attempt after a restart); one broadcast gives every rank the same answer."""
        found = run_to_continue(self.tcfg, self.job_token) if self.runtime.is_main else None
        found = self.runtime.broadcast_from_main(str(found) if found else None)
        return Path(found) if found else None

    def _read_resume_checkpoint(self, run_dir: Path) -> dict[str, Any]:
        """The last checkpoint of the run to continue (every rank reads it from the shared run directory),
        after checking that this config trains the same model on the same data for the same task."""
        state, _ = load_resume_checkpoint(run_dir, self.device)  # last.pt, or previous.pt if it is damaged
        stored = load_config(load_yaml_text(state["config_yaml"]))
        changed = [f"{section}.{key}" for section in ("data", "model", "task")
                   for key, value in self.config[section].items() if key != "root" and value != stored[section][key]]
        changed += ["criterion"] if self.config["criterion"] is not stored["criterion"] else []
        if changed:
            source = "training.resume" if self.tcfg["resume"] else "training.run_name" if self.tcfg["run_name"] else ""
            raise ConfigError(f"{source or run_dir}: this config changes {', '.join(changed)} of the run being "
                              f"continued ({run_dir}); a resumed run trains the same model on the same data for "
                              f"the same task. Resume with the run's own config (--config {run_dir / 'config.yaml'} "
                              "--resume ...) or start a new run (another training.run_name)")
        return state

    def _check_model_forward(self, first) -> None:
        check_model_forward(self.core_model, first, self.task, self.config["model"], self.device)

    def _write_resolved_config(self) -> None:
        # Without resume and run_name, `--config <run dir>/config.yaml` starts the same run anew.
        repeatable = {**self.config, "training": {**self.tcfg, "resume": None, "run_name": None}}
        text = dump_config({**repeatable, "derived": self.derived})
        header = "# Resolved config of this run. 'derived' is recomputed by the trainer and ignored on load.\n"
        atomic_write_text(self.run_dir / "config.yaml", header + text)

    def _open_experiment_logger(self):
        wandb_cfg = (self.config.get("logger") or {}).get("wandb")
        if not wandb_cfg:
            return None
        resume_id = (self._resume_state or {}).get("wandb_run_id") or None
        return WandbLogger(wandb_cfg, self.run_dir, {**self.config, "derived": self.derived}, resume_id=resume_id)

    # ------------------------------------------------------------------ data
    def prepare_dataloaders(self) -> tuple[DataLoader, DataLoader, DataLoader]:
        """Train (sharded, reshuffled each epoch), validation (sharded or whole on rank 0), test (whole)."""
        return data_sources.prepare_dataloaders(self.dataset, self.split, self.config, self.runtime)

    # ------------------------------------------------------------------ the loop
    @names_stalled_ranks  # a collective timeout says which rank did not arrive
    def run_training(self, train_loader: DataLoader, val_loader: DataLoader) -> tuple[list[dict], list[dict]]:
        """Train until ``num_epochs`` or early stopping; returns (train_history, val_history) on every rank."""
        self._log_start_block(train_loader)
        self.callbacks.call("on_fit_start", self)
        decision = Decision(reason=f"completed {self.tcfg['num_epochs']} epochs")
        with sigterm_requests_a_stop() as self._stop_request:  # checkpoint first, then stop (preemption)
            for epoch in range(self.start_epoch, self.tcfg["num_epochs"]):
                self.epoch = epoch
                started = time.perf_counter()
                train_stats = self._train_one_epoch(train_loader, epoch)
                val_stats = self.evaluate(val_loader)
                stop = self._finish_epoch(epoch, train_stats, val_stats, time.perf_counter() - started)
                if stop.stop:  # the same decision on every rank: the votes of every rank were gathered
                    decision = stop
                    break
        self._finish_training(decision)
        train_history = [{"epoch": r["epoch"], "loss": r["train_loss"]} for r in self.history]
        val_history = [{"epoch": r["epoch"], **{m: r[f"val_{m}"] for m in self.task.metric_names}}
                       for r in self.history]
        return train_history, val_history

    def _train_one_epoch(self, loader: DataLoader, epoch: int) -> dict[str, float]:
        self.model.train()
        if isinstance(loader.sampler, DistributedSampler):
            # Without set_epoch every epoch would replay the same permutation on every rank.
            loader.sampler.set_epoch(epoch)
        # A mid-epoch checkpoint resumes after its batches, with its partial loss sums (every rank
        # starts from the same batch: the permutation depends on the seed and the epoch only).
        first_batch, partial = self._resume_in_epoch if epoch == self.start_epoch else (0, None)
        totals = torch.zeros(2, device=self.device, dtype=torch.float64)  # loss sum, graph count
        if partial is not None and self.runtime.is_main:
            totals += torch.tensor(partial, device=self.device, dtype=torch.float64)
        started = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        batches = itertools.islice(loader, first_batch, None)
        progress = self._progress(batches, epoch, total=len(loader) - first_batch)
        with self._logs_above_progress_bar(progress):
            self._run_batches(progress, epoch, totals, started, first_batch, len(loader))
        elapsed = time.perf_counter() - started
        # Sums and counts over all ranks, then divided (DistributedSampler's padding duplicates count too).
        loss_sum, graphs = self.runtime.sum_across_ranks(totals).tolist()
        return {"loss": loss_sum / max(graphs, 1), "graphs": graphs, "seconds": elapsed}

    def _run_batches(self, progress, epoch: int, totals: torch.Tensor, started: float, first_batch: int,
                     num_batches: int) -> None:
        accumulation = self.tcfg["accumulation_steps"]
        for step, batch in enumerate(progress, start=first_batch):
            # Dropout differs per rank and step, yet a run resumed at any checkpoint replays it exactly.
            torch.manual_seed((self.tcfg["seed"] * 1_000_003 + epoch * 10_007 + step) * 1_009 + self.runtime.rank)
            group_start = step - step % accumulation
            group_size = min(accumulation, num_batches - group_start)
            last_micro_step = step == group_start + group_size - 1
            loss, graphs = self._forward_backward(batch, group_size, sync=last_micro_step)
            totals += torch.stack([loss.detach().double() * graphs, torch.tensor(graphs, device=self.device,
                                                                                 dtype=torch.float64)])
            if last_micro_step:
                self._optimizer_step()
                self._after_optimizer_step(epoch, step + 1, totals)
            if (step + 1) % self.tcfg["log_every_n_steps"] == 0:
                self._report_step(progress, epoch, step, loss, totals, started)

    def _after_optimizer_step(self, epoch: int, completed_batches: int, totals: torch.Tensor) -> None:
        """At every optimizer step, on every rank: stop for a SIGTERM that reached any rank (all agree, so
        no rank waits at a collective the others left), and checkpoint every checkpoint_every_n_steps."""
        stop = self.runtime.any_rank(self._stop_request.is_set())
        every, accumulation = self.tcfg["checkpoint_every_n_steps"], self.tcfg["accumulation_steps"]
        steps_done = math.ceil(completed_batches / accumulation)
        if stop or (every and steps_done % every == 0):
            partial = self.runtime.sum_across_ranks(totals).tolist()  # every rank: the epoch's sums so far
            if self.runtime.is_main:
                self._save_checkpoints(epoch - 1, improved=False,
                                       in_epoch={"epoch": epoch, "completed_batches": completed_batches,
                                                 "train_totals": partial})
        if stop:
            logger.warning(f"SIGTERM: checkpointed epoch {epoch} after {completed_batches} batches; stopping")
            raise Preempted(f"stopped on SIGTERM after checkpointing epoch {epoch} (batch {completed_batches}) in "
                            f"{self.run_dir}; the same job started again (a requeue) continues from there")

    @staticmethod
    @contextlib.contextmanager
    def _logs_above_progress_bar(progress):
        """While a bar is drawn, console log lines go through tqdm.write so they do not cut the bar."""
        if not hasattr(progress, "set_postfix"):
            yield
            return
        from tqdm.contrib.logging import logging_redirect_tqdm

        package = logging.getLogger(PACKAGE_LOGGER)
        consoles = [h for h in package.handlers if type(h) is not logging.FileHandler]
        level = min((h.level for h in consoles), default=logging.NOTSET)
        with logging_redirect_tqdm(loggers=[package]):
            package.handlers[-1].setLevel(level)  # tqdm's handler (appended last) keeps the console's level
            yield

    def _report_step(self, progress, epoch: int, step: int, loss: torch.Tensor, totals: torch.Tensor,
                     started: float) -> None:
        """Every ``log_every_n_steps`` batches: memory (warn once past the limit), and on rank 0 the
        local loss and throughput in the progress bar and the log. ``.item()`` waits for the GPU,
        which is why this is not done every step."""
        snapshot = self.memory.check()
        if not self.runtime.is_main:
            return
        rate = totals[1].item() / max(time.perf_counter() - started, 1e-9)
        if hasattr(progress, "set_postfix"):
            progress.set_postfix(loss=f"{loss.item():.4f}", graphs_per_s=f"{rate:.0f}")
        logger.info(f"epoch {epoch} step {step}: loss {loss.item():.4f}, {rate:.0f} graphs/s on rank 0, "
                    f"{self.memory.format(snapshot)}")

    def _forward_backward(self, batch, group_size: int, sync: bool) -> tuple[torch.Tensor, int]:
        batch = batch.to(self.device, non_blocking=True)
        # Gradient accumulation: on all but the last micro-step of a group, skip DDP's
        # gradient all-reduce (no_sync); gradients pile up locally and are reduced once.
        no_sync = getattr(self.model, "no_sync", None)
        context = no_sync() if (no_sync is not None and not sync) else contextlib.nullcontext()
        with context:
            with self._autocast():
                loss = self.criterion(self.model(batch), self.task.target(batch.y))
            scaled = loss / group_size  # the mean over the whole group, as one batch of that size
            (self.scaler.scale(scaled) if self.scaler else scaled).backward()
        if not self._checked_unused_parameters:
            self._check_unused_parameters()
        return loss, batch.num_graphs

    def _autocast(self):
        amp = self.tcfg["amp"]
        if amp == "off":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16 if amp == "bf16" else torch.float16)

    def _optimizer_step(self) -> None:
        if self.scaler:
            self.scaler.unscale_(self.optimizer)  # clip the true gradients, not the scaled ones
        if self.tcfg["grad_clip_norm"]:
            torch.nn.utils.clip_grad_norm_(self.core_model.parameters(), self.tcfg["grad_clip_norm"])
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.scheduler is not None and self.tcfg["scheduler_interval"] == "step":
            self.scheduler.step()

    def _check_unused_parameters(self) -> None:
        """After the first backward: name parameters that got no gradient (DDP would otherwise
        fail later with 'Expected to have finished reduction in the prior iteration')."""
        self._checked_unused_parameters = True
        if not isinstance(self.model, DistributedDataParallel):
            return
        unused = [n for n, p in self.core_model.named_parameters() if p.requires_grad and p.grad is None]
        if unused and not self.config["parallel"]["find_unused_parameters"]:
            raise ConfigError(
                f"these model parameters received no gradient: {', '.join(unused)}. DDP must be told: set "
                "parallel.find_unused_parameters: true (slower), or remove the parameters from the model")
        if not unused and self.config["parallel"]["find_unused_parameters"]:
            rank_zero_warn(logger, "parallel.find_unused_parameters is true but every parameter received a "
                                   "gradient; set it to false: DDP is faster without the extra graph traversal")

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def _evaluate_local(self, loader: DataLoader, predictions: list | None = None) -> torch.Tensor:
        """The task's metric totals (loss sum, count, confusion matrix or error sums) over this rank's
        batches; each graph's (prediction, true value, flip fraction) is appended to ``predictions`` when
        it is given (``_per_graph``).

        Uses the unwrapped model: DDP's forward would broadcast buffers, a collective
        that hangs when ranks hold different numbers of evaluation batches.
        """
        totals = self.task.zero_totals(self.device)
        was_training = self.core_model.training
        self.core_model.eval()
        for batch in loader:
            batch = batch.to(self.device, non_blocking=True)
            with self._autocast():
                outputs = self.core_model(batch)
            target = self.task.target(batch.y)
            outputs = outputs.float()
            totals += self.task.batch_totals(outputs, target, self.criterion(outputs, target))
            if predictions is not None:
                predictions += self._per_graph(outputs, target, batch)
        self.core_model.train(was_training)
        return totals

    def _per_graph(self, outputs: torch.Tensor, target: torch.Tensor, batch) -> list[tuple[float, float, float]]:
        """(prediction, true value, flip fraction) of each graph: the predicted class for classification, the
        output for regression; the flip fraction is NaN for data without one."""
        classification = isinstance(self.task, tasks.ClassificationTask)
        predicted = self.task.predict(outputs) if classification else outputs.view(-1)
        fractions = batch.flip_fraction.view(-1).tolist() if "flip_fraction" in batch else [math.nan] * len(predicted)
        return list(zip(predicted.tolist(), target.view(-1).tolist(), fractions))

    def evaluate(self, loader: DataLoader) -> dict[str, Any] | None:
        """Exact metrics of the current model on ``loader``: loss, count and the task's (``tasks``).

        Sharded mode: every rank evaluates its shard and the sums and counts are reduced, then
        divided (never an average of per-rank means). rank0 mode: rank 0 evaluates all of it and
        the other ranks get None. Either way the numbers equal one process evaluating the split.
        """
        if self.config["validation"]["mode"] == "rank0":
            # Rank 0 evaluates the whole split; the others go straight to the epoch's broadcast.
            return self.task.metrics(self._evaluate_local(loader)) if self.runtime.is_main else None
        self._sync_buffers_from_main()
        return self.task.metrics(self.runtime.sum_across_ranks(self._evaluate_local(loader)))

    def _sync_buffers_from_main(self) -> None:
        # Each rank's last training forward updated its own BatchNorm running statistics;
        # evaluate every shard with rank 0's, so the result equals one process evaluating rank 0's model.
        if self.runtime.distributed:
            for buffer in self.core_model.buffers():
                torch.distributed.broadcast(buffer, src=0)

    # ------------------------------------------------------------------ end of epoch (rank 0 decides)
    def _finish_epoch(self, epoch: int, train: dict, val: dict | None, seconds: float) -> Decision:
        memory = self.memory.check()  # every rank: each warns once past training.memory_limit_mb
        self.memory.start_new_peak()
        decision = None
        if self.runtime.is_main:
            scores = {f"val_{m}": val[m] for m in self.task.metric_names}
            record = {"epoch": epoch, "train_loss": train["loss"], **scores, "lr": self.optimizer.param_groups[0]["lr"],
                      "epoch_time_s": seconds, "graphs_per_s": train["graphs"] / max(train["seconds"], 1e-9),
                      **memory}
            improved = self.early_stopping.update(record[self.early_stopping.metric], epoch)
            decision = (record, improved, self.early_stopping.should_stop, self.early_stopping.reason())
        # One broadcast per epoch carries rank 0's record and early-stopping decision to every rank.
        record, improved, stop, reason = self.runtime.broadcast_from_main(decision)
        votes = [("EarlyStopping", Stop(reason))] if stop else []
        votes += self.callbacks.votes("on_epoch_end", self, record)  # may add keys to the record
        self.history.append(record)
        self._step_epoch_scheduler(record)  # every rank, before the checkpoint: a resume continues the schedule
        if self.runtime.is_main:
            self._write_epoch(record, improved)
        # One all-gather of every rank's votes: all stop at this epoch, or none does.
        decided = self.runtime.decide(votes)
        if decided.resumable:
            raise Preempted(f"{decided.reason} ({', '.join(decided.voters)}): epoch {epoch} is checkpointed in "
                            f"{self.run_dir}; the same command started again continues from there")
        return decided

    def _step_epoch_scheduler(self, record: dict[str, Any]) -> None:
        if isinstance(self.scheduler, ReduceLROnPlateau):
            self.scheduler.step(record[self.early_stopping.metric])
        elif self.scheduler is not None and self.tcfg["scheduler_interval"] == "epoch":
            self.scheduler.step()

    def _write_epoch(self, record: dict[str, Any], improved: bool) -> None:
        """Rank 0: the metrics row first, then the checkpoints (a resume drops rows after its checkpoint)."""
        self.metrics_csv.append(record)
        self._save_checkpoints(record["epoch"], improved)
        if self.experiment:
            self.experiment.log_epoch(record, record["epoch"])
        short = {"accuracy": "acc"}  # the log's name for it since the first release
        scores = "  ".join(f"val_{short.get(m, m)} {record[f'val_{m}']:.3f}" for m in self.task.metric_names[1:])
        logger.info(f"epoch {record['epoch']:3d}  train_loss {record['train_loss']:.4f}  val_loss "
                    f"{record['val_loss']:.4f}  {scores}  lr {record['lr']:.2e}"
                    f"  {record['graphs_per_s']:.0f} graphs/s{'  *best*' if improved else ''}")

    def _checkpoint_state(self, epoch: int, in_epoch: dict[str, Any] | None = None) -> dict[str, Any]:
        """``epoch``: the last completed epoch; ``in_epoch``: where a mid-epoch checkpoint stands in the next."""
        return {
            "in_epoch": in_epoch,
            "model": self.core_model.state_dict(),  # the plain model: loadable without DDP
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "scaler": self.scaler.state_dict() if self.scaler else None,
            "epoch": epoch,
            "early_stopping": self.early_stopping.state_dict(),
            "config_yaml": dump_config(self.config),
            "world_size": self.runtime.world_size,
            "derived": self.derived,
            "wandb_run_id": (self.experiment.run_id if self.experiment else None) or "",
            "callbacks": self.callbacks.state_dict(),
        }

    def _save_checkpoints(self, epoch: int, improved: bool, in_epoch: dict[str, Any] | None = None) -> None:
        state = self._checkpoint_state(epoch, in_epoch)
        folder = self.run_dir / CHECKPOINT_DIR
        if improved:
            save_checkpoint(folder / "best.pt", state)
            self._best_state = {k: v.detach().cpu().clone() for k, v in state["model"].items()}
        save_last_checkpoint(folder, state)
        if self.tcfg["checkpoint_at"] and not in_epoch and (epoch + 1) % self.tcfg["checkpoint_at"] == 0:
            save_checkpoint(folder / f"epoch_{epoch}.pt", state)

    def _restore(self, state: dict[str, Any]) -> None:
        """Continue a run from its last checkpoint: weights, optimizer, schedule, early stopping, epoch."""
        self.core_model.load_state_dict(state["model"])
        old_world = state.get("world_size", self.runtime.world_size)
        if old_world == self.runtime.world_size:
            if self.scheduler is not None and state.get("scheduler"):
                self.scheduler.load_state_dict(state["scheduler"])
            # After the scheduler: building one resets the optimizer's LR (SequentialLR does).
            self.optimizer.load_state_dict(state["optimizer"])
            self._fit_schedule_to_num_epochs(load_yaml_text(state["config_yaml"])["training"]["num_epochs"])
        else:  # rebuilt for this job's world size and num_epochs
            self._restore_for_another_world_size(state, old_world)
        if self.scaler and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.early_stopping.load_state_dict(state["early_stopping"])
        self.callbacks.load_state_dict(state.get("callbacks") or {})
        self.epoch, self.start_epoch = state["epoch"], state["epoch"] + 1
        in_epoch = state.get("in_epoch")
        if in_epoch and old_world != self.runtime.world_size:
            rank_zero_warn(logger, f"the checkpoint stands inside epoch {in_epoch['epoch']} of a run on {old_world} "
                                   f"processes; on {self.runtime.world_size} the batches differ, so that epoch "
                                   "starts again from its first batch")
        elif in_epoch:  # a mid-epoch checkpoint: continue that epoch after its completed batches
            self.start_epoch = in_epoch["epoch"]
            self._resume_in_epoch = (in_epoch["completed_batches"], in_epoch["train_totals"])
        best = self.run_dir / CHECKPOINT_DIR / "best.pt"
        if best.is_file():
            self._best_state = load_checkpoint(best)["model"]
        summary_file = self.run_dir / "summary.json"
        if summary_file.is_file():  # keep what the interrupted run reported until it is superseded
            self.summary = {**json.loads(summary_file.read_text()), **self.summary}
        rows = [r for r in self.metrics_csv.rows() if int(r["epoch"]) < self.start_epoch]
        self.history = [{k: (float(v) if k != "epoch" else int(v)) for k, v in r.items() if v != ""} for r in rows]
        if self.runtime.is_main:
            self.metrics_csv.keep_epochs_before(self.start_epoch)
        first_batch = self._resume_in_epoch[0]
        logger.info(f"resuming {self.run_dir} at epoch {self.start_epoch}"
                    + (f", batch {first_batch}" if first_batch else ""))

    def _restore_for_another_world_size(self, state: dict[str, Any], old_world: int) -> None:
        """A run continued on another number of processes: the optimizer's moments carry over, but what
        depends on the world size (effective batch, scaled LR and warmup, steps per epoch) is this job's,
        and the schedule is rebuilt for it and advanced to where the run stood."""
        self.optimizer.load_state_dict(state["optimizer"])
        for group in self.optimizer.param_groups:  # the LR this job derived, before the schedule scales it
            group["lr"] = group["initial_lr"] = self.derived["lr"]
        self.scheduler = build_scheduler(self.optimizer, self.tcfg, self.derived, self._batches_per_epoch(),
                                         self.config["early_stopping"]["mode"])
        if self.scheduler is not None:
            per_epoch = scheduler_steps_per_epoch(self.tcfg, self._batches_per_epoch())
            fast_forward(self.scheduler, (state["epoch"] + 1) * per_epoch)  # the epochs completed
        old = state.get("derived") or {}
        rank_zero_warn(logger, f"continuing a run of {old_world} processes on {self.runtime.world_size}: effective "
                               f"batch {old.get('effective_batch_size')} -> {self.derived['effective_batch_size']}, "
                               f"learning rate {old.get('lr', float('nan')):.3g} -> {self.derived['lr']:.3g} "
                               f"(training.lr_scaling: {self.tcfg['lr_scaling']}), warmup "
                               f"{old.get('warmup_epochs')} -> {self.derived['warmup_epochs']} epochs")

    def _fit_schedule_to_num_epochs(self, planned_epochs: int) -> None:
        """A resume that changes num_epochs: a cosine whose length follows it is re-planned for the new length."""
        done = fit_schedule_to_num_epochs(self.scheduler, self.tcfg, self.derived, self._batches_per_epoch(),
                                          planned_epochs)
        if done:
            logger.info(f"training.num_epochs: the resumed run was planned for {planned_epochs} epochs, now "
                        f"{self.tcfg['num_epochs']}; {done}")

    def _finish_training(self, decision: Decision) -> None:
        es, stop_reason = self.early_stopping, decision.reason
        self.callbacks.call("on_fit_end", self, decision)
        if self.runtime.is_main:
            forget_run(self.tcfg, self.job_token)  # finished: a later job with the same token starts afresh
            self.summary.update({"stop_reason": stop_reason, "stopped_by": decision.stopped_by or None,
                                 "stopped_at_epoch": self.epoch,
                                 "best_epoch": es.best_epoch, f"best_{es.metric}": es.best_value,
                                 "derived": self.derived})
            self._write_summary()
            rows, figures = self.metrics_csv.rows(), {}
            if rows:
                self._draw(figures, "training_curves", plot_training_curves, rows,
                           metric=f"val_{self.task.metric_names[1]}")
            if self.experiment and figures:
                self.experiment.log_images(figures)
        # Every rank says where it stopped (in its own log file): they must all agree.
        logger.info(f"training finished at epoch {self.epoch}: {stop_reason}")

    def _write_summary(self) -> None:
        """Rank 0: summary.json, with the wall time of this process's run so far (a resumed run: since the resume)."""
        self.summary["wall_time_s"] = round(time.perf_counter() - self._started, 3)
        write_json(self.run_dir / "summary.json", self.summary)

    # ------------------------------------------------------------------ test
    def run_test(self, test_loader: DataLoader) -> dict[str, Any] | None:
        """Evaluate the best model on the whole test split, on rank 0 only (no collectives, so it
        may be called on rank 0 alone). Returns ``test_<metric>`` for each of the task's metrics and,
        with ``testing.baselines``, the baselines'; None on other ranks."""
        if not self.runtime.is_main:
            return None
        if self._best_state is not None:
            self.core_model.load_state_dict(self._best_state)
        predictions: list[tuple[float, float, float]] = []
        test = self.task.metrics(self._evaluate_local(test_loader, predictions))
        result = {f"test_{m}": test[m] for m in self.task.metric_names}
        result["num_test"] = test["count"]
        classification = isinstance(self.task, tasks.ClassificationTask)
        figures = {}
        if classification:
            result.update(confusion_matrix=test["confusion"], class_names=self.task.class_names)
            self._draw(figures, "confusion_matrix", plot_confusion_matrix, test["confusion"], self.task.class_names)
        else:
            result.update(tasks.train_mean_metrics(self._targets("train"), self._targets("test")))
            self._draw(figures, "predictions", plot_predictions, [(p, t) for p, t, _ in predictions])
        baselines, baseline_predictions = {}, {}
        if self.config["testing"]["baselines"] and self._has_invariants():  # both baselines, for this task
            kind, truth, baseline_predictions = predict_baselines(
                self.dataset, self.split["train"], self.split["test"],
                task="classification" if classification else "regression")
            baselines = score_baselines(kind, truth, baseline_predictions,
                                        self.task.num_classes if classification else None)
            result.update(**flatten_baselines(baselines), baselines=baselines)
        curves = self._destroyed_curves(predictions, baseline_predictions) if classification else None
        if curves:
            result["destroyed_by_flip_fraction"] = curves
            self._draw(figures, "destroyed_by_flip_fraction", plot_destroyed_by_flip_fraction, curves, MODEL_LABELS)
        self.callbacks.call("on_test_end", self, result)
        self.summary.update(result)
        self._write_summary()
        if self.experiment:
            if figures:  # none with training.figures false: no empty image row
                self.experiment.log_images(figures)
            self.experiment.log_summary({k: v for k, v in self.summary.items() if not isinstance(v, (list, dict))})
        scores = ", ".join(f"{m} {test[m]:.3f}" for m in self.task.metric_names[1:])
        logger.info("; ".join([f"test {scores}", *describe_baselines(baselines)]))
        if curves:
            logger.info(describe_curves(curves))
        return result

    def _destroyed_curves(self, predictions: list[tuple[float, float, float]],
                          baseline_predictions: dict[str, Any]) -> dict[str, Any] | None:
        """The destroyed test sets recognised per flip-fraction bin (``destroyed_sets``) by the GNN and by the
        baselines (their predictions on the test split, from the fit above); None without varying flip fractions."""
        gnn = np.array(predictions, dtype=np.float64).reshape(-1, 3)
        results = {"gnn": (gnn[:, 2], gnn[:, 0] == gnn[:, 1])}
        if baseline_predictions:
            test = [self.dataset[i] for i in self.split["test"]]
            fractions, truth = flip_fractions(test), np.array([int(g.y.reshape(-1)[0]) for g in test])
            results.update({f"{name}_baseline": (fractions, predicted == truth)
                            for name, predicted in baseline_predictions.items()})
        generated = getattr(self.dataset, "generation_params", None) or {}
        span = generated.get("destroy_fraction") if isinstance(generated.get("destroy_fraction"), list) else ()
        return destroyed_curves(results, span)

    def _draw(self, figures: dict[str, Path], name: str, plot: Callable[..., Path], *data: Any,
              **options: Any) -> None:
        """Rank 0: ``plot(*data, figures/<name>.png, **options)`` into the run directory and ``figures[name]``
        (for the experiment logger), unless ``training.figures`` is false."""
        if self.tcfg["figures"]:
            figures[name] = plot(*data, self.run_dir / FIGURE_DIR / f"{name}.png", **options)

    def _has_invariants(self) -> bool:
        """The order-invariant baseline needs the generator's per-set ``invariants``."""
        return getattr(self.dataset[0], "invariants", None) is not None

    def _targets(self, split: str) -> list[float]:
        """The ``y`` values of one split (rank 0, at test time)."""
        return [float(self.dataset[i].y.reshape(-1)[0]) for i in self.split[split]]

    def close(self) -> None:
        """Finish the experiment logger (W&B run) and close this rank's log file. Safe to call twice."""
        callbacks, self.callbacks = self.callbacks, CallbackList([], self.runtime.is_main)
        callbacks.call("teardown", self)
        if self.experiment:
            self.experiment.finish()
            self.experiment = None
        if self._run_lock:
            self._run_lock.release()
        close_run_log()

    # ------------------------------------------------------------------ reporting
    def _progress(self, loader, epoch: int, total: int):
        setting = self.tcfg["progress_bar"]
        interactive = sys.stderr.isatty() and not os.environ.get("CI")
        if not self.runtime.is_main or setting is False or (setting == "auto" and not interactive):
            return loader
        from tqdm.auto import tqdm

        return tqdm(loader, desc=f"epoch {epoch}", total=total, leave=False, unit="batch", dynamic_ncols=True)

    def _log_start_block(self, train_loader: DataLoader) -> None:
        counts = count_parameters(self.core_model)
        self.summary["parameters"] = counts
        if not self.runtime.is_main:
            return
        if self.experiment:
            self.experiment.log_model_info(counts)
            self.experiment.watch(self.core_model)
        d, rt = self.derived, self.runtime
        sizes = {name: len(idx) for name, idx in self.split.items()}
        lines = [
            f"run directory     {self.run_dir}",
            f"processes         world_size={rt.world_size}  backend={rt.backend or 'none (single process)'}"
            f"  device={self.device}",
            f"batch size        {self.tcfg['batch_size']} per process x {self.tcfg['accumulation_steps']} "
            f"accumulation x {rt.world_size} processes = {d['effective_batch_size']} effective",
            f"learning rate     {self.optimizer.param_groups[0]['lr']:.3g} at the first step (peak {d['lr']:.3g}, "
            f"base {d['base_lr']:.3g}, scaling {self.tcfg['lr_scaling']}, warmup {d['warmup_epochs']} epochs)"
            f"  amp={self.tcfg['amp']}",
            f"model             {counts['total_params']:,} parameters ({counts['trainable_params']:,} trainable,"
            f" {counts['size_mb']:.2f} MB)",
            f"data              train {sizes['train']}  val {sizes['val']}  test {sizes['test']} causal sets, "
            f"{self.task.describe()}",
            f"epochs            {self.start_epoch}..{self.tcfg['num_epochs'] - 1}  "
            f"({len(train_loader)} train batches per process per epoch)",
        ]
        logger.info("training set-up\n  " + "\n  ".join(lines))
        for advice in config_advice(self.config, rt.world_size, self.device.type):
            logger.warning(f"config advice: {advice}")


RUN_FILES = ("config.yaml", "metrics.csv", "summary.json", "checkpoints/", "figures/", "logs/")


def summarise_run(result: dict[str, Any]) -> str:
    """The one-screen summary the CLI prints."""
    summary = result.get("summary", {})
    lines = [
        "",
        "=== QuantumGrav run summary ===",
        f"run directory   {summary.get('run_dir')}",
        f"stopped         epoch {summary.get('stopped_at_epoch')}: {summary.get('stop_reason')}",
        f"best epoch      {summary.get('best_epoch')}",
    ]
    test = result.get("test") or {}
    if test:
        scores = "  ".join(f"{k.removeprefix('test_')} {v:.3f}" for k, v in test.items()
                           if k.startswith("test_") and k != "test_loss")
        lines.append(f"test            {scores}  (loss {test['test_loss']:.4f}, {test['num_test']} causal sets)")
        lines += describe_baselines(test.get("baselines", {}))
        if "destroyed_by_flip_fraction" in test:
            lines.append(describe_curves(test["destroyed_by_flip_fraction"]))
        if "train_mean_rmse" in test:
            lines.append(f"train mean      rmse {test['train_mean_rmse']:.3f}  (predicting the training mean)")
    run_dir = Path(str(summary.get("run_dir")))
    files = [name for name in RUN_FILES if (run_dir / name).exists()]  # figures/ only when training.figures
    lines.append(f"files           {', '.join(files)}")
    return "\n".join(lines)


