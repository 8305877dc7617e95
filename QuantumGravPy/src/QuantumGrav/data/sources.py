"""Where the causal sets come from, how they are checked, and how each rank's share is sampled.

Sources: the built-in generator (``CausalSetDataset``, the ``data:`` section), a dataset class named in
the config (``data.type: !pyobject my_module.MyDataset`` built as ``MyDataset(**data.kwargs)``), or a
dataset object handed to the trainer (``QG.Trainer(config, dataset=ds)``). Any PyG ``Dataset`` or
sequence of ``Data`` with ``x`` (float, nodes x features), ``edge_index`` (2 x edges) and ``y`` works;
other attributes are passed through to the model untouched.

The samplers: training, a ``DistributedSampler`` reshuffled per epoch (or, with ``training.sampler:
class_balanced``, a class-balanced draw with replacement); validation, disjoint shards (or,
under ``training.batch_budget``, batches packed by size: ``batching``). Which rank builds the dataset
first and the loaders themselves: ``training.loaders``.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Iterator, Sequence

import torch
from torch.utils.data import DistributedSampler, Sampler, Subset, WeightedRandomSampler
from torch_geometric.data import Dataset as PyGDataset

from ..config.yaml_io import pyobject_path
from .dataset import CausalSetDataset
from .node_targets import describe_unlabelled
from ..common.errors import ConfigError, UserError

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


class DistributedClassBalancedSampler(Sampler[int]):
    """Rank ``rank``'s share of a class-balanced draw (``training.sampler: class_balanced``): each epoch
    ``len(labels)`` items (rounded up to a multiple of the ranks) are drawn with replacement, each with a
    probability proportional to 1 / its class's count (torch's ``WeightedRandomSampler``), from the stream (seed,
    epoch), and dealt out rank by rank. Every rank draws the same items from the same labels and seed, so the ranks'
    shares are disjoint draws of one sample without talking to each other; ``set_epoch`` draws the next one."""

    def __init__(self, labels: Sequence[int], rank: int, world_size: int, seed: int):
        labels = torch.as_tensor(list(labels), dtype=torch.long)
        self.weights = 1.0 / torch.bincount(labels).double()[labels]
        self.rank, self.world_size, self.seed, self.epoch = rank, world_size, seed, 0
        self.num_samples = math.ceil(len(labels) / world_size)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        stream = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        drawn = list(WeightedRandomSampler(self.weights, self.num_samples * self.world_size, generator=stream))
        return iter(drawn[self.rank::self.world_size])

    def __len__(self) -> int:
        return self.num_samples


def graph_labels(dataset) -> list[int]:
    """The class index of each item (its ``y``, one value per graph), read item by item."""
    return [int(dataset[i].y.reshape(-1)[0]) for i in range(len(dataset))]


# --------------------------------------------------------------------------- sources
def source_name(data_cfg: dict[str, Any], dataset: Any = None) -> str:
    """How error messages name the data source (``data_cfg``: the config's ``data`` section)."""
    if dataset is not None:
        return PASSED_SOURCE
    data_type = data_cfg["type"]
    return f"data.type ({pyobject_path(data_type)})" if data_type is not None else GENERATOR_SOURCE


def build_dataset(data_cfg: dict[str, Any]):
    """The configured dataset in this process (``data_cfg``: the config's ``data`` section): the class
    ``data.type`` built from ``data.kwargs``, else the generator's (made and cached, or read from its cache)."""
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
def item_problem(item: Any) -> str | None:
    """What keeps ``item`` from being a causal set's graph (x, edge_index and y, each of its form), or None."""
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
        problem = item_problem(item)
        if problem:
            raise ConfigError(f"{source}: item {position}: {problem}")
    widths = {position: item.x.size(1) for position, item in zip(positions, items)}
    if len(set(widths.values())) > 1:
        listing = ", ".join(f"item {p}: {w}" for p, w in widths.items())
        raise ConfigError(f"{source}: every item needs the same number of node features (x's columns), got "
                          f"{listing}")
    return dict(zip(positions, items))


# --------------------------------------------------------------------------- split
def subset(dataset: Any, indices: list[int]):
    """The items at ``indices``: a PyG dataset's own view (keeps its attributes), else a torch Subset."""
    return dataset.index_select(indices) if isinstance(dataset, PyGDataset) else Subset(dataset, indices)


def data_notes(dataset: Any) -> list[str]:
    """What the data's reader did to the sets that a result should say: how many sets a store's reader closed or
    left out (``QuantumGravJLDataset.order_repairs_line``), which stores' sets carry no labels of the target, so are
    scored without truth (``unlabelled_stores``)."""
    describe_repairs = getattr(dataset, "order_repairs_line", None)
    lines = [describe_repairs()] if callable(describe_repairs) else []
    lines.append(describe_unlabelled(getattr(dataset, "unlabelled_stores", []), getattr(dataset, "target", "")))
    return [line for line in lines if line]
