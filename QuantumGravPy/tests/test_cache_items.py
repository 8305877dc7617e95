"""The items read through the data cache, fingerprinted before the generator's shard cache and the store reader's
one-file-per-set cache became one cache (issue 62): the same seed and the same store keep giving the same tensors,
byte for byte, dtype and shape, whether read from memory or disk, cached or computed, at the first read or after."""

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch
import zarr

import QuantumGrav as QG
from QuantumGrav.data import orders
from QuantumGrav.data.dataset import CausalSetDataset
from QuantumGrav.data.kinds.stores import write_kind_stores
from QuantumGrav.data.zarr_store import QuantumGravJLDataset, write_julia_group, write_julia_store

REPO = Path(__file__).resolve().parents[2]
# Two generation blocks (128 + 44 sets) of small sets, every default class.
GENERATED = {"num_samples": 172, "n_min": 10, "n_max": 24, "seed": 11, "workers": 1}


def items_fingerprint(items) -> str:
    """A hash of every attribute of every item: its name, dtype, shape and bytes (or value)."""
    digest = hashlib.sha256()
    for item in items:
        for key in sorted(item.keys()):
            value = item[key]
            if torch.is_tensor(value):
                digest.update(f"{key}:{value.dtype}:{tuple(value.shape)}:".encode())
                digest.update(value.contiguous().view(torch.uint8).numpy().tobytes() if value.numel() else b"")
            else:
                digest.update(f"{key}={value!r}:".encode())
    return digest.hexdigest()[:16]


GENERATED_ITEMS = {  # (edges, target) -> fingerprint of the 172 items
    ("links", "cset_type"): "76884af018ecbe1d",
    ("relations", "myrheim_meyer_dimension"): "f993f23dd8d29504",
    ("links", "manifold_like"): "5d7896021057956e",
}


@pytest.mark.parametrize("edges, target", sorted(GENERATED_ITEMS))
def test_the_generators_items_are_those_cached_before(tmp_path, edges, target):
    memory = CausalSetDataset(tmp_path, **GENERATED, edges=edges, target=target)
    disk = CausalSetDataset(tmp_path, **GENERATED, edges=edges, target=target, storage="disk")
    assert memory.generated_sets == len(memory) and disk.generated_sets == 0
    assert items_fingerprint(memory) == items_fingerprint(disk) == GENERATED_ITEMS[edges, target]
    assert np.array_equal(memory.graph_sizes(), disk.graph_sizes())
    sizes = disk.graph_sizes()
    assert sizes.tolist() == [[item.num_nodes, item.edge_index.shape[1]] for item in disk]


def test_the_default_jobs_items_are_those_cached_before(tmp_path):
    """configs/train.yaml's data (make train's 2,000 sets, seed 1234), read from disk: the items that the stored
    results of the default job were trained on. (Seeds 21 to 25, the 10-run seeds check's, were compared once, in
    memory and on disk, with the code before the caches became one: the same.)"""
    data = QG.load_config(REPO / "configs" / "train.yaml", [f"data.root={tmp_path}", "data.storage=disk",
                                                             "data.workers=1"])["data"]
    assert (data["num_samples"], data["n_min"], data["n_max"], data["seed"]) == (2000, 64, 128, 1234)
    assert items_fingerprint(CausalSetDataset.from_config(data)) == "89e69973ff1a8bfb"


def _kind_stores(folder: Path) -> list[Path]:
    return write_kind_stores(folder, num_per_kind=3, seed=4, n_range=(24, 40))


STORE_ITEMS = {  # target -> fingerprint of the 27 items of the nine kinds' stores
    "manifold_like": "b8e807d083e557df",
    "cset_type": "97f5a33b64a5fe0c",
    "inserted_block": "24dc8f9e7a3e5ac6",
    "toggled_relations": "0d591a76251c9c1c",
}


@pytest.mark.parametrize("target", sorted(STORE_ITEMS))
def test_the_stores_items_are_those_cached_before(tmp_path, target):
    stores = _kind_stores(tmp_path / "kinds")
    computed = items_fingerprint(QuantumGravJLDataset(stores, target=target, cache=False))
    first = items_fingerprint(QuantumGravJLDataset(stores, target=target))  # computes and caches
    second = items_fingerprint(QuantumGravJLDataset(stores, target=target))  # reads the cache
    assert computed == first == second == STORE_ITEMS[target]


def _intransitive(R: np.ndarray) -> np.ndarray:
    """``R`` with one implied relation taken out (i < j < k related, i < k not)."""
    links = orders.transitive_reduction(R)
    i, j = map(int, np.argwhere(links)[0])
    k = int(np.flatnonzero(links[j])[0])
    broken = R.copy()
    broken[i, k] = False
    return broken


def _store_of_problems(folder: Path) -> Path:
    """A 2d sprinkling, one with an implied relation missing, one with a cycle, and one stored as its links."""
    from QuantumGrav.data import causal_sets as cs

    rng = np.random.default_rng(8)
    good = [cs.sprinkle_diamond(20, 2, rng)[1] for _ in range(4)]
    store = write_julia_store(folder / "complex_topology.zarr", good[:1], [2], [True])
    root = zarr.open_group(str(store), mode="a", zarr_format=2)
    write_julia_group(root, 2, _intransitive(good[1]), 2, True)
    cycle = good[2].copy()
    cycle[-1, 0] = True
    write_julia_group(root, 3, cycle, 2, True)
    write_julia_group(root, 4, good[3], 2, True, links_only=True)
    return store


STORE_PROBLEM_ITEMS = {"close": "8c56063d70dee77f", "skip": "af1ee1b19fc559fe"}


@pytest.mark.parametrize("mode", sorted(STORE_PROBLEM_ITEMS))
def test_closed_and_skipped_sets_are_those_cached_before(tmp_path, mode):
    """The cache keeps a closed set's graph and only the labels of a set with a cycle (refused under close)."""
    store = _store_of_problems(tmp_path)
    if mode == "close":
        root = zarr.open_group(str(store), mode="a", zarr_format=2)
        del root["cset_3"]
    reads = [QuantumGravJLDataset(store, not_partial_orders=mode, cache=cache) for cache in (False, True, True)]
    assert {items_fingerprint(dataset) for dataset in reads} == {STORE_PROBLEM_ITEMS[mode]}
    assert reads[1].order_repairs == reads[2].order_repairs == reads[0].order_repairs
