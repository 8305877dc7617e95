"""Metrics that the sets measured cannot define, and why: a run that cannot measure says so.

A test split of five sets with no manifold-like one has no recall of manifold-like sets (it divides by them), and a
model that predicted none has no precision; scikit-learn's convention (``zero_division=0``) and the run's metrics
report such a value as 0, which reads as a measured failure. Each task names such metrics with the reason
(``Task.undefined``), from the same totals the metrics come from (``unlabelled_metrics``: every metric, for data that
records no truth at all); ``evaluate`` shows them as undefined (None in its JSON), and the
run's summary gets one line (``describe_undefined``).
"""

from __future__ import annotations

from typing import Any

from ..tasks.base import Task


def unlabelled_metrics(task: Task, unit: str) -> dict[str, str]:
    """Every metric of ``task``, each undefined because no set of the data records its truth (stores written as
    QuantumGrav.jl writes them carry no per-element labels): its ``unit``s are scored only."""
    why = f"no set of the data records its truth, so its {unit}s are scored only (the predictions CSV)"
    return {name: why for name in task.metric_names}


def with_undefined_as_none(metrics: dict[str, Any], undefined: dict[str, str]) -> dict[str, Any]:
    """``metrics`` with each undefined one None (``per_class_f1.<class>`` inside ``per_class_f1``)."""
    shown = {**metrics, "per_class_f1": dict(metrics.get("per_class_f1") or {})}
    for name in undefined:
        group, _, member = name.partition(".")
        if member:
            shown[group][member] = None
        else:
            shown[name] = None
    if not metrics.get("per_class_f1"):
        shown.pop("per_class_f1")
    return shown


def describe_undefined(undefined: dict[str, str], where: str) -> str | None:
    """One line naming what is undefined on ``where`` (e.g. "the test split (5 sets)") and why; None if nothing."""
    if not undefined:
        return None
    by_reason: dict[str, list[str]] = {}
    for name, why in undefined.items():
        by_reason.setdefault(why, []).append(name.replace("per_class_f1.", "F1 of "))
    reasons = "; ".join(f"{', '.join(names)}: {why}" for why, names in by_reason.items())
    return (f"undefined on {where}: {reasons}. metrics.csv and summary.json carry 0 there (scikit-learn's "
            f"zero_division) or NaN; read them as not measured")
