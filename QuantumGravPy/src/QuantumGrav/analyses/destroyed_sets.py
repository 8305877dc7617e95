"""Where a classifier stops: the share of destroyed sets it recognises, per flip-fraction bin.

A destroyed set is a sprinkling with a fraction of its pairs flipped (``causal_sets.destroy_order``); with
very few flipped, no method can tell it from the sprinkling it came from, so one accuracy hides where a
model stops. Generated with ``data.destroy_fraction: [low, high]``, every destroyed set draws its own
fraction (its ``flip_fraction``; 0 for the other sets). After the test the trainer counts, for the
destroyed sets of the test split, how many the GNN and both baselines classify correctly (as destroyed
for ``data.target: cset_type``, as non-manifold-like for ``manifold_like``) in each of ``NUM_BINS``
log-spaced bins of the flip fraction. Counts first, shares from them: a reader can pool runs exactly.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import numpy as np

from ..callbacks.state import RunState
from ..tasks.classification import ClassificationTask
from ..runs.records import MODEL_LABELS
from .base import Analysis
from .figures import plot_destroyed_by_flip_fraction


NUM_BINS = 5


def flip_fractions(graphs: Iterable) -> np.ndarray:
    """The ``flip_fraction`` of each graph (NaN where a graph has none)."""
    values = [getattr(graph, "flip_fraction", None) for graph in graphs]
    return np.array([float(v.reshape(-1)[0]) if v is not None else math.nan for v in values], dtype=np.float64)


def bin_edges(fractions: np.ndarray, span: Sequence[float] = (), num_bins: int = NUM_BINS) -> np.ndarray:
    """``num_bins + 1`` log-spaced edges over ``span`` (the generator's [low, high]: the same bins for every
    run of a config), widened to the smallest and largest of ``fractions`` (all > 0)."""
    low, high = min(fractions.min(), *span[:1]), max(fractions.max(), *span[1:])
    return np.logspace(np.log10(low), np.log10(high), num_bins + 1)


def counts_per_bin(fractions: np.ndarray, hits: np.ndarray, edges: np.ndarray) -> list[int]:
    """How many of ``hits`` (bool, one per fraction) fall into each bin; the end bins include their edge."""
    bins = np.digitize(fractions, edges[1:-1])
    return np.bincount(bins, weights=hits.astype(np.float64), minlength=len(edges) - 1).astype(int).tolist()


def destroyed_curves(results: dict[str, tuple[np.ndarray, np.ndarray]],
                     span: Sequence[float] = ()) -> dict[str, Any] | None:
    """Per model, ``results[name] = (flip fraction, correct)`` of every test set (same order; fraction 0 or
    NaN for sets that are not destroyed); ``span``: see ``bin_edges``. Returns the bin edges, the destroyed
    sets per bin, and per model the recognised ones per bin and their share (None for an empty bin); None
    when the destroyed sets do not have at least two different flip fractions (a single destroy_fraction,
    or data without one)."""
    destroyed = {name: np.nan_to_num(fractions) > 0 for name, (fractions, _) in results.items()}
    values = np.concatenate([fractions[destroyed[name]] for name, (fractions, _) in results.items()])
    if len(np.unique(values)) < 2:
        return None
    edges = bin_edges(values, span)
    first, (fractions, _) = next(iter(results.items()))
    sets = counts_per_bin(fractions[destroyed[first]], np.ones(int(destroyed[first].sum()), dtype=bool), edges)
    recognised = {name: counts_per_bin(fractions[destroyed[name]], correct[destroyed[name]], edges)
                  for name, (fractions, correct) in results.items()}
    return {"bin_edges": edges.tolist(), "destroyed_sets": sets, "recognised": recognised,
            "share": {name: [hits / n if n else None for hits, n in zip(counts, sets)]
                      for name, counts in recognised.items()}}


class DestroyedSetCurves(Analysis):
    """After the test of a classifier (rank 0): the curves of the model and, when they ran, the baselines
    (``state.baseline_predictions``), as ``result["destroyed_by_flip_fraction"]``, and with ``training.figures``
    ``figures/destroyed_by_flip_fraction.png``; nothing for data without varying flip fractions. Switched on where
    the generator draws each destroyed set's flip fraction from a range (``data.destroy_fraction: [low, high]``)."""

    def on_test_end(self, state: RunState, result: dict[str, Any]) -> None:
        if not isinstance(state.task, ClassificationTask):
            return
        gnn = np.array(state.test_predictions, dtype=np.float64).reshape(-1, 3)  # prediction, truth, fraction
        results = {"gnn": (gnn[:, 2], gnn[:, 0] == gnn[:, 1])}
        if state.baseline_predictions:
            test = [state.dataset[i] for i in state.split["test"]]
            fractions, truth = flip_fractions(test), np.array([int(g.y.reshape(-1)[0]) for g in test])
            results.update({f"{name}_baseline": (fractions, predicted == truth)
                            for name, predicted in state.baseline_predictions.items()})
        generated = getattr(state.dataset, "generation_params", None) or {}
        span = generated.get("destroy_fraction") if isinstance(generated.get("destroy_fraction"), list) else ()
        curves = destroyed_curves(results, span)
        if curves:
            result["destroyed_by_flip_fraction"] = curves
            self.add_figure(state, "destroyed_by_flip_fraction", plot_destroyed_by_flip_fraction, curves, MODEL_LABELS)
