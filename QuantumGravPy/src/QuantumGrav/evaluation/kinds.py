"""Recall per kind of causal set, with its interval: what one accuracy over nine kinds hides.

An ambiguous ``destroyed`` set with one relation changed is a sprinkling to every method, a ``grid`` to none. Every
applied run (``evaluate``) reports, per kind, its sets and the share classified correctly (for the binary question, a
non-manifold-like kind's recall is the share recognised as not manifold-like) with its Wilson interval
(``INTERVAL_CONFIDENCE``): a per-kind recall of a few hundred sets is known to a few points only. The recall against
each defect's realised size, and where it crosses 90 %, is an analysis (``analyses.kind_breakdown``); the words that
read such a crossing are here, for every table that prints one.

Counts come with every share, so runs can be pooled exactly.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

INTERVAL_CONFIDENCE = 0.95
# How a detection threshold reads (``analyses.kind_breakdown.detection_threshold``).
BELOW_SMALLEST = "below the smallest drawn"
NOT_REACHED = "not reached"
CROSSING = "crossing"


def wilson_interval(correct: int, sets: int, confidence: float = INTERVAL_CONFIDENCE) -> tuple[float, float]:
    """The Wilson score interval of a share ``correct / sets`` (scipy's ``binomtest``); (0, 1) for no sets."""
    from scipy.stats import binomtest

    if sets == 0:
        return 0.0, 1.0
    interval = binomtest(int(correct), int(sets)).proportion_ci(confidence_level=confidence, method="wilson")
    return float(interval.low), float(interval.high)


def share_with_interval(correct: int, sets: int) -> dict[str, Any]:
    """``sets``, ``correct``, ``recall`` and its Wilson interval ``recall_low`` .. ``recall_high``."""
    low, high = wilson_interval(correct, sets)
    return {"sets": int(sets), "correct": int(correct), "recall": correct / sets if sets else None,
            "recall_low": low, "recall_high": high}


def mean_by_kind(kinds: Sequence[str], values: Sequence[float], name: str) -> dict[str, dict[str, Any]]:
    """Per kind (sorted by name): its sets and the mean of ``values`` over them, as ``name``."""
    kinds, values = np.asarray(kinds), np.asarray(values, dtype=float)
    return {kind: {"sets": int((kinds == kind).sum()), name: float(values[kinds == kind].mean())}
            for kind in sorted(set(kinds.tolist()))}


def recall_by_kind(kinds: Sequence[str], correct: np.ndarray) -> dict[str, dict[str, Any]]:
    """Per kind (sorted by name): its test sets, those classified correctly, their share and its interval."""
    kinds, correct = np.asarray(kinds), np.asarray(correct, dtype=bool)
    return {kind: share_with_interval(int(correct[kinds == kind].sum()), int((kinds == kind).sum()))
            for kind in sorted(set(kinds.tolist()))}


def describe_threshold(threshold: dict[str, Any]) -> str:
    """'0.0123', 'below the smallest drawn (4)' or 'not reached'."""
    if threshold["reading"] == CROSSING:
        return f"{threshold['threshold']:.3g}"
    if threshold["reading"] == BELOW_SMALLEST:
        return f"{BELOW_SMALLEST} ({threshold['smallest_drawn']:.3g})"
    return NOT_REACHED
