"""A PyG dataset of generated causal sets, cached on disk, and a deterministic split.

Each causal set becomes a directed graph: nodes are its elements (features
``causal_sets.NODE_FEATURES``), edges point from past to future along its links (the
Hasse diagram, ``edges="links"``) or along all of its relations (``edges="relations"``).
The set is generated once and cached under ``root`` in a folder named by a hash of all
generation parameters, so changing any of them regenerates and the same ones reload.
The cache is the data cache's (``shards``, which QuantumGrav.jl's stores are cached in too): a shard per generation
block, made by a pool of ``workers`` processes and, under DDP, shared out over the ranks (``generate_share``); a
block found damaged is made again. ``storage="memory"`` loads it whole, ``storage="disk"`` reads each item from its
shard when asked.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch_geometric.data import Data, InMemoryDataset

from . import causal_sets, shards as data_shards
from .causal_sets import (CSET_TYPES, INVARIANT_NAMES, MANIFOLD_CLASSES, NODE_FEATURES, CausalSetRecord,
                          check_generation_args, draw_plan, generate_block, plan_order)
from ..config.sections.data import DATA_DEFAULTS, VALID_CLASSES, VALID_EDGES, VALID_STORAGE, VALID_TARGETS  # noqa: F401
from ..common.processes import cores_per_process, map_in_workers
from ..tasks.registry import BinaryTask, MulticlassTask, RegressionTask

# The task each target is learned as (QuantumGrav.tasks); task.type: auto reads it from the dataset.
TARGET_TASKS: dict[str, str] = {"cset_type": MulticlassTask.type, "manifold_like": BinaryTask.type,
                                "dimension": MulticlassTask.type, "myrheim_meyer_dimension": RegressionTask.type}
_SPLIT_KEYS = ("split", "split_seed")  # read by the caller, not generation parameters
_OTHER_SOURCE_KEYS = ("type", "kwargs")  # the config's user-dataset source (sources), not the generator's
CACHE_FORMAT_VERSION = 4  # bump when the generator or the stored Data change: old caches are then ignored
MANIFOLD_LIKE_NAMES = ["non_manifold_like", "manifold_like"]
# What a block's shard holds per set: its arrays, and its fields (its index in the data set and its labels).
SHARD_CONTENTS = (("x", "edge_index", "invariants"),
                  ("index", "y", "manifold_like", "dimension", "cset_type", "flip_fraction"))


def _generation_params(num_samples: int, n_min: int, n_max: int, dimensions: Sequence[int],
                       classes: Sequence[str], destroy_fraction: float | Sequence[float], edges: str, target: str,
                       seed: int) -> dict[str, Any]:
    """The checked parameters as plain JSON types (their hash names the cache folder)."""
    if not isinstance(num_samples, (int, np.integer)) or num_samples < 1:
        raise ValueError(f"num_samples: expected a positive integer, got {num_samples!r}")
    if edges not in VALID_EDGES:
        raise ValueError(f"edges: expected one of {VALID_EDGES}, got {edges!r}")
    if target not in VALID_TARGETS:
        raise ValueError(f"target: expected one of {VALID_TARGETS}, got {target!r}")
    if target == "dimension" and not any(c in MANIFOLD_CLASSES for c in classes):
        raise ValueError(f"classes: target 'dimension' keeps only manifold-like sets, so classes must "
                         f"contain one of {list(MANIFOLD_CLASSES)}, got {list(classes)!r}")
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: expected a non-negative integer, got {seed!r}")
    check_generation_args(num_samples, n_min, n_max, dimensions, classes, destroy_fraction)
    return {"num_samples": int(num_samples), "n_min": int(n_min), "n_max": int(n_max),
            "dimensions": [int(d) for d in dimensions], "classes": [str(c) for c in classes],
            "destroy_fraction": _json_fraction(destroy_fraction), "edges": edges, "target": target, "seed": int(seed)}


def _json_fraction(destroy_fraction: float | Sequence[float]) -> float | list[float]:
    """A flip fraction or [low, high] range as JSON (checked by ``check_generation_args`` before)."""
    if isinstance(destroy_fraction, (list, tuple)):
        return [float(v) for v in destroy_fraction]
    return float(destroy_fraction)


def _cache_key(params: dict[str, Any]) -> str:
    text = json.dumps({**params, "format_version": CACHE_FORMAT_VERSION, "shard_format": data_shards.FORMAT_VERSION,
                       "block_size": causal_sets.GENERATION_BLOCK_SIZE}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_directory(root: str | os.PathLike, params: dict[str, Any]) -> Path:
    return Path(root) / f"causal_sets_{_cache_key(params)}"


# Auto workers (data.workers: null) start a pool only for more estimated work than this: the pool's start
# (its fork server imports the package) takes seconds, more than a small data set takes to generate.
POOL_WORTH_SECONDS = 10.0
# One process generates about 1,670 sets/s at N = 128 and the time per set grows about like N^2 up to
# N = 512 (benchmarks/generation/bench_generation.py): the basis of the estimate above.
SECONDS_PER_SET_AT_128 = 1 / 1670


def default_workers() -> int:
    """Generation processes for this process: its cores shared among the processes of this node."""
    return cores_per_process()


def generation_workers(workers: int | None, params: dict[str, Any]) -> int:
    """``workers`` if given; else 1 for a data set made in under ``POOL_WORTH_SECONDS`` by one process
    (by estimate), ``default_workers()`` for a larger one."""
    if workers is not None:
        return workers
    mean_n = (params["n_min"] + params["n_max"]) / 2
    estimate = params["num_samples"] * SECONDS_PER_SET_AT_128 * (mean_n / 128) ** 2
    return default_workers() if estimate > POOL_WORTH_SECONDS else 1


def _check_access(storage: str, workers: int | None) -> None:
    if storage not in VALID_STORAGE:
        raise ValueError(f"storage: expected one of {VALID_STORAGE}, got {storage!r}")
    if workers is not None and (not isinstance(workers, (int, np.integer)) or workers < 1):
        raise ValueError(f"workers: expected a positive integer or None (the cores of this process), got {workers!r}")


def past_to_future_edges(adjacency: np.ndarray) -> torch.Tensor:
    """Edge index [2, E] of a 0/1 relation or link matrix: an edge i -> j for every i preceding j."""
    return torch.from_numpy(np.stack(np.nonzero(adjacency))).long()


def _generated_classes(params: dict[str, Any]) -> list[str]:
    if params["target"] == "dimension":
        return [c for c in params["classes"] if c in MANIFOLD_CLASSES]
    return list(params["classes"])


def _label(record: CausalSetRecord, params: dict[str, Any]) -> float:
    """The set's y: a class index (stored as a float, read back as long) or the regression target."""
    target = params["target"]
    if target == "myrheim_meyer_dimension":
        return float(record.invariants[INVARIANT_NAMES.index(target)])
    if target == "cset_type":
        return params["classes"].index(record.cset_type)
    if target == "manifold_like":
        return int(record.manifold_like)
    return _generated_dimensions(params).index(record.dimension)


def _generated_dimensions(params: dict[str, Any]) -> list[int]:
    return sorted(MANIFOLD_CLASSES[c] for c in params["classes"] if c in MANIFOLD_CLASSES)


@functools.lru_cache(maxsize=1)
def _plan(params_json: str) -> tuple[np.ndarray, np.ndarray]:
    """The data set's plan and its block order, made once per process (a worker makes many blocks)."""
    params = json.loads(params_json)
    plan = draw_plan(params["num_samples"], params["n_min"], params["n_max"], params["dimensions"],
                     _generated_classes(params), params["seed"])
    return plan, plan_order(plan)


def generate_block_files(directory: str, params: dict[str, Any], block: int, block_size: int) -> int:
    """Generate one block of the data set and write its shard; return its number of sets.
    A module-level function of picklable arguments: a pool's worker processes run it."""
    plan, order = _plan(json.dumps(params, sort_keys=True))
    members, records = generate_block(plan, order, block, classes=_generated_classes(params),
                                      destroy_fraction=params["destroy_fraction"], seed=params["seed"],
                                      block_size=block_size)
    items = [{"x": record.features,
              "edge_index": past_to_future_edges(record.link_matrix if params["edges"] == "links"
                                                 else record.causal_matrix).numpy(),
              "invariants": record.invariants} for record in records]
    per_set = {"index": members.astype(np.int64),
               "y": np.asarray([_label(record, params) for record in records], dtype=np.float64),
               "manifold_like": np.asarray([record.manifold_like for record in records], dtype=bool),
               "dimension": np.asarray([record.dimension for record in records], dtype=np.int64),
               "cset_type": np.asarray([CSET_TYPES.index(record.cset_type) for record in records], dtype=np.int64),
               "flip_fraction": np.asarray([record.flip_fraction for record in records], dtype=np.float64)}
    data_shards.write_shard(data_shards.shard_path(Path(directory), block), items, per_set, narrow=("edge_index",))
    return len(records)


def remake_block(directory: str, params: dict[str, Any], block: int) -> None:
    """Make block ``block`` of a generated folder again (its shard was missing or damaged): the same bytes."""
    generate_block_files(directory, params, block, causal_sets.GENERATION_BLOCK_SIZE)


def generate_blocks(directory: Path, params: dict[str, Any], blocks: Sequence[int], workers: int) -> int:
    """Make the ``blocks`` not yet on disk, in a pool of ``workers`` processes; return how many sets were
    made. The pool's workers come from ``processes.worker_context``: forked from a fork server that imported
    torch and the package once, so safe inside launched and torchrun workers and with threads running
    (unlike a fork of this process), without each worker importing them again (as spawned ones would)."""
    block_size = causal_sets.GENERATION_BLOCK_SIZE
    pending = data_shards.missing_blocks(directory, list(blocks))
    calls = [(str(directory), params, block, block_size) for block in pending]
    return sum(map_in_workers(generate_block_files, calls, workers, caller="CausalSetDataset",
                              instead="pass workers=1 (data.workers: 1 in a config) to generate in this process"))


class CausalSetDataset(InMemoryDataset):
    """Generated causal sets as PyG graphs, labelled for one of ``VALID_TARGETS``.

    * ``target="cset_type"``: y indexes ``classes`` (e.g. 2d/3d/4d sprinklings, destroyed, layered).
    * ``target="manifold_like"``: y = 1 for sprinklings, 0 for the non-manifold-like orders.
    * ``target="dimension"``: only the ``minkowski_{d}d`` classes are generated; y indexes their d.
    * ``target="myrheim_meyer_dimension"``: y (float [1]) is the set's Myrheim-Meyer dimension estimate
      (from its ordering fraction), a continuous target for regression, over all ``classes``.

    Each ``Data`` has ``x`` (float32 N x F), ``edge_index`` (past -> future), ``y`` (long [1], float for
    regression),
    ``manifold_like`` (bool [1]), ``dimension`` (long [1], -1 where undefined), ``cset_type``
    (long [1], index into ``causal_sets.CSET_TYPES``), ``flip_fraction`` (float [1], 0 except
    for destroyed sets), ``num_nodes`` and ``invariants`` (float [1, K], columns
    ``causal_sets.INVARIANT_NAMES``) for the baselines and hybrid models.
    ``destroy_fraction`` may be a range [low, high]: each destroyed set then draws its own.

    ``storage="memory"`` holds all graphs in this process; ``storage="disk"`` holds only the cache's index
    and reads each graph from its shard when asked (the same items). ``workers`` generation processes
    make a missing cache (None: this process's share of the cores for a large data set, else one:
    ``generation_workers``).

    Args:
        root: the folder of the data cache; a cache made with the same generation parameters is reused.
        num_samples: the number of causal sets.
        n_min: the fewest elements of a set.
        n_max: the most elements of a set.
        dimensions: the spacetime dimensions of the Minkowski sprinklings.
        classes: the kinds of causal set to generate (``causal_sets.CSET_TYPES``).
        destroy_fraction: the fraction of relations a destroyed set has flipped, or a range [low, high].
        edges: ``"links"`` (the Hasse diagram) or ``"relations"`` (every relation).
        target: what ``y`` is, one of ``VALID_TARGETS`` (above).
        seed: the generator's seed; the same seed gives the same sets whatever the number of processes.
        storage: ``"memory"`` or ``"disk"`` (above).
        workers: generation processes for a missing cache (above).
        log: print PyG's progress messages.
        transform: applied to each item as it is read (PyG's ``transform``).

    Raises:
        ValueError: a parameter out of its range (the message names it).
        UserError: a cache folder that cannot be read or written.

    Example:
        >>> import QuantumGrav as QG
        >>> sets = QG.CausalSetDataset("data", num_samples=40, n_min=8, n_max=12)  # doctest: +SKIP
        >>> sets[0]  # doctest: +SKIP
    """

    def __init__(self, root: str | os.PathLike, *, num_samples: int = DATA_DEFAULTS["num_samples"],
                 n_min: int = DATA_DEFAULTS["n_min"], n_max: int = DATA_DEFAULTS["n_max"],
                 dimensions: Sequence[int] = DATA_DEFAULTS["dimensions"],
                 classes: Sequence[str] = DATA_DEFAULTS["classes"],
                 destroy_fraction: float | Sequence[float] = DATA_DEFAULTS["destroy_fraction"],
                 edges: str = DATA_DEFAULTS["edges"], target: str = DATA_DEFAULTS["target"],
                 seed: int = DATA_DEFAULTS["seed"], storage: str = DATA_DEFAULTS["storage"],
                 workers: int | None = DATA_DEFAULTS["workers"], log: bool = False,
                 transform: Callable | None = None):
        self._params = _generation_params(num_samples, n_min, n_max, dimensions, classes,
                                          destroy_fraction, edges, target, seed)
        _check_access(storage, workers)
        self._cache_key = _cache_key(self._params)
        self._reader: data_shards.BlockReader | None = None
        super().__init__(str(root), transform=transform, log=log)
        directory = Path(self.processed_dir)
        make_block = functools.partial(remake_block, str(directory), self._params)  # picklable: loader workers
        if not data_shards.is_complete(directory):
            self.generated_sets = self._generate_and_cache(directory, generation_workers(workers, self._params),
                                                           make_block)
        else:
            self.generated_sets = 0  # how many sets this construction generated (the rest were cached)
        self._reader = data_shards.BlockReader(directory, make_block)
        if storage == "memory":
            self._data, self.slices = self.collate([self._read(i) for i in range(len(self._reader))])
            self._reader = None

    @classmethod
    def from_config(cls, data_cfg: dict[str, Any]) -> "CausalSetDataset":
        """Build from the config's ``data:`` section (keys of ``DATA_DEFAULTS``; missing keys take the
        defaults). ``split``/``split_seed`` belong to the caller: see ``split_indices``; ``type``/``kwargs``
        name a dataset class to use instead of this one (``sources``) and are ignored here."""
        cfg = _config_with_defaults(data_cfg)
        kwargs = {key: cfg[key] for key in DATA_DEFAULTS if key not in (*_SPLIT_KEYS, "root")}
        return cls(cfg["root"], **{**kwargs, "dimensions": tuple(cfg["dimensions"]), "classes": tuple(cfg["classes"])})

    # ------------------------------------------------------------------ PyG file layout
    @property
    def raw_file_names(self) -> list[str]:
        return []

    @property
    def processed_file_names(self) -> list[str]:
        return [data_shards.MANIFEST]

    @property
    def processed_dir(self) -> str:
        return str(cache_directory(self.root, self._params))

    # ------------------------------------------------------------------ items (disk storage: from the shards)
    def len(self) -> int:
        return len(self._reader) if self._reader is not None else super().len()

    def get(self, idx: int) -> Data:
        return self._read(idx) if self._reader is not None else super().get(idx)

    def _read(self, i: int) -> Data:
        item = self._reader.read(i, SHARD_CONTENTS)
        y_type = torch.float32 if self.task == RegressionTask.type else torch.long
        return Data(x=torch.from_numpy(item["x"]), edge_index=torch.from_numpy(item["edge_index"]),
                    y=torch.tensor([item["y"]], dtype=y_type),
                    manifold_like=torch.tensor([bool(item["manifold_like"])]),
                    dimension=torch.tensor([int(item["dimension"])], dtype=torch.long),
                    cset_type=torch.tensor([int(item["cset_type"])], dtype=torch.long),
                    invariants=torch.from_numpy(item["invariants"]).reshape(1, -1),
                    flip_fraction=torch.tensor([float(item["flip_fraction"])], dtype=torch.float32),
                    num_nodes=int(item["x"].shape[0]))

    def graph_sizes(self) -> np.ndarray:
        """(nodes, edges) of every set, int64 [len, 2], read from the cache's index: no graph is loaded
        (``training.batch_budget`` packs batches by these)."""
        if self._reader is not None:
            nodes, edges = self._reader.index["num_nodes"], self._reader.index["num_edges"]
        else:
            nodes, edges = np.diff(self.slices["x"].numpy()), np.diff(self.slices["edge_index"].numpy())
        sizes = np.stack([nodes, edges], axis=1).astype(np.int64)
        return sizes if self._indices is None else sizes[np.asarray(self.indices(), dtype=np.int64)]

    # ------------------------------------------------------------------ labels
    @property
    def generation_params(self) -> dict[str, Any]:
        return copy.deepcopy(self._params)

    @property
    def task(self) -> str:
        """How ``y`` is learned: multiclass, binary or regression (``QuantumGrav.tasks``)."""
        return TARGET_TASKS[self._params["target"]]

    @property
    def class_names(self) -> list[str]:
        target, classes = self._params["target"], self._params["classes"]
        if target == "myrheim_meyer_dimension":
            return []
        if target == "cset_type":
            return list(classes)
        if target == "manifold_like":
            return list(MANIFOLD_LIKE_NAMES)
        return [f"d={d}" for d in _generated_dimensions(self._params)]

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    # ------------------------------------------------------------------ generation
    def _generate_and_cache(self, directory: Path, workers: int, make_block: Callable[[int], None]) -> int:
        params = self._params
        if self.log:
            print(f"Generating {params['num_samples']} causal sets into {directory} ({workers} processes)",
                  file=sys.stderr)
        blocks = range(causal_sets.num_blocks(params["num_samples"]))
        generated = generate_blocks(directory, params, blocks, workers)
        manifest = {"params": params, "format_version": CACHE_FORMAT_VERSION,
                    "block_size": causal_sets.GENERATION_BLOCK_SIZE, "num_blocks": len(blocks),
                    "num_sets": params["num_samples"], "node_features": list(NODE_FEATURES),
                    "invariants": list(INVARIANT_NAMES)}
        data_shards.finalise(directory, len(blocks), manifest, make_block)
        return generated


def _config_with_defaults(data_cfg: dict[str, Any]) -> dict[str, Any]:
    data_cfg = {k: v for k, v in data_cfg.items() if k not in _OTHER_SOURCE_KEYS}
    unknown = sorted(set(data_cfg) - set(DATA_DEFAULTS))
    if unknown:
        raise ValueError(f"data_cfg: unknown keys {unknown}; expected keys from {sorted(DATA_DEFAULTS)}")
    return {**DATA_DEFAULTS, **data_cfg}


def generate_share(data_cfg: dict[str, Any], rank: int, world_size: int) -> int:
    """Under DDP: make this rank's share of the blocks (every ``world_size``-th, from ``rank``) of the
    configured cache, unless it is complete; return how many sets were made. The data do not depend on
    the share, and rank 0 then merges the index and writes the manifest (``CausalSetDataset``)."""
    cfg = _config_with_defaults(data_cfg)
    params = _generation_params(*(cfg[key] for key in ("num_samples", "n_min", "n_max", "dimensions", "classes",
                                                        "destroy_fraction", "edges", "target", "seed")))
    _check_access(cfg["storage"], cfg["workers"])
    directory = cache_directory(cfg["root"], params)
    if data_shards.is_complete(directory):
        return 0
    blocks = range(rank, causal_sets.num_blocks(params["num_samples"]), world_size)
    return generate_blocks(directory, params, blocks, generation_workers(cfg["workers"], params))


def split_indices(num_items: int, fractions: Sequence[float], seed: int) -> tuple[list[int], list[int], list[int]]:
    """Split ``range(num_items)`` into disjoint train, validation and test index lists.

    A function of its arguments only (its own generator seeded with ``seed``): every process computes the
    same split. Each part gets at least one item.

    Args:
        num_items: the number of items, at least 3.
        fractions: the (train, val, test) fractions, positive and summing to 1.
        seed: the seed of the shuffle.

    Returns:
        The (train, val, test) index lists, each sorted.

    Raises:
        ValueError: fewer than 3 items, or fractions that are not three positive numbers summing to 1.

    Example:
        >>> import QuantumGrav as QG
        >>> QG.split_indices(10, [0.6, 0.2, 0.2], seed=1)
        ([1, 2, 3, 5, 6, 9], [4, 8], [0, 7])
    """
    if not isinstance(num_items, (int, np.integer)) or num_items < 3:
        raise ValueError(f"num_items: expected an integer >= 3 so that train, val and test are all "
                         f"non-empty, got {num_items!r}")
    fractions = [float(f) for f in fractions]
    if len(fractions) != 3 or min(fractions) <= 0 or abs(sum(fractions) - 1.0) > 1e-6:
        raise ValueError(f"fractions: expected three positive fractions (train, val, test) summing to 1, "
                         f"got {fractions}")
    num_val = max(1, round(fractions[1] * num_items))
    num_test = max(1, round(fractions[2] * num_items))
    while num_items - num_val - num_test < 1:  # only for tiny num_items: take from the larger part
        if num_val >= num_test:
            num_val -= 1
        else:
            num_test -= 1
    order = np.random.default_rng(seed).permutation(num_items)
    val, test, train = np.split(order, [num_val, num_val + num_test])
    return sorted(train.tolist()), sorted(val.tolist()), sorted(test.tolist())
