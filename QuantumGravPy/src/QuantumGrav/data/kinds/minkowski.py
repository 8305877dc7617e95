"""The built-in generator's sprinkled classes (``data.classes``): ``minkowski_{d}d`` (manifold-like), a uniform
sprinkling of the causal diamond of d-dimensional Minkowski space (d = 2, 3, 4), the prototype of a manifold-like
causal set; and ``destroyed`` (not manifold-like), such a sprinkling, in a dimension drawn per set, with each pair
i < j flipped (related <-> unrelated) with a probability phi and then transitively closed (``destroyed.destroy_order``:
a few random relations already destroy the local light-cone structure). phi is the given ``destroy_fraction``, or
drawn per set log-uniformly from a range [low, high]. (QuantumGrav.jl's ``polynomial`` and ``destroyed`` kinds sprinkle
a curved box instead: ``kinds.polynomial``, ``kinds.destroyed``.)

Both are made a batch of equal sets at a time (``catalogue.BUILTIN_CLASSES``): the small draws (points, flip
fractions) for the whole batch first, then the relations part by part, each part drawing its pairs after the
previous one, so that the parts draw the numbers one batch would."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..sprinkling import CausalDiamond, light_cone_relation, sprinkle
from .destroyed import destroy_order


def sprinkle_diamond(n: int, dim: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Sprinkle ``n`` points uniformly into the causal diamond between (-1, 0) and (1, 0) of ``dim``-dimensional
    Minkowski space: the coordinates (n x d, time first, sorted by time) and the causal matrix (n x n bool) of their
    light-cone order, which is then in a natural labelling."""
    points = sprinkle(rng, n, CausalDiamond(dim))
    return points, light_cone_relation(points)


def sprinkle_diamond_batch(batch: int, n: int, dim: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``batch`` independent sprinklings of ``n`` points: coordinates (B, n, d) sorted by time, causal matrices."""
    points = sprinkle(rng, n, CausalDiamond(dim), batch=batch)
    return points, light_cone_relation(points)


def fraction_range(destroy_fraction: float | Sequence[float]) -> tuple[float, float]:
    """(low, high) of a flip fraction given as one number or as a [low, high] range."""
    if isinstance(destroy_fraction, (int, float, np.integer, np.floating)):
        return float(destroy_fraction), float(destroy_fraction)
    values = list(destroy_fraction) if isinstance(destroy_fraction, (list, tuple)) else []
    if len(values) != 2 or not all(isinstance(v, (int, float, np.integer, np.floating)) for v in values):
        raise ValueError(f"destroy_fraction: expected a number in (0, 1] or a range [low, high], "
                         f"got {destroy_fraction!r}")
    return float(values[0]), float(values[1])


def draw_flip_fractions(batch: int, destroy_fraction: float | Sequence[float], rng: np.random.Generator) -> np.ndarray:
    """One flip fraction per set: the given number, or log-uniform in the range [low, high] (so that 0.1% to 10%
    get equally many sets per decade). A single number draws nothing from ``rng``, so a fixed fraction leaves the
    random stream of the rest of the generation as it is."""
    low, high = fraction_range(destroy_fraction)
    if low == high:
        return np.full(batch, low)
    return np.exp(rng.uniform(math.log(low), math.log(high), size=batch))


@dataclass
class SprinkledBatch:
    """A batch's sprinkled points (B, n, d) and, for destroyed sets, each set's flip fraction."""

    points: np.ndarray
    flip_fractions: np.ndarray
    destroyed: bool

    def relations(self, rng: np.random.Generator, part: slice) -> np.ndarray:
        relation = light_cone_relation(self.points[part])
        return destroy_order(relation, self.flip_fractions[part], rng) if self.destroyed else relation


@dataclass(frozen=True)
class MinkowskiSprinklings:
    """``minkowski_{d}d``: sprinklings of the causal diamond in d dimensions."""

    dimension: int
    manifold_like = True

    def draw_batch(self, rng: np.random.Generator, batch: int, n: int, *, source_dimension: int = 0,
             destroy_fraction: float | Sequence[float] = 0.0) -> SprinkledBatch:
        points = sprinkle(rng, n, CausalDiamond(self.dimension), batch=batch)
        return SprinkledBatch(points, np.zeros(batch), destroyed=False)


@dataclass(frozen=True)
class DestroyedSprinklings:
    """The built-in ``destroyed`` class: sprinklings in ``source_dimension`` dimensions (drawn per set by the plan),
    pairs flipped with each set's flip fraction, closed."""

    manifold_like = False
    dimension = -1

    def draw_batch(self, rng: np.random.Generator, batch: int, n: int, *, source_dimension: int = 0,
             destroy_fraction: float | Sequence[float] = 0.0) -> SprinkledBatch:
        points = sprinkle(rng, n, CausalDiamond(source_dimension), batch=batch)
        return SprinkledBatch(points, draw_flip_fractions(batch, destroy_fraction, rng), destroyed=True)
