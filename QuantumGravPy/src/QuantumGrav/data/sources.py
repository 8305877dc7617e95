"""Where the causal sets come from, and how they reach each rank.

Sources: the built-in generator (``CausalSetDataset``, the ``data:`` section), a dataset class named in
the config (``data.type: !pyobject my_module.MyDataset`` built as ``MyDataset(**data.kwargs)``), or a
dataset object handed to the trainer (``QG.Trainer(config, dataset=ds)``). Any PyG ``Dataset`` or
sequence of ``Data`` with ``x`` (float, nodes x features), ``edge_index`` (2 x edges) and ``y`` works;
other attributes are passed through to the model untouched.

Then the split (the same on every rank: ``split_indices`` depends on ``data.split_seed`` only), the
samplers (training: a ``DistributedSampler`` reshuffled per epoch; validation: disjoint shards; or, under
``training.batch_budget``, batches packed by size: ``batching``) and the loaders.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import torch
from torch.utils.data import DistributedSampler, Sampler, Subset
from torch_geometric.data import Dataset as PyGDataset
from torch_geometric.loader import DataLoader

from ..models import tasks
from .batching import (BatchBudget, DistributedBudgetBatchSampler, ShardedBudgetBatches, check_items_fit,
                       graph_sizes)
from ..config.schema import pyobject_path
from .dataset import CausalSetDataset, generate_share, split_indices
from .derived_invariants import with_order_invariants
from ..distributed.runtime import Runtime
from ..errors import ConfigError, UserError

GENERATOR_SOURCE = "data (the built-in generator)"
PASSED_SOURCE = "dataset (the object passed to the trainer)"


class ShardSampler(Sampler[int]):
    """Rank r evaluates items r, r+W, r+2W, ...: disjoint shards, no padding, nothing counted twice
    (DistributedSampler pads with duplicates, which would bias validation metrics)."""

    def __init__(self, num_items: int, rank: int, world_size: int):
        self.indices = list(range(rank, num_items, world_size))

    def __iter__(self):
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


def make_train_sampler(dataset, rank: int, world_size: int, shuffle: bool, seed: int) -> DistributedSampler:
    """Rank ``rank``'s shard of the training set, reshuffled by ``set_epoch``.

    Used even for one process: the permutation then depends only on (seed, epoch), so
    a resumed run, and an N-process run taken together, see the same sample order.
    """
    return DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed)


# --------------------------------------------------------------------------- sources
@dataclass
class RunData:
    """A run's data: the dataset, what is learned from it (``tasks``), its split, and its first item."""

    dataset: Any
    task: tasks.Task
    split: dict[str, list[int]]
    first: Any


def load_run_data(config: dict[str, Any], runtime: Runtime, dataset: Any = None) -> RunData:
    """The dataset (``load_dataset``), checked on a few items, the task its targets define, and the split
    (the same on every rank). Any problem is one ConfigError naming the source."""
    source = source_name(config["data"], dataset)
    # Items without the order invariants that the model or the baselines need get them from edge_index.
    loaded = with_order_invariants(load_dataset(config, runtime, dataset), config, source)
    samples = check_samples(loaded, source)
    task = tasks.resolve_task(config["task"], loaded, samples, source)
    tasks.check_metric(config["early_stopping"]["metric"], task)
    data_cfg = config["data"]
    split = dict(zip(("train", "val", "test"), split_indices(len(loaded), data_cfg["split"], data_cfg["split_seed"])))
    return RunData(loaded, task, split, samples[0])


def source_name(data_cfg: dict[str, Any], dataset: Any = None) -> str:
    """How error messages name the data source (``data_cfg``: the config's ``data`` section)."""
    if dataset is not None:
        return PASSED_SOURCE
    data_type = data_cfg["type"]
    return f"data.type ({pyobject_path(data_type)})" if data_type is not None else GENERATOR_SOURCE


def load_dataset(config: dict[str, Any], runtime: Runtime, dataset: Any = None):
    """The dataset to train on: ``dataset`` if given, else the configured one. Rank 0 builds it first
    (generates or prepares a cache); the others wait, then build theirs (reading the cache)."""
    if dataset is not None:
        return dataset
    data_cfg, timeout_s = config["data"], config["parallel"]["data_timeout_s"]
    if data_cfg["type"] is None and runtime.distributed:
        # Every rank makes its share of the generator's blocks, then rank 0 merges them (below).
        with runtime.every_rank_then_all(timeout_s=timeout_s), naming_the_cache_folder(data_cfg):
            generate_share(data_cfg, runtime.rank, runtime.world_size)
    with runtime.main_process_first(timeout_s=timeout_s):
        if data_cfg["type"] is not None:
            return _build_user_dataset(data_cfg)
        with naming_the_cache_folder(data_cfg):
            return CausalSetDataset.from_config(data_cfg)


@contextlib.contextmanager
def naming_the_cache_folder(data_cfg: dict[str, Any]) -> Iterator[None]:
    try:
        yield
    except OSError as err:
        raise UserError(f"data.root: cannot read or write the data cache in '{data_cfg['root']}' "
                        f"({err.strerror or err}); set data.root to a folder you can write to") from None


def _build_user_dataset(data_cfg: dict[str, Any]):
    cls = data_cfg["type"]
    try:
        return cls(**data_cfg["kwargs"])
    except (TypeError, ValueError) as err:
        raise ConfigError(f"data.kwargs: {pyobject_path(cls)}(**data.kwargs) failed: {err}; data.kwargs holds "
                          f"the keyword arguments of data.type, got {data_cfg['kwargs']}") from None


# --------------------------------------------------------------------------- the first-sample check
def _item_problem(item: Any) -> str | None:
    missing = [key for key in ("x", "edge_index", "y") if getattr(item, key, None) is None]
    if missing:
        return f"its items need x, edge_index and y, item has no {', '.join(missing)} ({type(item).__name__})"
    x, edge_index = item.x, item.edge_index
    if not (isinstance(x, torch.Tensor) and x.dim() == 2 and x.is_floating_point()):
        return f"x must be a float tensor [nodes, features], got {_shape_text(x)}"
    if not (isinstance(edge_index, torch.Tensor) and edge_index.dim() == 2 and edge_index.size(0) == 2
            and edge_index.dtype == torch.long):
        return f"edge_index must be a long tensor [2, edges], got {_shape_text(edge_index)}"
    return None


def _shape_text(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{value.dtype} tensor of shape {list(value.shape)}"
    return type(value).__name__


def check_samples(dataset: Any, source: str) -> dict[int, Any]:
    """Check the first, middle and last items (``x``, ``edge_index``, ``y`` present and shaped, the same
    feature width) and return them by position. Any problem is one ConfigError naming ``source``."""
    if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        raise ConfigError(f"{source}: expected a PyG Dataset or a sequence of Data, got {type(dataset).__name__}")
    if len(dataset) < 3:
        raise ConfigError(f"{source}: expected at least 3 causal sets (train, validation and test need one "
                          f"each), got {len(dataset)}")
    positions = sorted({0, len(dataset) // 2, len(dataset) - 1})
    items = [dataset[i] for i in positions]
    for position, item in zip(positions, items):
        problem = _item_problem(item)
        if problem:
            raise ConfigError(f"{source}: item {position}: {problem}")
    widths = {position: item.x.size(1) for position, item in zip(positions, items)}
    if len(set(widths.values())) > 1:
        listing = ", ".join(f"item {p}: {w}" for p, w in widths.items())
        raise ConfigError(f"{source}: every item needs the same number of node features (x's columns), got "
                          f"{listing}")
    return dict(zip(positions, items))


# --------------------------------------------------------------------------- split and loaders
def subset(dataset: Any, indices: list[int]):
    """The items at ``indices``: a PyG dataset's own view (keeps its attributes), else a torch Subset."""
    return dataset.index_select(indices) if isinstance(dataset, PyGDataset) else Subset(dataset, indices)


def make_loader(dataset, loader_cfg: dict[str, Any], sampler: Sampler | None, device: torch.device,
                batch_sampler: Sampler | None = None) -> DataLoader:
    """A loader of ``loader_cfg``'s batch size over ``sampler``, or of the batches ``batch_sampler`` yields."""
    workers = loader_cfg["num_workers"]
    extra: dict[str, Any] = {"prefetch_factor": loader_cfg["prefetch_factor"]} \
        if workers and loader_cfg["prefetch_factor"] else {}
    if batch_sampler is None:
        extra.update(batch_size=loader_cfg["batch_size"], sampler=sampler, drop_last=loader_cfg.get("drop_last", False))
    else:
        extra.update(batch_sampler=batch_sampler)
    return DataLoader(dataset, shuffle=False, num_workers=workers,
                      pin_memory=loader_cfg["pin_memory"] and device.type == "cuda",
                      persistent_workers=workers > 0, **extra)


def split_sizes(dataset, split: dict[str, list[int]], runtime: Runtime) -> dict[str, np.ndarray]:
    """(nodes, edges) of the items of each part of the split (``batching.graph_sizes``: read once per run)."""
    sizes = graph_sizes(dataset, runtime)
    return {name: sizes[np.asarray(indices, dtype=np.int64)] for name, indices in split.items()}


def training_batches(sizes: dict[str, np.ndarray], tcfg: dict[str, Any], runtime: Runtime
                     ) -> DistributedBudgetBatchSampler | None:
    """This rank's training batches under ``training.batch_budget`` (None without one: fixed batch_size);
    ``tcfg``: the config's ``training`` section."""
    budget = BatchBudget.from_config(tcfg)
    if budget is None:
        return None
    for name in ("train", "val", "test"):
        check_items_fit(sizes[name], budget, name)
    return DistributedBudgetBatchSampler(sizes["train"], budget, runtime.rank, runtime.world_size, tcfg["seed"],
                                         shuffle=tcfg["shuffle"])


def prepare_dataloaders(dataset, split: dict[str, list[int]], config: dict[str, Any], runtime: Runtime,
                        sizes: dict[str, np.ndarray] | None = None) -> tuple[DataLoader, DataLoader, DataLoader]:
    """Train (sharded, reshuffled each epoch), validation (sharded or whole on rank 0), test (whole).
    Under ``training.batch_budget`` all three are packed by size (``batching``); ``sizes``: ``split_sizes``'s
    result, if the caller has it already."""
    rank, world, device = runtime.rank, runtime.world_size, runtime.device
    train, val, test = (subset(dataset, split[name]) for name in ("train", "val", "test"))
    tcfg, vcfg, sharded = config["training"], config["validation"], config["validation"]["mode"] == "sharded"
    budget = BatchBudget.from_config(tcfg)
    if budget is not None:
        sizes = sizes if sizes is not None else split_sizes(dataset, split, runtime)
        val_batches = ShardedBudgetBatches(sizes["val"], budget, rank if sharded else 0, world if sharded else 1)
        return (make_loader(train, tcfg, None, device, training_batches(sizes, tcfg, runtime)),
                make_loader(val, vcfg, None, device, val_batches),
                make_loader(test, config["testing"], None, device, ShardedBudgetBatches(sizes["test"], budget, 0, 1)))
    train_sampler = make_train_sampler(train, rank, world, tcfg["shuffle"], tcfg["seed"])
    val_sampler = ShardSampler(len(val), rank, world) if sharded else None
    return (make_loader(train, tcfg, train_sampler, device),
            make_loader(val, vcfg, val_sampler, device),
            make_loader(test, config["testing"], None, device))
