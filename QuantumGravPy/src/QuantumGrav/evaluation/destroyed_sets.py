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


NUM_BINS = 5
MODEL_LABELS = {"gnn": "GNN", "simple_baseline": "simple baseline", "strong_baseline": "strong baseline",
                "strongest_baseline": "strongest rival", "exact_test": "exact 2D-order test"}


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


def describe_curves(curves: dict[str, Any]) -> str:
    """One log line: the share recognised per bin, for each model."""
    edges = curves["bin_edges"]
    shares = "; ".join(f"{MODEL_LABELS.get(name, name)} " + " ".join("-" if s is None else f"{s:.2f}" for s in row)
                       for name, row in curves["share"].items())
    return (f"destroyed test sets recognised per flip-fraction bin ({edges[0]:.2g}..{edges[-1]:.2g}, "
            f"{len(edges) - 1} log-spaced bins, {curves['destroyed_sets']} sets): {shares}")
