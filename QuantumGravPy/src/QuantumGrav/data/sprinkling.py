"""Sprinkling, the library's one sprinkler: points drawn independently from a region of d-dimensional spacetime
(d = 2, 3, 4) with the region's volume measure, sorted by time (``sprinkle``), and their order by the flat light cone
(``light_cone_relation``). Every sprinkled set of the built-in generator and of QuantumGrav.jl's kinds is made here.

Two regions:

* ``CausalDiamond(d)``: the diamond |x| <= 1 - |t| of Minkowski space, uniform (the built-in generator's
  ``minkowski_{d}d`` and ``destroyed`` sets), drawn exactly: the slice at time t is a (d-1)-ball of radius
  s = 1 - |t|, so s has density proportional to s^(d-1) (s = U^(1/d)), and the spatial point is uniform in that ball.
* ``ConformalBox(c)``: the box [-1, 1]^d with density f^2 of the Chebyshev series f of the rank-d coefficients c
  (QuantumGrav.jl's conformally flat regions, ``data.kinds``), by rejection against the bound (sum |c|)^2, which holds
  because |T_k| <= 1. The conformal factor keeps Minkowski's light cones in any dimension.

The coordinates are (t, x_1, .., x_{d-1}), time first. Sorted by time, the points are in a natural labelling: the
causal matrix ``relation[i, j]`` (i precedes j) is strictly upper triangular and transitive.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.polynomial import chebyshev

DIMENSIONS = (2, 3, 4)


def check_dimension(dimension: int) -> None:
    if isinstance(dimension, bool) or dimension not in DIMENSIONS:
        raise ValueError(f"dimension: expected one of {', '.join(map(str, DIMENSIONS))}, got {dimension!r}")


@dataclass(frozen=True)
class CausalDiamond:
    """The causal diamond between (-1, 0) and (1, 0) of ``dimension``-dimensional Minkowski space, uniform."""

    dimension: int

    def __post_init__(self) -> None:
        check_dimension(self.dimension)

    def draw(self, rng: np.random.Generator, batch: int, n: int) -> np.ndarray:
        """(batch, n, d) points, unsorted; the draws are made for the whole batch at once, each quantity in turn."""
        dim = self.dimension
        radius = rng.random((batch, n)) ** (1.0 / dim)
        t = (1.0 - radius) * rng.choice([-1.0, 1.0], size=(batch, n))
        direction = rng.standard_normal((batch, n, dim - 1))
        direction /= np.linalg.norm(direction, axis=-1, keepdims=True)
        r_space = radius * rng.random((batch, n)) ** (1.0 / (dim - 1))
        return np.concatenate([t[..., None], direction * r_space[..., None]], axis=-1)


@dataclass(frozen=True, eq=False)
class ConformalBox:
    """The box [-1, 1]^d with density f^2, f the Chebyshev series of the rank-d ``coefficients``."""

    coefficients: np.ndarray
    proposals: int = 4096  # uniform points proposed at a time

    def __post_init__(self) -> None:
        check_dimension(self.coefficients.ndim)

    def draw(self, rng: np.random.Generator, batch: int, n: int) -> np.ndarray:
        """(batch, n, d) points, unsorted: each set by its own rejection loop, in turn."""
        return np.stack([self._draw_one(rng, n) for _ in range(batch)])

    def _draw_one(self, rng: np.random.Generator, n: int) -> np.ndarray:
        bound = float(np.abs(self.coefficients).sum()) ** 2
        kept: list[np.ndarray] = []
        found = 0
        while found < n:
            points = rng.uniform(-1.0, 1.0, size=(self.proposals, self.coefficients.ndim))
            density = conformal_factor(points, self.coefficients) ** 2
            accepted = points[rng.uniform(0.0, bound, size=self.proposals) < density]
            kept.append(accepted)
            found += len(accepted)
        return np.concatenate(kept)[:n]


def sprinkle(rng: np.random.Generator, n: int, region: CausalDiamond | ConformalBox,
             batch: int | None = None) -> np.ndarray:
    """``n`` points sprinkled into ``region`` (d-dimensional), sorted by time: (n, d), or (batch, n, d) for
    ``batch`` independent sets (drawn as the region draws a batch)."""
    if n < 1 or (batch is not None and batch < 1):
        raise ValueError(f"n and batch: expected positive integers, got n={n}, batch={batch}")
    points = region.draw(rng, batch or 1, n)
    order = np.argsort(points[..., 0], axis=-1, kind="stable")
    points = np.take_along_axis(points, order[..., None], axis=-2)
    return points if batch is not None else points[0]


def light_cone_relation(points: np.ndarray) -> np.ndarray:
    """The causal matrix of time-sorted ``points`` (n, d), or of a batch (B, n, d): i precedes j iff i < j and
    t_j - t_i >= |x_j - x_i| (Minkowski's light cone, which a conformal factor keeps). The spatial distance is summed
    one coordinate at a time, so that only n x n arrays are held (N = 2,048 in 4D)."""
    dt = points[..., None, :, 0] - points[..., :, None, 0]  # dt[i, j] = t_j - t_i
    if points.shape[-1] == 2:
        distance = np.abs(points[..., None, :, 1] - points[..., :, None, 1])
    else:
        squared = np.zeros_like(dt)
        for k in range(1, points.shape[-1]):
            squared += (points[..., None, :, k] - points[..., :, None, k]) ** 2
        distance = np.sqrt(squared)
    return np.triu(dt >= distance, k=1)


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
