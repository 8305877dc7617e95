"""What QuantumGrav.jl's generators share (its source, main 69d44eb: csetgeneration.jl, cset_factories.jl):
a sample's record, the random polynomial conformal factor (building block A) and the random pair draw of destroyed
and random orders (building block C). Building block B, sprinkling with the factor's density and the flat light cone,
is the library's one sprinkler (``data.sprinkling``: ``ConformalBox``).

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

from ..sprinkling import ConformalBox, light_cone_relation
from .. import sprinkling

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


def sprinkle(rng: np.random.Generator, n: int, coefficients: np.ndarray) -> np.ndarray:
    """``n`` time-sorted points sprinkled into the box with density f^2 of ``coefficients``: the one sprinkler's
    ``ConformalBox`` (kept under this name for notebook 10 and scripts that call it so)."""
    return sprinkling.sprinkle(rng, n, ConformalBox(coefficients))


minkowski_relation = light_cone_relation  # the one light-cone order, under the name notebook 10 and scripts use


def random_pairs(rng: np.random.Generator, n: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` pairs i < j drawn as QuantumGrav.jl draws them (building block C): i uniform on 0..n-2, then j
    uniform on i+1..n-1, so late pairs are favoured (P(i, j) = 1 / ((n-1)(n-1-i)))."""
    first = rng.integers(0, n - 1, size=count)
    second = first + 1 + (rng.random(count) * (n - 1 - first)).astype(np.int64)
    return first, np.minimum(second, n - 1)
