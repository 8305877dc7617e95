"""The generated data's cache on disk: one shard per generation block, an index, a manifest written last.

Layout of a cache folder (``CausalSetDataset.processed_dir``):

* ``block_00007.bin``: the block's sets one after the other, each as raw little-endian bytes:
  ``x`` (float32, nodes x features), ``edge_index`` (int64, 2 x edges), ``invariants`` (float32).
* ``block_00007.npz``: the block's small per-set arrays (``SET_FIELDS``: dataset index, byte offset,
  sizes, labels). Written after the ``.bin``, so its presence means the block is complete.
* ``index.npz``: all blocks' per-set arrays in dataset order (with each set's block), and
  ``manifest.json``, written last: without it the cache is incomplete, and the missing blocks are made
  (an interrupted generation resumes; a shard without its ``.npz`` is made again).

Every file is written with ``atomic_replace``: a crash leaves no half-written file. Items are read one
at a time with ``os.preadv`` (``ShardReader``), so a process holds the index, not the data.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ..common.files import atomic_replace, atomic_write_text

MANIFEST = "manifest.json"
INDEX = "index.npz"
# Per set: its dataset index, where its bytes start in the block's .bin, its sizes and its labels.
SET_FIELDS: tuple[str, ...] = ("index", "offset", "num_nodes", "num_edges", "y", "manifold_like", "dimension",
                               "cset_type", "flip_fraction")


def shard_path(directory: Path, block: int) -> Path:
    return Path(directory) / f"block_{block:05d}.bin"


def block_index_path(directory: Path, block: int) -> Path:
    return Path(directory) / f"block_{block:05d}.npz"


def is_complete(directory: Path) -> bool:
    return (Path(directory) / MANIFEST).is_file()


def missing_blocks(directory: Path, blocks: list[int]) -> list[int]:
    return [block for block in blocks if not block_index_path(directory, block).is_file()]


def write_block(directory: Path, block: int, items: list[dict[str, np.ndarray]], per_set: dict[str, np.ndarray]
                ) -> None:
    """Write one block: ``items`` (x, edge_index, invariants per set) to its shard, then ``per_set`` (the
    ``SET_FIELDS`` except the offsets and sizes, which are computed here) to its index."""
    directory.mkdir(parents=True, exist_ok=True)  # by the blocks' writers: a build refused before it wrote leaves none
    offsets, position = [], 0
    for item in items:
        offsets.append(position)
        position += sum(item[key].nbytes for key in ("x", "edge_index", "invariants"))

    def write_shard(tmp: str) -> None:
        with open(tmp, "wb") as shard:
            for item in items:
                for key in ("x", "edge_index", "invariants"):
                    shard.write(np.ascontiguousarray(item[key]).tobytes())

    atomic_replace(shard_path(directory, block), write_shard)
    arrays = {**per_set, "offset": np.asarray(offsets, dtype=np.int64),
              "num_nodes": np.asarray([item["x"].shape[0] for item in items], dtype=np.int64),
              "num_edges": np.asarray([item["edge_index"].shape[1] for item in items], dtype=np.int64)}
    atomic_replace(block_index_path(directory, block), lambda tmp: _save_npz(tmp, arrays))


def _save_npz(tmp: str, arrays: dict[str, np.ndarray]) -> None:
    with open(tmp, "wb") as file:  # a file object: np.savez would append .npz to a path
        np.savez(file, **arrays)


def finalise(directory: Path, num_blocks: int, manifest: dict[str, Any]) -> None:
    """Merge the blocks' indexes into ``index.npz`` (dataset order), then write the manifest."""
    parts = []
    for block in range(num_blocks):
        with np.load(block_index_path(directory, block)) as part:
            arrays = {key: part[key] for key in SET_FIELDS}
        parts.append({**arrays, "block": np.full(len(arrays["index"]), block, dtype=np.int32)})
    merged = {key: np.concatenate([part[key] for part in parts]) for key in (*SET_FIELDS, "block")}
    order = np.argsort(merged["index"], kind="stable")
    if not np.array_equal(merged["index"][order], np.arange(manifest["num_sets"])):
        raise RuntimeError(f"{directory}: the blocks do not hold sets 0..{manifest['num_sets'] - 1} exactly once; "
                           f"delete the folder to generate it again")
    atomic_replace(Path(directory) / INDEX, lambda tmp: _save_npz(tmp, {k: v[order] for k, v in merged.items()}))
    atomic_write_text(Path(directory) / MANIFEST, json.dumps(manifest, indent=2) + "\n")


class ShardReader:
    """Reads set ``i`` of a complete cache from its shard on demand. Holds the index (a few dozen bytes
    per set) and, per process, one open file per shard: the handles are dropped when pickled (DataLoader
    workers, spawned processes) and reopened after a fork, so no process reads through another's."""

    def __init__(self, directory: Path, num_node_features: int, num_invariants: int):
        self.directory = Path(directory)
        self.num_node_features, self.num_invariants = num_node_features, num_invariants
        with np.load(self.directory / INDEX) as index:
            self.index = {key: index[key] for key in (*SET_FIELDS, "block")}
        self._files: dict[int, BinaryIO] = {}  # unbuffered: preadv reads by offset, the file closes when dropped
        self._pid = os.getpid()

    def __len__(self) -> int:
        return len(self.index["index"])

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_files": {}}

    def _descriptor(self, block: int) -> int:
        if self._pid != os.getpid():  # a forked child opens its own files rather than use the parent's
            self._files, self._pid = {}, os.getpid()
        if block not in self._files:
            self._files[block] = open(shard_path(self.directory, block), "rb", buffering=0)
        return self._files[block].fileno()

    def read(self, i: int) -> dict[str, np.ndarray]:
        """x, edge_index, invariants of set ``i`` (fresh writable arrays) and its ``SET_FIELDS`` values."""
        n, e = int(self.index["num_nodes"][i]), int(self.index["num_edges"][i])
        sizes = (4 * n * self.num_node_features, 16 * e, 4 * self.num_invariants)
        buffer = bytearray(sum(sizes))
        got = os.preadv(self._descriptor(int(self.index["block"][i])), [buffer], int(self.index["offset"][i]))
        if got != len(buffer):
            raise OSError(f"{self.directory}: the shard of set {i} is shorter than its index says; delete the "
                          f"folder to generate it again")
        x_end, edges_end = sizes[0], sizes[0] + sizes[1]
        return {"x": np.frombuffer(buffer, np.float32, count=n * self.num_node_features).reshape(n, -1),
                "edge_index": np.frombuffer(buffer, np.int64, count=2 * e, offset=x_end).reshape(2, e),
                "invariants": np.frombuffer(buffer, np.float32, count=self.num_invariants, offset=edges_end),
                **{key: self.index[key][i] for key in SET_FIELDS}}
