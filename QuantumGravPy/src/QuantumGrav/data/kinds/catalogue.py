"""The nine kinds by QuantumGrav.jl's names: their generators, their ``cset_type`` codes as its produce_data
encodes them, and which are manifold-like (``cset_type in [polynomial, complex_topology]``)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..zarr_store import JULIA_CSET_TYPES
from .common import DEFAULT_N_RANGE, KindSample, SetRefused, draw_n
from .complex_topology import generate_complex_topology
from .destroyed import generate_destroyed, generate_destroyed_ambiguous
from .grid import generate_grid
from .layered import generate_layered
from .merged import generate_merged, generate_merged_ambiguous
from .polynomial import generate_polynomial
from .random_order import generate_random_order

GENERATORS: dict[str, Callable[[int, np.random.Generator], KindSample]] = {
    "polynomial": generate_polynomial,
    "complex_topology": generate_complex_topology,
    "destroyed": generate_destroyed,
    "merged": generate_merged,
    "grid": generate_grid,
    "layered": generate_layered,
    "random": generate_random_order,
    "merged_ambiguous": generate_merged_ambiguous,
    "destroyed_ambiguous": generate_destroyed_ambiguous,
}
# produce_data's encoder, as the store reader knows it (polynomial 1, ..., destroyed_ambiguous 9).
CSET_TYPE_NUMBERS: dict[str, int] = {kind: code for code, kind in JULIA_CSET_TYPES.items() if kind in GENERATORS}
MANIFOLD_LIKE_KINDS = frozenset({"polynomial", "complex_topology"})
ATTEMPTS = 20  # draws of one set before giving up, as produce_data's make_cset_data


def generate_kind(kind: str, rng: np.random.Generator, n: int | None = None,
                  n_range: tuple[int, int] = DEFAULT_N_RANGE) -> KindSample:
    """One set of ``kind`` with its default settings: ``n`` elements, or a count drawn as QuantumGrav.jl draws it.
    A refused draw is drawn again (a new count, unless ``n`` is given), up to ``ATTEMPTS`` times."""
    if kind not in GENERATORS:
        raise ValueError(f"kind: expected one of {', '.join(GENERATORS)}, got {kind!r}")
    for _ in range(ATTEMPTS - 1):
        try:
            return GENERATORS[kind](n if n is not None else draw_n(rng, n_range), rng)
        except SetRefused:
            continue
    return GENERATORS[kind](n if n is not None else draw_n(rng, n_range), rng)  # its refusal reaches the caller
