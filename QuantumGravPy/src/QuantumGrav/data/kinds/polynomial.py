"""``polynomial`` (manifold-like): a sprinkling of a random, curved, conformally flat 2D region. The light cones
are Minkowski's; the curvature only changes the density of the points (QuantumGrav.jl's cset_factories.jl)."""

from __future__ import annotations

import numpy as np

from .common import KindSample, conformal_coefficients, minkowski_relation, sprinkle


def polynomial_points(rng: np.random.Generator, n: int, truncated: bool = False) -> tuple[np.ndarray, dict]:
    """The time-sorted sprinkled points of a random conformal factor, and its order and decay."""
    coefficients, order, decay = conformal_coefficients(rng, truncated=truncated)
    return sprinkle(rng, n, coefficients), {"conformal_order": order, "conformal_decay": decay}


def generate_polynomial(n: int, rng: np.random.Generator) -> KindSample:
    """A ``polynomial`` set of ``n`` elements; its params are the conformal factor's order and decay."""
    points, params = polynomial_points(rng, n)
    return KindSample("polynomial", minkowski_relation(points), True, params)
