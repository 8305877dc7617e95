"""Order invariants for causal sets that come without them, derived from their edges.

The order invariants (``causal_sets.INVARIANT_NAMES``: ordering fraction, Myrheim-Meyer dimension,
interval abundances, Benincasa-Dowker actions, ...) are a function of the order alone, so every causal
set has them. The default model's head (``model.graph_features``) and the physics baselines
(``testing.baselines``) read them as ``data.invariants``. The built-in generator and QuantumGrav.jl
stores (``zarr_store``, in its feature cache) carry them; a dataset of one's own with only ``x``,
``edge_index`` and ``y`` gets them here, from ``edge_index``:

* **Orientation.** An edge i -> j means that i precedes j (past to future, as ``data.past_to_future_edges``
  writes them). Edges the other way round describe the dual order: every invariant is the same except
  the fractions of minimal and maximal elements, which swap.
* **Links or relations.** The causal matrix is the transitive closure of the edges, so the links (the
  Hasse diagram) and all relations give the same invariants: the closure of a closed relation is itself.
* **Isolated nodes** are elements related to no other: they count in N, and are both minimal and maximal.
* **Not an order.** A cycle in the edges (a self-loop, an edge both ways as in an undirected graph) means
  the item is not a causal set and has no invariants: one ``ConfigError`` names the item's index, the
  cycle, and the keys to turn off.
* **Cost and cache.** One item costs a few matrix products O(N^3) (the closure by repeated squaring, in an
  order where the edges go forward so that only the tiles above the diagonal are multiplied, then
  ``order_invariants``); ``benchmarks/features/bench_derived_invariants.py`` measures it. Each item is derived
  once per process, when it is first read, and kept in that process's ``OrderInvariants`` (15 floats per
  item). Under DDP every rank derives the items it reads; a DataLoader worker keeps its own cache.
  Nothing is shared between processes, so nothing needs a lock.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from .invariants import order_invariants
from .orders import longest_paths, natural_order, transitive_closure
from ..common.errors import ConfigError


class NotACausalSet(ValueError):
    """An item's edges do not describe a causal set (a finite strict partial order)."""


def causal_matrix_of_edges(edge_index: torch.Tensor | np.ndarray, num_nodes: int) -> np.ndarray:
    """The causal matrix (bool N x N, ``R[i, j]``: i precedes j) of a past -> future edge index of links or
    relations: their transitive closure. Raises ``NotACausalSet`` for a cycle, edges to elements beyond
    ``num_nodes``, or fewer than two elements (no ordering fraction)."""
    edges = np.asarray(edge_index, dtype=np.int64).reshape(2, -1)
    if num_nodes < 2:
        raise NotACausalSet(f"it has {num_nodes} element(s); order invariants need at least 2")
    outside = edges[(edges < 0) | (edges >= num_nodes)]
    if outside.size:
        raise NotACausalSet(f"edge_index refers to element {int(outside[0])} but the item has {num_nodes} nodes")
    adjacency = np.zeros((num_nodes, num_nodes), dtype=bool)
    adjacency[edges[0], edges[1]] = True
    level = longest_paths(edges[0], edges[1], num_nodes)
    if level is None:
        on_cycle = np.flatnonzero(transitive_closure(adjacency).diagonal())
        raise NotACausalSet(_describe_cycle(adjacency, int(on_cycle[0])))
    # By the longest path to each element the edges go forward (strictly upper triangular), so the closure's
    # products multiply only the tiles on and above the diagonal; then back to the item's labelling.
    order = np.argsort(level, kind="stable")
    R = np.empty_like(adjacency)
    R[np.ix_(order, order)] = transitive_closure(adjacency[np.ix_(order, order)])
    return R


def _describe_cycle(adjacency: np.ndarray, start: int) -> str:
    """'its edge_index has a cycle (3 -> 7 -> 3: a directed cycle)': the shortest cycle through ``start``,
    found breadth first."""
    parent = {start: -1}
    frontier, closing = [start], None
    while closing is None:
        reached = []
        for node in frontier:
            for successor in np.flatnonzero(adjacency[node]).tolist():
                if successor == start:
                    closing = node
                    break
                if successor not in parent:
                    parent[successor] = node
                    reached.append(successor)
            if closing is not None:
                break
        frontier = reached
    path = [closing]
    while path[-1] != start:
        path.append(parent[path[-1]])
    cycle = [*reversed(path), start]
    shown = " -> ".join(map(str, cycle)) if len(cycle) <= 8 else " -> ".join(map(str, cycle[:7])) + " -> ..."
    hint = ("a self-loop" if len(cycle) == 2 else
            "an edge both ways, as in an undirected graph" if len(cycle) == 3 else "a directed cycle")
    return f"its edge_index has a cycle ({shown}: {hint})"


def invariants_of_edges(edge_index: torch.Tensor | np.ndarray, num_nodes: int) -> torch.Tensor:
    """The order invariants (float32 [1, K], columns ``causal_sets.INVARIANT_NAMES``) of the causal set whose
    past -> future links or relations are ``edge_index``; equal to ``order_invariants`` of its causal matrix."""
    R = causal_matrix_of_edges(edge_index, num_nodes)
    order = natural_order(R)  # order_invariants reads a natural labelling; the invariants do not depend on it
    return torch.from_numpy(order_invariants(R[np.ix_(order, order)])).reshape(1, -1)


class OrderInvariants(Dataset):
    """``dataset`` with ``invariants`` on every item: an item's own where it has them, else derived from its
    ``edge_index`` (``invariants_of_edges``) when it is first read and kept for the later reads in this
    process. Items are shallow copies: the wrapped dataset's items are never changed. Other attributes
    (``task``, ``class_names``, ``generation_params``, ...) are the wrapped dataset's.

    ``source`` names the data source and ``needed_by`` the config keys that need the invariants, for the
    error an item that is not a causal set raises.
    """

    def __init__(self, dataset: Any, source: str = "dataset", needed_by: tuple[str, ...] = ("model.graph_features",)):
        self.dataset, self.source, self.needed_by = dataset, source, tuple(needed_by)
        # This process's cache. Under DDP every rank holds its own (each derives the items its sampler gives it),
        # and every DataLoader worker gets a copy and fills that: nothing is shared, so there is nothing to lock and
        # no rank waits for another. A copy pickled for a spawned process takes the entries derived so far.
        self._derived: dict[int, torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, idx: int):
        item = self.dataset[idx]
        if getattr(item, "invariants", None) is not None:
            return item
        position = operator.index(idx) % len(self)  # one cache entry for idx and idx - len
        if position not in self._derived:
            self._derived[position] = self._derive(position, item)
        item = copy.copy(item)
        item.invariants = self._derived[position]
        return item

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(len(self)))

    def __getattr__(self, name: str) -> Any:
        wrapped = self.__dict__.get("dataset")  # absent while unpickling: no recursion
        if wrapped is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(wrapped, name)

    @property
    def num_classes(self) -> int | None:
        """The wrapped dataset's, else counted from its labels (not through this wrapper: that would derive
        the invariants of every item)."""
        declared = getattr(self.dataset, "num_classes", None)
        if declared is not None:
            return declared
        return int(max(int(item.y.reshape(-1)[0]) for item in self.dataset)) + 1

    def _derive(self, position: int, item: Any) -> torch.Tensor:
        try:
            return invariants_of_edges(item.edge_index, int(item.num_nodes))
        except NotACausalSet as err:
            needs = f"{' and '.join(self.needed_by)} need{'s' if len(self.needed_by) == 1 else ''}"
            off = ", ".join(f"{key}: false" for key in self.needed_by)
            raise ConfigError(f"{self.source}: item {position} is not a causal set (a partial order): {err}; "
                              f"{needs} the order invariants of every item. Give edge_index past -> future along "
                              f"the links or relations of a partial order, or train without them: {off}") from None


def with_order_invariants(dataset: Any, needed_by: Sequence[str], source: str) -> Any:
    """``dataset`` itself if nothing reads the invariants (``needed_by``: the config keys that do) or its items
    carry them (judged by the first item), else ``OrderInvariants(dataset)``, which derives them from
    ``edge_index``."""
    if not needed_by or not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")) or len(dataset) == 0:
        return dataset  # check_samples names a dataset that is no dataset
    if getattr(dataset[0], "invariants", None) is not None:
        return dataset
    return OrderInvariants(dataset, source, tuple(needed_by))
