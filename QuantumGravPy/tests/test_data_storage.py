"""The generator's shard cache: made in blocks (the same sets whatever the workers or ranks), read from
memory or from disk (the same items), resumed after a crash, built by `python -m QuantumGrav generate`."""

import filecmp
import pickle
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.loader import DataLoader

import QuantumGrav as QG
from QuantumGrav.data import causal_sets as cs
from QuantumGrav import cli
from QuantumGrav.data import dataset as qg_data
from QuantumGrav.common import processes as qg_processes
from QuantumGrav.data.dataset import CausalSetDataset, generate_share

REPO = Path(__file__).resolve().parents[2]
# Two generation blocks of tiny sets: enough to share out, milliseconds to make.
TWO_BLOCKS = {"num_samples": cs.GENERATION_BLOCK_SIZE + 44, "n_min": 5, "n_max": 7, "seed": 11}


def _assert_same_items(first, second):
    assert len(first) == len(second)
    for a, b in zip(first, second):
        assert sorted(a.keys()) == sorted(b.keys())
        for key in a.keys():
            if torch.is_tensor(a[key]):
                assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
            else:
                assert a[key] == b[key], key


def _cache_files(dataset) -> list[Path]:
    return sorted(Path(dataset.processed_dir).iterdir())


def test_the_cache_holds_the_sets_of_generate_causal_sets(tmp_path):
    dataset = CausalSetDataset(tmp_path, **TWO_BLOCKS, workers=1)
    records = cs.generate_causal_sets(TWO_BLOCKS["num_samples"], n_min=5, n_max=7, seed=11)
    assert len(dataset) == len(records)
    for graph, record in zip(dataset, records):
        assert torch.equal(graph.x, torch.from_numpy(record.features))
        assert torch.equal(graph.edge_index, qg_data.past_to_future_edges(record.link_matrix))
        assert cs.CSET_TYPES[int(graph.cset_type)] == record.cset_type


def test_two_worker_processes_write_the_same_cache_as_one(tmp_path):
    one = CausalSetDataset(tmp_path / "one", **TWO_BLOCKS, workers=1)
    two = CausalSetDataset(tmp_path / "two", **TWO_BLOCKS, workers=2)
    assert one.generated_sets == two.generated_sets == TWO_BLOCKS["num_samples"]
    names = [p.name for p in _cache_files(one)]
    assert names == [p.name for p in _cache_files(two)] and "block_00001.shard" in names
    for name in names:
        if name != "manifest.json":
            assert filecmp.cmp(Path(one.processed_dir) / name, Path(two.processed_dir) / name, shallow=False), name


def test_ranks_sharing_out_the_blocks_make_the_same_data_as_one_process(tmp_path):
    data_cfg = {"root": str(tmp_path / "ranks"), **TWO_BLOCKS, "workers": 1}
    made = [generate_share(data_cfg, rank, 2) for rank in (1, 0)]  # in any order: each block has its own stream
    assert made == [44, cs.GENERATION_BLOCK_SIZE]
    shared = CausalSetDataset.from_config(data_cfg)
    assert shared.generated_sets == 0, "rank 0 only merged the blocks' indexes"
    assert generate_share(data_cfg, 1, 2) == 0, "a complete cache is not made again"
    _assert_same_items(shared, CausalSetDataset(tmp_path / "alone", **TWO_BLOCKS, workers=1))


def test_disk_storage_reads_the_same_items_as_memory_also_in_loader_workers(tmp_path):
    memory = CausalSetDataset(tmp_path, **TWO_BLOCKS, target="myrheim_meyer_dimension", edges="relations",
                              workers=1)
    disk = CausalSetDataset(tmp_path, **TWO_BLOCKS, target="myrheim_meyer_dimension", edges="relations",
                            storage="disk")
    assert disk.generated_sets == 0 and disk.processed_dir == memory.processed_dir
    _assert_same_items(memory, disk)
    _assert_same_items(memory.index_select([7, 3]), pickle.loads(pickle.dumps(disk)).index_select([7, 3]))
    disk[0]  # this process's shard handles are open now: forked loader workers must not share them
    batches = [DataLoader(d, batch_size=32, num_workers=workers) for d, workers in ((memory, 0), (disk, 2))]
    for a, b in zip(*batches):
        assert torch.equal(a.x, b.x) and torch.equal(a.edge_index, b.edge_index) and torch.equal(a.y, b.y)


def test_an_interrupted_cache_is_completed_never_read_as_complete(tmp_path, monkeypatch):
    """A build killed while it wrote block 1 leaves block 0's shard and block 1's hidden temporary file, half
    written (``atomic_replace``): the next run makes block 1 alone and finishes the folder."""
    complete = CausalSetDataset(tmp_path / "complete", **TWO_BLOCKS, workers=1)
    interrupted = Path(complete.processed_dir.replace("complete", "interrupted"))
    interrupted.mkdir(parents=True)
    (interrupted / "block_00000.shard").write_bytes((Path(complete.processed_dir) / "block_00000.shard").read_bytes())
    half = (Path(complete.processed_dir) / "block_00001.shard").read_bytes()
    (interrupted / ".block_00001.shard.0badc0de.tmp").write_bytes(half[:len(half) // 2])
    made = []
    generate = qg_data.generate_block_files
    monkeypatch.setattr(qg_data, "generate_block_files", lambda *args: made.append(args[2]) or generate(*args))
    resumed = CausalSetDataset(tmp_path / "interrupted", **TWO_BLOCKS, workers=1, storage="disk")
    assert made == [1] and resumed.generated_sets == 44
    _assert_same_items(complete, resumed)


@pytest.mark.parametrize("damage", ["truncated", "flipped_byte", "deleted"])
@pytest.mark.parametrize("storage", ["memory", "disk"])
def test_a_damaged_block_of_a_complete_cache_is_made_again_with_a_warning(tmp_path, caplog, damage, storage):
    """A shard damaged after the cache was complete (a copy cut short, a bit flipped on disk, a file deleted) is
    caught by its length, checksum or absence and made again (the same bytes, its block's own random stream)."""
    complete = CausalSetDataset(tmp_path, **TWO_BLOCKS, workers=1)
    shard = Path(complete.processed_dir) / "block_00001.shard"
    content = shard.read_bytes()
    if damage == "deleted":
        shard.unlink()
    else:
        damaged = bytearray(content[:len(content) - 10] if damage == "truncated" else content)
        damaged[-1] ^= 0x01
        shard.write_bytes(bytes(damaged))
    with caplog.at_level("WARNING", logger="QuantumGrav.shards"):
        _assert_same_items(complete, CausalSetDataset(tmp_path, **TWO_BLOCKS, storage=storage))
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert len(warnings) == (damage != "deleted") and shard.read_bytes() == content
    assert all(str(shard) in line and "computing it again" in line for line in warnings), warnings


def test_the_training_range_reads_a_split_from_disk_one_set_at_a_time(tmp_path):
    """The trainer records the training split's range of N and invariants by reading its sets (``storage: disk``
    keeps no invariants in memory). Handed a list of every set, a rank held the whole split at once, and kept that
    memory: the RSS of configs/train.yaml at 50,000 sets of 32 elements grew by 55 % over 5,000
    (bench_memory_scaling.py). Read from a generator, at most the set being read and the one before are alive."""
    from QuantumGrav.data.training_range import counts_and_invariants

    dataset = CausalSetDataset(tmp_path, **TWO_BLOCKS, workers=1, storage="disk")
    alive = []

    def one_at_a_time():
        for i in range(len(dataset)):
            assert sum(ref() is not None for ref in alive) <= 1, "the sets read before are still held"
            item = dataset[i]
            alive.append(weakref.ref(item))
            yield item

    counts, rows = counts_and_invariants(one_at_a_time(), True)
    expected_counts, expected_rows = counts_and_invariants(list(dataset), True)
    assert np.array_equal(counts, expected_counts) and np.array_equal(rows, expected_rows)
    assert rows.shape == (len(dataset), len(cs.INVARIANT_NAMES)) and rows.dtype == np.float64


def test_bad_storage_and_workers_are_named(tmp_path):
    with pytest.raises(ValueError, match="storage: expected one of"):
        CausalSetDataset(tmp_path, **TWO_BLOCKS, storage="tape")
    with pytest.raises(ValueError, match="workers: expected a positive integer"):
        CausalSetDataset(tmp_path, **TWO_BLOCKS, workers=0)
    assert not list(tmp_path.iterdir()), "nothing written for bad arguments"


def test_auto_workers_start_a_pool_only_for_a_large_data_set(monkeypatch):
    monkeypatch.setattr(qg_processes, "usable_cpu_count", lambda: 8)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    small = {"num_samples": 2000, "n_min": 64, "n_max": 128}  # the default: about a second on one core
    large = {"num_samples": 100_000, "n_min": 1024, "n_max": 1024}
    assert qg_data.generation_workers(None, small) == 1
    assert qg_data.generation_workers(None, large) == 4, "8 cores shared by 2 processes on the node"
    assert qg_data.generation_workers(3, small) == 3, "an explicit data.workers is kept"


def test_training_reads_from_disk(tiny_config):
    trainer = QG.Trainer(tiny_config({"data.storage": "disk", "training.num_epochs": 1}))
    assert trainer.dataset._reader is not None, "items come from the shards"
    train_loader, val_loader, _ = trainer.prepare_dataloaders()  # the test split: the two-rank run below
    train_history, val_history = trainer.run_training(train_loader, val_loader)
    trainer.close()
    assert len(train_history) == len(val_history) == 1 and 0.0 <= val_history[0]["accuracy"] <= 1.0


def test_two_ranks_generate_shares_and_train_from_disk_with_exact_metrics(tiny_config, tmp_path):
    overrides = {"data.storage": "disk", "data.root": str(tmp_path / "data"), "data.num_samples": 170,
                 "data.workers": 1, "training.num_epochs": 1}
    result = QG.launch(tiny_config(overrides), nproc=2)
    single = QG.Trainer(tiny_config({**overrides, "data.storage": "memory", "training.run_name": "check"}))
    assert single.dataset.generated_sets == 0, "the ranks made the whole cache"
    single.core_model.load_state_dict(torch.load(Path(result["run_dir"]) / "checkpoints" / "last.pt",
                                                 weights_only=True)["model"])
    _, val_loader, _ = single.prepare_dataloaders()
    expected = single.evaluate(val_loader)
    assert result["history"][-1]["val_loss"] == pytest.approx(expected["loss"], rel=1e-5)
    single.close()


def test_generate_cli_builds_the_cache_and_reports_it(tmp_path, capsys):
    root = tmp_path / "data"
    argv = ["generate", "--config", str(REPO / "configs" / "train.yaml"), "--set", f"data.root={root}", "--set",
            "data.num_samples=40", "--set", "data.n_min=6", "--set", "data.n_max=8", "--workers", "1"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    folder = next(root.iterdir())
    assert f"{folder}: 40 causal sets" in out and "sets/s" in out and (folder / "manifest.json").is_file()
    assert cli.main(argv) == 0 and "nothing generated" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--workers", "0"], "--workers: expected an integer >= 1, got 0"),
    (["--set", "data.storage=tape"], "data.storage"),
    (["--config", "no_such.yaml"], "no_such.yaml"),
])
def test_generate_cli_bad_input_is_one_error_line(tmp_path, capsys, argv, message):
    config = str(REPO / "configs" / "train.yaml")
    assert cli.main(["generate", "--config", config, "--set", f"data.root={tmp_path}", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("error:")] and not list(tmp_path.iterdir())


def test_a_failing_rank_fails_every_rank_generating_data():
    from ddp_helpers import generate_with_a_failing_rank, spawn_ranks

    reports = dict(spawn_ranks(generate_with_a_failing_rank, 2))
    assert reports[1] == "ValueError: block 3: no space left on device"
    assert reports[0] == ("RuntimeError: rank 1 failed, so every rank stops: ValueError: block 3: no space left on "
                          "device")
