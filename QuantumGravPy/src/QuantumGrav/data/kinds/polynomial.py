"""``polynomial`` (manifold-like): a sprinkling of a random, curved, conformally flat region of d-dimensional
spacetime (d = 2 as QuantumGrav.jl's factory draws it; 3 and 4 as its ``make_polynomial_manifold_cset(...; d)``).
The light cones are Minkowski's; the curvature only changes the density of the points (QuantumGrav.jl's
cset_factories.jl and csetgeneration.jl)."""

from __future__ import annotations

import numpy as np

from ..sprinkling import ConformalBox, check_dimension, light_cone_relation, sprinkle
from .common import KindSample, conformal_coefficients


def polynomial_points(rng: np.random.Generator, n: int, truncated: bool = False,
                      dimension: int = 2) -> tuple[np.ndarray, dict]:
    """The time-sorted sprinkled points of a random conformal factor in ``dimension`` dimensions, and its order
    and decay."""
    check_dimension(dimension)
    coefficients, order, decay = conformal_coefficients(rng, truncated=truncated, dimension=dimension)
    return sprinkle(rng, n, ConformalBox(coefficients)), {"conformal_order": order, "conformal_decay": decay}


def generate_polynomial(n: int, rng: np.random.Generator, dimension: int = 2) -> KindSample:
    """A ``polynomial`` set of ``n`` elements in ``dimension`` dimensions; its params are the conformal factor's
    order and decay and the dimension."""
    points, params = polynomial_points(rng, n, dimension=dimension)
    return KindSample("polynomial", light_cone_relation(points), True, {**params, "dimension": dimension})
