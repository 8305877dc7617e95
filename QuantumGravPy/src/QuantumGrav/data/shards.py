"""The data cache: causal sets as graphs in shard files, each written whole or not at all and read one set at a time.

Both pipelines cache through it: the generator's data set (``dataset``: a shard per generation block of 128 sets, in
a folder named by a hash of its parameters, with ``index.npz`` and ``manifest.json`` written last) and QuantumGrav.jl's
stores (``zarr_store``: a shard per set, named by a hash of the set's stored bytes, made when a process first reads
it). A shard holds the unit its producer makes at once.

A shard file: ``MAGIC`` (the format's version), the header's length and CRC-32, the header (JSON: each array's name,
stored and read dtype, each set's shapes, per-set fields and the CRC-32 of each set's bytes), then each set's arrays
as raw little-endian bytes, one set after the other. It is written under a temporary name and renamed
(``atomic_replace``): a shard that exists is whole. One that fails a check (another format, a length or checksum that
disagrees with its header, arrays other than expected) is ``DamagedShard``; ``ShardFiles`` then makes it again, with
one warning. Integer arrays named ``narrow`` (node indices) are stored in the smallest integer type that holds them
and widened on reading, so a set reads back as it was written.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..common.files import atomic_replace, atomic_write_text
from ..common.logging_utils import get_logger

logger = get_logger("shards")

FORMAT_VERSION = 1  # part of every cache key: a new format is never read as the old one
MAGIC = b"QGSHARD" + bytes([FORMAT_VERSION])
_PREAMBLE = struct.Struct("<8sQI")  # magic, header bytes, header CRC-32
_NARROW_TYPES = (np.dtype("<i2"), np.dtype("<i4"), np.dtype("<i8"))


class DamagedShard(Exception):
    """A shard file that cannot be read back as this code writes it; the message says why."""


def write_shard(path: Path, sets: Sequence[dict[str, np.ndarray]], fields: dict[str, np.ndarray],
                narrow: Sequence[str] = ()) -> None:
    """Write ``sets`` (each the same names of arrays, each array one dtype across the sets) and ``fields`` (one
    value per set each) to the shard ``path``, whole or not at all."""
    names = list(sets[0])
    if any(list(arrays) != names for arrays in sets) or any(len(values) != len(sets) for values in fields.values()):
        raise ValueError(f"{path}: every set needs the arrays {names} and every field one value per set")
    read = {name: _one_dtype(name, [arrays[name] for arrays in sets]) for name in names}
    stored = {name: _narrowest(sets, name) if name in narrow else read[name] for name in names}
    payloads = [b"".join(np.ascontiguousarray(arrays[name], dtype=stored[name]).tobytes() for name in names)
                for arrays in sets]
    header = json.dumps({
        "arrays": [{"name": name, "stored": stored[name].str, "read": read[name].str} for name in names],
        "shapes": [[list(arrays[name].shape) for name in names] for arrays in sets],
        "fields": {name: {"dtype": np.asarray(values).dtype.str, "values": np.asarray(values).tolist()}
                   for name, values in fields.items()},
        "crc32": [zlib.crc32(payload) for payload in payloads]}, separators=(",", ":")).encode()

    def write(tmp: str) -> None:
        with open(tmp, "wb") as file:
            file.write(_PREAMBLE.pack(MAGIC, len(header), zlib.crc32(header)))
            file.write(header)
            for payload in payloads:
                file.write(payload)

    atomic_replace(Path(path), write)


def _one_dtype(name: str, arrays: list[np.ndarray]) -> np.dtype:
    dtypes = {np.asarray(array).dtype.newbyteorder("<") for array in arrays}
    if len(dtypes) != 1:
        raise ValueError(f"array {name!r}: one dtype across the sets of a shard, got {sorted(map(str, dtypes))}")
    return dtypes.pop()


def _narrowest(sets: Sequence[dict[str, np.ndarray]], name: str) -> np.dtype:
    """The smallest little-endian integer type that holds every value of array ``name`` (int16 up to 32,767
    elements: a quarter of int64's disk and page cache)."""
    arrays = [arrays[name] for arrays in sets if arrays[name].size]
    low = min((int(array.min()) for array in arrays), default=0)
    high = max((int(array.max()) for array in arrays), default=0)
    return next(dtype for dtype in _NARROW_TYPES if np.iinfo(dtype).min <= low and high <= np.iinfo(dtype).max)


class Shard:
    """One shard file open for reading, its header checked against the file: ``read(i)`` gives set ``i``."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._file = open(self.path, "rb", buffering=0)  # unbuffered: sets are read by offset (os.preadv)
        try:
            self._parse()
        except DamagedShard:
            self._file.close()
            raise
        except (ValueError, KeyError, TypeError, IndexError) as err:  # a header that is JSON but not ours
            self._file.close()
            raise DamagedShard(f"its header is not one this code writes ({type(err).__name__}: {err})") from None

    def _parse(self) -> None:
        preamble = self._file.read(_PREAMBLE.size)
        if len(preamble) < _PREAMBLE.size or preamble[:8] != MAGIC:
            raise DamagedShard(f"not a shard of format {FORMAT_VERSION} (it starts with {preamble[:8]!r})")
        _, header_bytes, header_crc = _PREAMBLE.unpack(preamble)
        length = os.fstat(self._file.fileno()).st_size
        if header_bytes > length - _PREAMBLE.size:  # checked before the read: a damaged length may say exabytes
            raise DamagedShard(f"it has {length:,} bytes, fewer than its header's length says")
        header = self._file.read(header_bytes)
        if len(header) != header_bytes or zlib.crc32(header) != header_crc:
            raise DamagedShard("its header is shorter than its length says or fails its checksum")
        header = json.loads(header)
        arrays = header["arrays"]
        self.names = [array["name"] for array in arrays]
        self._stored = [np.dtype(array["stored"]) for array in arrays]
        self._read_as = [np.dtype(array["read"]) for array in arrays]
        self._shapes = header["shapes"]
        self.fields = {name: np.asarray(field["values"], dtype=np.dtype(field["dtype"]))
                       for name, field in header["fields"].items()}
        self._crc32 = header["crc32"]
        sizes = np.array([[int(np.prod(shape)) * dtype.itemsize for shape, dtype in zip(shapes, self._stored)]
                          for shapes in self._shapes], dtype=np.int64).reshape(len(self._shapes), len(arrays))
        self._sizes, per_set = sizes, sizes.sum(axis=1)
        self._starts = _PREAMBLE.size + header_bytes + np.cumsum(per_set) - per_set
        expected = _PREAMBLE.size + header_bytes + int(per_set.sum())
        if len(self._crc32) != len(self._shapes) or length != expected:
            raise DamagedShard(f"it has {length:,} bytes where its header says {expected:,}")

    def __len__(self) -> int:
        return len(self._shapes)

    def shapes(self, name: str) -> list[tuple[int, ...]]:
        """The shape of array ``name`` in every set, without reading a set."""
        column = self.names.index(name)
        return [tuple(shapes[column]) for shapes in self._shapes]

    def read(self, i: int) -> dict[str, Any]:
        """Set ``i``'s arrays (fresh, writable, in the dtypes they were written in) and fields."""
        buffer = bytearray(int(self._sizes[i].sum()))
        if os.preadv(self._file.fileno(), [buffer], int(self._starts[i])) != len(buffer) or \
                zlib.crc32(buffer) != self._crc32[i]:
            raise DamagedShard(f"the bytes of its set {i} fail their checksum")
        arrays, offset = {}, 0
        for name, shape, stored, read_as, size in zip(self.names, self._shapes[i], self._stored, self._read_as,
                                                      self._sizes[i]):
            array = np.frombuffer(buffer, stored, count=int(size) // stored.itemsize, offset=offset).reshape(shape)
            arrays[name] = array if stored == read_as else array.astype(read_as)
            offset += int(size)
        return {**arrays, **{name: values[i] for name, values in self.fields.items()}}

    def close(self) -> None:
        self._file.close()


class ShardFiles:
    """This process's open shards, at most ``max_open`` (the least recently used closed first), each made by its
    ``make`` where it is missing or damaged. The open files are dropped when pickled (DataLoader workers, spawned
    processes) and after a fork, so no process reads through another's descriptors."""

    def __init__(self, max_open: int = 64):
        self.max_open = max_open
        self._open: OrderedDict[Path, Shard] = OrderedDict()
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_open": OrderedDict()}

    def read(self, path: Path, i: int, make: Callable[[], None], what: str,
             expect: tuple[Sequence[str], Sequence[str]] | None = None) -> dict[str, Any]:
        """Set ``i`` of the shard ``path``; ``make()`` writes the shard first where it is missing, and again where it
        is damaged or holds other arrays and fields than ``expect`` (names), with one warning naming ``what``."""
        try:
            return self._read(self.open(path, make, what), i, expect)
        except DamagedShard as err:
            self._warn_and_make(path, make, what, err)
        try:
            return self._read(self.open(path, make, what), i, expect)
        except DamagedShard as again:
            raise _damaged_again(path, what, again) from None

    @staticmethod
    def _read(shard: Shard, i: int, expect: tuple[Sequence[str], Sequence[str]] | None) -> dict[str, Any]:
        if expect is not None and (list(shard.names), sorted(shard.fields)) != (list(expect[0]), sorted(expect[1])):
            raise DamagedShard(f"it holds the arrays {shard.names} and fields {sorted(shard.fields)}, "
                               f"not {list(expect[0])} and {sorted(expect[1])}")
        if not 0 <= i < len(shard):
            raise DamagedShard(f"it holds {len(shard)} sets, not set {i}")
        return shard.read(i)

    def open(self, path: Path, make: Callable[[], None], what: str) -> Shard:
        """The shard ``path`` opened, made first by ``make()`` if missing, made again if damaged."""
        if self._pid != os.getpid():  # a forked child opens its own files rather than use the parent's
            self._open, self._pid = OrderedDict(), os.getpid()
        path = Path(path)
        if path in self._open:
            self._open.move_to_end(path)
            return self._open[path]
        if not path.is_file():
            make()
        try:
            shard = Shard(path)
        except DamagedShard as err:
            self._warn_and_make(path, make, what, err)
            try:
                shard = Shard(path)
            except DamagedShard as again:
                raise _damaged_again(path, what, again) from None
        self._open[path] = shard
        while len(self._open) > self.max_open:
            self._open.popitem(last=False)[1].close()
        return shard

    def _warn_and_make(self, path: Path, make: Callable[[], None], what: str, err: DamagedShard) -> None:
        logger.warning("%s: the cache file %s cannot be read (%s); computing it again and replacing it", what, path, err)
        dropped = self._open.pop(Path(path), None)
        if dropped is not None:
            dropped.close()
        make()


def _damaged_again(path: Path, what: str, err: DamagedShard) -> RuntimeError:
    """Made again and still damaged: the disk (or a bug), not a stale file."""
    return RuntimeError(f"{what}: the cache file {path} is damaged again after it was made again ({err}); check the "
                        f"disk it is on")


# --------------------------------------------------------------------------- the generator's folder of shards
MANIFEST = "manifest.json"
INDEX = "index.npz"
INDEX_FIELDS = ("block", "position", "num_nodes", "num_edges")  # per set, in data set order


def shard_path(directory: Path, block: int) -> Path:
    return Path(directory) / f"block_{block:05d}.shard"


def is_complete(directory: Path) -> bool:
    return (Path(directory) / MANIFEST).is_file()


def missing_blocks(directory: Path, blocks: list[int]) -> list[int]:
    return [block for block in blocks if not shard_path(directory, block).is_file()]


def finalise(directory: Path, num_blocks: int, manifest: dict[str, Any], make_block: Callable[[int], None]) -> None:
    """Merge the blocks' headers (each set's ``index`` field, its block, position and sizes) into ``index.npz``,
    in data set order, then write the manifest. ``make_block(b)`` makes block b again if its shard is damaged."""
    files, parts = ShardFiles(max_open=1), []
    for block in range(num_blocks):
        shard = files.open(shard_path(directory, block), lambda: make_block(block), f"{directory}, block {block}")
        parts.append({"index": shard.fields["index"], "block": np.full(len(shard), block, dtype=np.int32),
                      "position": np.arange(len(shard), dtype=np.int32),
                      "num_nodes": np.array([shape[0] for shape in shard.shapes("x")], dtype=np.int64),
                      "num_edges": np.array([shape[1] for shape in shard.shapes("edge_index")], dtype=np.int64)})
    merged = {key: np.concatenate([part[key] for part in parts]) for key in ("index", *INDEX_FIELDS)}
    order = np.argsort(merged["index"], kind="stable")
    if not np.array_equal(merged["index"][order], np.arange(manifest["num_sets"])):
        raise RuntimeError(f"{directory}: the blocks do not hold sets 0..{manifest['num_sets'] - 1} exactly once; "
                           f"delete the folder to generate it again")
    atomic_replace(Path(directory) / INDEX, lambda tmp: _save_npz(tmp, {k: merged[k][order] for k in INDEX_FIELDS}))
    atomic_write_text(Path(directory) / MANIFEST, json.dumps(manifest, indent=2) + "\n")


def _save_npz(tmp: str, arrays: dict[str, np.ndarray]) -> None:
    with open(tmp, "wb") as file:  # a file object: np.savez would append .npz to a path
        np.savez(file, **arrays)


class BlockReader:
    """Reads set ``i`` of a complete generated folder from its block's shard on demand. Holds the index (a few dozen
    bytes per set) and, per process, a few open shards (``ShardFiles``); ``make_block(b)`` (picklable: DataLoader
    workers call it) makes block b again where its shard is missing or damaged."""

    def __init__(self, directory: Path, make_block: Callable[[int], None]):
        self.directory, self.make_block = Path(directory), make_block
        with np.load(self.directory / INDEX) as index:
            self.index = {key: index[key] for key in INDEX_FIELDS}
        self._files = ShardFiles()

    def __len__(self) -> int:
        return len(self.index["block"])

    def read(self, i: int, expect: tuple[Sequence[str], Sequence[str]]) -> dict[str, Any]:
        """x, edge_index, invariants of set ``i`` (fresh writable arrays) and its per-set fields."""
        block, position = int(self.index["block"][i]), int(self.index["position"][i])
        item = self._files.read(shard_path(self.directory, block), position, lambda: self.make_block(block),
                                f"{self.directory}, block {block}", expect)
        if int(item["index"]) != i:
            raise RuntimeError(f"{self.directory}: block {block} holds set {int(item['index'])} where the index "
                               f"says set {i}; delete the folder to generate it again")
        return item
