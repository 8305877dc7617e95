"""Causal sets generated with vectorised numpy: sprinklings, non-manifold-like orders, features.

A causal set is a locally finite partial order: its elements are spacetime "atoms" and
the order is causality. Here one is a boolean *causal matrix* ``R`` (N x N) with
``R[i, j]`` true when element ``i`` precedes ``j``. Elements are always in a natural
labelling (a linear extension of the order), so ``R`` is strictly upper triangular.
Every function takes one matrix (N x N) or a batch of equal-sized ones (B x N x N) and
returns the same rank; batches are processed at once with matrix products and
whole-array operations, never with Python loops over pairs.

Classes of causal sets (``CSET_TYPES``):

* ``minkowski_{d}d``: uniform sprinkling into a causal diamond of d-dimensional
  Minkowski space (d = 2, 3, 4), the prototype of a manifold-like causal set.
* ``destroyed``: a sprinkling (dimension drawn from ``dimensions``) in which a fraction of
  the pairs ``i < j`` is flipped (related <-> unrelated), then transitively closed.
* ``layered``: a Kleitman-Rothschild-like order: three layers (about N/4, N/2, N/4),
  relations only between consecutive layers, then closed. Almost all large partial
  orders look like this, so these stand for "generic", non-manifold-like causal sets.

The default task (``DEFAULT_CLASSES``, N uniform in [64, 128], ``DEFAULT_DESTROY_FRACTION``)
is chosen so that the simplest order invariants do not solve it. Layered and destroyed sets
overlap with the sprinklings in ordering fraction (so in Myrheim-Meyer dimension); layered
ones still give themselves away by their height of 3, but a destroyed sprinkling keeps
invariants close to those of some sprinkling. Richer invariants (interval abundances, the
Benincasa-Dowker actions) do see most destroyed sets. Measured with ``QuantumGrav.evaluation.baselines``
on CausalSetDataset defaults, split [0.7, 0.15, 0.15] with split_seed 42, 300 test sets of
2000: logistic regression on the five simple invariants 0.843 (seed 1234), gradient boosting on
all ``INVARIANT_NAMES`` 0.967 (seed 1234), the default model of ``configs/train.yaml`` 0.963 (seed
1234, ``make train``). Over 11 seeds drawn with the generator's previous random streams (the same
distributions): 0.846 +- 0.017, 0.951 +- 0.011 and 0.967 +- 0.008 (``benchmarks/study_models.py``);
over seeds 1234, 1 and 2 of today's generator: 0.856 +- 0.021, 0.958 +- 0.008 and 0.964 +- 0.007.
Almost all remaining errors are destroyed sets taken for sprinklings: with few flipped pairs they
are sprinklings (see the flip-fraction sweep there).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterator, Sequence

import numpy as np
import torch

from ..config.data_section import (CSET_TYPES, DEFAULT_CLASSES, DEFAULT_DESTROY_FRACTION, DEFAULT_DIMENSIONS,  # noqa: F401
                                   DEFAULT_N_MAX, DEFAULT_N_MIN, MANIFOLD_CLASSES, NON_MANIFOLD_CLASSES,
                                   SPRINKLING_DIMENSIONS)

# Layered orders: Kleitman-Rothschild proportions; the probability of a relation between
# consecutive layers is drawn per set from this range, which spreads their ordering
# fraction over the range of 2d to 4d sprinklings.
LAYER_WEIGHTS: tuple[float, ...] = (0.25, 0.5, 0.25)
LAYER_RELATION_PROBABILITY: tuple[float, float] = (0.1, 0.6)

NODE_FEATURES: tuple[str, ...] = (
    "past_cone_fraction",  # |past of x| / N
    "future_cone_fraction",  # |future of x| / N
    "in_link_fraction",  # number of links into x (its immediate past) / N
    "out_link_fraction",  # number of links out of x (its immediate future) / N
    "longest_past_chain",  # relations in the longest chain ending at x / N
    "longest_future_chain",  # relations in the longest chain starting at x / N
    "past_interval_1_fraction",  # y before x with exactly 1 element between them / N
    "future_interval_1_fraction",  # y after x with exactly 1 element between them / N
    "past_interval_2_fraction",  # y before x with exactly 2 elements between them / N
    "future_interval_2_fraction",  # y after x with exactly 2 elements between them / N
)
NODE_INTERVAL_SIZES: tuple[int, ...] = (1, 2)  # the interval sizes of the per-element counts above
INVARIANT_NAMES: tuple[str, ...] = (
    "ordering_fraction",  # relations / (N choose 2)
    "myrheim_meyer_dimension",  # dimension whose sprinklings have that ordering fraction
    "height_fraction",  # elements in the longest chain / N
    "links_per_element",  # links N0 / N
    "num_elements",  # N
    "interval_1_per_link",  # N1 / N0: N_k = related pairs with exactly k elements between them
    "interval_2_per_link",  # N2 / N0
    "interval_3_per_link",  # N3 / N0
    "interval_4_per_link",  # N4 / N0
    "chains_3_per_relation",  # 3-element chains x < z < y per relation
    "bd_action_2d_per_element",  # Benincasa-Dowker action in 2d / N (see benincasa_dowker_action)
    "bd_action_4d_per_element",  # Benincasa-Dowker action in 4d / N
    "minimal_fraction",  # elements with an empty past / N
    "maximal_fraction",  # elements with an empty future / N
    "largest_cone_fraction",  # max over x of |past of x| + |future of x|, / N
)
# The first five: the invariants of the simple baseline (what a physicist looks at first).
SIMPLE_INVARIANT_NAMES: tuple[str, ...] = INVARIANT_NAMES[:5]
MAX_INTERVAL_SIZE = 4  # N_0 .. N_4 are computed

_SET_CHUNK = 128  # sets processed together: bounds memory at N = 128 to a few tens of MB
# Sets per generation block. Each block has a random stream of its own (seeded by the data seed and the
# block's number), so the data do not depend on how blocks are shared out over processes; changing this
# changes the data (the cache key holds it).
# 128 = _SET_CHUNK: a block is at most one batch per run of equal sets, and 2,000 sets make 16 blocks.
GENERATION_BLOCK_SIZE = 128


@dataclass(frozen=True)
class CausalSetRecord:
    """One generated causal set with its derived data and labels."""

    causal_matrix: np.ndarray  # bool N x N, strictly upper triangular
    link_matrix: np.ndarray  # bool N x N, the transitive reduction (Hasse diagram)
    features: np.ndarray  # float32 N x len(NODE_FEATURES)
    invariants: np.ndarray  # float32 len(INVARIANT_NAMES)
    cset_type: str
    manifold_like: bool
    dimension: int  # spacetime dimension of a sprinkling, -1 where not defined
    flip_fraction: float = 0.0  # probability with which each pair was flipped (destroyed sets; 0 otherwise)

    @property
    def num_elements(self) -> int:
        return self.causal_matrix.shape[0]


# --------------------------------------------------------------------------- helpers
def _as_batch(matrix: np.ndarray) -> tuple[np.ndarray, bool]:
    """A (B, N, N) view of a square matrix or batch, and whether the input was a single one."""
    matrix = np.asarray(matrix)
    if matrix.ndim not in (2, 3) or matrix.shape[-1] != matrix.shape[-2]:
        raise ValueError(f"R: expected a square N x N matrix or a B x N x N batch, got shape {matrix.shape}")
    return (matrix[None], True) if matrix.ndim == 2 else (matrix, False)


def _check_dimension(dim: int) -> None:
    if dim not in SPRINKLING_DIMENSIONS:
        raise ValueError(f"dim: expected one of {SPRINKLING_DIMENSIONS}, got {dim!r}")


# --------------------------------------------------------------------------- sprinkling
def _diamond_points(batch: int, n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    """Exact uniform samples of the diamond |x| <= 1 - |t| in d-dim Minkowski space.

    The slice at time t is a (d-1)-ball of radius s = 1 - |t|, so s has density
    proportional to s^(d-1) (s = U^(1/d)); the spatial point is uniform in that ball.
    """
    radius = rng.random((batch, n)) ** (1.0 / dim)
    t = (1.0 - radius) * rng.choice([-1.0, 1.0], size=(batch, n))
    direction = rng.standard_normal((batch, n, dim - 1))
    direction /= np.linalg.norm(direction, axis=-1, keepdims=True)
    r_space = radius * rng.random((batch, n)) ** (1.0 / (dim - 1))
    return np.concatenate([t[..., None], direction * r_space[..., None]], axis=-1)


def causal_matrix_from_coordinates(coords: np.ndarray) -> np.ndarray:
    """Light-cone order of time-sorted points (..., N, d): i precedes j iff j is in i's future cone."""
    t, x = coords[..., 0], coords[..., 1:]
    dt = t[..., None, :] - t[..., :, None]  # dt[i, j] = t_j - t_i
    dx2 = np.zeros_like(dt)
    for k in range(x.shape[-1]):
        dx2 += (x[..., None, :, k] - x[..., :, None, k]) ** 2
    return (dt > 0) & (dt * dt > dx2)


def sprinkle_diamond_batch(batch: int, n: int, dim: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``batch`` independent sprinklings of ``n`` points: coordinates (B, n, d) sorted by time, causal matrices."""
    coords = sprinkled_coordinates(batch, n, dim, rng)
    return coords, causal_matrix_from_coordinates(coords)


def sprinkled_coordinates(batch: int, n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    """The coordinates (B, n, d) of ``sprinkle_diamond_batch``, sorted by time: all its random draws."""
    _check_dimension(dim)
    if n < 1 or batch < 1:
        raise ValueError(f"n and batch: expected positive integers, got n={n}, batch={batch}")
    coords = _diamond_points(batch, n, dim, rng)
    order = np.argsort(coords[..., 0], axis=1)
    return np.take_along_axis(coords, order[..., None], axis=1)


def sprinkle_diamond(n: int, dim: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Sprinkle ``n`` points uniformly into the causal diamond between (-1, 0) and (1, 0).

    Returns the coordinates (n x d, time first, sorted by time) and the causal matrix
    (n x n bool) of their light-cone order, which is then in a natural labelling.
    """
    coords, causal = sprinkle_diamond_batch(1, n, dim, rng)
    return coords[0], causal[0]


# --------------------------------------------------------------------------- closure, reduction
@contextmanager
def _one_torch_thread() -> Iterator[None]:
    """Run torch on one thread, then restore: for these small products a second thread only
    adds synchronisation, which costs 10-200x when another process holds a core."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def elements_between(R: np.ndarray) -> np.ndarray:
    """``(R @ R)[i, j]`` for one causal matrix or a batch: the number of elements z with i < z < j,
    i.e. the size of the interval between i and j when they are related. Float32 batched matrix
    products (counts are exact below 2^24, whatever the order of the sums), in torch because numpy's
    BLAS threads cannot be limited. Links, interval abundances and the 3-chain count all come from
    this one product. A strictly upper-triangular ``R`` (a natural labelling, as every generated set
    and every store's set once relabelled) is multiplied tile by tile (``_upper_triangular_square``)."""
    batch, single = _as_batch(R)
    as_float = torch.from_numpy(np.ascontiguousarray(batch, dtype=np.float32))
    with _one_torch_thread():
        if batch.shape[-1] > 2 * _PRODUCT_TILE and not np.tril(batch).any():
            between = _upper_triangular_square(as_float).numpy()
        else:
            between = torch.bmm(as_float, as_float).numpy()
    return between[0] if single else between


# The tile of the triangular product: at N = 2,048 one product took 64 ms with tiles of 256, 74 ms with 128,
# 78 ms with 512 and 211 ms as one full product (one thread, the 2-core development machine, quiet).
_PRODUCT_TILE = 256


def _upper_triangular_square(A: torch.Tensor) -> torch.Tensor:
    """``A @ A`` for a batch of strictly upper-triangular matrices: tile (I, J) of the product, I <= J, only
    needs the tiles K with I <= K <= J (the others are zero), about a sixth of the full product's
    multiply-adds; the tiles below the diagonal stay zero. Exactly equal to ``torch.bmm(A, A)`` for 0/1
    entries (integer sums below 2^24 are exact in float32)."""
    n, tile = A.shape[-1], _PRODUCT_TILE
    product = torch.zeros_like(A)
    for i in range(0, n, tile):
        for j in range(i, n, tile):
            product[:, i:i + tile, j:j + tile] = torch.bmm(A[:, i:i + tile, i:j + tile], A[:, i:j + tile, j:j + tile])
    return product


def _two_step_paths(R: np.ndarray) -> np.ndarray:
    """``R @ R > 0`` for a batch: pairs (i, j) with some k, i R k R j."""
    return elements_between(R) > 0


def transitive_closure(R: np.ndarray) -> np.ndarray:
    """Smallest transitive relation containing R, by repeated squaring (log2 N matrix products)."""
    closed, single = _as_batch(R)
    closed = closed.astype(bool)
    while True:
        grown = closed | _two_step_paths(closed)
        if np.array_equal(grown, closed):
            return grown[0] if single else grown
        closed = grown


def transitive_reduction(R: np.ndarray) -> np.ndarray:
    """Links of a transitively closed order: relations i < j with no element between them."""
    batch, single = _as_batch(R)
    links = batch.astype(bool) & ~_two_step_paths(batch)
    return links[0] if single else links


# --------------------------------------------------------------------------- non-manifold-like orders
def random_layered_orders(batch: int, n: int, rng: np.random.Generator, *,
                          layer_weights: Sequence[float] = LAYER_WEIGHTS,
                          relation_probability: tuple[float, float] = LAYER_RELATION_PROBABILITY) -> np.ndarray:
    """Kleitman-Rothschild-like orders (B, n, n): elements fall into layers with ``layer_weights``,
    each pair in consecutive layers is related with a probability p drawn per set from
    ``relation_probability``, and the result is transitively closed."""
    weights = np.asarray(layer_weights, dtype=float)
    low, high = relation_probability
    if weights.ndim != 1 or len(weights) < 2 or np.any(weights < 0) or not np.isclose(weights.sum(), 1.0):
        raise ValueError(f"layer_weights: expected two or more non-negative weights summing to 1, got {layer_weights}")
    if not 0.0 <= low <= high <= 1.0:
        raise ValueError(f"relation_probability: expected (low, high) with 0 <= low <= high <= 1, "
                         f"got {relation_probability}")
    layer = np.sort(rng.choice(len(weights), size=(batch, n), p=weights), axis=1)  # layer by layer: natural labelling
    p = rng.uniform(low, high, size=(batch, 1, 1))
    return _layered_relations(layer, p, rng)


def _layered_relations(layer: np.ndarray, p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The closed orders of ``random_layered_orders`` from the layers (B, n) and probabilities (B, 1, 1) drawn
    for them; draws the pairs. Drawing for the sets of a batch in several consecutive parts draws the same
    numbers as at once (a Generator's doubles come in sequence), hence the same orders."""
    batch, n = layer.shape
    consecutive = layer[:, None, :] == layer[:, :, None] + 1
    return transitive_closure(consecutive & (rng.random((batch, n, n)) < p))


def destroy_order(R: np.ndarray, fraction: float | np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Flip each pair i < j of the natural labelling with probability ``fraction``, then close.
    For a batch, ``fraction`` may also hold one probability per set.

    Flipping only pairs with i < j keeps the relation acyclic (strictly upper triangular),
    so the closure is again a partial order; a few random relations already destroy the
    local light-cone structure of a sprinkling.
    """
    probability = np.asarray(fraction, dtype=float)
    if probability.ndim > 1 or np.any((probability < 0) | (probability > 1) | np.isnan(probability)):
        raise ValueError(f"fraction: expected a number in [0, 1] or one per set, got {fraction!r}")
    batch, single = _as_batch(R)
    n = batch.shape[-1]
    upper = np.triu(np.ones((n, n), dtype=bool), k=1)
    flipped = batch.astype(bool) ^ (upper & (rng.random(batch.shape) < probability.reshape(-1, 1, 1)))
    closed = transitive_closure(flipped)
    return closed[0] if single else closed


# --------------------------------------------------------------------------- features, invariants
def _chains_along_links(L: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Longest chains ending at / starting at each element (int32, (B, N)) of a batch of link matrices.

    A longest chain is made of links, so chain[j] = max over links i -> j of chain[i] + 1 (0 for minimal
    elements). Relaxed over all links of the batch at once until nothing changes: height + 1 passes of
    O(links) each, instead of a Python loop over the N elements with O(N) work each."""
    batch, n, _ = L.shape
    set_of, earlier, later = np.nonzero(L)
    earlier, later = set_of * n + earlier, set_of * n + later
    return (_relax_along(earlier, later, batch * n).reshape(batch, n),
            _relax_along(later, earlier, batch * n).reshape(batch, n))


def _relax_along(source: np.ndarray, target: np.ndarray, size: int) -> np.ndarray:
    """Longest path (in edges) ending at each of ``size`` nodes of a DAG given as edges source -> target."""
    length = longest_paths(source, target, size)
    assert length is not None, "a natural labelling has no cycle"
    return length


def longest_paths(source: np.ndarray, target: np.ndarray, size: int) -> np.ndarray | None:
    """Longest path (in edges, int32) ending at each of ``size`` nodes along the edges source -> target, or None
    if the edges have a cycle (no path is longer than size - 1 edges in a DAG, so a longer one means a cycle)."""
    length = np.zeros(size, dtype=np.int32)
    for _ in range(size + 1):
        longer = length.copy()
        np.maximum.at(longer, target, length[source] + 1)
        if np.array_equal(longer, length):
            return length
        length = longer
    return None


def longest_chains(R: np.ndarray, L: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Relations in the longest chain ending at / starting at each element (int32, shape of R[..., 0]).
    ``L``, the links of ``R``, is derived from ``R`` when not given."""
    batch, single = _as_batch(R)
    if np.tril(batch).any():
        raise ValueError("R: expected a strictly upper-triangular causal matrix (elements in a natural labelling)")
    links = transitive_reduction(batch) if L is None else _as_batch(L)[0]
    past, future = _chains_along_links(links)
    return (past[0], future[0]) if single else (past, future)


def _interval_counts(R: np.ndarray, between: np.ndarray, size: int) -> np.ndarray:
    """Boolean mask of the related pairs with exactly ``size`` elements between them."""
    return R & (between == size)


def _node_features(R: np.ndarray, L: np.ndarray, between: np.ndarray, past_chain: np.ndarray,
                   future_chain: np.ndarray) -> np.ndarray:
    n = R.shape[-1]
    columns = [R.sum(axis=-2), R.sum(axis=-1), L.sum(axis=-2), L.sum(axis=-1), past_chain, future_chain]
    for size in NODE_INTERVAL_SIZES:
        pairs = _interval_counts(R, between, size)
        columns += [pairs.sum(axis=-2), pairs.sum(axis=-1)]  # column sums: pairs (y, x) with y before x
    return (np.stack(columns, axis=-1) / n).astype(np.float32)


def _abundances(R: np.ndarray, between: np.ndarray, max_size: int) -> np.ndarray:
    """N_0 .. N_max_size (float64, shape (B, max_size + 1))."""
    return np.stack([_interval_counts(R, between, k).sum(axis=(-2, -1)) for k in range(max_size + 1)],
                    axis=-1).astype(np.float64)


def _bd_actions(n: int, abundances: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 2d and 4d Benincasa-Dowker actions from N and N_0..N_3 (formulas: benincasa_dowker_action)."""
    n0, n1, n2, n3 = (abundances[..., k] for k in range(4))
    return n - 2 * n0 + 4 * n1 - 2 * n2, 4 / math.sqrt(6) * (n - n0 + 9 * n1 - 16 * n2 + 8 * n3)


def _order_invariants(R: np.ndarray, between: np.ndarray, past_chain: np.ndarray) -> np.ndarray:
    n = R.shape[-1]
    relations = R.sum(axis=(-2, -1)).astype(np.float64)
    ordering = relations / (n * (n - 1) / 2)
    abundances = _abundances(R, between, MAX_INTERVAL_SIZE)
    links = abundances[..., 0]  # N_0: the links (equal to L.sum() for the reduction of R)
    action_2d, action_4d = _bd_actions(n, abundances)
    past_size, future_size = R.sum(axis=-2), R.sum(axis=-1)
    columns = [ordering, myrheim_meyer_dimension(ordering), (past_chain.max(axis=-1) + 1) / n,
               links / n, np.full(ordering.shape, n),
               *(abundances[..., k] / np.maximum(links, 1) for k in range(1, MAX_INTERVAL_SIZE + 1)),
               between.sum(axis=(-2, -1)) / np.maximum(relations, 1),
               action_2d / n, action_4d / n,
               (past_size == 0).sum(axis=-1) / n, (future_size == 0).sum(axis=-1) / n,
               (past_size + future_size).max(axis=-1) / n]
    return np.stack(columns, axis=-1).astype(np.float32)


def node_features(R: np.ndarray, L: np.ndarray | None = None) -> np.ndarray:
    """Per-element features (float32 N x F, columns ``NODE_FEATURES``), counts divided by N,
    of a transitively closed ``R`` (a causal matrix; ``transitive_closure`` makes one), for one
    set or a batch. ``L``, its links, is derived from ``R`` when not given.

    Cone sizes measure spacetime volume to the past/future; longest chains measure
    proper time (in d dimensions the longest chain grows like N^(1/d)); links and the small
    intervals (1 or 2 elements between) next to an element are the local structure that the
    Benincasa-Dowker actions count.
    """
    R = np.asarray(R, dtype=bool)
    between = elements_between(R)
    L = R & (between == 0) if L is None else np.asarray(L)
    past, future = longest_chains(R, L)
    return _node_features(R, L, between, past, future)


def order_invariants(R: np.ndarray) -> np.ndarray:
    """Whole-set invariants (float32, columns ``INVARIANT_NAMES``) of a transitively closed
    ``R``, for one set or a batch. One matrix product ``R @ R`` per set (O(N^3)) gives them all."""
    R = np.asarray(R, dtype=bool)
    between = elements_between(R)
    past, _ = longest_chains(R, R & (between == 0))
    return _order_invariants(R, between, past)


def features_and_invariants(R: np.ndarray, between: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``node_features(R)`` and ``order_invariants(R)`` of a transitively closed, naturally labelled ``R``
    together, from one product ``R @ R`` (``between``, computed when not given) and one pass for the longest
    chains."""
    R = np.asarray(R, dtype=bool)
    between = elements_between(R) if between is None else between
    L = R & (between == 0)
    past, future = longest_chains(R, L)
    return _node_features(R, L, between, past, future), _order_invariants(R, between, past)


def natural_order(R: np.ndarray) -> np.ndarray:
    """A permutation listing the elements of the strict order ``R`` (one N x N matrix, any labelling) in a
    natural labelling: the identity if ``R`` is already upper triangular, else by the size of the past
    (i before j implies a smaller past), so that ``R[np.ix_(order, order)]`` is strictly upper triangular."""
    if not np.tril(R).any():
        return np.arange(R.shape[0])
    return np.argsort(R.sum(axis=0), kind="stable")


def interval_abundances(R: np.ndarray, max_size: int = MAX_INTERVAL_SIZE) -> np.ndarray:
    """Interval abundances N_0 .. N_max_size (int64, last axis) of a transitively closed ``R``:
    N_k is the number of related pairs x < y with exactly k elements z, x < z < y, between them
    (N_0 is the number of links). Glaser and Surya, "Towards a definition of locality in a
    manifold-like causal set", Phys. Rev. D 88, 124026 (2013), arXiv:1309.3403, use their
    distribution to tell manifold-like causal sets from others."""
    if not isinstance(max_size, (int, np.integer)) or max_size < 0:
        raise ValueError(f"max_size: expected a non-negative integer, got {max_size!r}")
    R = np.asarray(R, dtype=bool)
    return _abundances(R, elements_between(R), int(max_size)).astype(np.int64)


def benincasa_dowker_action(R: np.ndarray, dim: int) -> float | np.ndarray:
    """The Benincasa-Dowker action (in units of hbar, discreteness length 1) of a causal set:

    * d = 2: S = N - 2 N_0 + 4 N_1 - 2 N_2
    * d = 4: S = (4 / sqrt(6)) (N - N_0 + 9 N_1 - 16 N_2 + 8 N_3)

    with N_k the interval abundances (``interval_abundances``). Source: D. M. T. Benincasa and
    F. Dowker, "The scalar curvature of a causal set", Phys. Rev. Lett. 104, 181301 (2010),
    arXiv:1001.2725; reviewed in S. Surya, Living Rev. Relativ. 22, 5 (2019), arXiv:1903.11544.
    The coefficients of the N_k sum to zero (the causal-set d'Alembertian of a constant vanishes).
    """
    if dim not in (2, 4):
        raise ValueError(f"dim: the Benincasa-Dowker action is implemented for d = 2 and d = 4, got {dim!r}")
    R = np.asarray(R, dtype=bool)
    batch, single = _as_batch(R)
    action_2d, action_4d = _bd_actions(batch.shape[-1], _abundances(batch, elements_between(batch), 3))
    action = action_2d if dim == 2 else action_4d
    return float(action[0]) if single else action


# --------------------------------------------------------------------------- Myrheim-Meyer
def ordering_fraction_of_dimension(d: float | np.ndarray) -> float | np.ndarray:
    """Expected ordering fraction of a sprinkled d-dim causal diamond (Myrheim, Meyer):
    r(d) = Gamma(d+1) Gamma(d/2) / (2 Gamma(3d/2)); r(1) = 1, r(2) = 1/2, r(4) = 1/10.

    (Often written f(d) = Gamma(d+1) Gamma(d/2) / (4 Gamma(3d/2)) = r(d)/2, the fraction of
    *ordered* pairs that are related.)
    """
    log_r = np.vectorize(lambda x: math.lgamma(x + 1) + math.lgamma(x / 2) - math.lgamma(1.5 * x))(d)
    r = np.exp(log_r) / 2
    return float(r) if np.ndim(r) == 0 else r


@lru_cache(maxsize=1)
def _dimension_table() -> tuple[np.ndarray, np.ndarray]:
    """r(d) on a fine grid of [1, 10], as (log r ascending, d descending) for interpolation."""
    d = np.linspace(1.0, 10.0, 9001)
    return np.log(ordering_fraction_of_dimension(d))[::-1], d[::-1]


def myrheim_meyer_dimension(ordering_fraction: float | np.ndarray) -> float | np.ndarray:
    """Myrheim-Meyer dimension estimate: the d in [1, 10] with r(d) = ordering fraction.

    r(d) is strictly decreasing, so the inverse is read off a fine table by monotone
    interpolation in log r (error below 1e-5). Fractions above r(1) = 1 cannot occur;
    fractions below r(10) give 10, an antichain (r = 0) too.
    """
    r = np.asarray(ordering_fraction, dtype=float)
    if np.any((r < 0) | (r > 1) | np.isnan(r)):
        raise ValueError(f"ordering_fraction: expected values in [0, 1], got {ordering_fraction!r}")
    log_r, d = _dimension_table()
    with np.errstate(divide="ignore"):
        estimate = np.interp(np.log(r), log_r, d)
    return float(estimate) if estimate.ndim == 0 else estimate


# --------------------------------------------------------------------------- generation
def _fraction_range(destroy_fraction: float | Sequence[float]) -> tuple[float, float]:
    """(low, high) of a flip fraction given as one number or as a [low, high] range."""
    if isinstance(destroy_fraction, (int, float, np.integer, np.floating)):
        return float(destroy_fraction), float(destroy_fraction)
    values = list(destroy_fraction) if isinstance(destroy_fraction, (list, tuple)) else []
    if len(values) != 2 or not all(isinstance(v, (int, float, np.integer, np.floating)) for v in values):
        raise ValueError(f"destroy_fraction: expected a number in (0, 1] or a range [low, high], "
                         f"got {destroy_fraction!r}")
    return float(values[0]), float(values[1])


def check_generation_args(num: int, n_min: int, n_max: int, dimensions: Sequence[int],
                          classes: Sequence[str], destroy_fraction: float | Sequence[float]) -> None:
    """Raise ValueError naming the first bad argument of ``generate_causal_sets``."""
    if not isinstance(num, (int, np.integer)) or num < 1:
        raise ValueError(f"num: expected a positive integer, got {num!r}")
    if not all(isinstance(v, (int, np.integer)) for v in (n_min, n_max)) or not 2 <= n_min <= n_max:
        raise ValueError(f"n_min, n_max: expected 2 <= n_min <= n_max, got n_min={n_min!r}, n_max={n_max!r}")
    if not dimensions or any(d not in SPRINKLING_DIMENSIONS for d in dimensions):
        raise ValueError(f"dimensions: expected a non-empty list from {SPRINKLING_DIMENSIONS}, got {dimensions!r}")
    unknown = [c for c in classes if c not in CSET_TYPES]
    if not classes or unknown or len(set(classes)) != len(classes):
        raise ValueError(f"classes: expected distinct names from {CSET_TYPES}, got {classes!r}")
    missing = [c for c in classes if c in MANIFOLD_CLASSES and MANIFOLD_CLASSES[c] not in dimensions]
    if missing:
        raise ValueError(f"classes: {missing} need their dimension in dimensions={list(dimensions)}; "
                         f"remove them from classes or add their dimension to dimensions")
    low, high = _fraction_range(destroy_fraction)
    if not 0.0 < low <= high <= 1.0:
        raise ValueError(f"destroy_fraction: expected a number in (0, 1] or a range [low, high] with "
                         f"0 < low <= high <= 1, got {destroy_fraction!r}")


def _draw_flip_fractions(batch: int, destroy_fraction: float | Sequence[float],
                         rng: np.random.Generator) -> np.ndarray:
    """One flip fraction per set: the given number, or log-uniform in the range [low, high]
    (so that 0.1% to 10% get equally many sets per decade). A single number draws nothing:
    the sets of a fixed fraction stay the same as before ranges existed."""
    low, high = _fraction_range(destroy_fraction)
    if low == high:
        return np.full(batch, low)
    return np.exp(rng.uniform(math.log(low), math.log(high), size=batch))


# Memory of the generator's work per pair of elements of a set (coordinate differences in float64, the
# causal, flip and link masks, the product in float32, ...), about 40 bytes measured with ru_maxrss at
# N = 1,024; a run of equal sets is worked on in parts that fit _WORK_BYTES. The parts draw the same numbers
# as one batch would (``_generate_batch``), so the sets do not depend on it.
_WORK_BYTES_PER_PAIR = 40
_WORK_BYTES = 1 << 30


def _sets_per_part(n: int) -> int:
    return max(1, _WORK_BYTES // (_WORK_BYTES_PER_PAIR * n * n))


def _generate_batch(cset_type: str, batch: int, n: int, source_dim: int,
                    destroy_fraction: float | Sequence[float], rng: np.random.Generator) -> list[CausalSetRecord]:
    """``batch`` sets of one class and size, with links, features and invariants (one product R @ R,
    longest chains once). The small draws (coordinates, layers, flip fractions) are made for the whole batch
    first, then the sets are made in parts of ``_sets_per_part(n)``, each part drawing its pairs in turn:
    the same numbers, in the same order, as one batch, in bounded memory at N in the thousands."""
    flip_fractions = np.zeros(batch)
    if cset_type == "layered":
        weights = np.asarray(LAYER_WEIGHTS)
        layer = np.sort(rng.choice(len(weights), size=(batch, n), p=weights), axis=1)
        p = rng.uniform(*LAYER_RELATION_PROBABILITY, size=(batch, 1, 1))
    else:
        coords = sprinkled_coordinates(batch, n, MANIFOLD_CLASSES.get(cset_type, source_dim), rng)
        if cset_type == "destroyed":
            flip_fractions = _draw_flip_fractions(batch, destroy_fraction, rng)
    records: list[CausalSetRecord] = []
    for start in range(0, batch, _sets_per_part(n)):
        part = slice(start, min(batch, start + _sets_per_part(n)))
        if cset_type == "layered":
            R = _layered_relations(layer[part], p[part], rng)
        else:
            R = causal_matrix_from_coordinates(coords[part])
            if cset_type == "destroyed":
                R = destroy_order(R, flip_fractions[part], rng)
        records += _records(R, cset_type, flip_fractions[part])
    return records


def _records(R: np.ndarray, cset_type: str, flip_fractions: np.ndarray) -> list[CausalSetRecord]:
    """The records of a batch of causal matrices of one class: links, features, invariants."""
    between = elements_between(R)
    L = R & (between == 0)
    past, future = longest_chains(R, L)
    features, invariants = _node_features(R, L, between, past, future), _order_invariants(R, between, past)
    return [CausalSetRecord(R[k], L[k], features[k], invariants[k], cset_type,
                            manifold_like=cset_type in MANIFOLD_CLASSES, dimension=MANIFOLD_CLASSES.get(cset_type, -1),
                            flip_fraction=float(flip_fractions[k]))
            for k in range(len(R))]


def draw_plan(num: int, n_min: int, n_max: int, dimensions: Sequence[int], classes: Sequence[str],
              seed: int) -> np.ndarray:
    """One row per set: class index (balanced, shuffled), size N, and the dimension a destroyed
    set is sprinkled in (0 for the other classes). Drawn from ``seed`` alone; cheap, so every
    process that generates a block draws it again instead of receiving it."""
    rng = np.random.default_rng(seed)
    class_of = rng.permutation(np.arange(num) % len(classes))
    size_of = rng.integers(n_min, n_max + 1, size=num)
    source_dim_of = rng.choice(np.asarray(dimensions), size=num)
    source_dim_of[np.asarray(classes)[class_of] != "destroyed"] = 0
    return np.stack([class_of, size_of, source_dim_of], axis=1)


def num_blocks(num: int, block_size: int = GENERATION_BLOCK_SIZE) -> int:
    return -(-num // block_size)


def plan_order(plan: np.ndarray) -> np.ndarray:
    """The plan's set indices ordered by (class, N, source dimension, index): cut into blocks, this
    gives blocks of long runs of equal sets, each generated as one vectorised batch, however the sets'
    sizes are spread."""
    return np.lexsort((np.arange(len(plan)), plan[:, 2], plan[:, 1], plan[:, 0]))


def generate_block(plan: np.ndarray, order: np.ndarray, block: int, *, classes: Sequence[str],
                   destroy_fraction: float | Sequence[float], seed: int,
                   block_size: int = GENERATION_BLOCK_SIZE) -> tuple[np.ndarray, list[CausalSetRecord]]:
    """The sets of one block (``order``, from ``plan_order``, cut into blocks of ``block_size``) and their
    indices. The block draws from its own stream, seeded by (seed, block), so a block is the same whichever
    process makes it and in whatever order."""
    members = order[block * block_size:(block + 1) * block_size]
    rng = np.random.default_rng(np.random.SeedSequence([seed, block]))
    records: list[CausalSetRecord] = []
    rows = plan[members]
    run_starts = np.flatnonzero(np.r_[True, (rows[1:] != rows[:-1]).any(axis=1)])
    for start, stop in zip(run_starts, np.r_[run_starts[1:], len(rows)]):
        class_index, n, source_dim = (int(v) for v in rows[start])
        for chunk_start in range(start, stop, _SET_CHUNK):
            size = min(_SET_CHUNK, stop - chunk_start)
            records += _generate_batch(classes[class_index], size, n, source_dim, destroy_fraction, rng)
    return members, records


def generate_causal_sets(num: int, *, n_min: int = DEFAULT_N_MIN, n_max: int = DEFAULT_N_MAX,
                         dimensions: Sequence[int] = DEFAULT_DIMENSIONS,
                         classes: Sequence[str] = DEFAULT_CLASSES,
                         destroy_fraction: float | Sequence[float] = DEFAULT_DESTROY_FRACTION,
                         seed: int = 0) -> list[CausalSetRecord]:
    """``num`` labelled causal sets, classes balanced (to within one) and in random order.

    Each set's size N is uniform in [n_min, n_max]. ``dimensions`` are the spacetime
    dimensions in play: ``destroyed`` sets start from a sprinkling in one of them (drawn
    per set), and every ``minkowski_{d}d`` class needs its d among them. ``destroy_fraction`` is the
    probability with which each pair of a destroyed set is flipped, or a range [low, high] from which it
    is drawn per set, log-uniformly (``CausalSetRecord.flip_fraction`` keeps it). The output is a
    function of the arguments only: same arguments, identical sets. The plan (class, N, source dimension
    of every set) comes from ``seed``; the sets themselves are made block by block (``generate_block``),
    each block from its own stream, so processes that share out the blocks make the same sets.
    """
    check_generation_args(num, n_min, n_max, dimensions, classes, destroy_fraction)
    plan = draw_plan(num, n_min, n_max, dimensions, classes, seed)
    order = plan_order(plan)
    records: list[CausalSetRecord | None] = [None] * num
    for block in range(num_blocks(num)):
        members, batch = generate_block(plan, order, block, classes=classes, destroy_fraction=destroy_fraction,
                                        seed=seed)
        for index, record in zip(members, batch):
            records[index] = record
    return records
