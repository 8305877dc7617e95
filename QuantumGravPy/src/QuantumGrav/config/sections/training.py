"""``training:``'s own keys: the loop, the run directory and its checkpoints, memory, and what a run logs
(its loader's keys: ``loaders``; the optimizer's and the schedule's: ``optimizer``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


from ..checks import boolean, choice, integer, number, plain_name, string
from .base import Section, setting


_POSITIVE = number(0.0, exclusive_min=True)



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
    compile: bool = setting(
        False, boolean,
        "train with the model compiled by torch.compile (dynamic shapes; the inner module, before DDP; checkpoints "
        "and evaluation use the plain model): compiling takes the first steps of the first epoch, counted in its "
        "time. Needs inductor's compiler (a C++ compiler on CPU, Triton on CUDA). Off by default: on 2 CPU cores it "
        "made the default job's epoch slower (docs/training.md, \"Compiled training\")")



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
