"""Reading an offline W&B run back from its ``.wandb`` file (wandb ships no public reader for it).

A .wandb file is a LevelDB-style log of protobuf ``Record`` messages: a 7-byte file header (":W&B", magic
0xBEE1, version 0), then 32 KiB blocks of chunks, each with a 7-byte header (CRC-32 of type byte + data,
length, type FULL/FIRST/MIDDLE/LAST).
"""

from __future__ import annotations

import json
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_FILE_HEADER = struct.Struct("<4sHB")
_CHUNK_HEADER = struct.Struct("<IHB")
_BLOCK_SIZE = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _read_record_bytes(path: Path) -> Iterator[bytes]:
    data = path.read_bytes()
    if len(data) < _FILE_HEADER.size:  # just created: the writer has not finished the header yet
        return
    ident, magic, version = _FILE_HEADER.unpack_from(data, 0)
    if (ident, magic, version) != (b":W&B", 0xBEE1, 0):
        raise ValueError(f"{path} is not a W&B transaction log (header {ident!r} {magic:#x} v{version})")
    pos, pending = _FILE_HEADER.size, b""
    while pos + _CHUNK_HEADER.size <= len(data):
        space_in_block = _BLOCK_SIZE - pos % _BLOCK_SIZE
        if space_in_block < _CHUNK_HEADER.size:  # zero padding at the end of a block
            pos += space_in_block
            continue
        checksum, length, kind = _CHUNK_HEADER.unpack_from(data, pos)
        chunk = data[pos + _CHUNK_HEADER.size: pos + _CHUNK_HEADER.size + length]
        pos += _CHUNK_HEADER.size + length
        if kind == 0 or len(chunk) < length:  # zeros or a cut record: the writer stopped here
            break
        if zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != checksum:
            raise ValueError(f"{path}: checksum mismatch at byte {pos - length}; the file is corrupt")
        pending = chunk if kind in (_FULL, _FIRST) else pending + chunk
        if kind in (_FULL, _LAST):
            yield pending


def _parent_and_key(item, target: dict) -> tuple[dict, str]:
    """The dict that holds a protobuf update item's (nested) key, created on the way, and the key."""
    keys = list(item.nested_key) or [item.key]
    node = target
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    return node, keys[-1]


def _items_to_dict(items, target: dict) -> dict:
    """Apply protobuf update items (key or nested_key, value_json) to ``target``."""
    for item in items:
        node, key = _parent_and_key(item, target)
        node[key] = json.loads(item.value_json)
    return target


def _remove_items(items, target: dict) -> None:
    for item in items:
        node, key = _parent_and_key(item, target)
        node.pop(key, None)


def _public(values: dict) -> dict:
    return {k: v for k, v in values.items() if not k.startswith("_")}


def _read_records(path: Path) -> Iterator[Any]:
    """The protobuf ``Record`` messages of a .wandb file, in order."""
    from wandb.proto import wandb_internal_pb2

    for raw in _read_record_bytes(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        yield record


def wait_for_exit_record(path: Path, timeout_s: float) -> bool:
    """True once the last record of ``path`` is the run's "exit" record (False after timeout_s)."""
    deadline = time.monotonic() + timeout_s
    while True:
        kinds = [r.WhichOneof("record_type") for r in _read_records(path)] if path.is_file() else []
        if kinds and kinds[-1] == "exit":
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def _read_offline_run(path: Path) -> dict[str, Any]:
    run: dict[str, Any] = {"id": None, "name": None, "group": None, "dir": str(path.parent), "config": {},
                           "history": [], "summary": {}}
    for record in _read_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run["id"], run["name"], run["group"] = record.run.run_id, record.run.display_name, record.run.run_group
            _items_to_dict(record.run.config.update, run["config"])
        elif kind == "config":
            _items_to_dict(record.config.update, run["config"])
            _remove_items(record.config.remove, run["config"])
        elif kind == "history":
            run["history"].append(_public(_items_to_dict(record.history.item, {})))
        elif kind == "summary":
            _items_to_dict(record.summary.update, run["summary"])
            _remove_items(record.summary.remove, run["summary"])
    run["config"], run["summary"] = _public(run["config"]), _public(run["summary"])
    return run


def epochs_on_disk(run_dir: Path, run_id: str) -> list[int]:
    """The epochs that the offline files of W&B run ``run_id`` hold (all its attempts so far)."""
    return [int(row["epoch"]) for run in read_offline_runs(run_dir) if run["id"] == run_id
            for row in run["history"] if "epoch" in row]


def read_offline_runs(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every offline W&B run under ``run_dir/wandb``, oldest first.

    Each is ``{"id", "name", "group", "dir", "config", "history", "summary"}``: ``history`` has one dict per
    ``log`` call, ``_``-prefixed keys (``_step``, ``_runtime``, ...) left out. A resumed run
    is a second directory with the same ``id`` (``wandb sync`` appends it to the same run).
    """
    files = (Path(run_dir) / "wandb").glob("offline-run-*/run-*.wandb")
    # Directory names are offline-run-<YYYYmmdd_HHMMSS>-<id>[-<n>]: sorted = started order.
    return [_read_offline_run(path) for path in sorted(files, key=lambda p: p.parent.name)]
