"""``logger.wandb:``: the Weights & Biases run a job logs to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..checks import boolean, choice, integer, list_of, string
from .base import Section, defaults_of, lookup, setting, subsection, yaml_tree


WANDB_MODES = ("offline", "online", "disabled")



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



WANDB_DEFAULTS: dict[str, Any] = lookup(defaults_of(yaml_tree(WandbSection)), WandbSection.yaml)
