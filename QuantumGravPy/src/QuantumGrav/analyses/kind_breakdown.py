"""Where a classifier of QuantumGrav.jl's kinds stops: recall per kind, and against each defect's realised size.

For the test sets of data that describe their sets (``describe(i)``: ``KindsDataset``, QuantumGrav.jl's stores), the
run (``KindBreakdown``, switched on by the nine kinds' configs), ``evaluate`` and the study report per model (the GNN
and the baselines), in one vocabulary (``evaluation.kinds``):

* the recall of each kind, with its Wilson interval;
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

from ..callbacks.state import RunState
from ..evaluation.kinds import BELOW_SMALLEST, CROSSING, NOT_REACHED, recall_by_kind, share_with_interval
from ..runs.records import MODEL_LABELS
from ..tasks.classification import ClassificationTask
from .base import Analysis
from .figures import plot_recall_by_kind

# The realised size of each kind's defect: what the set's describe(i) records (data.kinds).
DEFECT_SIZES: dict[str, tuple[str, ...]] = {
    "destroyed": ("changed_relations",), "destroyed_ambiguous": ("changed_relations",),
    "merged": ("block_size",), "merged_ambiguous": ("block_size",),
    "complex_topology": ("n_vertical_cuts", "n_finite_cuts"),
}
DETECTION_RECALL = 0.9
NUM_SIZE_BINS = 4


def defect_size(description: dict[str, Any]) -> float | None:
    """The realised size of a described set's defect (the sum of its ``DEFECT_SIZES`` values), None if it has
    none (another kind, or a store that does not record it)."""
    names = DEFECT_SIZES.get(description.get("kind", ""), ())
    if not names or any(name not in description for name in names):
        return None
    return float(sum(description[name] for name in names))


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


class KindBreakdown(Analysis):
    """After the test of a classifier on data that describe their sets (``describe(i)``: QuantumGrav.jl's kinds):
    recall per kind and against each defect's size for the model and, when they ran, the baselines, as
    ``result["by_kind"]`` and ``result["by_defect_size"]``, the kinds of the data without a test set as
    ``result["kinds_without_test_sets"]``; with ``training.figures``, ``figures/recall_by_kind.png``."""

    def on_test_end(self, state: RunState, result: dict[str, Any]) -> None:
        if not isinstance(state.task, ClassificationTask) or not hasattr(state.dataset, "describe"):
            return
        test = list(state.split["test"])
        predicted = {index: int(p) for index, (p, _, _) in zip(state.test_order, state.test_predictions)}
        truth = {index: int(t) for index, (_, t, _) in zip(state.test_order, state.test_predictions)}
        correct = {"gnn": np.array([predicted[i] == truth[i] for i in test])}
        correct.update({f"{name}_baseline": np.asarray(predictions) == np.array([truth[i] for i in test])
                        for name, predictions in state.baseline_predictions.items()})
        result.update(kind_breakdown([state.dataset.describe(i) for i in test], correct))
        # The kinds the data holds (each store's) that the test split has no set of: their recall is undefined.
        present = set(result["by_kind"]["gnn"])
        result["kinds_without_test_sets"] = [kind for kind in getattr(state.dataset, "found_cset_types", None) or []
                                             if kind not in present]
        if result["by_kind"]:
            self.add_figure(state, "recall_by_kind", plot_recall_by_kind, result["by_kind"],
                            result["by_defect_size"], MODEL_LABELS, absent=result["kinds_without_test_sets"])
