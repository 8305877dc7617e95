"""Sensitivity curves, the field's axes: how often a detector calls a defect of exactly k changed relations (or an
inserted block of exactly m elements) at a fixed false-alarm rate on the manifold-like sets.

A detector gives each set a score, higher for "has a defect" (a classifier's probability of *not* manifold-like).
Its threshold is chosen on null sets held out for it (the validation split's manifold-like sets):
``threshold_at_false_alarm`` is the lowest threshold at which at most the share ``FALSE_ALARM_RATE`` of them score
above it (a set is *detected* when its score is strictly above the threshold). The rate realised on the test
split's null sets is then measured, not assumed (``false_alarms``). Against the defect's exact size, each size is
one point of the curve (``detection_curve``): its test sets, those detected, the detection rate and its Wilson
interval, in the vocabulary of ``analyses.kind_breakdown`` (a point is a bin whose edges are both its size, so
``detection_threshold`` reads it); the smallest size detected at 90 % is where that curve crosses 0.9, with an
interval: where the curves of the points' Wilson bounds cross it (the upper bounds give the low end, the lower
bounds the high end). Counts come with every point, so seeds pool exactly (``pooled_curve``).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..evaluation.kinds import share_with_interval, wilson_interval
from .kind_breakdown import DETECTION_RECALL, detection_threshold

FALSE_ALARM_RATE = 0.05
THRESHOLD_KEY = f"threshold_at_{round(100 * DETECTION_RECALL)}"


def _finite_scores(scores: Sequence[float], name: str) -> np.ndarray:
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    if not np.isfinite(scores).all():
        raise ValueError(f"{name}: expected finite scores, got {int((~np.isfinite(scores)).sum())} NaN or infinite")
    return scores


def threshold_at_false_alarm(null_scores: Sequence[float], rate: float = FALSE_ALARM_RATE) -> float:
    """The lowest threshold t at which at most ``rate`` of ``null_scores`` lie strictly above t: with the scores
    sorted, the one that has floor(rate * n) above its position. Tied scores are never split, so with ties at the
    top fewer than ``rate`` exceed t (a threshold between equal scores does not exist)."""
    scores = np.sort(_finite_scores(null_scores, "null_scores"))
    if len(scores) == 0:
        raise ValueError("null_scores: expected the scores of at least one null (manifold-like) set, got none")
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"rate: expected a false-alarm rate in [0, 1), got {rate!r}")
    allowed = int(np.floor(rate * len(scores) + 1e-9))  # the 1e-9: 0.05 * 100 is 5.000000000000001 in floats
    return float(scores[len(scores) - 1 - allowed])


def false_alarms(null_scores: Sequence[float], threshold: float) -> dict[str, Any]:
    """The null sets scored above ``threshold``: ``sets``, ``false_alarms``, their ``rate`` and its Wilson interval
    ``rate_low`` .. ``rate_high``."""
    scores = _finite_scores(null_scores, "null_scores")
    alarms = int((scores > threshold).sum())
    low, high = wilson_interval(alarms, len(scores))
    return {"sets": len(scores), "false_alarms": alarms, "rate": alarms / len(scores) if len(scores) else None,
            "rate_low": low, "rate_high": high}


def curve_from_counts(counts: dict[float, tuple[int, int]]) -> dict[str, Any]:
    """The curve of ``{size: (sets, detected)}``: its ``points`` by size (``size``, ``low`` = ``high`` = size,
    ``sets``, ``correct`` = detected, ``recall`` = the detection rate, ``recall_low`` .. ``recall_high``; a size with
    no sets keeps its place with recall None) and ``threshold_at_90`` read from the points with sets, with its
    ``interval``: the readings of the points' upper (``low``) and lower (``high``) Wilson bounds."""
    points = [{"size": float(size), "low": float(size), "high": float(size), **share_with_interval(detected, sets)}
              for size, (sets, detected) in sorted(counts.items())]
    drawn = [point for point in points if point["sets"] > 0]
    bounds = {end: [{**point, "recall": point[key]} for point in drawn]
              for end, key in (("low", "recall_high"), ("high", "recall_low"))}
    return {"points": points, THRESHOLD_KEY: {**detection_threshold(drawn), "interval": {
        end: detection_threshold(rows) for end, rows in bounds.items()}}}


def detection_curve(sizes: Sequence[float], detected: Sequence[bool],
                    drawn_sizes: Sequence[float] = ()) -> dict[str, Any]:
    """The detection rate at each exact defect size in ``sizes`` (one per test set, ``detected`` one bool per set),
    and where it reaches 90 % (``curve_from_counts``); every size of ``drawn_sizes`` is a point even where no test
    set has it."""
    sizes, detected = np.asarray(sizes, dtype=np.float64), np.asarray(detected, dtype=bool)
    if sizes.shape != detected.shape:
        raise ValueError(f"sizes, detected: expected one of each per set, got {sizes.shape} and {detected.shape}")
    counts = {float(size): (0, 0) for size in drawn_sizes}
    for size in np.unique(sizes):
        counts[float(size)] = (int((sizes == size).sum()), int(detected[sizes == size].sum()))
    return curve_from_counts(counts)


def pooled_curve(curves: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Curves of several seeds as one: each size's sets and detections summed, the crossing read again."""
    counts: dict[float, tuple[int, int]] = {}
    for curve in curves:
        for point in curve["points"]:
            sets, detected = counts.get(point["size"], (0, 0))
            counts[point["size"]] = (sets + point["sets"], detected + point["correct"])
    return curve_from_counts(counts)


def pooled_false_alarms(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``false_alarms`` of several seeds as one: the null sets and alarms summed."""
    sets, alarms = sum(row["sets"] for row in rows), sum(row["false_alarms"] for row in rows)
    low, high = wilson_interval(alarms, sets)
    return {"sets": sets, "false_alarms": alarms, "rate": alarms / sets if sets else None, "rate_low": low,
            "rate_high": high}
