"""The typed config: ``ConfigSections``, one frozen section per component, and the YAML layout it reads.

Every key is declared once, in its section (``setting``: default, check, one-line doc, and the YAML key it
reads). The YAML layout is the one configs have always had (``training:`` holds the loop's, the training
loader's, the optimizer's, the scheduler's, the checkpoints', the memory's and the logging's keys); ``schema()``
derives it, validation walks it and docs/configuration.md is written from it. A resolved config gives its
sections as ``config.sections`` (``QuantumGrav.config.schema.ResolvedConfig``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar, Mapping

from .checks import boolean, callback_entry, choice, integer, list_of, number, port, string
from .data_section import DataSection
from .learning_sections import EarlyStoppingSection, ModelSection, TaskSection
from .section import Section, defaults_of, lookup, optional_sections, section_from, setting, subsection, yaml_tree
from .training_sections import (CheckpointSection, LoadersSection, LoggingSection, LoopSection, MemorySection,
                                OptimizerSection, SchedulerSection)

WANDB_MODES = ("offline", "online", "disabled")


@dataclass(frozen=True)
class ParallelSection(Section):
    """``parallel:``: distributed data-parallel training: processes, rendezvous and timeouts."""

    yaml: ClassVar[str] = "parallel"

    world_size: int = setting(1, integer(1), "processes for QG.launch / --nproc (torchrun sets its own)")
    master_addr: str = setting("localhost", string, "address of node 0")
    master_port: int | None = setting(None, port, "null: a free port is picked", nullable=True)
    backend: str | None = setting(None, choice("nccl", "gloo"), "null: nccl on CUDA, else gloo", nullable=True)
    timeout_s: float = setting(300.0, number(0.0, exclusive_min=True),
                               "collective timeout: a dead rank fails the job after this")
    data_timeout_s: float = setting(3600.0, number(0.0, exclusive_min=True),
                                    "how long ranks wait for each other to generate the data")
    output_device: int | None = setting(None, integer(0), "null: this process's GPU (LOCAL_RANK)", nullable=True)
    find_unused_parameters: bool = setting(False, boolean, "true only if some parameters get no gradient (slower)")


@dataclass(frozen=True)
class WandbWatchSection(Section):
    """``logger.wandb.watch``: wandb.watch's histograms."""

    yaml: ClassVar[str] = "logger.wandb.watch"

    enabled: bool = setting(False, boolean, "log gradient (or parameter) histograms with wandb.watch")
    log: str = setting("gradients", choice("gradients", "parameters", "all"), "what wandb.watch logs")
    log_freq: int = setting(100, integer(1), "wandb.watch logs every N batches")


@dataclass(frozen=True)
class WandbSection(Section):
    """``logger.wandb``: the run's W&B logging; absent (null): no W&B."""

    yaml: ClassVar[str] = "logger.wandb"

    project: str = setting("QuantumGrav", string, "W&B project of the run")
    name: str | None = setting(None, string, "W&B run name; null: one W&B picks", nullable=True)
    entity: str | None = setting(None, string, "W&B user or team; null: your default entity", nullable=True)
    group: str | None = setting(None, string, "W&B group of related runs (e.g. a sweep)", nullable=True)
    mode: str = setting("offline", choice(*WANDB_MODES),
                        "offline: written under the run directory, to sync later (wandb sync); online: sent as it "
                        "runs; disabled: no W&B. The environment's WANDB_MODE, when one of these, wins")
    tags: tuple[str, ...] = setting((), list_of(string), "W&B tags of the run")
    watch: WandbWatchSection = subsection(WandbWatchSection)


@dataclass(frozen=True)
class ConfigSections(Section):
    """A resolved config as typed, frozen sections, one per component (``config.sections``): e.g.
    ``sections.optimizer.lr``, ``sections.loaders.training.batch_size``, ``sections.loop.num_epochs``. Each
    section's fields name the YAML keys they read in their metadata (``setting_key``)."""

    loop: LoopSection = subsection(LoopSection)
    loaders: LoadersSection = subsection(LoadersSection)
    optimizer: OptimizerSection = subsection(OptimizerSection)
    scheduler: SchedulerSection = subsection(SchedulerSection)
    checkpoint: CheckpointSection = subsection(CheckpointSection)
    memory: MemorySection = subsection(MemorySection)
    logging: LoggingSection = subsection(LoggingSection)
    model: ModelSection = subsection(ModelSection)
    task: TaskSection = subsection(TaskSection)
    early_stopping: EarlyStoppingSection = subsection(EarlyStoppingSection)
    data: DataSection = subsection(DataSection)
    parallel: ParallelSection = subsection(ParallelSection)
    wandb: WandbSection | None = subsection(WandbSection, optional=True)
    callbacks: tuple[Mapping[str, Any], ...] = setting(
        (), list_of(callback_entry),
        "your callbacks (QuantumGrav.Callback subclasses), each {type: !pyobject module.Class, kwargs: {...}}, run "
        "after the built-in ones that decide and before those that write (docs/training.md, \"Callbacks\")")


# The top-level keys in the order configs and docs/configuration.md list them.
TOP_LEVEL_KEYS = ("training", "model", "validation", "testing", "task", "early_stopping", "criterion", "data",
                  "callbacks", "parallel", "logger")
OPTIONAL_SECTIONS = frozenset(optional_sections(ConfigSections))


@lru_cache(maxsize=1)
def _layout() -> dict[str, Any]:
    tree = yaml_tree(ConfigSections)  # tests/test_config_sections.py checks that TOP_LEVEL_KEYS lists all its keys
    return {key: tree[key] for key in TOP_LEVEL_KEYS}


def schema() -> dict[str, Any]:
    """The YAML layout of a config: section -> key -> ``Field`` (nested dicts are sub-sections), derived from
    ``ConfigSections``; validation walks it."""
    return _layout()


def config_sections(resolved: Mapping[str, Any]) -> ConfigSections:
    """The typed sections of a resolved config (every key present, as ``validate_config`` returns it)."""
    return section_from(ConfigSections, resolved)


WANDB_DEFAULTS: dict[str, Any] = lookup(defaults_of(yaml_tree(WandbSection)), WandbSection.yaml)
