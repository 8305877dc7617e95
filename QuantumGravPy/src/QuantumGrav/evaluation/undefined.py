"""Metrics that the sets measured cannot define, and why: a run that cannot measure says so.

A test split of five sets with no manifold-like one has no recall of manifold-like sets (it divides by them), and a
model that predicted none has no precision; scikit-learn's convention (``zero_division=0``) and the run's metrics
report such a value as 0, which reads as a measured failure. ``undefined_metrics`` names each such metric with the
reason, from the same totals the metrics come from (``unlabelled_metrics``: every metric, for data that records no
truth at all); ``evaluate`` shows them as undefined (None in its JSON), and the
run's summary gets one line (``describe_undefined``).
"""

from __future__ import annotations

import math
from typing import Any

from . import tasks


def undefined_metrics(task: tasks.Task, metrics: dict[str, Any]) -> dict[str, str]:
    """Metric name -> why the sets cannot define it, for the task's ``metrics`` (``Task.metrics``' result: its
    ``confusion``, ``iou``, ``r2``); ``per_class_f1.<class>`` for a class's F1. Empty when everything is defined."""
    if isinstance(task, tasks.RegressionTask):
        r2 = metrics.get("r2")
        return {"r2": "the true values do not vary (R^2 divides by their variance)"} \
            if r2 is not None and math.isnan(r2) else {}
    confusion = metrics.get("confusion")
    if confusion is None:
        return {}
    found: dict[str, str] = {}
    if isinstance(task, (tasks.BinaryTask, tasks.NodeBinaryTask, tasks.RelationBinaryTask)):
        found.update(_positive_class(task, confusion))
    if isinstance(task, tasks.RelationBinaryTask):
        for name, why in (("all_found", "no set has a changed pair (all_found is a share of those sets)"),
                          ("exact", "no set was measured")):
            if math.isnan(metrics.get(name, 0.0)):
                found[name] = why
        return found
    if isinstance(task, tasks.NodeBinaryTask):
        iou = metrics.get("iou")
        if iou is not None and math.isnan(iou):
            found["iou"] = "no set has a true block (the IoU is averaged over the sets that have one)"
        return found
    names = task.class_names or [str(k) for k in range(len(confusion))]
    for k, name in enumerate(names):
        if sum(confusion[k]) == 0 and sum(row[k] for row in confusion) == 0:
            found[f"per_class_f1.{name}"] = f"no set is {name}, and none was predicted {name}"
    return found


def unlabelled_metrics(task: tasks.Task, unit: str) -> dict[str, str]:
    """Every metric of ``task``, each undefined because no set of the data records its truth (stores written as
    QuantumGrav.jl writes them carry no per-element labels): its ``unit``s are scored only."""
    why = f"no set of the data records its truth, so its {unit}s are scored only (the predictions CSV)"
    return {name: why for name in task.metric_names}


def _positive_class(task: tasks.Task, confusion: list[list[int]]) -> dict[str, str]:
    (_, fp), (fn, tp) = confusion
    unit = {"node": "element", "pair": "pair"}.get(task.level, "set")
    positive = task.class_names[1] if len(task.class_names) == 2 else "positive"
    found = {}
    if tp + fp == 0:
        found["precision"] = f"no {unit} was predicted {positive} (precision divides by them)"
    if tp + fn == 0:
        found["recall"] = f"no {unit} is {positive} (recall divides by them)"
    if tp + fp + fn == 0:
        found["f1"] = f"no {unit} is {positive}, and none was predicted {positive}"
    return found


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
