"""The typed config: ``ConfigSections``, one frozen section per component (``sections/``), and the YAML layout
it reads. The layout is the one configs have always had (``training:`` holds the loop's, the training loader's,
the optimizer's, the schedule's, the checkpoints', the memory's and the logging's keys); ``schema()`` derives it,
validation walks it and docs/configuration.md is written from it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

from .checks import callback_entry, list_of
from .sections.data import DataSection
from .sections.early_stopping import EarlyStoppingSection
from .sections.model import ModelSection
from .sections.task import TaskSection
from .sections.base import (Section, optional_sections, section_from, setting, subsection,
                            yaml_tree)
from .sections.training import CheckpointSection, LoggingSection, LoopSection, MemorySection
from .sections.loaders import LoadersSection
from .sections.optimizer import OptimizerSection, SchedulerSection
from .sections.parallel import ParallelSection
from .sections.wandb import WandbSection


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
