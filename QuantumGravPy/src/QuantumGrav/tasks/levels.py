"""What one output row of a model is about: a whole causal set, one element of it, or one candidate pair of its
elements. A task declares its level (``Task.level``); the level says how many rows a set of N elements gives
(``rows``), which readout the built-in model needs for them (``readout``), which graph of a batch each output row
belongs to (what a task's per-set totals, e.g. the node task's block IoU, group by) and what names the row within its
set (the id columns of an applied run's CSV: none for a set, ``element`` for an element, ``from_element`` and
``to_element`` for a pair).

An applied run writes one CSV row per output row, whatever the level, from these answers alone, and those the level
keeps (``kept_rows``: every one, but for pairs). A new level is one ``OutputLevel`` subclass here.

The candidate pairs of a set of N elements are its N (N - 1) / 2 unordered pairs {i, j}, listed as i < j in the item's
element order, row by row (``torch.triu_indices``; ``data.relation_targets`` says why all of them, and unordered).
"""

from __future__ import annotations

import torch


def candidate_pairs(num_elements: int, device: torch.device | None = None) -> torch.Tensor:
    """[2, N (N - 1) / 2] long: the candidate pairs (i, j), i < j, row by row (the module's docstring says why)."""
    return torch.triu_indices(num_elements, num_elements, 1, device=device)


def num_pairs(num_elements: torch.Tensor | int) -> torch.Tensor | int:
    """The candidate pairs of sets of ``num_elements``."""
    return num_elements * (num_elements - 1) // 2


def pair_graph_index(node_graph: torch.Tensor, num_graphs: int) -> torch.Tensor:
    """Each candidate pair's graph, for the elements' graphs ``node_graph`` (a PyG batch's ``batch``): graph g's
    n_g (n_g - 1) / 2 pairs in turn, as the pair head and the data list them."""
    sizes = torch.bincount(node_graph, minlength=num_graphs)
    return torch.repeat_interleave(torch.arange(num_graphs, device=node_graph.device), num_pairs(sizes))


class OutputLevel:
    """One output row per causal set (the set-level tasks): ``unit`` is what a row is about (in messages and an applied
    run's ``unit``), ``readout`` the built-in model's readout for it (``model.readout``), ``row_text`` and
    ``rows_text`` a row and the rows of a batch in words, ``id_columns`` the columns that name a row within its set
    (none here)."""

    unit, readout, row_text, rows_text = "set", "graph", "set", "graphs"
    labels_text = "one label per causal set"  # what a dataset's y gives at this level, in words
    id_columns: tuple[str, ...] = ()

    def rows(self, num_elements: int) -> int:
        """Output rows of a set of ``num_elements`` elements."""
        return 1

    def row_graphs(self, batch) -> torch.Tensor:
        """Each output row's graph in ``batch`` (0..graphs-1), non-decreasing: the rows of a set are consecutive."""
        return torch.arange(batch.num_graphs, device=batch.batch.device)

    def row_ids(self, batch) -> torch.Tensor:
        """``[rows, len(id_columns)]`` (long): what names each output row within its set."""
        return torch.zeros(batch.num_graphs, 0, dtype=torch.long)

    def kept_rows(self, task, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Which output rows a predictions CSV writes (bool per row; ``targets`` NaN where unknown): every one."""
        return torch.ones(outputs.size(0), dtype=torch.bool)


class ElementLevel(OutputLevel):
    """One output row per element: row k of a set is its element k, in the order of the set's ``adj`` (row and column
    k; element k + 1 in QuantumGrav.jl's 1-based count)."""

    unit, readout, row_text, rows_text = "element", "node", "element", "elements"
    labels_text = "one label per element"
    id_columns = ("element",)

    def rows(self, num_elements: int) -> int:
        return num_elements

    def row_graphs(self, batch) -> torch.Tensor:
        return batch.batch

    def row_ids(self, batch) -> torch.Tensor:
        graphs = batch.batch.cpu()
        first_of_graph = batch.ptr.cpu()[graphs]
        return (torch.arange(graphs.numel()) - first_of_graph).view(-1, 1)


class PairLevel(OutputLevel):
    """One output row per candidate pair of elements: a set's pairs i < j row by row, named by their two elements in
    the order of the set's ``adj``.

    A predictions CSV keeps the pairs that are marked or truly changed only: a set of N elements has N (N - 1) / 2
    pairs (523,776 at N = 1,024), nearly all of them unchanged and unmarked, and a row for each would make a file of
    every pair of every set, read by nobody; the metrics count every pair (they come from the task's totals)."""

    unit, readout, row_text, rows_text = "pair", "pair", "pair of elements", "pairs of elements"
    labels_text = "one label per pair of elements"
    id_columns = ("from_element", "to_element")

    def rows(self, num_elements: int) -> int:
        return num_pairs(num_elements)

    def row_graphs(self, batch) -> torch.Tensor:
        return pair_graph_index(batch.batch, batch.num_graphs)

    def row_ids(self, batch) -> torch.Tensor:
        sizes = torch.bincount(batch.batch.cpu(), minlength=batch.num_graphs).tolist()
        return torch.cat([candidate_pairs(n).T for n in sizes]) if sizes else torch.zeros(0, 2, dtype=torch.long)

    def kept_rows(self, task, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return task.predict(outputs).bool() | (targets.view(-1) == 1)


SET, ELEMENT, PAIR = OutputLevel(), ElementLevel(), PairLevel()
LEVELS: tuple[OutputLevel, ...] = (SET, ELEMENT, PAIR)
