"""Generated sets of the nine kinds written as QuantumGrav.jl writes them: one Zarr store per kind, groups
``cset_<i>`` with ``adj`` (as Zarr.jl leaves it: the transpose), ``manifold_like`` and ``cset_type``
(``data/zarr_store.py`` writes the layout and reads it back). Each group also keeps what our generator knows and
produce_data does not store: the drawn parameters as the group's attributes, for merged sets a
``node_labels`` array (1 for the elements of the inserted block), and for destroyed sets a ``relation_labels``
array in ``adj``'s layout (1 for each relation added or removed relative to the sprinkling)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ...common.processes import map_in_workers
from ..stores.layout import import_zarr
from ..zarr_store import write_julia_group
from .catalogue import CSET_TYPE_NUMBERS, GENERATORS, generate_kind
from .common import DEFAULT_N_RANGE

# Sets per random stream: a kind's sets are drawn in blocks, block b from the stream (seed, kind, b), so the sets do
# not depend on how many processes draw them. Changing it changes the data (the generated folder's key holds it).
BLOCK_SIZE = 64


def check_kinds(kinds: Sequence[str]) -> None:
    unknown = [kind for kind in kinds if kind not in GENERATORS]
    if unknown or not kinds or len(set(kinds)) != len(kinds):
        raise ValueError(f"kinds: expected distinct names from {', '.join(GENERATORS)}; got {list(kinds)!r}"
                         + (f" ({', '.join(map(repr, unknown))} unknown)" if unknown else ""))


def write_kind_stores(folder: str | os.PathLike, kinds: Sequence[str] = tuple(GENERATORS), num_per_kind: int = 100,
                      seed: int = 0, n_range: tuple[int, int] = DEFAULT_N_RANGE, workers: int = 1,
                      dimension: int = 2, defect_sizes: Mapping[str, Sequence[int]] | None = None,
                      caller: str = "write_kind_stores") -> list[Path]:
    """``num_per_kind`` sets of each kind, one store ``<kind>_<seed>.zarr`` each in ``folder``, made by up to
    ``workers`` processes, block by block (``BLOCK_SIZE``); each block writes its own groups. ``dimension``: that
    of the kinds that have one; ``defect_sizes``: per kind, exact defect sizes that its sets take in turn (set i
    the size i mod their count; ``catalogue.DEFECT_SIZE_ARGUMENTS``). The same arguments give the same stores,
    whatever ``workers``; adding a kind leaves the others' sets as they were. ``caller``: the API the user called,
    named if a script calls it outside its main guard with ``workers`` > 1 (``processes.check_main_guard``)."""
    check_kinds(kinds)
    zarr = import_zarr()
    stores = [Path(folder) / f"{kind}_{seed}.zarr" for kind in kinds]
    for store in stores:
        zarr.open_group(str(store), mode="w", zarr_format=2)
    sizes = {kind: tuple((defect_sizes or {}).get(kind, ())) for kind in kinds}
    blocks = [(str(store), kind, block, seed, num_per_kind, tuple(n_range), dimension, sizes[kind])
              for store, kind in zip(stores, kinds) for block in range(-(-num_per_kind // BLOCK_SIZE))]
    map_in_workers(write_block, blocks, workers, caller=caller, instead="pass workers=1 to generate in this process")
    return stores


def write_block(store: str, kind: str, block: int, seed: int, num_per_kind: int, n_range: tuple[int, int],
                dimension: int = 2, defect_sizes: tuple[int, ...] = ()) -> None:
    """Groups ``cset_<64 b + 1>``.. of block ``b`` of a kind's store, drawn from the block's own stream."""
    root = import_zarr().open_group(store, mode="r+", zarr_format=2)
    rng = np.random.default_rng([seed, CSET_TYPE_NUMBERS[kind], block])
    for index in range(block * BLOCK_SIZE, min(num_per_kind, (block + 1) * BLOCK_SIZE)):
        defect_size = defect_sizes[index % len(defect_sizes)] if defect_sizes else None
        sample = generate_kind(kind, rng, n_range=n_range, dimension=dimension, defect_size=defect_size)
        write_julia_group(root, index + 1, sample.relation, CSET_TYPE_NUMBERS[kind], sample.manifold_like,
                          attributes=plain(sample.params), node_labels=sample.node_labels,
                          relation_labels=sample.relation_labels)


def plain(value: Any) -> Any:
    """``value`` with numpy scalars and arrays made JSON's own types (a group's attributes are JSON)."""
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [plain(item) for item in value]
    return value.item() if isinstance(value, np.generic) else value
