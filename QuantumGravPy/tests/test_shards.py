"""The data cache's shard files (``data.shards``), which both the generator and the store reader cache through: sets
read back as written (dtypes, shapes, fields, node indices narrowed and widened), every kind of damage caught and the
shard made again, few files held open, and readers that never see a shard half written while others write it."""

import multiprocessing
import pickle

import numpy as np
import pytest

from QuantumGrav.data import shards
from QuantumGrav.data.shards import DamagedShard, Shard, ShardFiles, write_shard


def some_sets(largest_index: int = 20) -> tuple[list[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    sets = []
    for n in (5, 0, 9):
        edges = rng.integers(0, max(n, 1), size=(2, 2 * n)).astype(np.int64)
        if n == 9:
            edges[1, 0] = largest_index
        sets.append({"x": rng.random((n, 3), dtype=np.float32), "edge_index": edges,
                     "invariants": rng.random((1, 4)).astype(np.float32), "labels": rng.integers(0, 2, n, np.uint8)})
    fields = {"y": np.array([0.1 + 0.2, np.nan, -3e-300]), "flag": np.array([True, False, True]),
              "code": np.array([1, 2**40, -7])}
    return sets, fields


@pytest.mark.parametrize("largest_index, stored", [(20, "<i2"), (40_000, "<i4"), (2**33, "<i8")])
def test_sets_read_back_as_written_with_node_indices_narrowed(tmp_path, largest_index, stored):
    sets, fields = some_sets(largest_index)
    write_shard(tmp_path / "a.shard", sets, fields, narrow=("edge_index",))
    shard = Shard(tmp_path / "a.shard")
    assert len(shard) == 3 and shard.names == ["x", "edge_index", "invariants", "labels"]
    assert shard._stored[1].str == stored and shard.shapes("x") == [(5, 3), (0, 3), (9, 3)]
    for i, arrays in enumerate(sets):
        read = shard.read(i)
        for name, array in arrays.items():
            assert read[name].dtype == array.dtype and np.array_equal(read[name], array) and read[name].flags.writeable
        for name, values in fields.items():
            assert read[name].dtype == values.dtype and np.array_equal(read[name], values[i], equal_nan=True)
    assert repr(float(shard.read(0)["y"])) == repr(0.1 + 0.2), "a float field is the same float"
    shard.close()


def test_inconsistent_sets_are_refused_before_anything_is_written(tmp_path):
    sets, fields = some_sets()
    with pytest.raises(ValueError, match="every set needs the arrays"):
        write_shard(tmp_path / "a.shard", [sets[0], {"x": sets[1]["x"]}], {})
    with pytest.raises(ValueError, match="one value per set"):
        write_shard(tmp_path / "a.shard", sets, {"y": np.zeros(2)})
    with pytest.raises(ValueError, match="array 'x': one dtype across the sets"):
        write_shard(tmp_path / "a.shard", [sets[0], {**sets[2], "x": sets[2]["x"].astype(np.float64)}], {})
    assert not list(tmp_path.iterdir())


def _damaged(content: bytes, damage: str) -> bytes:
    header_end = shards._PREAMBLE.size + shards._PREAMBLE.unpack(content[:shards._PREAMBLE.size])[1]
    flip = {"magic": 0, "header_byte": header_end - 5, "data_byte": len(content) - 1}.get(damage)
    if flip is not None:
        return content[:flip] + bytes([content[flip] ^ 0x10]) + content[flip + 1:]
    if damage == "header_length":  # the magic intact, the header's length exabytes
        return content[:8] + (2**62).to_bytes(8, "little") + content[16:]
    return {"empty": b"", "truncated": content[:-3], "appended": content + b"\0", "preamble_only":
            content[:shards._PREAMBLE.size]}[damage]


@pytest.mark.parametrize("damage", ["empty", "magic", "header_length", "header_byte", "preamble_only", "truncated",
                                    "appended", "data_byte"])
def test_every_damage_is_caught_and_the_shard_made_again_with_one_warning(tmp_path, caplog, damage):
    sets, fields = some_sets()
    path = tmp_path / "a.shard"
    write_shard(path, sets, fields, narrow=("edge_index",))
    content = path.read_bytes()
    path.write_bytes(_damaged(content, damage))
    with pytest.raises(DamagedShard):
        Shard(path).read(2)
    made = []

    def make():
        made.append(1)
        write_shard(path, sets, fields, narrow=("edge_index",))

    with caplog.at_level("WARNING", logger="QuantumGrav.shards"):
        read = ShardFiles().read(path, 2, make, "the test's shard")
    assert made == [1] and path.read_bytes() == content and np.array_equal(read["x"], sets[2]["x"])
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1 and warnings[0].startswith(f"the test's shard: the cache file {path} cannot be read")


def test_a_missing_shard_is_made_once_and_other_contents_are_damage(tmp_path):
    sets, fields = some_sets()
    path, made = tmp_path / "a.shard", []
    files = ShardFiles()

    def make():
        made.append(1)
        write_shard(path, sets, fields)

    for i in (0, 1, 2):
        files.read(path, i, make, "a shard", expect=(["x", "edge_index", "invariants", "labels"], sorted(fields)))
    assert made == [1]
    with pytest.raises(RuntimeError, match="damaged again after it was made again .* not "):
        files.read(path, 0, make, "a shard", expect=(["x"], []))  # made again, still not what is expected


def test_few_shards_are_held_open_and_none_travels_with_a_pickle(tmp_path):
    sets, fields = some_sets()
    paths = [tmp_path / f"{k}.shard" for k in range(5)]
    for path in paths:
        write_shard(path, sets, fields)
    files = ShardFiles(max_open=2)
    for path in paths:
        files.read(path, 0, lambda: pytest.fail("not missing"), "a shard")
    assert list(files._open) == paths[-2:]
    copy = pickle.loads(pickle.dumps(files))
    assert not copy._open and np.array_equal(copy.read(paths[0], 1, lambda: None, "a shard")["x"], sets[1]["x"])


def _write_repeatedly(path: str, times: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    sets = [{"x": rng.random((4000, 8), dtype=np.float32)} for _ in range(8)]  # about 1 MB: writes take a while
    for _ in range(times):
        write_shard(shards.Path(path), sets, {"seed": np.full(8, seed)})


def test_readers_never_see_a_shard_half_written_while_two_processes_write_it(tmp_path):
    """Two processes rewrite one shard 40 times each (as two ranks or loader workers computing the same entry)
    while this one opens and reads it again and again: every open finds a whole shard, one writer's or the
    other's. A race is a distribution: 40 x 2 writes against some hundreds of reads."""
    path = tmp_path / "a.shard"
    _write_repeatedly(str(path), 1, 0)
    context = multiprocessing.get_context("fork")  # the writers use numpy and files alone: no thread of torch
    writers = [context.Process(target=_write_repeatedly, args=(str(path), 40, seed)) for seed in (1, 2)]
    for writer in writers:
        writer.start()
    reads = seeds = 0
    while any(writer.is_alive() for writer in writers) or reads < 50:
        shard = Shard(path)  # raises DamagedShard on anything but a whole shard
        seeds |= 1 << int(shard.read(7)["seed"])
        shard.close()
        reads += 1
    for writer in writers:
        writer.join()
        assert writer.exitcode == 0
    assert reads >= 50 and seeds & 0b110, "the writers' shards were read"
