"""Batches by size (``training.batch_budget``): packed up to a budget of nodes, edges and graphs, with the same
number of optimizer steps on every rank and about the same work at each step.

The pattern is fairseq's ``batch_by_size`` with its sharded epoch iterator: the items are sorted by size once (ties
broken by a seeded permutation) and packed greedily, so that similar sizes share a batch and a batch's memory is
bounded whatever the sizes of its sets. Each epoch then orders the batches (a function of the seed and the epoch
only) and deals them out in steps of ``world_size`` batches of neighbouring cost, so that the batches that meet at
one gradient all-reduce hold about the same number of edges. Where the batches do not divide into whole steps, the
cheapest ones are repeated (as ``DistributedSampler`` repeats items): every rank runs the same number of steps,
because a rank without a batch at an all-reduce would wait there for ever.

Validation and test batches are packed the same way but never padded (``ShardedBudgetBatches``): their loops hold no
collective per batch, and every item is counted exactly once by the exact metrics.

The sizes of the items are read without loading the graphs where the dataset knows them (``graph_sizes()``: the
generator's index, an in-memory dataset's slices); otherwise every rank reads its share of the items once per run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator, Protocol

import numpy as np
import torch
from torch.utils.data import Sampler

from ..common.errors import ConfigError

NODES, EDGES = 0, 1  # the columns of a sizes array


class RankGroup(Protocol):
    """The processes that share out the reading of the sizes (``distributed.runtime.Runtime`` is one)."""

    rank: int
    world_size: int

    def sum_across_ranks(self, values: torch.Tensor) -> torch.Tensor: ...


@dataclass(frozen=True)
class BatchBudget:
    """The most nodes, edges and graphs one batch may hold (None: no bound on that count)."""

    nodes: int | None = None
    edges: int | None = None
    graphs: int | None = None

    @classmethod
    def from_section(cls, budget: Any) -> "BatchBudget | None":
        """The budget of ``training.batch_budget`` (its section, or None: no budget)."""
        return None if budget is None else cls(budget.nodes, budget.edges, budget.graphs)

    def fits(self, nodes: int, edges: int, graphs: int) -> bool:
        return ((self.nodes is None or nodes <= self.nodes) and (self.edges is None or edges <= self.edges)
                and (self.graphs is None or graphs <= self.graphs))

    def describe(self) -> str:
        parts = [f"{name}: {value}" for name, value in (("nodes", self.nodes), ("edges", self.edges),
                                                         ("graphs", self.graphs)) if value is not None]
        return "{" + ", ".join(parts) + "}"


# --------------------------------------------------------------------------- sizes
def graph_sizes(dataset: Any, runtime: RankGroup) -> np.ndarray:
    """(nodes, edges) of every item, int64 [len(dataset), 2], the same on every rank.

    From the dataset's own ``graph_sizes()`` when it has one (no graph is loaded); else from an in-memory PyG
    dataset's slices; else each rank reads every ``world_size``-th item once and one sum gives every rank all."""
    known = getattr(dataset, "graph_sizes", None)
    if callable(known):
        return np.asarray(known(), dtype=np.int64).reshape(len(dataset), 2)
    from_slices = _sizes_from_slices(dataset)
    if from_slices is not None:
        return from_slices
    inner = getattr(dataset, "dataset", None)  # OrderInvariants: the sizes are those of the wrapped items
    source = inner if inner is not None and len(inner) == len(dataset) else dataset
    sizes = torch.zeros(len(dataset), 2, dtype=torch.float64)
    for i in range(runtime.rank, len(dataset), runtime.world_size):
        item = source[i]
        sizes[i, NODES], sizes[i, EDGES] = item.num_nodes, item.edge_index.size(1)
    return runtime.sum_across_ranks(sizes).round().long().numpy()


def _sizes_from_slices(dataset: Any) -> np.ndarray | None:
    slices = getattr(dataset, "slices", None)
    if not isinstance(slices, dict) or "x" not in slices or "edge_index" not in slices \
            or getattr(dataset, "_indices", None) is not None:
        return None
    nodes = np.diff(slices["x"].numpy())
    edges = np.diff(slices["edge_index"].numpy())
    return np.stack([nodes, edges], axis=1).astype(np.int64) if len(nodes) == len(dataset) else None


def check_items_fit(sizes: np.ndarray, budget: BatchBudget, part: str) -> None:
    """One ConfigError if a set of the ``part`` split is larger than any batch within ``budget`` may be, naming
    the budget that would hold it (a set is never skipped: every set is in exactly one batch per epoch)."""
    too_big = sum(not budget.fits(int(nodes), int(edges), 1) for nodes, edges in sizes)
    if too_big:
        need_nodes, need_edges = (int(v) for v in sizes.max(axis=0))
        raise ConfigError(f"training.batch_budget: {too_big} set(s) of the {part} split are larger than one batch "
                          f"may be ({budget.describe()}); every set must fit into a batch on its own: raise the "
                          f"budget to at least nodes: {need_nodes}, edges: {need_edges}")


# --------------------------------------------------------------------------- packing
def pack_by_size(sizes: np.ndarray, budget: BatchBudget, seed: int) -> list[np.ndarray]:
    """Item positions sorted by edges (then nodes; ties in an order drawn from ``seed``), packed greedily into
    batches within ``budget``: a batch is closed when the next item would not fit."""
    tie_break = np.random.default_rng(seed).permutation(len(sizes))
    order = tie_break[np.lexsort((sizes[tie_break, NODES], sizes[tie_break, EDGES]))]
    batches, start, nodes, edges = [], 0, 0, 0
    for position, item in enumerate(order):
        item_nodes, item_edges = int(sizes[item, NODES]), int(sizes[item, EDGES])
        if position > start and not budget.fits(nodes + item_nodes, edges + item_edges, position - start + 1):
            batches.append(order[start:position])
            start, nodes, edges = position, 0, 0
        nodes, edges = nodes + item_nodes, edges + item_edges
    if len(order):
        batches.append(order[start:])
    return batches


def batch_edges(sizes: np.ndarray, batch: np.ndarray) -> int:
    """The work of a batch for balancing: its edges, the messages of every layer."""
    return int(sizes[batch, EDGES].sum())


class DistributedBudgetBatchSampler(Sampler[list[int]]):
    """Training batches within a budget, ``len(self)`` steps on every rank (a ``batch_sampler`` for the
    DataLoader). ``set_epoch`` chooses the epoch: the plan is a function of (seed, epoch, world_size) only, so
    every rank computes the same one and a resumed run replays it."""

    def __init__(self, sizes: np.ndarray, budget: BatchBudget, rank: int, world_size: int, seed: int,
                 shuffle: bool = True):
        self.sizes, self.rank, self.world_size, self.seed, self.shuffle = sizes, rank, world_size, seed, shuffle
        self.batches = pack_by_size(sizes, budget, seed)
        # Heaviest first: neighbours in this order meet at one step, so their costs are alike.
        self.batches.sort(key=lambda batch: -batch_edges(sizes, batch))
        self.num_steps = math.ceil(len(self.batches) / world_size)
        padding = self.num_steps * world_size - len(self.batches)
        # The cheapest batches again, as DistributedSampler repeats items: the same steps on every rank.
        self.padded = self.batches + [self.batches[-1 - i % len(self.batches)] for i in range(padding)]
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def plan(self, epoch: int) -> list[list[np.ndarray]]:
        """The epoch's steps, each the list of every rank's batch (rank r's at index r)."""
        steps = [self.padded[i * self.world_size:(i + 1) * self.world_size] for i in range(self.num_steps)]
        if self.shuffle:
            order = np.random.default_rng([self.seed, epoch]).permutation(self.num_steps)
            steps = [steps[i] for i in order]
        load, plan = np.zeros(self.world_size, dtype=np.int64), []
        for step in steps:
            # The heaviest batch of the step to the rank with the least work so far, and so on: the epoch's
            # totals stay within one batch of each other as well as each step's batches.
            dealt: list[np.ndarray] = [np.empty(0, np.int64)] * self.world_size
            heaviest_first = sorted(step, key=lambda batch: -batch_edges(self.sizes, batch))
            for rank, batch in zip(np.argsort(load, kind="stable"), heaviest_first):
                dealt[rank] = batch
                load[rank] += batch_edges(self.sizes, batch)
            plan.append(dealt)
        return plan

    def __iter__(self) -> Iterator[list[int]]:
        for step in self.plan(self.epoch):
            yield step[self.rank].tolist()

    def __len__(self) -> int:
        return self.num_steps


class ShardedBudgetBatches(Sampler[list[int]]):
    """Evaluation batches within a budget: packed by size, batch i on rank i % world_size, no padding, so every
    item is evaluated exactly once over all ranks (ranks may hold different numbers of batches: the evaluation
    loop has no collective per batch)."""

    def __init__(self, sizes: np.ndarray, budget: BatchBudget, rank: int, world_size: int):
        self.batches = pack_by_size(sizes, budget, seed=0)[rank::world_size]

    def __iter__(self) -> Iterator[list[int]]:
        return (batch.tolist() for batch in self.batches)

    def __len__(self) -> int:
        return len(self.batches)
