"""The range of the data a run was trained on, and the sets of other data that lie outside it.

A model depends on its sets' size by design (``num_elements`` is one of the order invariants its head reads), and it
has only seen the sizes and invariants of its training split: a run trained on sets of 24-32 elements that calls
sets of 2,048 elements manifold-like with a score of 1.0 is extrapolating, not measuring. So every checkpoint
records the training split's range (``training_range_of``: the smallest and largest N, and for a model whose
head reads the order invariants, of each of them), and an applied run flags every set outside it
(``outside_training_range``).

N is judged exactly (an integer the data were drawn for). An invariant is judged against its training range widened
by ``INVARIANT_MARGIN`` of its width on each side: a test set of the training distribution lies a little past the
extremes that a finite training split happened to draw more often than not, and that is no extrapolation.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np
import torch

from .invariants import INVARIANT_NAMES

INVARIANT_MARGIN = 0.05
NUM_ELEMENTS = "num_elements"


def training_range_of(counts: np.ndarray, rows: np.ndarray | None) -> dict[str, Any]:
    """``{"sets": .., "num_elements": [low, high], "invariants": {name: [low, high]}}`` of the training sets' element
    ``counts`` and, where the head reads them, their invariant ``rows`` [sets, K] (None: not recorded)."""
    found: dict[str, Any] = {"sets": len(counts), NUM_ELEMENTS: [int(counts.min()), int(counts.max())]}
    if rows is not None:
        found["invariants"] = {name: [float(rows[:, k].min()), float(rows[:, k].max())]
                               for k, name in enumerate(INVARIANT_NAMES)}
    return found


def known_counts_and_invariants(dataset: Any, indices: list[int], sizes: np.ndarray | None, with_invariants: bool
                                ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The items' element counts and invariant rows where they are known without reading the items (``sizes``: the
    items' (nodes, edges); a store's declared shapes; an in-memory PyG dataset's stored invariants), else None."""
    return _element_counts(dataset, indices, sizes), _stored_invariants(dataset, indices) if with_invariants else None


def counts_and_invariants(items: Iterable[Any], with_invariants: bool) -> tuple[np.ndarray, np.ndarray]:
    """The element counts and invariant rows [items, K] (empty without ``with_invariants``) of ``items``, read one
    at a time: given a generator, one item is held at once (a list of a large split's graphs read from disk held
    them all, and the process kept that memory)."""
    counts, rows = [], []
    for item in items:
        counts.append(int(item.num_nodes))
        if with_invariants:
            rows.append(item.invariants.reshape(-1).double().numpy())
    return np.array(counts, dtype=np.int64), (np.stack(rows) if rows else np.zeros((0, len(INVARIANT_NAMES))))


def _element_counts(dataset: Any, indices: list[int], sizes: np.ndarray | None) -> np.ndarray | None:
    if sizes is not None:
        return np.asarray(sizes)[:, 0]
    declared = getattr(dataset, "element_counts", None)  # a store's sets, from their declared shapes
    return np.asarray(declared())[indices] if callable(declared) else None


def _stored_invariants(dataset: Any, indices: list[int]) -> np.ndarray | None:
    """The invariants of an in-memory PyG dataset, one row per set, without reading its items; else None."""
    data, slices = getattr(dataset, "_data", None), getattr(dataset, "slices", None)
    if getattr(dataset, "_indices", None) is not None or not isinstance(slices, dict) or "invariants" not in slices:
        return None
    stored = getattr(data, "invariants", None)
    if not isinstance(stored, torch.Tensor) or stored.shape[0] != len(dataset):
        return None
    return stored[torch.as_tensor(indices, dtype=torch.long)].double().numpy()


def outside_training_range(training_range: dict[str, Any], num_elements: Sequence[int],
                           invariants: torch.Tensor | None) -> list[list[str]]:
    """For each set, the names of what lies outside ``training_range``: ``num_elements`` outside [low, high], and
    each recorded invariant (from ``invariants`` [sets, K], when the sets carry them) outside its range widened by
    ``INVARIANT_MARGIN``."""
    low, high = training_range[NUM_ELEMENTS]
    outside = [[NUM_ELEMENTS] if not low <= n <= high else [] for n in num_elements]
    recorded = training_range.get("invariants") or {}
    if invariants is None or not recorded:
        return outside
    values = invariants.double().reshape(len(outside), -1).numpy()
    for k, name in enumerate(INVARIANT_NAMES):
        if name == NUM_ELEMENTS or name not in recorded or k >= values.shape[1]:
            continue  # N is judged exactly above
        low, high = recorded[name]
        margin = INVARIANT_MARGIN * (high - low)
        for row, value in zip(outside, values[:, k]):
            if not low - margin <= value <= high + margin:
                row.append(name)
    return outside


def describe_outside(outside: list[list[str]], training_range: dict[str, Any]) -> str | None:
    """One line: how many sets lie outside the training range and in what (None if none)."""
    flagged = [names for names in outside if names]
    if not flagged:
        return None
    low, high = training_range[NUM_ELEMENTS]
    by_name: dict[str, int] = {}
    for names in flagged:
        for name in names:
            by_name[name] = by_name.get(name, 0) + 1
    what = ", ".join(f"{name} {count}" for name, count in sorted(by_name.items(), key=lambda item: -item[1]))
    return (f"{len(flagged)} of {len(outside)} sets lie outside the range the run was trained on (N {low}-{high}"
            f"{' and its head invariants' if training_range.get('invariants') else ''}; outside in: {what}): its "
            f"predictions there are extrapolations (the CSV's outside_training_range column names them)")
