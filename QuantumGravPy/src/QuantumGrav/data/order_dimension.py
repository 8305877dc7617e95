"""Whether a causal set is a 2D order (order dimension <= 2): an exact test in O(N^2) work, with a witness.

Every manifold-like kind generated in d = 2 (the default) is two-dimensional, and the causal order of a sprinkling into a 2D region
conformally flat to a diamond is the intersection of two linear orders (its two light-cone coordinates u = t + x,
v = t - x): a *2D order*. Curvature never changes this (a conformal factor keeps the light cones), so whether a set
is a 2D order is a yes/no fact that no learned model can beat on a 2D manifold-like set, and that no destroyed,
layered or random set of some size satisfies by chance.

**Theory.** A poset P has dimension <= 2 iff its incomparability graph G (elements, joined when unrelated) has a
transitive orientation Q, its *conjugate* (Dushnik and Miller, Amer. J. Math. 63, 600 (1941)): then L1 = P + Q and
L2 = P + Q^-1 are linear orders with P = L1 & L2. G's transitive orientations are found by ordered vertex
partitioning (McConnell and Spinrad, "Modular decomposition and transitive orientation", Discrete Math. 201, 189
(1999); Habib, McConnell, Paul and Viennot, Theor. Comput. Sci. 234, 59 (2000)):

* a class of an ordered partition of the elements, split by a *pivot* p outside it, puts p's neighbours in G (the
  elements unrelated to p) on the side away from p: every transitive orientation in which the classes' edges point
  left to right does so (else transitivity would force an edge to p that G lacks);
* the partition starts from a source of some transitive orientation: the last element of a lexicographic breadth
  first search of G's complement (the comparability graph, a cocomparability graph when P is 2D: Corneil, Olariu and
  Stewart, SIAM J. Discrete Math. 13, 2000) ordered as (its non-neighbours, itself, its neighbours);
* when no pivot splits a class any more, every class is a module of G (all its outside elements see it alike), which
  is oriented on its own (Gallai): its components in G, or in the complement, in any order, else from its own source.

Each pivot costs O(N) numpy work, so a set costs about O(N^2): 4 ms of CPU at N = 128, 20 ms at 512 and 0.2 s at
2,048 on one core (``benchmarks/features/bench_order_dimension.py``, ``results_order_dimension.json``). The answer is certified: "yes" only when L1 and L2 are verified linear
orders (a tournament is transitive iff its out-degrees are all different), and then R = L1 & L2 is transitive too.
"No" rests on the partitioning being complete, which the tests check against Golumbic's implication classes.

**Local form.** Where P is not 2D, the partitioning still ends in some order of the elements; its conjugate's
tournaments L1 and L2 then have cycles. An element *takes part in a violation* when it lies on a cycle (in a
strongly connected part of three or more elements) of L1 or L2: zero elements exactly for 2D orders. A pair
whose ends share such a part is an edge of a violating cycle (``two_dimension_violation_parts``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["conjugate_order", "is_two_dimensional", "two_dimension_violations", "two_dimension_violation_parts",
           "two_dimension_features", "TWO_DIMENSION_FEATURES"]

# The per-set features of ``two_dimension_features``.
TWO_DIMENSION_FEATURES: tuple[str, ...] = ("is_two_dimensional", "two_dimension_violation_fraction")


def _checked(R: np.ndarray) -> np.ndarray:
    """``R`` as a boolean N x N strict order (irreflexive, antisymmetric), or one ValueError naming what is wrong."""
    R = np.asarray(R)
    if R.ndim != 2 or R.shape[0] != R.shape[1]:
        raise ValueError(f"R: expected a square N x N causal matrix, got shape {R.shape}")
    if R.dtype != bool:
        if not np.isin(R, (0, 1)).all():
            raise ValueError("R: expected a boolean causal matrix (0/1 entries)")
        R = R.astype(bool)
    if R.diagonal().any():
        raise ValueError("R: an element precedes itself (R[i, i] is true); a causal matrix is a strict order")
    if (R & R.T).any():
        raise ValueError("R: some pair precedes each other both ways; a causal matrix is a strict order")
    return R


def _dense_rank(key: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Ranks 0, 1, ... of non-negative integer keys below ``size``, in key order, and which keys occur."""
    present = np.zeros(size, dtype=bool)
    present[key] = True
    return (np.cumsum(present) - 1)[key], present


def _last_of_lex_bfs(adjacency: np.ndarray) -> int:
    """The last vertex of a lexicographic breadth-first search of a graph (dense boolean adjacency), by partition
    refinement: the next vertex is the first of the first class; each step puts every class's neighbours of it
    first."""
    m = len(adjacency)
    rank, visited = np.zeros(m, dtype=np.int64), np.zeros(m, dtype=bool)
    for _ in range(m - 1):
        vertex = int(np.argmin(np.where(visited, m + 1, rank)))
        visited[vertex] = True
        rank, _ = _dense_rank(2 * rank + ~adjacency[vertex], 2 * m)
    return int(np.flatnonzero(~visited)[0])


def _pivot(incomparable: np.ndarray, rank: np.ndarray, pivot: int) -> tuple[np.ndarray, np.ndarray]:
    """Split every class but the pivot's by the pivot's neighbours, which go away from the pivot: after the
    non-neighbours in classes to its right, before them in classes to its left. The new ranks and which of the old
    classes split."""
    own, neighbour = rank[pivot], incomparable[pivot]
    away = np.where(rank > own, neighbour, (rank < own) & ~neighbour)
    rank, present = _dense_rank(2 * rank + away, 2 * len(rank))
    return rank, present[0::2] & present[1::2]


def _refine(incomparable: np.ndarray, rank: np.ndarray, queued: np.ndarray) -> np.ndarray:
    """Pivot on queued elements until none is queued; every element of a class that splits is queued again (it may
    now split the other part), so at the end every class is a module."""
    while queued.any():
        for pivot in np.flatnonzero(queued):
            queued[pivot] = False
            old = rank
            rank, split = _pivot(incomparable, rank, pivot)
            if split.any():
                queued |= split[old]
    return rank


def _components(adjacency: np.ndarray) -> tuple[int, np.ndarray]:
    """Number and labels of the connected components of a graph given as a dense boolean adjacency matrix, by
    breadth-first search on its rows (O(m^2) without building a sparse matrix: these graphs are dense)."""
    m = len(adjacency)
    label, count = np.full(m, -1, dtype=np.int64), 0
    for start in range(m):
        if label[start] >= 0:
            continue
        frontier, label[start] = np.array([start]), count
        while frontier.size:
            frontier = np.flatnonzero(adjacency[frontier].any(axis=0) & (label < 0))
            label[frontier] = count
        count += 1
    return count, label


def _module_order(incomparable: np.ndarray) -> tuple[np.ndarray, bool]:
    """How a module (its own incomparability graph) splits: by its components when it is disconnected, by the
    components of its complement when that is, else around its source (non-neighbours, source, neighbours). Returns
    the parts' order keys and whether the split needs refining (the last case)."""
    parts, label = _components(incomparable)
    if parts > 1:
        return label, False
    comparable = ~incomparable
    np.fill_diagonal(comparable, False)
    parts, label = _components(comparable)
    if parts > 1:
        return label, False
    source = _last_of_lex_bfs(comparable)
    key = np.where(incomparable[source], 2, 0)
    key[source] = 1
    return key, True


def conjugate_order(R: np.ndarray) -> np.ndarray:
    """A permutation of the elements of the causal matrix ``R`` (any labelling) whose order on every unrelated pair
    is a transitive orientation of the incomparability graph when ``R`` is a 2D order: ``position[i] < position[j]``
    for unrelated i, j says that i is left of j. For other orders the same procedure ends in some order, whose
    conjugate is then not transitive (``two_dimension_violations``)."""
    R = _checked(R)
    n = len(R)
    incomparable = ~(R | R.T)
    np.fill_diagonal(incomparable, False)
    rank, queued = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    while True:
        sizes = np.bincount(rank)
        if (sizes <= 1).all():
            return np.argsort(rank)
        key = np.zeros(n, dtype=np.int64)
        by_class = np.argsort(rank, kind="stable")
        for members in np.split(by_class, np.cumsum(sizes)[:-1]):
            if len(members) > 1:
                key[members], refine = _module_order(incomparable[np.ix_(members, members)])
                queued[members] = refine
        rank = np.unique(rank * (n + 1) + key, return_inverse=True)[1].reshape(-1)
        rank = _refine(incomparable, rank, queued)


def _realizer(R: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two tournaments L1 = R + Q and L2 = R + Q^-1 of the conjugate Q that ``conjugate_order`` finds."""
    position = np.empty(len(R), dtype=np.int64)
    position[conjugate_order(R)] = np.arange(len(R))
    left_of = ~(R | R.T) & (position[:, None] < position[None, :])
    return R | left_of, R | left_of.T


def _cycle_parts(tournament: np.ndarray) -> np.ndarray:
    """Each vertex's strongly connected part of a tournament when the part has 3 or more vertices (the vertices on
    a cycle), else -1. The parts of a tournament follow each other in the order of out-degrees: the k vertices of
    highest out-degree are a union of whole parts iff they beat all the others, i.e. their out-degrees sum to
    k(k-1)/2 + k(n-k). Within a part every edge lies on a cycle (a path leads back from its head to its tail)."""
    n = len(tournament)
    out_degree = tournament.sum(axis=1)
    order = np.argsort(-out_degree, kind="stable")
    k = np.arange(1, n + 1)
    closes = np.cumsum(out_degree[order]) == k * (k - 1) // 2 + k * (n - k)
    sizes = np.diff(np.r_[-1, np.flatnonzero(closes)])
    part = np.empty(n, dtype=np.int64)
    part[order] = np.where(np.repeat(sizes >= 3, sizes), np.repeat(np.arange(len(sizes)), sizes), -1)
    return part


def two_dimension_violation_parts(R: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per element of the causal matrix ``R``: its violating part in each tournament L1 = R + Q and L2 = R + Q^-1
    of the conjugate Q found by ``conjugate_order`` (a strongly connected part of 3 or more elements, numbered from
    0), or -1 where it lies on no cycle of that tournament. A pair whose ends share a part in L1 or L2 is an edge
    of a violating cycle; all -1 exactly when ``R`` is a 2D order."""
    R = _checked(R)
    first, second = _realizer(R)
    return _cycle_parts(first), _cycle_parts(second)


def two_dimension_violations(R: np.ndarray) -> np.ndarray:
    """Per element of the causal matrix ``R``: whether it takes part in a violation of two-dimensionality, i.e. lies
    on a cycle of the tournaments L1 = R + Q or L2 = R + Q^-1 of the conjugate Q found by ``conjugate_order``. All
    false exactly when ``R`` is a 2D order (a transitively closed relation of order dimension <= 2)."""
    first, second = two_dimension_violation_parts(R)
    return (first >= 0) | (second >= 0)


def is_two_dimensional(R: np.ndarray) -> bool:
    """Whether the causal matrix ``R`` (boolean N x N, any labelling) is a 2D order: a transitively closed relation
    that is the intersection of two linear orders. Exact (see the module's docstring); a relation that is not
    transitive is no order, and gets False."""
    return not two_dimension_violations(R).any()


def two_dimension_features(R: np.ndarray) -> np.ndarray:
    """The per-set features ``TWO_DIMENSION_FEATURES`` (float64): 1.0 for a 2D order (else 0.0), and the fraction
    of the elements that take part in a violation (``two_dimension_violations``)."""
    violations = two_dimension_violations(R)
    return np.array([float(not violations.any()), float(violations.mean()) if len(violations) else 0.0])
