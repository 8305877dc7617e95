"""What QuantumGrav.jl's generators share (its source, main 69d44eb: csetgeneration.jl, cset_factories.jl):
a sample's record, the random polynomial conformal factor, sprinkling with its density, the flat light cone,
and the random pair draw of destroyed and random orders.

Every generator is 2-dimensional in conformal coordinates (t, s) on the box [-1, 1]^2, and labels its elements
by time: ``relation[i, j]`` is True iff i precedes j, only for i < j (strictly upper triangular), and the
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
    """

    kind: str
    relation: np.ndarray
    manifold_like: bool
    params: dict[str, Any] = field(default_factory=dict)
    node_labels: np.ndarray | None = None

    @property
    def n(self) -> int:
        return int(self.relation.shape[0])


def draw_n(rng: np.random.Generator, n_range: tuple[int, int] = DEFAULT_N_RANGE) -> int:
    """An element count as QuantumGrav.jl draws it: uniform on the inclusive range."""
    return int(rng.integers(n_range[0], n_range[1] + 1))


def conformal_coefficients(rng: np.random.Generator, truncated: bool = False,
                           order_range: tuple[int, int] = ORDER_RANGE,
                           decay_range: tuple[float, float] = DECAY_RANGE) -> tuple[np.ndarray, int, float]:
    """Chebyshev coefficients c[a, b] = r^-(a+b+2) z_ab of a random conformal factor f(t, s) (building block A),
    with its order o and decay r. ``truncated`` (complex_topology, grid): row and column o are zero."""
    order = int(rng.integers(order_range[0], order_range[1] + 1))
    decay = float(rng.uniform(*decay_range))
    degrees = np.arange(order + 1)
    coefficients = decay ** -(degrees[:, None] + degrees[None, :] + 2.0) * rng.standard_normal((order + 1, order + 1))
    if truncated:
        coefficients[order, :] = 0.0
        coefficients[:, order] = 0.0
    return coefficients, order, decay


def sprinkle(rng: np.random.Generator, n: int, coefficients: np.ndarray, batch: int = 4096) -> np.ndarray:
    """Exactly ``n`` points (t, s) on [-1, 1]^2, iid with density proportional to f^2 (building block B), sorted
    by time: rejection sampling against the bound (sum |c|)^2, which holds because |T_k| <= 1."""
    bound = float(np.abs(coefficients).sum()) ** 2
    kept: list[np.ndarray] = []
    found = 0
    while found < n:
        points = rng.uniform(-1.0, 1.0, size=(batch, 2))
        density = chebyshev.chebval2d(points[:, 0], points[:, 1], coefficients) ** 2
        accepted = points[rng.uniform(0.0, bound, size=batch) < density]
        kept.append(accepted)
        found += len(accepted)
    points = np.concatenate(kept)[:n]
    return points[np.argsort(points[:, 0], kind="stable")]


def minkowski_relation(points: np.ndarray) -> np.ndarray:
    """i precedes j iff t_j - t_i >= |s_j - s_i| (the flat light cone, which a 2D conformal factor keeps), for the
    time-sorted ``points``: strictly upper triangular and transitive."""
    dt = points[None, :, 0] - points[:, None, 0]
    ds = np.abs(points[None, :, 1] - points[:, None, 1])
    return np.triu(dt >= ds, k=1)


def random_pairs(rng: np.random.Generator, n: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` pairs i < j drawn as QuantumGrav.jl draws them (building block C): i uniform on 0..n-2, then j
    uniform on i+1..n-1, so late pairs are favoured (P(i, j) = 1 / ((n-1)(n-1-i)))."""
    first = rng.integers(0, n - 1, size=count)
    second = first + 1 + (rng.random(count) * (n - 1 - first)).astype(np.int64)
    return first, np.minimum(second, n - 1)
