"""``layered`` (not manifold-like): a generalised Kleitman-Rothschild order. L antichains (layers) follow each
other in time, and each pair of elements in consecutive layers is linked with probability p; the order is the
transitive closure of these links (QuantumGrav.jl's layeredgeneration.jl, cset_factories.jl)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .common import KindSample


@dataclass(frozen=True)
class LayeredSettings:
    """The draws of a layered set; defaults are QuantumGrav.jl's (createdata_default.yaml: p ~ U(0.05, 1),
    L = ceil(U(2, 20)) so L in 3..20, the layer sizes' spread sigma ~ U(0, 1))."""

    link_probability_range: tuple[float, float] = (0.05, 1.0)
    layer_count_range: tuple[float, float] = (2.0, 20.0)
    layer_spread_range: tuple[float, float] = (0.0, 1.0)


def layer_sizes(rng: np.random.Generator, n: int, layer_count: int, spread: float) -> np.ndarray:
    """Sizes of ``layer_count`` layers of ``n`` elements in all, each cut drawn near an equal split of what is
    left (round(mu + spread * N(0, 1))) and redrawn until every later layer keeps one element and the last two.
    Needs n > layer_count, as upstream (otherwise no cut is admissible)."""
    if n <= layer_count:
        raise ValueError(f"a layered set of {n} elements cannot have {layer_count} layers: n must exceed L")
    cuts = [0]
    for k in range(1, layer_count):
        mean = cuts[-1] + (n - cuts[-1]) / (layer_count - k + 1)
        while True:
            cut = int(np.round(mean + spread * rng.standard_normal()))
            if cuts[-1] < cut < n + k - layer_count:
                break
        cuts.append(cut)
    return np.diff(np.array(cuts + [n]))


def consecutive_layer_edges(rng: np.random.Generator, sizes: np.ndarray, link_probability: float) -> np.ndarray:
    """Each pair (a in layer k, b in layer k + 1) joined with probability ``link_probability``; no other pair."""
    starts = np.concatenate([[0], np.cumsum(sizes)])
    edges = np.zeros((starts[-1], starts[-1]), dtype=bool)
    for layer in range(len(sizes) - 1):
        block = rng.random((sizes[layer], sizes[layer + 1])) < link_probability
        edges[starts[layer]:starts[layer + 1], starts[layer + 1]:starts[layer + 2]] = block
    return edges


def close_layers(edges: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The transitive closure of links that only join consecutive layers: from the last layer down, a layer
    precedes what its links reach in the next layer and everything those elements precede. One float32 product
    per layer, about n^3 / (2L) multiply-adds in all, instead of log2(L) full squarings."""
    relation = edges.copy()
    starts = np.concatenate([[0], np.cumsum(sizes)])
    for layer in range(len(sizes) - 3, -1, -1):
        rows = slice(starts[layer], starts[layer + 1])
        successors = slice(starts[layer + 1], starts[layer + 2])
        beyond = slice(starts[layer + 2], starts[-1])
        reached = edges[rows, successors].astype(np.float32) @ relation[successors, beyond].astype(np.float32)
        relation[rows, beyond] = reached > 0
    return relation


def generate_layered(n: int, rng: np.random.Generator, settings: LayeredSettings = LayeredSettings()) -> KindSample:
    """A ``layered`` set of ``n`` elements, labelled layer by layer; its params are the layer count L, the link
    probability p, the sizes' spread and the layer sizes."""
    link_probability = float(rng.uniform(*settings.link_probability_range))
    layer_count = math.ceil(rng.uniform(*settings.layer_count_range))
    spread = float(rng.uniform(*settings.layer_spread_range))
    sizes = layer_sizes(rng, n, layer_count, spread)
    edges = consecutive_layer_edges(rng, sizes, link_probability)
    params = {"layer_count": layer_count, "link_probability": link_probability, "layer_spread": spread,
              "layer_sizes": sizes.tolist()}
    return KindSample("layered", close_layers(edges, sizes), False, params)
