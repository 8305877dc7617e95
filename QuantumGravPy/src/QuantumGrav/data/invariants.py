"""What is measured on a causal set: per-element features (``NODE_FEATURES``) and whole-set order invariants
(``INVARIANT_NAMES``), the interval abundances, the Benincasa-Dowker actions and the Myrheim-Meyer
dimension. All from one product ``R @ R`` of a transitively closed causal matrix (``orders``), for one set
or a batch.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from .orders import as_batch, elements_between, longest_chains

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
    batch, single = as_batch(R)
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
