"""The 2D rival of the relation task (``relation_binary``): fit the nearest 2D order to a destroyed set and mark
the pairs where the two differ.

A sprinkling into a 2D region is a 2D order (``data.order_dimension``): the dominance order of two linear orders,
its light-cone coordinates u and v (i < j iff i is before j in both). A destroyed set is such an order with a few
pairs toggled, then closed: an added toggle a < b stays a link of the set and its closure adds past(a) x future(b);
a removed relation sticks only where it was a link. So a 2D order S explains the set R with

    cost(S) = (links of R that S lacks: each an added toggle; R's other relations then follow by the closure)
            + (relations of S that R lacks: each a removed link),

and the repair marks the pairs where R and the S of least cost it finds differ (added toggles with their closure,
removed links). S is a 2D order by construction, so every set gets an answer; a 2D order R costs 0 and gets none.

**Search.** The two orders start from the exact test's conjugate Q (``data.order_dimension.conjugate_order``): its
tournaments R + Q and R + Q^-1 ranked by out-degree (exactly a realizer of R when R is 2D, cost 0). Then each
element in turn moves to the places in both orders, the others fixed, that cost least: only its own pairs change,
every place is priced at once by 2D prefix sums (``place_costs``), and an element whose pairs cost nothing stays.
Sweeps repeat until no move lowers the price (at most ``MAX_SWEEPS``). Moving one element at a time gets stuck where
several are misplaced together, as around an added toggle, so the fit restarts from each of the ``MAX_RESTARTS``
costliest elements left out: the conjugate's orders of the others (exact when they are a 2D order), the element put
back at its cheapest place, the sweeps again. The search prices a toggle on a pair off the exact test's violating
cycles a little higher (``toggle_prices``), so that among fits with as many toggles it takes one whose changes lie
where the test sees them; a relation against the natural labelling (every relation from the lower index to the
higher) costs more than any fit. The cheapest fit wins, then the fewest marked pairs. At N = 256 a set takes about
0.3 s on one core (``benchmarks/toggled_relations/study_toggled_relations.py``).

**Ceiling.** The least cost is not always the truth: a 2D order needing fewer toggles than the sprinkling's own (or
as few) exists for some sets, and no method that picks the simplest explanation finds their changes. The study
counts them (``cheaper_explanation``). Where a change leaves the set a 2D order nothing exact can locate it, and in
d >= 3 (no sprinkling is a 2D order) the repair is no rival at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ..data.order_dimension import conjugate_order, two_dimension_violation_parts
from ..data.orders import transitive_reduction
from ..tasks.levels import candidate_pairs

# The search's bound per set (see the module's docstring): sweeps over both orders.
MAX_SWEEPS = 50
# Restarts per set: from each of the costliest elements left out (the module's docstring).
MAX_RESTARTS = 16
# The cost of a fitted relation against the natural labelling (more than any set's toggles: n^2 / 2 pairs).
AGAINST_LABELLING = 1 << 40

REPAIR_DESCRIPTION = ("2D repair: the 2D order (two light-cone orders) that explains the set with the fewest "
                      "toggles (its unexplained links added, its missing relations removed), fitted element by "
                      "element; marks where the two differ")


def relation_of(item: Any) -> np.ndarray:
    """The causal matrix an item's input describes: its related candidate pairs, in their natural labelling (every
    relation from the lower index to the higher: ``data.relation_targets``)."""
    n = int(item.num_nodes)
    R = np.zeros((n, n), dtype=bool)
    first, second = candidate_pairs(n).numpy()
    R[first, second] = item.pair_relation.numpy() > 0
    return R


def violation_features(R: np.ndarray, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """[pairs, 3] float32 for the pairs (first, second) of the causal matrix ``R``: how many of the pair's ends lie
    on a violation of two-dimensionality, whether the pair is an edge of a violating cycle (its ends share a part
    of L1 or of L2, ``data.order_dimension.two_dimension_violation_parts``), and the size of the smallest part they
    share as a fraction of N (0 where none)."""
    n = len(R)
    on_violation = np.zeros(n, dtype=np.float32)
    smallest = np.full(len(first), np.inf)
    for part in two_dimension_violation_parts(R):
        on_violation = np.maximum(on_violation, part >= 0)
        shared = (part[first] >= 0) & (part[first] == part[second])
        sizes = np.bincount(part[part >= 0], minlength=1)
        smallest[shared] = np.minimum(smallest[shared], sizes[part[first[shared]]])
    cycle = np.isfinite(smallest)
    return np.stack([on_violation[first] + on_violation[second], cycle,
                     np.where(cycle, smallest, 0.0) / max(n, 1)], axis=1).astype(np.float32)


@dataclass(frozen=True)
class Repair:
    """A repair's result: the changed pairs (N x N bool, upper triangular), the fitted 2D order's cost (toggles:
    links of the set it lacks plus relations it has that the set lacks), and the sweeps taken."""

    changed: np.ndarray
    cost: int
    sweeps: int


class Prices(NamedTuple):
    """What a fitted 2D order S pays per pair (N x N int64): ``missing[i, j]`` where S lacks the link i < j of the
    set (0 on other pairs), ``extra[i, j]`` where S has i < j and the set does not (0 where the set has it)."""

    missing: np.ndarray
    extra: np.ndarray

    def of(self, S: np.ndarray) -> int:
        """The price of the 2D order ``S`` (N x N bool)."""
        return int(self.missing[~S].sum() + self.extra[S].sum())


def toggle_prices(R: np.ndarray, links: np.ndarray, off_cycle: np.ndarray | None = None) -> Prices:
    """One toggle per missing link and per extra relation (doubled, plus one where the pair is ``off_cycle``: among
    fits with as many toggles, those whose changes lie on the exact test's violating cycles cost less), and more
    than any fit for a relation against the natural labelling (every relation from the lower index to the higher:
    no sprinkling has one)."""
    unit = np.int64(1) if off_cycle is None else 2 + off_cycle.astype(np.int64)
    against = np.tril(np.full(R.shape, AGAINST_LABELLING, dtype=np.int64), -1)
    return Prices(np.where(links, unit, 0).astype(np.int64), np.where(R, 0, unit).astype(np.int64) + against)


def explanation_cost(R: np.ndarray, S: np.ndarray, links: np.ndarray | None = None) -> int:
    """The toggles a 2D order ``S`` needs to explain the closed order ``R``: links of ``R`` that ``S`` lacks plus
    relations of ``S`` that ``R`` lacks (the module's docstring)."""
    links = transitive_reduction(R) if links is None else links
    return int((links & ~S).sum() + (S & ~R).sum())


def starting_orders(R: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the elements in two linear orders: the conjugate's two tournaments ranked by out-degree."""
    n = len(R)
    position = np.empty(n, dtype=np.int64)
    position[conjugate_order(R)] = np.arange(n)
    left_of = ~(R | R.T) & (position[:, None] < position[None, :])
    orders = []
    for tournament in (R | left_of, R | left_of.T):
        rank = np.empty(n, dtype=np.int64)
        rank[np.argsort(-tournament.sum(axis=1), kind="stable")] = np.arange(n)
        orders.append(rank)
    return orders[0], orders[1]


def dominance(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The 2D order of two linear orders (positions): i < j iff i is before j in both."""
    return (u[:, None] < u[None, :]) & (v[:, None] < v[None, :])


def place_costs(prices: Prices, u: np.ndarray, v: np.ndarray, x: int, present: np.ndarray,
                only_if_costly: bool = False) -> tuple[int, np.ndarray | None]:
    """The price of ``x``'s pairs with the ``present`` elements where it is (positions ``u``, ``v`` in the two
    orders), and for every place (t_u, t_v) it could move to (t others before it in each order), as an N x N grid
    (None with ``only_if_costly`` where it costs nothing there: no place costs less).

    For an element y, x before y in both orders predicts x < y, after it in both y < x, else unrelated: each case has
    its price for the pair. Over the places the price is a sum over the others of their case's, which 2D prefix
    sums over the others' ranks give for every place at once: O(N^2)."""
    n = len(u)
    missing, extra = prices
    unrelated = missing[x] + missing[:, x]
    before = extra[x] + missing[:, x] - unrelated  # x < y: extra if the set lacks it, and y < x is missing
    after = extra[:, x] + missing[x] - unrelated  # y < x
    absent = ~present
    absent[x] = True
    before[absent] = after[absent] = unrelated[absent] = 0
    first, second = u[x] < u, v[x] < v
    here = int(unrelated.sum() + before[first & second].sum() + after[~first & ~second].sum())
    if only_if_costly and here == 0:
        return here, None
    u_rank, v_rank = u - (u > u[x]), v - (v > v[x])  # ranks among the others
    before_grid, after_grid = np.zeros((n, n), dtype=np.int64), np.zeros((n, n), dtype=np.int64)
    y = np.flatnonzero(~absent)
    before_grid[u_rank[y], v_rank[y]] = before[y]
    after_grid[u_rank[y] + 1, v_rank[y] + 1] = after[y]
    # Place (t_u, t_v): the others of u rank >= t_u and v rank >= t_v are after x, those of both ranks below before.
    grid = before_grid[::-1, ::-1].cumsum(0).cumsum(1)[::-1, ::-1] + after_grid.cumsum(0).cumsum(1) + unrelated.sum()
    return here, grid


def sweep(prices: Prices, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """One pass over the elements: each moves to the places in the two orders (positions ``u``, ``v``) with the
    least price (``place_costs``), the others kept in theirs. Only the moved element's pairs change, so an element
    whose pairs cost nothing stays: only the few at a toggle search. Returns the new positions and whether any move
    lowered the price."""
    present = np.ones(len(u), dtype=bool)
    improved = False
    for x in range(len(u)):
        here, grid = place_costs(prices, u, v, x, present, only_if_costly=True)
        if grid is None:
            continue
        best = np.unravel_index(int(np.argmin(grid)), grid.shape)
        if grid[best] < here:
            u, v, improved = moved(u, x, int(best[0])), moved(v, x, int(best[1])), True
    return u, v, improved


def moved(positions: np.ndarray, x: int, place: int) -> np.ndarray:
    """Positions in a linear order after ``x`` moves to ``place`` (``place`` others before it)."""
    rank = positions - (positions > positions[x])
    shifted = rank + (rank >= place)
    shifted[x] = place
    return shifted


def own_costs(prices: Prices, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Per element, the price of its pairs under the 2D order of ``u``, ``v``."""
    S = dominance(u, v)
    paid = np.where(S, prices.extra, prices.missing)
    return paid.sum(axis=0) + paid.sum(axis=1)


def fitted(R: np.ndarray, links: np.ndarray, prices: Prices, u: np.ndarray, v: np.ndarray,
           max_sweeps: int) -> tuple[Repair, int, np.ndarray, np.ndarray]:
    """Sweeps from the orders ``u``, ``v`` until no move lowers the price: the repair they give, its price, and the
    orders."""
    sweeps, improved = 0, True
    while improved and sweeps < max_sweeps:
        sweeps += 1
        u, v, improved = sweep(prices, u, v)
    S = dominance(u, v)
    differs = R ^ S
    return Repair(np.triu(differs | differs.T, 1), explanation_cost(R, S, links), sweeps), prices.of(S), u, v


def repair(R: np.ndarray, max_sweeps: int = MAX_SWEEPS, max_restarts: int = MAX_RESTARTS) -> Repair:
    """The 2D order nearest the causal matrix ``R`` (natural labelling, transitively closed) by the toggles it
    needs, and the pairs where it differs from ``R`` (the module's docstring): the cheapest of the sweeps from the
    conjugate's orders and of the restarts from each costly element left out, then the one with fewest marks. Among
    fits with as many toggles, those whose changes lie on the exact test's violating cycles (where the changes are
    when the test sees them: ``violation_features``) are cheaper."""
    n = len(R)
    links = transitive_reduction(R)
    first, second = np.triu_indices(n, 1)
    on_cycle = np.zeros_like(R)
    on_cycle[first, second] = violation_features(R, first, second)[:, 1] > 0
    prices = toggle_prices(R, links, ~(on_cycle | on_cycle.T))
    best, price, u, v = fitted(R, links, prices, *starting_orders(R), max_sweeps)
    costs = own_costs(prices, u, v)
    costly = np.argsort(-costs, kind="stable")[:max_restarts]
    for x in costly[costs[costly] > 0]:
        if best.cost == 0:
            break
        found, found_price, _, _ = fitted(R, links, prices, *restart_without(R, prices, int(x)), max_sweeps)
        if (found_price, int(found.changed.sum())) < (price, int(best.changed.sum())):
            best, price = found, found_price
    return best


def restart_without(R: np.ndarray, prices: Prices, x: int) -> tuple[np.ndarray, np.ndarray]:
    """The conjugate's orders of the set without ``x`` (exact where that is a 2D order), ``x`` then put at its
    cheapest place in both."""
    n = len(R)
    rest = np.flatnonzero(np.arange(n) != x)
    u, v = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    u[rest], v[rest] = starting_orders(R[np.ix_(rest, rest)])
    u[x] = v[x] = n - 1
    _, grid = place_costs(prices, u, v, x, np.ones(n, dtype=bool))
    best = np.unravel_index(int(np.argmin(grid)), grid.shape)
    return moved(u, x, int(best[0])), moved(v, x, int(best[1]))


def predict_repair(item: Any) -> np.ndarray:
    """The candidate pairs of an item (``data.relation_targets``) that its repair changes."""
    return pair_marks(repair(relation_of(item)))


def pair_marks(found: Repair) -> np.ndarray:
    """A repair's changed pairs in the order of the candidate pairs (``tasks.levels.candidate_pairs``)."""
    first, second = candidate_pairs(len(found.changed)).numpy()
    return found.changed[first, second]
