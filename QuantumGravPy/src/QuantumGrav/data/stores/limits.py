"""How large a set of a QuantumGrav.jl store may be, judged before anything of it is read.

A store is input like any other: a group whose ``adj`` declares 200,000 x 200,000 elements is a tiny folder (its
chunks need never be written), yet reading it allocates 37 GiB and its features hours of products. So the shape each
group's ``adj`` (or ``linkmat``) *declares* (its metadata file: ``.zarray`` in Zarr format 2, ``zarr.json`` in
format 3) is read first, for every group, and checked against two limits before any chunk is read, any cache folder made or any run
folder written:

* ``max_elements``: the most elements a set may have (``data.kwargs.max_elements``);
* the memory this process may use (what the machine has free, and the cgroup's limit where a job runs under one):
  reading and deriving the features of a set of N elements holds about ``BYTES_PER_PAIR`` x N^2 bytes at its peak.

The declared sizes are also each set's element count, known without reading it (``element_counts``).
"""

from __future__ import annotations

import json
from pathlib import Path

import psutil

from ...common.errors import UserError

# The largest set read by default: 32,768 elements (a 1 GiB dense matrix; its features need about 16 GiB).
DEFAULT_MAX_ELEMENTS = 32_768
# Peak memory of reading one set and deriving its features, per pair of elements (the growth of the peak resident
# memory of a process reading a 2D sprinkling, over N^2): 13.0 bytes at N = 2,048 and 12.4 at N = 4,096
# (benchmarks/stores/bench_store_read_memory.py, results_store_read_memory.json; 20.7 at N = 1,024, where a few MB that do
# not grow with N weigh most), rounded up: the check matters for large N.
BYTES_PER_PAIR = 16
GIB = 2**30
_METADATA = ((".zarray", 2), ("zarr.json", 3))
# The arrays a group may hold its relation in, the first found read: the causal matrix (produce_data's ``adj``, from
# ``make_adj``) or its links alone (``linkmat``, the transitive reduction, which upstream's own notebooks read), both
# N x N UInt8 in the same layout.
RELATION_ARRAYS = ("adj", "linkmat")


def relation_metadata(store: Path, group: str) -> tuple[str, Path, int]:
    """The array the group holds its relation in (the first of ``RELATION_ARRAYS`` there), its metadata file and
    Zarr format."""
    for array in RELATION_ARRAYS:
        for name, zarr_format in _METADATA:
            if (store / group / array / name).is_file():
                return array, store / group / array / name, zarr_format
    raise store_error(store, group, "array 'adj' is missing (no .zarray or zarr.json in its folder), and no 'linkmat' "
                                 "either; produce_data writes adj, manifold_like, cset_type in every group")


def declared_shape(store: Path, group: str) -> tuple[str, tuple[int, ...]]:
    """The group's relation array (``relation_metadata``) and the shape it declares in its metadata file, read
    without zarr and without its chunks."""
    array, path, zarr_format = relation_metadata(store, group)
    try:
        shape = json.loads(path.read_text()).get("shape")
    except (OSError, ValueError, AttributeError) as err:
        raise store_error(store, group, f"the metadata of '{array}' ({path.name}) cannot be read: {err}") from None
    if not isinstance(shape, list) or not all(type(size) is int and size >= 0 for size in shape):
        raise store_error(store, group, f"the metadata of '{array}' ({path.name}) declares the shape {shape!r}; "
                                     f"expected a list of sizes (Zarr format {zarr_format})")
    return array, tuple(shape)


def usable_memory() -> int:
    """Bytes this process may still allocate: the machine's available memory, or less under a cgroup limit."""
    available = psutil.virtual_memory().available
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
    except (OSError, ValueError):
        return available
    return available if limit == "max" else min(available, max(int(limit) - used, 0))


def checked_size(store: Path, group: str, max_elements: int, memory: int) -> tuple[str, int]:
    """The group's relation array (``adj`` or ``linkmat``) and N of its set, from the shape the array declares: one
    UserError naming store, group and shape if it is not a non-empty square, has more than ``max_elements`` elements
    or needs more than ``memory`` bytes to read."""
    array, shape = declared_shape(store, group)
    if len(shape) != 2 or shape[0] != shape[1] or shape[0] == 0:
        raise store_error(store, group, f"'{array}' declares the shape {shape}; expected a non-empty square N x N "
                                     f"{'causal' if array == 'adj' else 'link'} matrix")
    n = shape[0]
    if n > max_elements:
        raise store_error(store, group, f"'{array}' declares {n:,} x {n:,} elements, more than max_elements ({max_elements:,}, "
                                     f"data.kwargs.max_elements); nothing was read. Leave the store out, or raise the "
                                     f"limit if sets of that size are meant")
    needed = BYTES_PER_PAIR * n * n
    if needed > memory:
        raise store_error(store, group, f"'{array}' declares {n:,} x {n:,} elements: reading it needs about "
                                     f"{needed / GIB:,.1f} GiB, more than the {memory / GIB:,.1f} GiB this process may "
                                     f"use; nothing was read. Leave the store out, or read it on a machine with more "
                                     f"memory")
    return array, n


def check_max_elements(value: object) -> int:
    if type(value) is not int or value < 1:
        raise UserError(f"max_elements: expected a positive integer (the most elements a set may have), got {value!r}")
    return value


def store_error(store: Path, group: str, problem: str) -> UserError:
    """One UserError naming the store, the group and what is wrong with it."""
    return UserError(f"QuantumGrav.jl store {store}, group {group}: {problem}")
