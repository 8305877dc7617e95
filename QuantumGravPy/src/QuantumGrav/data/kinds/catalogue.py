"""The catalogue of every generator of causal sets in the library.

* ``GENERATORS``: QuantumGrav.jl's nine kinds by its names, one set at a time, with their ``cset_type`` codes as its
  produce_data encodes them and which are manifold-like (``cset_type in [polynomial, complex_topology]``): what
  ``KindsDataset`` writes as stores.
* ``BUILTIN_CLASSES``: the built-in generator's classes by the config's names (``data.classes``: the Minkowski
  diamonds' sprinklings, ``destroyed``, ``layered``), a batch of equal sets at a time: what ``CausalSetDataset``
  makes (``causal_sets.generate_block``).

A new kind of causal set is a module beside these and one entry here."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ...config.sections.data import MANIFOLD_CLASSES
from ..stores.kind_codes import ITEM_CODES
from ..sprinkling import check_dimension
from .common import DEFAULT_N_RANGE, KindSample, SetRefused, draw_n
from .complex_topology import generate_complex_topology
from .destroyed import generate_destroyed, generate_destroyed_ambiguous
from .grid import generate_grid
from .layered import generate_layered
from .merged import generate_merged, generate_merged_ambiguous
from .minkowski import DestroyedSprinklings, MinkowskiSprinklings
from .polynomial import generate_polynomial
from .random_order import generate_random_order
from .three_layers import ThreeLayerOrders

GENERATORS: dict[str, Callable[..., KindSample]] = {
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
CSET_TYPE_NUMBERS: dict[str, int] = {kind: code for kind, code in ITEM_CODES.items() if kind in GENERATORS}
# The built-in generator's classes, in the config's order (``config.sections.data.CSET_TYPES``).
BUILTIN_CLASSES = {**{name: MinkowskiSprinklings(dimension) for name, dimension in MANIFOLD_CLASSES.items()},
                   "destroyed": DestroyedSprinklings(), "layered": ThreeLayerOrders()}
MANIFOLD_LIKE_KINDS = frozenset({"polynomial", "complex_topology"})
# The kinds sprinkled in d = 2, 3 or 4 dimensions (a sprinkling, or one with a defect). grid stays a 2D lattice and
# layered and random have no dimension; complex_topology's cuts exist in 2D only (QuantumGrav.jl's geometry).
DIMENSIONAL_KINDS = frozenset({"polynomial", "destroyed", "destroyed_ambiguous", "merged", "merged_ambiguous"})
TWO_DIMENSIONAL_ONLY = frozenset({"complex_topology"})
# Kinds whose defect may be given an exact size, and the generator's argument that takes it: destroyed kinds the
# number of relations their closed order changes, merged kinds the number of elements of their block.
DEFECT_SIZE_ARGUMENTS = {"destroyed": "changes", "destroyed_ambiguous": "changes", "merged": "block_elements",
                         "merged_ambiguous": "block_elements"}
ATTEMPTS = 20  # draws of one set before giving up, as produce_data's make_cset_data


def generator_options(kind: str, dimension: int = 2, defect_size: int | None = None) -> dict[str, Any]:
    """The keyword arguments that make ``kind``'s generator draw in ``dimension`` dimensions with an exact defect
    size (none: QuantumGrav.jl's 2D draws)."""
    if kind not in GENERATORS:
        raise ValueError(f"kind: expected one of {', '.join(GENERATORS)}, got {kind!r}")
    check_dimension(dimension)
    if dimension != 2 and kind in TWO_DIMENSIONAL_ONLY:
        raise ValueError(f"dimension {dimension}: {kind} is 2-dimensional only (QuantumGrav.jl's cuts are 2D); "
                         f"leave it out of the kinds, or use dimension 2")
    options: dict[str, Any] = {"dimension": dimension} if kind in DIMENSIONAL_KINDS else {}
    if defect_size is not None:
        if kind not in DEFECT_SIZE_ARGUMENTS:
            raise ValueError(f"an exact defect size applies to {', '.join(DEFECT_SIZE_ARGUMENTS)}, not to {kind}")
        options[DEFECT_SIZE_ARGUMENTS[kind]] = defect_size
    return options


def generate_kind(kind: str, rng: np.random.Generator, n: int | None = None,
                  n_range: tuple[int, int] = DEFAULT_N_RANGE, dimension: int = 2,
                  defect_size: int | None = None) -> KindSample:
    """One set of ``kind``: ``n`` elements, or a count drawn as QuantumGrav.jl draws it; in ``dimension``
    dimensions where the kind has one (``DIMENSIONAL_KINDS``), with a defect of exactly ``defect_size`` where
    given (``DEFECT_SIZE_ARGUMENTS``), else with QuantumGrav.jl's draws. A refused draw is drawn again (a new count,
    unless ``n`` is given), up to ``ATTEMPTS`` times."""
    options = generator_options(kind, dimension, defect_size)
    for _ in range(ATTEMPTS - 1):
        try:
            return GENERATORS[kind](n if n is not None else draw_n(rng, n_range), rng, **options)
        except SetRefused:
            continue
    # the last attempt's refusal reaches the caller
    return GENERATORS[kind](n if n is not None else draw_n(rng, n_range), rng, **options)
