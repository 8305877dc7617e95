"""``merged`` and ``merged_ambiguous`` (not manifold-like): a ``polynomial`` sprinkling (in d = 2, 3 or 4) with a
random 3-layer order spliced in as a block at a random place in its time labelling, tied to its surroundings by
random cross links (QuantumGrav.jl's csetmerging.jl, insert_layered_into_manifoldlike and insert_cset, and its
MergedCsetMaker).

The block takes labels position..position+n2-1: the sprinkling's earlier elements may precede block elements, the
block's elements may precede its later ones, each such pair an edge with the cross-link probability l; the closure
then relates sprinkled elements before the block to those after it through the block, spacelike pairs included.
No path leaves the block and re-enters it, so the block's own order is kept exactly.

``merged``: QuantumGrav.jl's defaults, n2/n, l and the block's link probability p each Uniform(0, 1). The block
is no small defect: its share of the set is uniform, from 4 elements to all but one, half the time most of it.
``merged_ambiguous``: QuantumGrav.jl builds it with the same maker from a config section that was never
published. Here it is the hard end of the defect: a block of 0.5-5% of the set (at least 4 elements, as
upstream: max(4, rint(n2/n * n)), which at QuantumGrav.jl's N of 64-128 makes most blocks exactly 4 elements and
every block of a set of at most 90) with few cross links (l uniform on [0, 0.1]), so the sprinkling is almost
untouched. Both are settings (``MergedSettings``); ``block_elements`` gives the block an exact size instead.

Every set carries ``node_labels`` (True inside the block) and the block's size and start in its params. Where
upstream's n2 = round(n2/n * n) reaches n it makes a set of n + 1 elements; here n2 is capped at n - 1, so every
set has the drawn n elements (it changes about 1 draw in 2n).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..orders import transitive_closure
from .layered import close_layers, consecutive_layer_edges, layer_sizes
from ..sprinkling import ConformalBox, check_dimension, light_cone_relation, sprinkle
from .common import DECAY_RANGE, ORDER_RANGE, KindSample, conformal_coefficients

# QuantumGrav.jl's inserted block: create_random_layered_causet(n2, 3; p), whose layer sizes scatter around
# equal thirds with standard deviation 0.1 n2 / 3 (layeredgeneration.jl).
BLOCK_LAYERS = 3
BLOCK_SIZE_SPREAD = 0.1
MIN_BLOCK_SIZE = 4


@dataclass(frozen=True)
class MergedSettings:
    """The draws of a merged set. Defaults are QuantumGrav.jl's (createdata_default.yaml, `merged`: the
    `polynomial` anchor's order and decay; n2_rel, link_prob and connectivity distributions Uniform(0, 1))."""

    block_fraction_range: tuple[float, float] = (0.0, 1.0)
    cross_link_range: tuple[float, float] = (0.0, 1.0)
    block_link_range: tuple[float, float] = (0.0, 1.0)
    order_range: tuple[int, int] = ORDER_RANGE
    decay_range: tuple[float, float] = DECAY_RANGE


# The hard end of the defect (upstream's `merged_ambiguous` parameters are unpublished): see the docstring.
MERGED_AMBIGUOUS = MergedSettings(block_fraction_range=(0.005, 0.05), cross_link_range=(0.0, 0.1))


def block_size(n: int, block_fraction: float) -> int:
    """n2 = max(4, round(n2_rel n)) as QuantumGrav.jl rounds it (half to even), capped so the sprinkling keeps
    one element."""
    return int(min(max(MIN_BLOCK_SIZE, np.rint(block_fraction * n)), n - 1))


def layered_block(rng: np.random.Generator, n: int, link_probability: float) -> tuple[np.ndarray, np.ndarray]:
    """A random 3-layer order of ``n`` elements, labelled layer by layer: consecutive layers' pairs are edges
    with ``link_probability``, then closed (the first layer precedes the third through a shared middle element).
    Returns the relation and the layer sizes."""
    sizes = layer_sizes(rng, n, BLOCK_LAYERS, BLOCK_SIZE_SPREAD * n / BLOCK_LAYERS)
    return close_layers(consecutive_layer_edges(rng, sizes, link_probability), sizes), sizes


def insert_block(relation: np.ndarray, block: np.ndarray, position: int, into_block: np.ndarray,
                 out_of_block: np.ndarray) -> np.ndarray:
    """The closed order of ``relation`` (n1 elements) with ``block`` (n2) inserted after its first ``position``
    elements; ``into_block`` (position, n2) and ``out_of_block`` (n2, n1 - position) are the cross edges."""
    n1, n2 = len(relation), len(block)
    kept = np.concatenate([np.arange(position), np.arange(position + n2, n1 + n2)])
    inside = slice(position, position + n2)
    edges = np.zeros((n1 + n2, n1 + n2), dtype=bool)
    edges[np.ix_(kept, kept)] = relation
    edges[inside, inside] = block
    edges[:position, inside] = into_block
    edges[inside, position + n2:] = out_of_block
    return transitive_closure(edges)


def generate_merged(n: int, rng: np.random.Generator, settings: MergedSettings = MergedSettings(),
                    kind: str = "merged", dimension: int = 2, block_elements: int | None = None) -> KindSample:
    """A merged set of ``n`` elements, its sprinkling in ``dimension`` dimensions, its block's size drawn as a
    fraction of ``n`` or, with ``block_elements``, exactly that. Its params: the conformal factor's order and
    decay, the dimension, the block fraction (drawn, or the exact size's share), cross-link and in-block link
    probabilities, and the block's size, start and layer sizes; its ``node_labels`` mark the block's elements."""
    check_dimension(dimension)
    coefficients, order, decay = conformal_coefficients(rng, order_range=settings.order_range,
                                                        decay_range=settings.decay_range, dimension=dimension)
    if block_elements is None:
        block_fraction = float(rng.uniform(*settings.block_fraction_range))
        n2 = block_size(n, block_fraction)
    elif MIN_BLOCK_SIZE <= block_elements <= n - 1:
        block_fraction, n2 = block_elements / n, block_elements
    else:
        raise ValueError(f"block_elements: expected {MIN_BLOCK_SIZE} to {n - 1} (the sprinkling keeps one of the {n} "
                         f"elements), got {block_elements}")
    cross_link = float(rng.uniform(*settings.cross_link_range))
    block_link = float(rng.uniform(*settings.block_link_range))
    n1 = n - n2
    sprinkled = light_cone_relation(sprinkle(rng, n1, ConformalBox(coefficients)))
    block, sizes = layered_block(rng, n2, block_link)
    position = int(rng.integers(0, n1 + 1))
    into_block = rng.random((position, n2)) < cross_link
    out_of_block = rng.random((n2, n1 - position)) < cross_link
    labels = np.zeros(n, dtype=bool)
    labels[position:position + n2] = True
    params = {"conformal_order": order, "conformal_decay": decay, "dimension": dimension,
              "block_fraction": block_fraction, "cross_link_probability": cross_link,
              "block_link_probability": block_link, "block_size": n2, "block_start": position,
              "block_layer_sizes": sizes.tolist()}
    return KindSample(kind, insert_block(sprinkled, block, position, into_block, out_of_block), False, params,
                      node_labels=labels)


def generate_merged_ambiguous(n: int, rng: np.random.Generator, settings: MergedSettings = MERGED_AMBIGUOUS,
                              dimension: int = 2, block_elements: int | None = None) -> KindSample:
    """A ``merged_ambiguous`` set: a merged set at the hard end of the defect (a small, weakly tied block)."""
    return generate_merged(n, rng, settings, kind="merged_ambiguous", dimension=dimension,
                           block_elements=block_elements)
