"""What a training run is built of, each part from its own config sections (as torchtitan's trainer builds its
model, optimizers and loaders): ``Trainer.__init__`` calls these in an order that finds bad input before the
run directory exists, so a refused run leaves nothing on disk."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from ..callbacks.base import Callback
from ..callbacks.checkpointing import Checkpointing
from ..callbacks.early_stopping import EarlyStopping
from ..callbacks.records import RunRecords
from ..callbacks.results import Figures
from ..callbacks.state import RunState
from ..callbacks.wandb_logging import WandbCallback
from ..config.schema import ResolvedConfig
from ..config.layout import ConfigSections
from ..config.sections.training import CheckpointSection, LoopSection
from ..config.yaml_io import resolve_pyobject
from ..data import sources as data_sources
from ..data.training_range import counts_and_invariants, known_counts_and_invariants, training_range_of
from ..distributed.runtime import Runtime
from ..common.errors import ConfigError
from ..common.logging_utils import setup_logging
from ..runs.artifacts import run_provenance
from ..runs.checkpoint_files import RunLock
from ..runs.resume import open_run_dir
from ..tasks.base import Task
from ..tasks.registry import model_io
from . import loaders
from .compilation import check_compile_backend
from .denormals import flush_denormals
from .model_builder import build_configured_model, check_model_forward
from .optimization import Optimization, batches_per_epoch
from .preflight import MemoryEstimate, refuse_if_too_large, run_preflight
from .schedules import derive_hyperparameters


def prepare_device(loop: LoopSection, device: torch.device) -> None:
    """Refuse what this device cannot run, and flush denormal floats on a CPU."""
    if loop.flush_denormals and device.type == "cpu":
        flush_denormals()  # before any parallel op of the run: its threads start with the flag
    if loop.compile:
        check_compile_backend(device)
    if loop.amp == "fp16" and device.type != "cuda":
        raise ConfigError("training.amp: fp16 needs a CUDA device (its gradient scaler is CUDA-only); "
                          "use amp: bf16 on CPU, or amp: off")


def batch_plan(data: loaders.RunData, sections: ConfigSections, runtime: Runtime
               ) -> tuple[dict[str, np.ndarray] | None, Any]:
    """The items' sizes, read once per run (the batch budget packs by them, the preflight finds the largest
    batch), and the training batches packed by size; (None, None) where neither is configured."""
    if sections.loaders.training.batch_budget is None and not sections.memory.preflight:
        return None, None
    sizes = loaders.split_sizes(data.dataset, data.split, runtime)
    return sizes, loaders.training_batches(sizes, sections.loaders.training, sections.loop.seed, runtime)


def training_range(data: loaders.RunData, sections: ConfigSections, sizes: dict[str, np.ndarray] | None,
                   runtime: Runtime) -> dict[str, Any]:
    """The training split's range of N and, where the built-in model's head reads them, of each order invariant
    (``data.training_range``): every checkpoint holds it, so that an applied run flags sets outside it."""
    reads_invariants = sections.model.type is None and bool(sections.model.graph_features)
    indices = list(data.split["train"])
    counts, rows = known_counts_and_invariants(data.dataset, indices, sizes["train"] if sizes is not None else None,
                                               reads_invariants)
    if counts is None or (reads_invariants and rows is None):  # read: each rank its share, gathered on every rank
        local = counts_and_invariants((data.dataset[i] for i in indices[runtime.rank::runtime.world_size]),
                                      reads_invariants)
        parts = runtime.broadcast_from_main(runtime.gather_to_main(local))
        counts, rows = np.concatenate([part[0] for part in parts]), np.concatenate([part[1] for part in parts])
    return training_range_of(counts, rows if reads_invariants else None)


def build_run_model(sections: ConfigSections, first: Any, task: Task, device: torch.device
                    ) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The model for items like ``first`` on ``device``, checked on ``first``, and what it was built for
    (``model_io``: every checkpoint holds it, so that an applied run rebuilds the model without the data)."""
    model = build_configured_model(sections.model, first.x.size(1), task)
    model = model.to(device)  # on the device *before* any DDP wrapping
    check_model_forward(model, first, task, sections.model.as_mapping(), device)
    return model, model_io(first.x.size(1), task)


def preflight(model: torch.nn.Module, data: loaders.RunData, sizes: dict[str, np.ndarray] | None, train_batches: Any,
              sections: ConfigSections, runtime: Runtime) -> MemoryEstimate | None:
    """The largest training batch, run once: a UserError (one line, exit 2) if it would not fit in memory.
    Before DDP wraps the model: its hooks would take this backward."""
    if not sections.memory.preflight:
        return None
    train = data_sources.subset(data.dataset, data.split["train"])
    found = run_preflight(model, train, sizes["train"], train_batches, sections, runtime)
    refuse_if_too_large(found, sections.loaders.training)
    return found


def build_optimization(model: torch.nn.Module, sections: ConfigSections, runtime: Runtime, num_train: int,
                       train_batches: Any) -> Optimization:
    """The optimizer, its schedule, AMP and the step, sized by the batches per epoch."""
    num_batches = len(train_batches) if train_batches is not None else \
        batches_per_epoch(sections.loaders.training, num_train, runtime.world_size)
    return Optimization(model, optimizer=sections.optimizer, scheduler=sections.scheduler, loop=sections.loop,
                        derived=derive_hyperparameters(sections, runtime.world_size),
                        monitored_mode=sections.early_stopping.mode, world_size=runtime.world_size,
                        num_batches=num_batches)


def open_run(checkpoint: CheckpointSection, runtime: Runtime, token: str | None, continued: Path | None
             ) -> tuple[Path, RunLock | None]:
    """The run directory, this job's lock on it (rank 0) and this rank's log file in it. One job per run; a
    restart of this job (same token) takes over the lock its first attempt left."""
    run_dir = open_run_dir(checkpoint, runtime, token, continued)
    lock = RunLock.acquire(run_dir, token) if runtime.is_main else None
    setup_logging(runtime.rank, run_dir)
    return run_dir, lock


def run_state(config: ResolvedConfig, runtime: Runtime, run_dir: Path, model: torch.nn.Module,
              optimization: Optimization, data: loaders.RunData, data_range: dict[str, Any] | None = None
              ) -> RunState:
    """What every callback hook receives, with the summary's first lines: the run directory, provenance and the
    range of the training data."""
    return RunState(runtime=runtime, config=config, run_dir=run_dir, model=model, optimizer=optimization.optimizer,
                    scheduler=optimization.scheduler, task=data.task, dataset=data.dataset, split=data.split,
                    derived=optimization.derived,
                    summary={"run_dir": str(run_dir), **run_provenance(runtime.world_size),
                             **({"training_range": data_range} if data_range else {})})


# The analysis that a generator's flip-fraction range (data.destroy_fraction: [low, high]) switches on.
DESTROYED_SET_CURVES = "QuantumGrav.analyses.destroyed_sets.DestroyedSetCurves"


def declared_analyses(sections: ConfigSections, task: Task, dataset: Any) -> list[Callback]:
    """What the task and the data switch on besides the config's callbacks, each named by its path and imported here
    only when switched on (so a run loads no analysis it does not run): with ``testing.baselines`` the task's rivals
    (the baselines for a task with one output per set), the task's own analyses, and the destroyed-set curves where
    the generator drew each destroyed set's flip fraction from a range."""
    names = [*(task.rivals if sections.loaders.testing.baselines else ()), *task.analyses]
    generated = getattr(dataset, "generation_params", None) or {}
    if isinstance(generated.get("destroy_fraction"), list):
        names.append(DESTROYED_SET_CURVES)
    return [resolve_pyobject(name)() for name in names]


def run_callbacks(sections: ConfigSections, run_dir: Path, early_stopping: EarlyStopping, checkpointing: Checkpointing,
                  declared: Sequence[Callback], users: Sequence[Callback]) -> list[Callback]:
    """Early stopping; the users' callbacks (config's, then code's: they may extend the epoch's record); the task's
    rivals and the analyses, the users' among them, after the test's predictions they read (``declared``: their
    order is the result's); then the writers in the order their inputs need: figures, metrics row before checkpoint
    (a resume drops later rows), summary, W&B."""
    wandb_cfg = sections.wandb.as_mapping() if sections.wandb is not None else None
    chosen = {type(callback) for callback in users}
    return [early_stopping, *(c for c in users if not c.analysis), *(c for c in declared if type(c) not in chosen),
            *(c for c in users if c.analysis), *([Figures()] if sections.logging.figures else []),
            RunRecords(run_dir, early_stopping), checkpointing, *([WandbCallback(wandb_cfg)] if wandb_cfg else [])]
