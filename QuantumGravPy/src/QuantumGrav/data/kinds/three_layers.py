"""The built-in generator's ``layered`` class (``data.classes``; not manifold-like): a Kleitman-Rothschild-like
order of three layers of about N/4, N/2 and N/4 elements, each pair in consecutive layers related with a
probability p drawn per set, then transitively closed. Almost all large partial orders look like this, so these stand
for "generic", non-manifold-like causal sets; the relation probability's range spreads their ordering fraction over
that of 2D to 4D sprinklings. (QuantumGrav.jl's ``layered`` kind, with up to 20 layers, is ``kinds.layered``.)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..orders import transitive_closure

LAYER_WEIGHTS: tuple[float, ...] = (0.25, 0.5, 0.25)
LAYER_RELATION_PROBABILITY: tuple[float, float] = (0.1, 0.6)


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
    return ThreeLayerOrders.draw_layers(rng, batch, n, weights, relation_probability).relations(rng, slice(None))


def layered_relations(layer: np.ndarray, p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The closed orders of ``random_layered_orders`` from the layers (B, n) and probabilities (B, 1, 1) drawn
    for them; draws the pairs. Drawing for the sets of a batch in several consecutive parts draws the same
    numbers as at once (a Generator's doubles come in sequence), hence the same orders."""
    batch, n = layer.shape
    consecutive = layer[:, None, :] == layer[:, :, None] + 1
    return transitive_closure(consecutive & (rng.random((batch, n, n)) < p))


@dataclass
class LayeredBatch:
    """A batch's small draws: each element's layer (B, n), sorted, and each set's relation probability (B, 1, 1)."""

    layer: np.ndarray
    p: np.ndarray

    @property
    def flip_fractions(self) -> np.ndarray:
        return np.zeros(len(self.layer))

    def relations(self, rng: np.random.Generator, part: slice) -> np.ndarray:
        return layered_relations(self.layer[part], self.p[part], rng)


class ThreeLayerOrders:
    """The ``layered`` class as the built-in generator makes it, a batch at a time (``catalogue.BUILTIN_CLASSES``)."""

    manifold_like = False
    dimension = -1

    def draw_batch(self, rng: np.random.Generator, batch: int, n: int, *, source_dimension: int = 0,
             destroy_fraction: float | Sequence[float] = 0.0) -> LayeredBatch:
        return self.draw_layers(rng, batch, n, np.asarray(LAYER_WEIGHTS), LAYER_RELATION_PROBABILITY)

    @staticmethod
    def draw_layers(rng: np.random.Generator, batch: int, n: int, weights: np.ndarray,
                    relation_probability: tuple[float, float]) -> LayeredBatch:
        layer = np.sort(rng.choice(len(weights), size=(batch, n), p=weights), axis=1)  # layer by layer: natural
        return LayeredBatch(layer, rng.uniform(*relation_probability, size=(batch, 1, 1)))
