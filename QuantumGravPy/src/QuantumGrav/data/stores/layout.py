"""Where a QuantumGrav.jl store's sets are and what a set's group holds: the store folders of a path, the
``cset_{i}`` groups of a store, a group's arrays (its relation as ``adj``, or as ``linkmat`` with the link degrees),
a scalar as ``save_data.jl`` writes it, and the zarr module that reads them (an optional extra)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from ...common.errors import UserError
from .graphs import LINK_DEGREE_ARRAYS
from .limits import store_error

ARRAYS: tuple[str, ...] = ("adj", "manifold_like", "cset_type")  # what produce_data writes in every group

ZARR_EXTRA_HINT = "install the optional extra: pip install 'QuantumGrav[zarr]'"
_GROUP_NAME = re.compile(r"^cset_(\d+)$")


def import_zarr():
    """The zarr module, or one UserError naming the extra to install."""
    try:
        import zarr
    except ImportError as err:
        raise UserError(f"Reading QuantumGrav.jl's Zarr stores needs the package zarr: {ZARR_EXTRA_HINT}") from err
    return zarr


def is_store(path: Path) -> bool:
    return path.is_dir() and ((path / ".zgroup").is_file() or (path / "zarr.json").is_file())


def find_stores(path: str | os.PathLike) -> list[Path]:
    """``path`` itself if it is a store, else the stores directly inside the folder ``path``, by name."""
    path = Path(path).expanduser()
    if is_store(path):
        return [path]
    if not path.is_dir():
        raise UserError(f"QuantumGrav.jl data path {path}: no such folder (expected a Zarr store written by "
                        f"QuantumGrav.jl's produce_data, or a folder of such stores)")
    stores = sorted(child for child in path.iterdir() if is_store(child))
    if not stores:
        raise UserError(f"QuantumGrav.jl data path {path}: not a Zarr store (no .zgroup or zarr.json) and no store "
                        f"inside; expected a store written by QuantumGrav.jl's produce_data or a folder of them")
    return stores


def list_groups(store: Path) -> list[str]:
    """The ``cset_{i}`` groups of a directory store, by i (a listing, no data read)."""
    found = [(int(match.group(1)), entry.name) for entry in os.scandir(store)
             if entry.is_dir() and (match := _GROUP_NAME.match(entry.name))]
    if not found:
        raise UserError(f"QuantumGrav.jl store {store}: no cset_{{i}} groups; expected one group per causal set "
                        f"as produce_data writes them")
    return [name for _, name in sorted(found)]


def read_scalar(value: np.ndarray, name: str, store: Path, group: str) -> Any:
    if value.shape != (1,):
        raise store_error(store, group, f"'{name}' has shape {value.shape}; expected a one-element array "
                                          f"(how save_data.jl writes a scalar)")
    return value[0].item()


def read_array(root: Any, store: Path, group: str, name: str, required: bool = True) -> np.ndarray | None:
    """One array of a group of the open store ``root``, opened by path from the root with the format given: zarr 3
    then skips metadata probes that cost more than these small reads (about half the time per group, measured). A
    missing array is one UserError, or None where it is not ``required``."""
    try:
        array = root[f"{group}/{name}"]
    except KeyError:
        array = None
    if isinstance(array, import_zarr().Array):
        return np.asarray(array[...])
    if required:
        raise store_error(store, group, f"array '{name}' is missing; produce_data writes {', '.join(ARRAYS)} in "
                                        f"every group")
    return None


def read_group(root: Any, store: Path, group: str) -> dict[str, np.ndarray]:
    """The arrays of one group: its relation (``adj``, or ``linkmat`` with the link degrees stored beside it),
    ``manifold_like`` and ``cset_type``."""
    relation = "adj" if read_array(root, store, group, "adj", required=False) is not None else "linkmat"
    arrays = {name: read_array(root, store, group, name) for name in (relation, "manifold_like", "cset_type")}
    if relation == "linkmat":
        degrees = {name: read_array(root, store, group, name, required=False) for name in LINK_DEGREE_ARRAYS}
        arrays.update({name: value for name, value in degrees.items() if value is not None})
    return arrays
