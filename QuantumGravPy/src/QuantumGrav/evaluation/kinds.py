"""Where a classifier of QuantumGrav.jl's kinds stops: recall per kind, and against each defect's realised size.

One accuracy over nine kinds hides which kind a model gives away: an ambiguous ``destroyed`` set with one relation
changed is a sprinkling to every method, a ``grid`` to none. For the test sets of data that describe their sets
(``describe(i)``: ``KindsDataset``, QuantumGrav.jl's stores), the run, ``evaluate`` and the study report per model
(the GNN and the baselines), in one vocabulary:

* the recall of each kind: the share of its test sets classified correctly (for the binary question, a
  non-manifold-like kind's recall is the share recognised as not manifold-like), with its Wilson interval
  (``INTERVAL_CONFIDENCE``): a per-kind recall of a few hundred sets is known to a few points only;
* for the kinds with a defect (``DEFECT_SIZES``: the relations a destroyed set's toggles changed after the closure,
  the elements of a merged set's inserted block, the cuts of a complex_topology set, all as *realised*, not as
  drawn), the recall in bins of equal counts of that size, each bin with its sets, the correct ones and the
  interval; and the **detection threshold**: where the recall curve (through the bins' centres, on a log axis)
  last crosses ``DETECTION_RECALL`` on the way up to the largest defects. When even the smallest bin is recognised
  at that level the threshold is *below the smallest drawn* (said so, with the smallest size drawn), and when the
  largest bin is not it is *not reached*.

Counts come with every share, so runs can be pooled exactly.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

# The realised size of each kind's defect: what the set's describe(i) records (data.kinds).
DEFECT_SIZES: dict[str, tuple[str, ...]] = {
    "destroyed": ("changed_relations",), "destroyed_ambiguous": ("changed_relations",),
    "merged": ("block_size",), "merged_ambiguous": ("block_size",),
    "complex_topology": ("n_vertical_cuts", "n_finite_cuts"),
}
DETECTION_RECALL = 0.9
INTERVAL_CONFIDENCE = 0.95
NUM_SIZE_BINS = 4
BELOW_SMALLEST = "below the smallest drawn"
NOT_REACHED = "not reached"
CROSSING = "crossing"


def defect_size(description: dict[str, Any]) -> float | None:
    """The realised size of a described set's defect (the sum of its ``DEFECT_SIZES`` values), None if it has
    none (another kind, or a store that does not record it)."""
    names = DEFECT_SIZES.get(description.get("kind", ""), ())
    if not names or any(name not in description for name in names):
        return None
    return float(sum(description[name] for name in names))


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


def _centre(row: dict[str, Any]) -> float:
    """A bin's centre on a log axis (its edges' geometric mean; half its upper edge when it starts at 0)."""
    return math.sqrt(row["low"] * row["high"]) if row["low"] > 0 else row["high"] / 2


def detection_threshold(bins: Sequence[dict[str, Any]], level: float = DETECTION_RECALL) -> dict[str, Any]:
    """Where the recall curve of ``bins`` (ordered by size) last crosses ``level`` on its way up to the largest
    defects, interpolated between the two bins' centres on a log axis: ``{"threshold": size, "reading":
    "crossing"}``; ``"below the smallest drawn"`` (with ``smallest_drawn``) when every bin is at the level, ``"not
    reached"`` when the largest bin is below it."""
    recalls = [row["recall"] for row in bins]
    if not bins or recalls[-1] < level:
        return {"threshold": None, "reading": NOT_REACHED}
    below = [b for b, recall in enumerate(recalls) if recall < level]
    if not below:
        return {"threshold": None, "reading": BELOW_SMALLEST, "smallest_drawn": bins[0]["low"]}
    lower, upper = bins[below[-1]], bins[below[-1] + 1]
    x0, x1 = _centre(lower), _centre(upper)
    t = (level - lower["recall"]) / (upper["recall"] - lower["recall"])
    crossing = math.exp(math.log(x0) + t * (math.log(x1) - math.log(x0))) if x0 > 0 else x0 + t * (x1 - x0)
    return {"threshold": crossing, "reading": CROSSING}


def recall_by_defect_size(sizes: np.ndarray, correct: np.ndarray, num_bins: int = NUM_SIZE_BINS) -> dict[str, Any]:
    """The sets of one kind in up to ``num_bins`` bins of equal counts of their defect's size (fewer where sizes
    repeat: a bin never splits equal sizes): each bin's edges, sets, correct ones, recall and interval; and
    ``detection_threshold`` as ``threshold_at_90`` (for ``DETECTION_RECALL`` 0.9)."""
    sizes, correct = np.asarray(sizes, dtype=float), np.asarray(correct, dtype=bool)
    edges = np.unique(np.quantile(sizes, np.linspace(0, 1, num_bins + 1)))
    if len(edges) == 1:
        edges = np.array([edges[0], edges[0]])
    bins = np.clip(np.searchsorted(edges[1:-1], sizes, side="right"), 0, len(edges) - 2)
    rows = [{"low": float(edges[b]), "high": float(edges[b + 1]),
             **share_with_interval(int(correct[bins == b].sum()), int((bins == b).sum()))}
            for b in range(len(edges) - 1) if (bins == b).any()]
    return {"bins": rows, f"threshold_at_{round(100 * DETECTION_RECALL)}": detection_threshold(rows)}


def describe_threshold(threshold: dict[str, Any]) -> str:
    """'0.0123', 'below the smallest drawn (4)' or 'not reached'."""
    if threshold["reading"] == CROSSING:
        return f"{threshold['threshold']:.3g}"
    if threshold["reading"] == BELOW_SMALLEST:
        return f"{BELOW_SMALLEST} ({threshold['smallest_drawn']:.3g})"
    return NOT_REACHED


def kind_breakdown(descriptions: Sequence[dict[str, Any]], correct: dict[str, np.ndarray]) -> dict[str, Any]:
    """``by_kind`` and ``by_defect_size`` per model, for test sets described by ``descriptions`` and
    ``correct[model]`` (bool, one per set, in the same order)."""
    kinds = [description["kind"] for description in descriptions]
    sizes = [defect_size(description) for description in descriptions]
    result: dict[str, Any] = {"by_kind": {name: recall_by_kind(kinds, hits) for name, hits in correct.items()},
                              "by_defect_size": {}}
    for kind, names in DEFECT_SIZES.items():
        members = np.array([k == kind and size is not None for k, size in zip(kinds, sizes)])
        if members.sum() < NUM_SIZE_BINS:
            continue
        kind_sizes = np.array([size for size, member in zip(sizes, members) if member])
        result["by_defect_size"][kind] = {
            "size": " + ".join(names),  # the realised quantity the bins are of
            **{name: recall_by_defect_size(kind_sizes, hits[members]) for name, hits in correct.items()}}
    return result


def describe_recall_by_kind(by_kind: dict[str, dict[str, dict[str, Any]]], labels: dict[str, str]) -> str:
    """Log lines: each model's recall per kind."""
    lines = []
    for name, kinds in by_kind.items():
        recalls = "  ".join(f"{kind} {row['recall']:.2f}" for kind, row in kinds.items())
        lines.append(f"recall per kind, {labels.get(name, name)}: {recalls}")
    return "\n".join(lines)
