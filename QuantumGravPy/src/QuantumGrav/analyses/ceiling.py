"""The ceiling of the manifold-likeness question: per kind, the sets no model can call and the sets the exact
2D-order test cannot call.

* **No model can call** a defect set whose order is its sprinkling's: a destroyed set whose toggles, after the
  closure, changed no relation (its realised ``changed_relations`` is 0), or a merged set whose inserted block
  changed nothing (its elements take part in no relation: the sprinkling is untouched, and a sprinkling's elements
  can be related to nothing too). Such a set is labelled not manifold-like, and every method calls it wrongly.
* **The exact test cannot call** a set whose label disagrees with ``causal_sets.is_two_dimensional``: a defect set
  that is still a 2D order (every manifold-like kind generated in d = 2 is one), or a manifold-like set that is not
  (every one in d = 3 or 4: the exact test answers the 2D question only).

``ceiling_counts`` counts both per kind; ``callable_sets`` marks the sets a model can call, so that results can be
read on all sets and on the changed ones. Everything is read from each set's description (``describe(i)``: the
realised defect and the block's place) and its causal matrix.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..data.order_dimension import is_two_dimensional


def unchanged_by_its_defect(description: dict[str, Any], relation: np.ndarray) -> bool:
    """Whether a set's defect left its sprinkling's order as it was (see the module's docstring); False for kinds
    without a defect, and for sets whose description does not record what the test needs."""
    kind = description.get("kind", "")
    if kind in ("destroyed", "destroyed_ambiguous") and "changed_relations" in description:
        return int(description["changed_relations"]) == 0
    if kind in ("merged", "merged_ambiguous") and {"block_start", "block_size"} <= set(description):
        block = slice(int(description["block_start"]), int(description["block_start"]) + int(description["block_size"]))
        return not (relation[block].any() or relation[:, block].any())
    return False


def callable_sets(descriptions: Sequence[dict[str, Any]], relations: Sequence[np.ndarray]) -> np.ndarray:
    """One bool per set: True where a model can call it (its defect changed its order, or it has no defect)."""
    return np.array([not unchanged_by_its_defect(d, R) for d, R in zip(descriptions, relations)], dtype=bool)


def exact_test_predictions(relations: Sequence[np.ndarray]) -> np.ndarray:
    """The exact test as a classifier of manifold-likeness: 1 (manifold-like) for a 2D order, else 0."""
    return np.array([int(is_two_dimensional(R)) for R in relations], dtype=np.int64)


def ceiling_counts(descriptions: Sequence[dict[str, Any]], relations: Sequence[np.ndarray],
                   manifold_like: Sequence[int]) -> dict[str, dict[str, int]]:
    """Per kind (sorted by name): its ``sets``, those ``no_model_can_call`` (unchanged by their defect), those that
    are ``two_dimensional``, and those the ``exact_test_cannot_call`` (its answer disagrees with the label
    ``manifold_like``, 1 or 0 per set)."""
    kinds = np.array([d["kind"] for d in descriptions])
    unchanged = ~callable_sets(descriptions, relations)
    two_dimensional = exact_test_predictions(relations)
    wrong = two_dimensional != np.asarray(manifold_like, dtype=np.int64)
    return {kind: {"sets": int((kinds == kind).sum()), "no_model_can_call": int(unchanged[kinds == kind].sum()),
                   "two_dimensional": int(two_dimensional[kinds == kind].sum()),
                   "exact_test_cannot_call": int(wrong[kinds == kind].sum())}
            for kind in sorted(set(kinds.tolist()))}
