"""Generated sets of the nine kinds written as QuantumGrav.jl writes them: one Zarr store per kind, groups
``cset_<i>`` with ``adj`` (as Zarr.jl leaves it: the transpose), ``manifold_like`` and ``cset_type``
(``data/zarr_store.py`` writes the layout and reads it back)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np

from ..zarr_store import write_julia_store
from .catalogue import CSET_TYPE_NUMBERS, GENERATORS, MANIFOLD_LIKE_KINDS, generate_kind
from .common import DEFAULT_N_RANGE


def write_kind_stores(folder: str | os.PathLike, kinds: Sequence[str] = tuple(GENERATORS), num_per_kind: int = 100,
                      seed: int = 0, n_range: tuple[int, int] = DEFAULT_N_RANGE) -> list[Path]:
    """``num_per_kind`` sets of each kind, one store ``<kind>_<seed>.zarr`` each in ``folder``; every kind draws
    from a stream of its own (seed and kind), so adding a kind leaves the others' sets as they were."""
    unknown = [kind for kind in kinds if kind not in GENERATORS]
    if unknown:
        raise ValueError(f"kinds: {', '.join(map(repr, unknown))} unknown; expected some of {', '.join(GENERATORS)}")
    stores = []
    for kind in kinds:
        rng = np.random.default_rng([seed, CSET_TYPE_NUMBERS[kind]])
        relations = [generate_kind(kind, rng, n_range=n_range).relation for _ in range(num_per_kind)]
        stores.append(write_julia_store(Path(folder) / f"{kind}_{seed}.zarr", relations,
                                        [CSET_TYPE_NUMBERS[kind]] * num_per_kind,
                                        [kind in MANIFOLD_LIKE_KINDS] * num_per_kind))
    return stores
