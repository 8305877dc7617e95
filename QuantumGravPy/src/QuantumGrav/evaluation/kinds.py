"""Where a classifier of QuantumGrav.jl's kinds stops: recall per kind, and against each defect's size.

One accuracy over nine kinds hides which kind a model gives away: an ambiguous ``destroyed`` set with one pair in
ten thousand flipped is a sprinkling to every method, a ``grid`` to none. For the test sets of data that describe
their sets (``describe(i)``: ``KindsDataset``, QuantumGrav.jl's stores), the run reports per model (the GNN and
the baselines):

* the recall of each kind: the share of its test sets classified correctly (for the binary question, a
  non-manifold-like kind's recall is the share recognised as not manifold-like);
* for the kinds with a defect of drawn size (``DEFECT_SIZES``: the flip fraction of destroyed sets, the inserted
  block's share of a merged set, the number of cuts of a complex_topology set), the recall in bins of equal counts
  of that size, and the smallest size from which on the model recognises ``DETECTION_RECALL`` of the sets.

Counts come with every share, so runs can be pooled exactly.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

DEFECT_SIZES: dict[str, tuple[str, ...]] = {
    "destroyed": ("flip_fraction",), "destroyed_ambiguous": ("flip_fraction",),
    "merged": ("block_fraction",), "merged_ambiguous": ("block_fraction",),
    "complex_topology": ("n_vertical_cuts", "n_finite_cuts"),
}
DETECTION_RECALL = 0.9
NUM_SIZE_BINS = 4


def defect_size(description: dict[str, Any]) -> float | None:
    """The size of a described set's defect (the sum of its ``DEFECT_SIZES`` parameters), None if it has none."""
    names = DEFECT_SIZES.get(description.get("kind", ""), ())
    if not names or any(name not in description for name in names):
        return None
    return float(sum(description[name] for name in names))


def mean_by_kind(kinds: Sequence[str], values: Sequence[float], name: str) -> dict[str, dict[str, Any]]:
    """Per kind (sorted by name): its sets and the mean of ``values`` over them, as ``name``."""
    kinds, values = np.asarray(kinds), np.asarray(values, dtype=float)
    return {kind: {"sets": int((kinds == kind).sum()), name: float(values[kinds == kind].mean())}
            for kind in sorted(set(kinds.tolist()))}


def recall_by_kind(kinds: Sequence[str], correct: np.ndarray) -> dict[str, dict[str, float | int]]:
    """Per kind (sorted by name): its test sets, those classified correctly, and their share."""
    correct = np.asarray(correct, dtype=bool)
    found = mean_by_kind(kinds, correct, "recall")
    for kind, row in found.items():
        row["correct"] = int(correct[np.asarray(kinds) == kind].sum())
    return found


def smallest_detected(sizes: np.ndarray, correct: np.ndarray, level: float = DETECTION_RECALL) -> float | None:
    """The smallest defect size s such that the model recognises at least ``level`` of the sets whose defect is
    at least s: the detection threshold. None when it misses that even among the largest defects."""
    order = np.argsort(-sizes, kind="stable")
    recall_from_top = np.cumsum(correct[order]) / np.arange(1, len(order) + 1)
    reached = np.flatnonzero(recall_from_top >= level)
    return float(sizes[order][reached[-1]]) if reached.size else None


def recall_by_defect_size(sizes: np.ndarray, correct: np.ndarray, num_bins: int = NUM_SIZE_BINS) -> dict[str, Any]:
    """The sets of one kind in ``num_bins`` bins of equal counts of their defect size: each bin's edges, sets,
    correct ones and recall; and ``smallest_detected``."""
    edges = np.quantile(sizes, np.linspace(0, 1, num_bins + 1))
    bins = np.clip(np.searchsorted(edges[1:-1], sizes, side="right"), 0, num_bins - 1)
    rows = [{"low": float(edges[b]), "high": float(edges[b + 1]), "sets": int((bins == b).sum()),
             "correct": int(correct[bins == b].sum())} for b in range(num_bins) if (bins == b).any()]
    for row in rows:
        row["recall"] = row["correct"] / row["sets"]
    return {"bins": rows, f"smallest_at_{round(100 * DETECTION_RECALL)}": smallest_detected(sizes, correct)}


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
            "size": " + ".join(names),
            **{name: recall_by_defect_size(kind_sizes, hits[members]) for name, hits in correct.items()}}
    return result


def describe_recall_by_kind(by_kind: dict[str, dict[str, dict[str, Any]]], labels: dict[str, str]) -> str:
    """Log lines: each model's recall per kind."""
    lines = []
    for name, kinds in by_kind.items():
        recalls = "  ".join(f"{kind} {row['recall']:.2f}" for kind, row in kinds.items())
        lines.append(f"recall per kind, {labels.get(name, name)}: {recalls}")
    return "\n".join(lines)
