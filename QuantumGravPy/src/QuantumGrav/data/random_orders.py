"""Random causal sets of each kind: sprinklings into a causal diamond of Minkowski space, layered
(Kleitman-Rothschild-like) orders, and destroyed orders (a sprinkling with pairs flipped). Each returns
causal matrices in a natural labelling (``orders``)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..config.sections.data import SPRINKLING_DIMENSIONS
from .orders import as_batch, transitive_closure

# Layered orders: Kleitman-Rothschild proportions; the probability of a relation between
# consecutive layers is drawn per set from this range, which spreads their ordering
# fraction over the range of 2d to 4d sprinklings.
LAYER_WEIGHTS: tuple[float, ...] = (0.25, 0.5, 0.25)
LAYER_RELATION_PROBABILITY: tuple[float, float] = (0.1, 0.6)


# --------------------------------------------------------------------------- sprinkling
def _check_dimension(dim: int) -> None:
    if dim not in SPRINKLING_DIMENSIONS:
        raise ValueError(f"dim: expected one of {SPRINKLING_DIMENSIONS}, got {dim!r}")


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
    return layered_relations(layer, p, rng)


def layered_relations(layer: np.ndarray, p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
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
    batch, single = as_batch(R)
    n = batch.shape[-1]
    upper = np.triu(np.ones((n, n), dtype=bool), k=1)
    flipped = batch.astype(bool) ^ (upper & (rng.random(batch.shape) < probability.reshape(-1, 1, 1)))
    closed = transitive_closure(flipped)
    return closed[0] if single else closed
