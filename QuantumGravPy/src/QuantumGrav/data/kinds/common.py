"""What QuantumGrav.jl's generators share (its source, main 69d44eb: csetgeneration.jl, cset_factories.jl):
a sample's record, the random polynomial conformal factor, sprinkling with its density, the flat light cone,
and the random pair draw of destroyed and random orders.

Generators work in conformal coordinates (t, x_1, .., x_{d-1}) on the box [-1, 1]^d: every kind is 2-dimensional
as QuantumGrav.jl's factory draws it, and ``polynomial`` and the kinds built on it take d = 3 and 4 as its
``make_polynomial_manifold_cset(...; d)`` does (upstream pull request #110): a rank-d tensor of Chebyshev
coefficients, the density its square, the box boundary and Minkowski's light cones. Every generator labels its
elements by time: ``relation[i, j]`` is True iff i precedes j, only for i < j (strictly upper triangular), and the
relation is transitive (the full order, not its links).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.polynomial import chebyshev

# QuantumGrav.jl's default element count per set: DiscreteUniform(64, 128), inclusive (createdata_default.yaml).
DEFAULT_N_RANGE = (64, 128)
# The conformal factor's order o ~ DiscreteUniform(5, 15) and decay r ~ Uniform(2, 8) (the `polynomial` anchor).
ORDER_RANGE = (5, 15)
DECAY_RANGE = (2.0, 8.0)
# The spacetime dimensions of the kinds that take one (polynomial, destroyed, merged and their ambiguous ends).
DIMENSIONS = (2, 3, 4)


class SetRefused(RuntimeError):
    """A generator's draw that cannot make a set (a random order's search that never reaches its goal); as
    QuantumGrav.jl's factory does, the caller draws again (``catalogue.generate_kind``)."""


@dataclass
class KindSample:
    """One generated causal set of a QuantumGrav.jl kind.

    Attributes:
        kind: the kind's QuantumGrav.jl name (``polynomial``, ``merged_ambiguous``, ...).
        relation: (n, n) bool, strictly upper triangular and transitive: ``relation[i, j]`` iff i precedes j.
        manifold_like: QuantumGrav.jl's label (polynomial and complex_topology are manifold-like).
        params: the drawn parameters that make the set what it is (and how hard it is to recognise).
        node_labels: a per-element label where the kind has one (merged: inside the inserted block).
        relation_labels: (n, n) bool where the kind has one (destroyed: the relations its closed order has and its
            sprinkling lacks, or lacks and its sprinkling has; ``relation ^ relation_labels`` is the sprinkling).
    """

    kind: str
    relation: np.ndarray
    manifold_like: bool
    params: dict[str, Any] = field(default_factory=dict)
    node_labels: np.ndarray | None = None
    relation_labels: np.ndarray | None = None

    @property
    def n(self) -> int:
        return int(self.relation.shape[0])


def draw_n(rng: np.random.Generator, n_range: tuple[int, int] = DEFAULT_N_RANGE) -> int:
    """An element count as QuantumGrav.jl draws it: uniform on the inclusive range."""
    return int(rng.integers(n_range[0], n_range[1] + 1))


def check_dimension(dimension: int) -> None:
    if isinstance(dimension, bool) or dimension not in DIMENSIONS:
        raise ValueError(f"dimension: expected one of {', '.join(map(str, DIMENSIONS))}, got {dimension!r}")


def conformal_coefficients(rng: np.random.Generator, truncated: bool = False,
                           order_range: tuple[int, int] = ORDER_RANGE,
                           decay_range: tuple[float, float] = DECAY_RANGE,
                           dimension: int = 2) -> tuple[np.ndarray, int, float]:
    """Chebyshev coefficients of a random conformal factor f of ``dimension`` variables (building block A), with
    its order o and decay r: the rank-d tensor c[a_1, .., a_d] = r^-(a_1 + .. + a_d + d) z (z iid standard normal,
    degrees a_k = 0..o; QuantumGrav.jl's 1-based r^-sum(I)). ``truncated`` (complex_topology, grid): the
    coefficients of degree o in any variable are zero."""
    order = int(rng.integers(order_range[0], order_range[1] + 1))
    decay = float(rng.uniform(*decay_range))
    shape = (order + 1,) * dimension
    exponents = np.indices(shape).sum(axis=0) + float(dimension)
    coefficients = decay ** -exponents * rng.standard_normal(shape)
    if truncated:
        for axis in range(dimension):
            np.moveaxis(coefficients, axis, 0)[order] = 0.0
    return coefficients, order, decay


def conformal_factor(points: np.ndarray, coefficients: np.ndarray) -> np.ndarray:
    """f at each of ``points`` (m, d): the Chebyshev series of the rank-d ``coefficients``. In d > 2 the sum over
    o^d terms is one matrix product: the basis of the first half of the coordinates against that of the rest."""
    if coefficients.ndim == 2:  # numpy's own 2D evaluation, so that the stored 2D draws stay what they were
        return chebyshev.chebval2d(points[:, 0], points[:, 1], coefficients)
    split = coefficients.ndim // 2
    left, right = (chebyshev_basis(points[:, axes], coefficients.shape[0] - 1)
                   for axes in (slice(0, split), slice(split, None)))
    return np.einsum("mi,ij,mj->m", left, coefficients.reshape(left.shape[1], right.shape[1]), right, optimize=True)


def chebyshev_basis(coordinates: np.ndarray, order: int) -> np.ndarray:
    """(m, (order + 1)^k): every product T_a1(x_1) .. T_ak(x_k) at each row of ``coordinates`` (m, k), the
    first coordinate's degree varying slowest (as a C-order reshape of the coefficients)."""
    basis = np.ones((len(coordinates), 1))
    for column in coordinates.T:
        basis = (basis[:, :, None] * chebyshev.chebvander(column, order)[:, None, :]).reshape(len(coordinates), -1)
    return basis


def sprinkle(rng: np.random.Generator, n: int, coefficients: np.ndarray, batch: int = 4096) -> np.ndarray:
    """Exactly ``n`` points (t, x_1, ..) on [-1, 1]^d (d: the coefficients' rank), iid with density proportional
    to f^2 (building block B), sorted by time: rejection sampling against the bound (sum |c|)^2, which holds
    because |T_k| <= 1."""
    bound = float(np.abs(coefficients).sum()) ** 2
    kept: list[np.ndarray] = []
    found = 0
    while found < n:
        points = rng.uniform(-1.0, 1.0, size=(batch, coefficients.ndim))
        density = conformal_factor(points, coefficients) ** 2
        accepted = points[rng.uniform(0.0, bound, size=batch) < density]
        kept.append(accepted)
        found += len(accepted)
    points = np.concatenate(kept)[:n]
    return points[np.argsort(points[:, 0], kind="stable")]


def minkowski_relation(points: np.ndarray) -> np.ndarray:
    """i precedes j iff t_j - t_i >= |x_j - x_i| (the flat light cone, which a conformal factor keeps in any
    dimension), for the time-sorted ``points`` (n, d): strictly upper triangular and transitive."""
    dt = points[None, :, 0] - points[:, None, 0]
    if points.shape[1] == 2:  # |ds| itself, so that the stored 2D draws stay what they were
        distance = np.abs(points[None, :, 1] - points[:, None, 1])
    else:  # summed one coordinate at a time: n x n arrays only (N = 2,048 in 4D), the same sums in the same order
        squared = np.zeros_like(dt)
        for column in points[:, 1:].T:
            squared += (column[None, :] - column[:, None]) ** 2
        distance = np.sqrt(squared)
    return np.triu(dt >= distance, k=1)


def random_pairs(rng: np.random.Generator, n: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` pairs i < j drawn as QuantumGrav.jl draws them (building block C): i uniform on 0..n-2, then j
    uniform on i+1..n-1, so late pairs are favoured (P(i, j) = 1 / ((n-1)(n-1-i)))."""
    first = rng.integers(0, n - 1, size=count)
    second = first + 1 + (rng.random(count) * (n - 1 - first)).astype(np.int64)
    return first, np.minimum(second, n - 1)
