"""The files of the feature cache of QuantumGrav.jl's stores (``QuantumGravJLDataset``'s ``cache``): the folder they
go to, and each cached graph's compact form on disk."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import torch

from ...common.errors import UserError
from ...common.logging_utils import get_logger
from ..dataset import CACHE_FORMAT_VERSION
from ..invariants import INVARIANT_NAMES, NODE_FEATURES
from .graphs import ORDER_CYCLE

logger = get_logger("zarr_store")  # the store reader's channel: its warnings name the store

# Bump when what is cached per causal set changes; the features' own version is CACHE_FORMAT_VERSION.
# 2: the order invariants are cached with the features. 3: edge indices stored as int16/int32. 4: the per-element
# labels (node_targets) too, whatever the target, so that one cache serves every target.
STORE_CACHE_VERSION = 4


def group_cache_key(folder: Path, edges: str) -> str:
    """The feature cache's key of a store's group (its ``folder``): a hash of every file of the group as stored
    (compressed chunks and metadata: its content, read without zarr, which costs more than the bytes), the edge
    kind and the feature version."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"store_cache={STORE_CACHE_VERSION} features={CACHE_FORMAT_VERSION}:{','.join(NODE_FEATURES)} "
                  f"invariants={','.join(INVARIANT_NAMES)} edges={edges}".encode())
    for file in sorted(path for path in folder.rglob("*") if path.is_file()):
        digest.update(file.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(file.read_bytes())
    return digest.hexdigest()


def feature_cache_dir(store: Path, cache_dir: str | os.PathLike | None) -> Path:
    """``<store>.qg_features`` next to the store, else under ``cache_dir``, else one clear error."""
    beside = store.parent / f"{store.name}.qg_features"
    if _writable_folder(beside):
        return beside
    if cache_dir is None:
        raise UserError(f"Cannot write the feature cache next to the QuantumGrav.jl store {store} (its folder "
                        f"is read-only): set cache_dir (data.kwargs.cache_dir) to a writable folder, or "
                        f"cache: false to compute the features at every read")
    store_id = hashlib.blake2b(str(store.resolve()).encode(), digest_size=4).hexdigest()
    elsewhere = Path(cache_dir).expanduser() / f"{store.name}-{store_id}.qg_features"
    if not _writable_folder(elsewhere):
        raise UserError(f"cache_dir {cache_dir}: cannot create or write {elsewhere}; choose a writable folder")
    logger.info("QuantumGrav.jl store %s is in a read-only folder: caching its features in %s", store, elsewhere)
    return elsewhere


# Cached tensors are stored compactly: node indices in the smallest integer type that holds them (int16 up to
# 32,767 elements: a quarter of int64's disk and page cache), expanded back to what the model reads on load.
def compacted(graph: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    if "x" not in graph:  # a cycle's labels only
        return graph
    num_nodes = graph["x"].shape[0]
    small = torch.int16 if num_nodes <= torch.iinfo(torch.int16).max else torch.int32
    return {**graph, "edge_index": graph["edge_index"].to(small)}


def expanded(stored: Any) -> dict[str, torch.Tensor]:
    """A cache file's graph, its edge index as int64; ValueError if it is not one this code wrote."""
    if isinstance(stored, dict) and set(stored) == {"labels", "order_problem"} and \
            int(stored["order_problem"]) == ORDER_CYCLE and stored["labels"].shape == (2,):
        return stored
    names = ("x", "edge_index", "invariants", "labels", "node_labels")
    if not isinstance(stored, dict) or any(not isinstance(stored.get(name), torch.Tensor) for name in names):
        raise ValueError(f"expected a dict of the tensors {names}")
    x, edge_index = stored["x"], stored["edge_index"]
    if x.dim() != 2 or edge_index.dim() != 2 or edge_index.shape[0] != 2 or stored["labels"].shape != (2,) \
            or stored["node_labels"].shape != (x.shape[0],):
        raise ValueError("tensors of unexpected shapes")
    return {**stored, "edge_index": edge_index.long()}


def _writable_folder(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK)
