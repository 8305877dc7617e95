"""An exact 2D rival of the relation task (``relation_binary``): repair a destroyed set back into a 2D order and mark
the pairs the repair changes.

A sprinkling into a 2D region is a 2D order (``data.order_dimension``); a destroyed set with a few changed relations
is often none, and the exact test's violations (cycles of the tournaments of the conjugate it finds) lie around the
changes. The repair searches, one step at a time, the operations that could undo one change, all on pairs whose two
ends share a violating part (an edge of a violating cycle: ``two_dimension_violation_parts``):

* remove a link (a toggle that added a lone relation, or a relation the sprinkling lacks);
* add the relation of an unrelated pair i < j whose cones are nested (F(j) in F(i), P(i) in P(j): the nesting
  defect is 0, so the result is closed): a removed link put back;
* undo an added toggle: a toggle on a < b relates past(a) x future(b) and leaves a < b a link, so the step
  removes every relation whose chains all pass through that link (the closure of the other links).

Each step takes the operation that leaves the fewest elements on a violation, then the fewest changed relations, and
the search stops when the set is a 2D order, when no operation lowers the count, or after ``max_steps``. A repair
that reaches a 2D order is then pruned: each change is taken back where the set stays a closed 2D order without it
(an undone toggle also removes the relations that were links before the toggle). The marked pairs are those whose
relation the steps changed, in the end (a pair toggled twice is unmarked). Every candidate costs one exact test
(about 10 ms at N = 256), so at most ``max_candidates`` are tried per step, those of the smallest violating parts
first (a small part is a sharp location).

A 2D method: where a change leaves the set a 2D order (a third of the sets with one removed link at N = 256) it
marks nothing, and in d >= 3 (no sprinkling is a 2D order) it is no rival at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..data.order_dimension import two_dimension_violation_parts, two_dimension_violations
from ..data.orders import transitive_closure, transitive_reduction
from ..data.relation_targets import candidate_pairs
from .relation_rival import relation_of

# The search's bounds per set (see the module's docstring): steps, and exact tests per step.
MAX_STEPS = 8
MAX_CANDIDATES = 256

REPAIR_DESCRIPTION = ("exact 2D repair: the fewest changed relations, step by step, that make the set a 2D order "
                      "(removed links put back, added links and toggles undone)")


@dataclass(frozen=True)
class Repair:
    """A repair's result: the changed pairs (N x N bool, upper triangular), the steps taken, the exact tests
    tried, and whether the repaired set is a 2D order."""

    changed: np.ndarray
    steps: int
    tests: int
    two_dimensional: bool


def shared_parts(R: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """The pairs i < j of ``R`` that are edges of a violating cycle, as N x N bool (upper triangular), the size of
    the smallest violating part each such pair's ends share (N x N, N + 1 elsewhere), and the elements on a
    violation."""
    n = len(R)
    smallest = np.full((n, n), n + 1, dtype=np.int64)
    violating = np.zeros(n, dtype=bool)
    for part in two_dimension_violation_parts(R):
        on = part >= 0
        violating |= on
        sizes = np.bincount(part[on], minlength=1)
        size = np.where(on, sizes[np.maximum(part, 0)], n + 1)
        same = on[:, None] & (part[:, None] == part[None, :])
        smallest = np.where(same, np.minimum(smallest, size[:, None]), smallest)
    edges = np.triu(smallest <= n, 1)
    return edges, smallest, int(violating.sum())


def candidate_operations(R: np.ndarray, links: np.ndarray, edges: np.ndarray, smallest: np.ndarray,
                         limit: int) -> list[np.ndarray]:
    """The operations of one step on the pairs ``edges`` (see the module's docstring), each as the N x N bool of
    the pairs it toggles; at most ``limit``, those on the smallest shared parts first."""
    counts = R.astype(np.float32)
    nested = ((counts.sum(1)[None, :] - counts @ counts.T) + (counts.sum(0)[:, None] - counts.T @ counts)) == 0
    addable = edges & ~R & nested
    removable = edges & links
    pairs = np.argwhere(addable | removable)
    pairs = pairs[np.argsort(smallest[pairs[:, 0], pairs[:, 1]], kind="stable")][:limit]
    operations = []
    for i, j in pairs:
        single = np.zeros_like(R)
        single[i, j] = True
        operations.append(single)
        if removable[i, j]:
            others = links.copy()
            others[i, j] = False
            undone = R & ~transitive_closure(others)
            if undone.sum() > 1:
                operations.append(undone)
    return operations


def repair(R: np.ndarray, max_steps: int = MAX_STEPS, max_candidates: int = MAX_CANDIDATES) -> Repair:
    """The greedy repair of the causal matrix ``R`` (natural labelling, transitively closed) into a 2D order."""
    state, changed = R.copy(), np.zeros_like(R)
    steps = tests = 0
    edges, smallest, violating = shared_parts(state)
    while violating and steps < max_steps:
        best = None
        for toggles in candidate_operations(state, transitive_reduction(state), edges, smallest, max_candidates):
            tests += 1
            after = int(two_dimension_violations(state ^ toggles).sum())
            key = (after, int(toggles.sum()))
            if best is None or key < best[0]:
                best = (key, toggles)
        if best is None or best[0][0] >= violating:
            break
        state, changed, steps = state ^ best[1], changed ^ best[1], steps + 1
        edges, smallest, violating = shared_parts(state)
    if violating == 0:
        state, changed, tests = pruned(state, changed, tests)
    return Repair(changed, steps, tests, violating == 0)


def pruned(state: np.ndarray, changed: np.ndarray, tests: int) -> tuple[np.ndarray, np.ndarray, int]:
    """A 2D repair with each change taken back where the set stays a closed 2D order without it: an undone toggle
    also removes the relations that were links before the toggle made them redundant, and these go back here."""
    for i, j in np.argwhere(changed):
        if state[i, j]:  # put in by the repair: out again only if it is a link, so the order stays closed
            closed = not (state[i] & state[:, j]).any()
        else:  # taken out: back only if the cones of its ends are nested, so the order stays closed
            closed = not (state[j] & ~state[i]).any() and not (state[:, i] & ~state[:, j]).any()
        if closed:
            state[i, j] = ~state[i, j]
            tests += 1
            if two_dimension_violations(state).any():
                state[i, j] = ~state[i, j]
            else:
                changed[i, j] = False
    return state, changed, tests


def predict_repair(item: Any) -> np.ndarray:
    """The candidate pairs of an item (``data.relation_targets``) that its repair changes."""
    first, second = candidate_pairs(int(item.num_nodes)).numpy()
    return repair(relation_of(item)).changed[first, second]
