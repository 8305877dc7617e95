"""A run's data on every rank: the dataset (rank 0 builds it first), its check, task and split, then the
loaders.

The split is the same on every rank (``split_indices`` depends on ``data.split_seed`` only). The samplers
(training: a ``DistributedSampler`` reshuffled per epoch; validation: disjoint shards; or, under
``training.batch_budget``, batches packed by size: ``data.batching``) come from ``data.sources``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import Sampler
from torch_geometric.loader import DataLoader

from ..config.layout import ConfigSections
from ..config.sections.loaders import LoaderSection, LoadersSection, TrainingLoaderSection
from ..data.batching import (BatchBudget, DistributedBudgetBatchSampler, ShardedBudgetBatches, check_items_fit,
                             graph_sizes)
from ..data.dataset import generate_share, split_indices
from ..data.derived_invariants import with_order_invariants
from ..data.sources import (DistributedClassBalancedSampler, ShardSampler, build_dataset, check_samples, graph_labels,
                            make_train_sampler, naming_the_cache_folder, source_name, subset)
from ..distributed.runtime import Runtime
from ..common.errors import ConfigError
from ..common.processes import dataloader_workers
from ..tasks import registry
from ..tasks.base import Task
from ..tasks.classification import ClassificationTask
from ..tasks.levels import SET


@dataclass
class RunData:
    """A run's data: the dataset, what is learned from it (its task), its split, and its first item."""

    dataset: Any
    task: Task
    split: dict[str, list[int]]
    first: Any


def load_run_data(sections: ConfigSections, runtime: Runtime, dataset: Any = None) -> RunData:
    """The dataset (``load_dataset``), checked on a few items, the task its targets define, and the split
    (the same on every rank). Any problem is one ConfigError naming the source. ``sections``: the config's; the
    data, task, early-stopping metric and the settings that need the order invariants are read."""
    data_cfg = sections.data.as_mapping()
    source = source_name(data_cfg, dataset)
    needed = keys_needing_invariants(sections)
    loaded = load_dataset(data_cfg, sections.parallel.data_timeout_s, runtime, dataset)
    # Items without the order invariants that the model or the baselines need get them from edge_index.
    loaded = with_order_invariants(loaded, needed, source)
    samples = check_samples(loaded, source)
    task = registry.resolve_task(sections.task.type, sections.task.threshold, loaded, samples, source)
    registry.check_metric(sections.early_stopping.metric, task)
    check_sampler(sections.loaders.training, task)
    split = dict(zip(("train", "val", "test"), split_indices(len(loaded), data_cfg["split"], data_cfg["split_seed"])))
    return RunData(loaded, task, split, samples[0])


def check_sampler(training: TrainingLoaderSection, task: Task) -> None:
    """``training.sampler: class_balanced`` needs one class per set, and draws its own items (no batch budget)."""
    if training.sampler != "class_balanced":
        return
    if not isinstance(task, ClassificationTask) or task.level is not SET:
        raise ConfigError(f"training.sampler: class_balanced draws sets by their class, but the {task.type} task has "
                          f"no class per set; use training.sampler: uniform")
    if training.batch_budget is not None:
        raise ConfigError("training.sampler: class_balanced and training.batch_budget both choose the training "
                          "batches; remove training.batch_budget or use training.sampler: uniform")


def keys_needing_invariants(sections: ConfigSections) -> list[str]:
    """The config keys that make this run read ``data.invariants``: the built-in model's ``graph_features``
    and the baselines."""
    model = sections.model
    keys = ["model.graph_features"] if model.type is None and model.graph_features else []
    return keys + (["testing.baselines"] if sections.loaders.testing.baselines else [])


def load_dataset(data_cfg: dict[str, Any], timeout_s: float, runtime: Runtime, dataset: Any = None):
    """The dataset to train on: ``dataset`` if given, else the one the ``data`` section describes. Rank 0 builds
    it first (generates or prepares a cache); the others wait, then build theirs (reading the cache)."""
    if dataset is not None:
        return dataset
    if data_cfg["type"] is None and runtime.distributed:
        # Every rank makes its share of the generator's blocks, then rank 0 merges them (below).
        with runtime.every_rank_then_all(timeout_s=timeout_s), naming_the_cache_folder(data_cfg):
            generate_share(data_cfg, runtime.rank, runtime.world_size)
    with runtime.main_process_first(timeout_s=timeout_s):
        return build_dataset(data_cfg)


# --------------------------------------------------------------------------- loaders
def make_loader(dataset, loader: LoaderSection, sampler: Sampler | None, device: torch.device,
                batch_sampler: Sampler | None = None) -> DataLoader:
    """A loader of ``loader``'s batch size over ``sampler``, or of the batches ``batch_sampler`` yields."""
    workers = dataloader_workers(loader.num_workers)
    extra: dict[str, Any] = {"prefetch_factor": loader.prefetch_factor} if workers and loader.prefetch_factor else {}
    if batch_sampler is None:
        extra.update(batch_size=loader.batch_size, sampler=sampler, drop_last=getattr(loader, "drop_last", False))
    else:
        extra.update(batch_sampler=batch_sampler)
    return DataLoader(dataset, shuffle=False, num_workers=workers, pin_memory=loader.pin_memory and device.type == "cuda",
                      persistent_workers=workers > 0, **extra)


def split_sizes(dataset, split: dict[str, list[int]], runtime: Runtime) -> dict[str, np.ndarray]:
    """(nodes, edges) of the items of each part of the split (``batching.graph_sizes``: read once per run)."""
    sizes = graph_sizes(dataset, runtime)
    return {name: sizes[np.asarray(indices, dtype=np.int64)] for name, indices in split.items()}


def training_batches(sizes: dict[str, np.ndarray], loader: TrainingLoaderSection, seed: int, runtime: Runtime
                     ) -> DistributedBudgetBatchSampler | None:
    """This rank's training batches under ``training.batch_budget`` (None without one: fixed batch_size),
    shuffled with ``seed`` (the same on every rank)."""
    budget = BatchBudget.from_section(loader.batch_budget)
    if budget is None:
        return None
    for name in ("train", "val", "test"):
        check_items_fit(sizes[name], budget, name)
    return DistributedBudgetBatchSampler(sizes["train"], budget, runtime.rank, runtime.world_size, seed,
                                         shuffle=loader.shuffle)


def prepare_dataloaders(dataset, split: dict[str, list[int]], loaders: LoadersSection, seed: int, runtime: Runtime,
                        sizes: dict[str, np.ndarray] | None = None) -> tuple[DataLoader, DataLoader, DataLoader]:
    """Train (sharded, reshuffled each epoch with ``seed``), validation (sharded or whole on rank 0), test
    (whole). Under ``training.batch_budget`` all three are packed by size (``batching``); ``sizes``:
    ``split_sizes``'s result, if the caller has it already."""
    rank, world, device = runtime.rank, runtime.world_size, runtime.device
    train, val, test = (subset(dataset, split[name]) for name in ("train", "val", "test"))
    training, validation, testing = loaders.training, loaders.validation, loaders.testing
    sharded = validation.mode == "sharded"
    budget = BatchBudget.from_section(training.batch_budget)
    if budget is not None:
        sizes = sizes if sizes is not None else split_sizes(dataset, split, runtime)
        val_batches = ShardedBudgetBatches(sizes["val"], budget, rank if sharded else 0, world if sharded else 1)
        return (make_loader(train, training, None, device, training_batches(sizes, training, seed, runtime)),
                make_loader(val, validation, None, device, val_batches),
                make_loader(test, testing, None, device, ShardedBudgetBatches(sizes["test"], budget, 0, 1)))
    if training.sampler == "class_balanced":
        # Every rank reads the training labels itself (the same items, so the same weights): no collective needed.
        train_sampler = DistributedClassBalancedSampler(graph_labels(train), rank, world, seed)
    else:
        train_sampler = make_train_sampler(train, rank, world, training.shuffle, seed)
    val_sampler = ShardSampler(len(val), rank, world) if sharded else None
    return (make_loader(train, training, train_sampler, device),
            make_loader(val, validation, val_sampler, device),
            make_loader(test, testing, None, device))
