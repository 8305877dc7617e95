"""How the model is trained: the sections that read the ``training:``, ``validation:`` and ``testing:`` keys,
one per concern (loop, loaders, optimizer, scheduler, checkpoints, memory, logging)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from .checks import boolean, choice, integer, integer_or_auto, list_of, mapping, number, plain_name, pyobject_of, string
from .section import Section, setting, subsection

_POSITIVE = number(0.0, exclusive_min=True)


def _any(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class LoopSection(Section):
    """The training loop: seed, device, epochs and what each optimizer step does."""

    yaml: ClassVar[str] = "training"

    seed: int = setting(42, integer(0), "seeds weights and shuffling (the same on every rank) and dropout (per rank)")
    device: str = setting("auto", choice("auto", "cpu", "cuda"),
                          "auto: CUDA when present; each process uses cuda:LOCAL_RANK")
    num_epochs: int = setting(40, integer(1), "upper bound; early stopping may end sooner")
    accumulation_steps: int = setting(1, integer(1), "micro-batches per optimizer step (DDP syncs only on the last)")
    amp: str = setting("off", choice("off", "fp16", "bf16"), "mixed precision; fp16 needs CUDA")
    flush_denormals: bool = setting(
        True, boolean,
        "on the CPU, compute with floats below 1.18e-38 as zero (torch.set_flush_denormal, in every thread of the "
        "process): x86 CPUs are many times slower on such denormal floats, and training makes more of them every "
        "epoch (docs/stable_training.md); false: the process keeps its own setting (IEEE arithmetic unless your "
        "code changed it)")
    grad_clip_norm: float | None = setting(None, _POSITIVE, "clip the global gradient norm to this value",
                                           nullable=True)


@dataclass(frozen=True)
class BatchBudgetSection(Section):
    """``training.batch_budget``: batches bounded by size instead of a number of graphs."""

    yaml: ClassVar[str] = "training.batch_budget"

    nodes: int | None = setting(None, integer(1), nullable=True,
                                doc="batches by size instead of batch_size: at most this many nodes per batch, per "
                                    "process (training, validation and testing); with edges, graphs or both")
    edges: int | None = setting(None, integer(1), nullable=True,
                                doc="at most this many edges per batch; similar sizes share a batch, every rank runs "
                                    "the same number of steps and each step's batches hold about the same edges "
                                    "(docs/large_data.md); a set larger than the budget is an error")
    graphs: int | None = setting(None, integer(1), "at most this many graphs per batch (null: any)", nullable=True)


# No drop_last for validation and testing: every item counts, or the metrics are not exact.
@dataclass(frozen=True)
class LoaderSection(Section):
    """The DataLoader of one split (the training split's; validation and testing add their own keys)."""

    yaml: ClassVar[str] = "training"

    batch_size: int = setting(32, integer(1), "graphs per batch, per process")
    num_workers: int | str = setting(0, integer_or_auto(0),
                                     "DataLoader worker processes, per process; auto: this process's share of the "
                                     "cores less one, its own (as QG.launch shares the cores' threads), so that the "
                                     "workers follow the machine they run on")
    pin_memory: bool = setting(False, boolean,
                               "page-locked host memory for faster copies to a GPU; only helps with CUDA")
    prefetch_factor: int | None = setting(None, integer(1), nullable=True,
                                          doc="batches each worker loads ahead; null: PyTorch's default (2 with "
                                              "workers)")


TRAINING_SAMPLERS: tuple[str, ...] = ("uniform", "class_balanced")


@dataclass(frozen=True)
class TrainingLoaderSection(LoaderSection):
    """The training split's loader: batch size or budget, shuffling, the incomplete last batch."""

    batch_budget: BatchBudgetSection | None = subsection(BatchBudgetSection, optional=True)
    drop_last: bool = setting(False, boolean, "drop each epoch's incomplete last training batch")
    shuffle: bool = setting(True, boolean, "reshuffle the training set every epoch (DistributedSampler.set_epoch)")
    sampler: str = setting("uniform", choice(*TRAINING_SAMPLERS),
                           "uniform: every training set once per epoch; class_balanced: as many draws, with "
                           "replacement, each class equally likely (torch's WeightedRandomSampler with weights 1 / "
                           "the class's count; upstream QuantumGrav's balanced variant); for graph-level classes")


@dataclass(frozen=True)
class ValidationSection(LoaderSection):
    """``validation:``: the loader and how the validation after every epoch runs."""

    yaml: ClassVar[str] = "validation"

    batch_size: int = setting(128, integer(1), "graphs per batch, per process")
    mode: str = setting("sharded", choice("sharded", "rank0"),
                        "sharded: every rank evaluates a shard, sums reduced; rank0: rank 0 evaluates all; same numbers")
    recompute_batch_norm: bool = setting(
        True, boolean,
        "before each validation, set every batch norm's statistics to those of the whole training set at the "
        "current weights (one forward pass, sums over all ranks); false: the running averages of the last batches, "
        "which swing with each batch's mix and made the validation loss jump")
    recompute_batch_norm_sets: int | None = setting(
        None, integer(1),
        "the batch norm pass reads at least this many training sets (the first batches of the epoch's shuffled "
        "order, split among the ranks) instead of all: a pass of a fraction of the cost (docs/stable_training.md "
        "measures both); null: the whole training set", nullable=True)


STRONG_BASELINE_FEATURES: tuple[str, ...] = ("invariants", "invariants_and_elements")


@dataclass(frozen=True)
class TestingSection(LoaderSection):
    """``testing:``: the loader of the test after training and its baselines."""

    yaml: ClassVar[str] = "testing"

    batch_size: int = setting(128, integer(1), "graphs per batch, per process")
    baselines: bool = setting(True, boolean, "fit the order-invariant baselines (scikit-learn) on the training split "
                                             "and report them next to the test result (items without invariants get "
                                             "them derived from edge_index); false: the model's result alone")
    strong_baseline: str = setting("invariants", choice(*STRONG_BASELINE_FEATURES),
                                   "the strong baseline's input: invariants (the order invariants); "
                                   "invariants_and_elements: also the distribution over the elements of each "
                                   "per-element feature and the layer widths (for QuantumGrav.jl's kinds)")
    strongest_baseline: bool = setting(False, boolean,
                                       "also fit the strongest rival: gradient boosting on the order invariants, the "
                                       "per-element features' distributions, the exact 2D-order test and the graph "
                                       "observables, computed from each set's edges (about 10 ms per set at N = 128)")


@dataclass(frozen=True)
class LoadersSection(Section):
    """The three splits' loaders."""

    training: TrainingLoaderSection = subsection(TrainingLoaderSection)
    validation: ValidationSection = subsection(ValidationSection)
    testing: TestingSection = subsection(TestingSection)


@dataclass(frozen=True)
class OptimizerSection(Section):
    """The optimizer and the base learning rate's scaling with the effective batch."""

    yaml: ClassVar[str] = "training"

    type: Any = setting(torch.optim.AdamW, pyobject_of("optimizer"),
                        "optimizer class (a subclass of torch.optim.Optimizer), built with (parameters, "
                        "*optimizer_args, **optimizer_kwargs)", key="training.optimizer_type")
    args: tuple = setting((), list_of(_any), "positional arguments of the optimizer after the parameters",
                          key="training.optimizer_args")
    # The default job's optimizer (configs/train.yaml, the study's best): tests/test_config.py keeps them equal.
    kwargs: dict[str, Any] = setting(
        {"lr": 4.46e-3, "weight_decay": 6.03e-6}, mapping,
        "keyword arguments of the optimizer; lr is the base LR before lr_scaling (a config that sets "
        "optimizer_kwargs replaces the whole mapping: give lr and weight_decay together)",
        key="training.optimizer_kwargs")
    lr_scaling: str = setting("none", choice("none", "linear", "sqrt"),
                              "scale lr and warmup with effective batch / reference_batch_size")
    reference_batch_size: int | None = setting(None, integer(1), "the batch the LR was tuned for (null: batch_size)",
                                               nullable=True)

    @property
    def lr(self) -> float | None:
        """The base learning rate (``optimizer_kwargs.lr``), before ``lr_scaling``; None: the optimizer's default."""
        return self.kwargs.get("lr")


@dataclass(frozen=True)
class SchedulerSection(Section):
    """The learning-rate schedule after a linear warmup."""

    yaml: ClassVar[str] = "training"

    type: Any = setting(
        torch.optim.lr_scheduler.CosineAnnealingLR, pyobject_of("scheduler"),
        "LR scheduler class (a subclass of torch.optim.lr_scheduler.LRScheduler, or ReduceLROnPlateau); null: a "
        "constant LR after the warmup. CosineAnnealingLR without T_max decays over the epochs after the warmup (and "
        "is re-planned when a resumed run changes num_epochs); ReduceLROnPlateau is stepped once per epoch with the "
        "early-stopping metric, in its mode (a scheduler_kwargs.mode that contradicts it is refused)",
        nullable=True, key="training.scheduler_type")
    args: tuple = setting((), list_of(_any), "positional arguments of the scheduler after the optimizer",
                          key="training.scheduler_args")
    kwargs: dict[str, Any] = setting({}, mapping, "keyword arguments of the scheduler, e.g. {T_max: 10} or "
                                                  "{step_size: 5, gamma: 0.5}", key="training.scheduler_kwargs")
    interval: str = setting("epoch", choice("epoch", "step"), "step the scheduler once per epoch or per optimizer step",
                            key="training.scheduler_interval")
    warmup_epochs: int = setting(0, integer(0), "linear LR warmup before the schedule")


_RESUME_DOC = (
    "run directory to continue from its last checkpoint; the config's data, model and task sections (and "
    "criterion) must be the run's, training settings such as num_epochs may change (a changed early-stopping metric "
    "starts its count afresh; docs/training.md, \"Training from the command line\", says how the LR schedule follows)")


@dataclass(frozen=True)
class CheckpointSection(Section):
    """Where the run directory is, which checkpoints it keeps, and the run a job resumes."""

    yaml: ClassVar[str] = "training"

    path: str = setting("runs", string, "parent folder of the run directories")
    run_name: str | None = setting(None, plain_name, "run directory name (null: run-<timestamp>-<random>)",
                                   nullable=True)
    every_k_epochs: int | None = setting(None, integer(1), "also keep epoch_K.pt every K epochs", nullable=True,
                                         key="training.checkpoint_at")
    every_n_steps: int | None = setting(
        None, integer(1), "also checkpoint last.pt every N optimizer steps: a restart resumes mid-epoch at the next "
                          "batch", nullable=True, key="training.checkpoint_every_n_steps")
    resume: str | None = setting(None, string, _RESUME_DOC, nullable=True)


@dataclass(frozen=True)
class MemorySection(Section):
    """The memory limit and the check of the largest batch before training."""

    yaml: ClassVar[str] = "training"

    preflight: bool = setting(True, boolean,
                              "before training, run the largest batch once (forward and backward) and refuse to start "
                              "(exit 2) if its peak memory passes memory_limit_mb or the device's memory; doctor "
                              "--config prints the same estimate")
    limit_mb: float | None = setting(None, _POSITIVE,
                                     "warn once when RSS (or CUDA memory) passes it; the preflight refuses a largest "
                                     "batch whose peak would pass it", nullable=True, key="training.memory_limit_mb")


@dataclass(frozen=True)
class LoggingSection(Section):
    """What a run reports as it goes: log lines, the progress bar, figures."""

    yaml: ClassVar[str] = "training"

    log_every_n_steps: int = setting(50, integer(1),
                                     "log loss, throughput and memory every N batches (and at each epoch end)")
    progress_bar: bool | str = setting("auto", choice("auto", True, False),
                                       "auto: on rank 0 in a terminal, never under CI")
    figures: bool = setting(True, boolean, "rank 0 draws figures/ (training curves, test plots) with matplotlib; "
                                           "false: none (sweeps, runs nobody looks at)")
