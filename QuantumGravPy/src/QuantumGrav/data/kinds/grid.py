"""``grid`` (not manifold-like): a regular parallelogram patch of one of six 2D Bravais lattices, rotated in the
(t, s) plane and ordered by the flat light cone: flat-space-like, but lattice-regular instead of Poisson
(QuantumGrav.jl's grid_like_causets.jl, cset_factories.jl)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..sprinkling import light_cone_relation
from .common import KindSample

# Upstream's lattice lookup, drawn by DiscreteUniform(1, 6); hexagonal and triangular are the same lattice there.
LATTICES = ("quadratic", "rectangular", "rhombic", "hexagonal", "triangular", "oblique")


@dataclass(frozen=True)
class GridSettings:
    """The draws of a grid; defaults are QuantumGrav.jl's (createdata_default.yaml: lattice uniform over six,
    rotation theta ~ U(0, 180) degrees, oblique angle gamma ~ U(0, 59) degrees (60 for the others), segment ratio
    b ~ U(0.2, 5) except for quadratic (b = 1))."""

    lattices: tuple[str, ...] = LATTICES
    rotation_range: tuple[float, float] = (0.0, 180.0)
    oblique_angle_range: tuple[float, float] = (0.0, 59.0)
    segment_ratio_range: tuple[float, float] = (0.2, 5.0)


def edge_vectors(lattice: str, ratio: float, angle_deg: float) -> np.ndarray:
    """The lattice's edge vectors e1, e2 as rows (t, s), with a = 1 and segment ratio b = ``ratio``; ``angle_deg``
    is the oblique lattice's angle between them."""
    gamma = math.radians(angle_deg)
    vectors = {
        "quadratic": ((1.0, 0.0), (0.0, 1.0)),
        "rectangular": ((1.0, 0.0), (0.0, ratio)),
        "rhombic": ((0.5, ratio / 2), (0.5, -ratio / 2)),
        "hexagonal": ((1.0, 0.0), (0.5, math.sqrt(3.0) / 2)),
        "triangular": ((1.0, 0.0), (0.5, math.sqrt(3.0) / 2)),
        "oblique": ((1.0, 0.0), (ratio * math.cos(gamma), ratio * math.sin(gamma))),
    }
    if lattice not in vectors:
        raise ValueError(f"unknown lattice {lattice!r}: expected one of {', '.join(LATTICES)}")
    return np.array(vectors[lattice])


def grid_points(n: int, edges: np.ndarray, rotation_deg: float) -> tuple[np.ndarray, np.ndarray]:
    """Exactly ``n`` points of the parallelogram spanned by the rotated ``edges``, subdivided k - 1 times along
    each (k = max(2, ceil(sqrt n))), enumerated with the first index fastest and cut to the first n; stably
    sorted by time and scaled, aspect kept, to fit [-1, 1]^2. Returns the points and their lattice indices
    (a, b), each point being (a e1 + b e2) / (k - 1) before scaling."""
    if n < 2:
        raise ValueError(f"a grid needs at least 2 points to be scaled to the box, got {n}")
    theta = math.radians(rotation_deg)
    rotation = np.array([[math.cos(theta), -math.sin(theta)], [math.sin(theta), math.cos(theta)]])
    rotated = edges @ rotation.T
    k = max(2, math.ceil(math.sqrt(n)))
    indices = np.stack(np.divmod(np.arange(n), k)[::-1], axis=1)
    points = indices @ rotated / (k - 1)
    by_time = np.argsort(points[:, 0], kind="stable")
    points, indices = points[by_time], indices[by_time]
    low, high = points.min(axis=0), points.max(axis=0)
    # the same scale on both axes keeps the light cones; upstream fits the box, limited by the longer side
    scale = 2.0 / np.max(high - low)
    return (points - (low + high) / 2) * scale, indices


def generate_grid(n: int, rng: np.random.Generator, settings: GridSettings = GridSettings()) -> KindSample:
    """A ``grid`` set of ``n`` elements; its params are the lattice, its rotation, segment ratio and oblique angle.
    Upstream also draws a conformal factor, but only for a curvature it discards: it changes neither the points
    nor the light cones, so it is not drawn here."""
    lattice = settings.lattices[int(rng.integers(len(settings.lattices)))]
    rotation = float(rng.uniform(*settings.rotation_range))
    angle = float(rng.uniform(*settings.oblique_angle_range)) if lattice == "oblique" else 60.0
    ratio = 1.0 if lattice == "quadratic" else float(rng.uniform(*settings.segment_ratio_range))
    points, _ = grid_points(n, edge_vectors(lattice, ratio, angle), rotation)
    params = {"lattice": lattice, "rotation_deg": rotation, "segment_ratio": ratio, "oblique_angle_deg": angle}
    return KindSample("grid", light_cone_relation(points), False, params)
