"""The feature cache of QuantumGrav.jl's stores (``QuantumGravJLDataset``'s ``cache``) in the data cache
(``data.shards``): the folder it goes to, the key of a set's entry, and a set's graph as an entry."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...common.errors import UserError
from ...common.logging_utils import get_logger, rank_zero_warn
from .. import shards
from ..dataset import CACHE_FORMAT_VERSION
from ..invariants import INVARIANT_NAMES, NODE_FEATURES
from .graphs import ORDER_CYCLE

logger = get_logger("zarr_store")  # the store reader's channel: its warnings name the store

# Bump when what is cached per causal set changes; the features' own version is CACHE_FORMAT_VERSION.
# 2: the order invariants are cached with the features. 3: edge indices stored as int16/int32. 4: the per-element
# labels (node_targets) too, whatever the target, so that one cache serves every target. The shards' format version
# is in the key too (a set's entry was a torch file before it, ``<key>.pt``, which is no longer read).
STORE_CACHE_VERSION = 4


def group_cache_key(folder: Path, edges: str) -> str:
    """The feature cache's key of a store's group (its ``folder``): a hash of every file of the group as stored
    (compressed chunks and metadata: its content, read without zarr, which costs more than the bytes), the edge
    kind and the feature version."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"store_cache={STORE_CACHE_VERSION} features={CACHE_FORMAT_VERSION}:{','.join(NODE_FEATURES)} "
                  f"invariants={','.join(INVARIANT_NAMES)} edges={edges} shard={shards.FORMAT_VERSION}".encode())
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


# What a set's shard (``data.shards``) holds: its graph, and as fields its labels and what kind of order it is
# (``graphs.ORDER_*``); a set with a cycle has no graph (empty arrays), only its labels. Node indices are stored in the
# smallest integer type that holds them (int16 up to 32,767 elements) and widened on reading.
ENTRY_CONTENTS = (("x", "edge_index", "invariants", "node_labels"), ("manifold_like", "cset_type", "order_problem"))


def write_entry(path: Path, graph: dict[str, torch.Tensor]) -> None:
    """Write a set's graph (``QuantumGravJLDataset._read_graph``) as its cache entry: one shard of one set."""
    if "x" in graph:
        arrays = {name: graph[name].numpy() for name in ENTRY_CONTENTS[0]}
    else:  # a cycle: the labels alone
        arrays = {"x": np.zeros((0, len(NODE_FEATURES)), np.float32), "edge_index": np.zeros((2, 0), np.int64),
                  "invariants": np.zeros((1, 0), np.float32), "node_labels": np.zeros(0, np.uint8)}
    labels = graph["labels"].tolist()
    fields = {"manifold_like": np.array([labels[0]], np.int64), "cset_type": np.array([labels[1]], np.int64),
              "order_problem": np.array([int(graph["order_problem"])], np.int64)}
    shards.write_shard(path, [arrays], fields, narrow=("edge_index",))


def graph_of_entry(entry: dict[str, Any]) -> dict[str, torch.Tensor]:
    """A cache entry read back (``ShardFiles.read``) as the graph that was written."""
    labels = torch.tensor([int(entry["manifold_like"]), int(entry["cset_type"])])
    problem = int(entry["order_problem"])
    if problem == ORDER_CYCLE:
        return {"labels": labels, "order_problem": torch.tensor(ORDER_CYCLE)}
    return {**{name: torch.from_numpy(entry[name]) for name in ENTRY_CONTENTS[0]}, "labels": labels,
            "order_problem": torch.tensor(problem)}


def announce_earlier_entries(cache_dirs: list[Path]) -> None:
    """One warning, on rank 0, naming the cache folders that hold entries of the cache's earlier format (torch files,
    ``<key>.pt``), which are no longer read: their space is the user's to free."""
    counts = {}
    for folder in cache_dirs:
        with os.scandir(folder) as entries:
            counts[folder] = sum(1 for entry in entries if entry.name.endswith(".pt") and entry.is_file())
    stale = {folder: count for folder, count in counts.items() if count}
    if stale:
        rank_zero_warn(logger, f"QuantumGrav.jl data: {', '.join(str(folder) for folder in stale)} hold "
                               f"{sum(stale.values()):,} feature-cache files of an earlier format (*.pt), which are no "
                               f"longer read (the cache is now one shard per set, *.shard): delete them to free their "
                               f"space")


def _writable_folder(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK)
