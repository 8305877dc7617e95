"""What one output row of a model is about: a whole causal set, or one element of it. The task fixes the level
(``level_of``); the level says which graph of a batch each output row belongs to (what the task's per-set totals,
e.g. the node task's block IoU, group by) and what names the row within its set (the id columns of an applied
run's CSV: none for a set, ``element`` for an element).

An applied run (``evaluation.predictions``) writes one CSV row per output row, whatever the level, from these two
answers alone. A new level (e.g. one output per candidate relation, a pair of elements) is one ``OutputLevel``
subclass here and its task type in ``LEVELS``: ``row_graphs`` maps each output row to its graph, ``row_ids`` names
it within its set (for a relation, its two elements: ``id_columns = ("from_element", "to_element")``).
"""

from __future__ import annotations

import torch

from . import tasks


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


# The level of each task type that is not one row per set.
LEVELS: dict[str, OutputLevel] = {"node_binary": ElementLevel()}


def level_of(task: tasks.Task) -> OutputLevel:
    """The output level of ``task``: its entry in ``LEVELS``, else one row per set."""
    return LEVELS.get(task.type, OutputLevel())
