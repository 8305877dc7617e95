"""What one output row of a model is about: a whole causal set, one element of it, or one candidate pair of its
elements. The task fixes the level (``Task.level``, read by ``level_of``); the level says which graph of a batch each output row belongs to (what the task's per-set totals,
e.g. the node task's block IoU, group by) and what names the row within its set (the id columns of an applied
run's CSV: none for a set, ``element`` for an element, ``from_element`` and ``to_element`` for a pair).

An applied run (``evaluation.predictions``) writes one CSV row per output row, whatever the level, from these two
answers alone, and those the level keeps (``kept_rows``: every one, but for pairs). A new level is one
``OutputLevel`` subclass here and its ``Task.level`` in ``LEVELS``: ``row_graphs`` maps each output row to its graph,
``row_ids`` names it within its set.
"""

from __future__ import annotations

import torch

from . import tasks
from ..data.relation_targets import candidate_pairs, pair_graph_index


class OutputLevel:
    """One output row per causal set (the graph-level tasks): ``unit`` is what a row is about, ``id_columns`` the
    columns that name a row within its set (none here)."""

    unit = "set"
    id_columns: tuple[str, ...] = ()

    def row_graphs(self, batch) -> torch.Tensor:
        """Each output row's graph in ``batch`` (0..graphs-1), non-decreasing: the rows of a set are consecutive."""
        return torch.arange(batch.num_graphs, device=batch.batch.device)

    def row_ids(self, batch) -> torch.Tensor:
        """``[rows, len(id_columns)]`` (long): what names each output row within its set."""
        return torch.zeros(batch.num_graphs, 0, dtype=torch.long)

    def kept_rows(self, task: tasks.Task, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Which output rows a predictions CSV writes (bool per row; ``targets`` NaN where unknown): every one."""
        return torch.ones(outputs.size(0), dtype=torch.bool)


class ElementLevel(OutputLevel):
    """One output row per element (``node_binary``): row k of a set is its element k, in the order of the set's
    ``adj`` (row and column k; element k + 1 in QuantumGrav.jl's 1-based count)."""

    unit = "element"
    id_columns = ("element",)

    def row_graphs(self, batch) -> torch.Tensor:
        return batch.batch

    def row_ids(self, batch) -> torch.Tensor:
        graphs = batch.batch.cpu()
        first_of_graph = batch.ptr.cpu()[graphs]
        return (torch.arange(graphs.numel()) - first_of_graph).view(-1, 1)


class PairLevel(OutputLevel):
    """One output row per candidate pair of elements (``relation_binary``): a set's pairs i < j row by row
    (``data.relation_targets``), named by their two elements in the order of the set's ``adj``.

    A predictions CSV keeps the pairs that are marked or truly changed only: a set of N elements has N (N - 1) / 2
    pairs (523,776 at N = 1,024), nearly all of them unchanged and unmarked, and a row for each would make a file of
    every pair of every set, read by nobody; the metrics count every pair (they come from the task's totals)."""

    unit = "pair"
    id_columns = ("from_element", "to_element")

    def row_graphs(self, batch) -> torch.Tensor:
        return pair_graph_index(batch.batch, batch.num_graphs)

    def row_ids(self, batch) -> torch.Tensor:
        sizes = torch.bincount(batch.batch.cpu(), minlength=batch.num_graphs).tolist()
        return torch.cat([candidate_pairs(n).T for n in sizes]) if sizes else torch.zeros(0, 2, dtype=torch.long)

    def kept_rows(self, task: tasks.Task, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return task.predict(outputs).bool() | (targets.view(-1) == 1)


# The level of each Task.level that is not one row per set.
LEVELS: dict[str, OutputLevel] = {"node": ElementLevel(), "pair": PairLevel()}


def level_of(task: tasks.Task) -> OutputLevel:
    """The output level of ``task``: its ``level``'s entry in ``LEVELS``, else one row per set."""
    return LEVELS.get(task.level, OutputLevel())
