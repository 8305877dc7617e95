"""``early_stopping:``: when a run that stopped improving ends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...tasks import registry
from ..checks import boolean, choice, integer, number
from .base import Section, setting
from .task import early_stopping_metric


@dataclass(frozen=True)
class EarlyStoppingSection(Section):
    """``early_stopping:``: when a run that stopped improving ends."""

    yaml: ClassVar[str] = "early_stopping"

    enabled: bool = setting(True, boolean, "false: train all num_epochs")
    metric: str = setting("val_loss", early_stopping_metric, registry.metrics_text())
    # Resolved to metric_mode(metric) when null: a resolved config's mode is never null.
    mode: str | None = setting(None, choice("min", "max"), nullable=True, doc=registry.modes_text())
    patience: int = setting(10, integer(1), "epochs without improvement before the run stops")
    min_delta: float = setting(0.0, number(0.0), "the least change of the metric that counts as an improvement")
    window: int = setting(3, integer(1), "judge the metric's mean over the last window epochs, so that one lucky "
                                         "epoch is not the best one (the best epoch is the window's last); 1: each "
                                         "epoch alone")
    grace: int = setting(0, integer(0), "the first epochs, in which an epoch without improvement does not count "
                                        "toward patience (upstream QuantumGrav's grace_period: 8)")
