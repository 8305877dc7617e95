"""The order a model made for orders reads from a batch, checked: every relation and its interval size
(``relation_index``, ``relation_interval``, from ``data.transforms.OrderStructure``), the links (``edge_index``),
optionally the unrelated pairs, a positional encoding and per-set features.

A batch that contradicts itself is refused in one ``ValueError`` that names what is wrong, never learned from: an
element related to itself, a pair related both ways (a cycle: no partial order), a link of ``edge_index`` that is no
relation or runs against the order (edges pointing backwards in time), edges that are neither the links nor all
relations, and a relation that is not transitive or intervals that do not count the elements between (a checksum:
the intervals sum to the two-step paths, sum_k in(k) out(k), exactly then). These cost a sort of the relations; where
a model builds the dense relation (``dense_order``), the same is checked pair by pair with one batched product
``R R``, which the pair network needs anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch_geometric.utils import to_dense_batch

HINT = ("wrap the dataset's items in QuantumGrav.data.transforms.OrderStructure (in a config: data.type: "
        "!pyobject QuantumGrav.data.transforms.with_order_structure)")


@dataclass
class OrderBatch:
    """A batch's order: relations past -> future [2, R] with their interval sizes [R], whether each is a link,
    each element's set (``graph``) and the number of sets."""

    relation_index: torch.Tensor
    interval: torch.Tensor
    is_link: torch.Tensor
    graph: torch.Tensor
    num_graphs: int

    @property
    def set_sizes(self) -> torch.Tensor:
        return torch.bincount(self.graph, minlength=self.num_graphs)


def attribute(data, name: str, model: str) -> torch.Tensor:
    """``data.<name>``, or a ValueError saying which transform gives it."""
    value = getattr(data, name, None)
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{model}: the batch has no {name} (it has {', '.join(sorted(data.keys()))}); {HINT}")
    return value


def graph_of_nodes(data) -> torch.Tensor:
    batch = getattr(data, "batch", None)
    return batch if batch is not None else torch.zeros(data.num_nodes, dtype=torch.long, device=data.x.device)


def read_order(data, model: str) -> OrderBatch:
    """The checked order of a batch (see the module's docstring for what is refused)."""
    relations = attribute(data, "relation_index", model)
    interval = attribute(data, "relation_interval", model).to(data.x.dtype)
    n = int(data.num_nodes)
    if relations.dim() != 2 or relations.size(0) != 2 or interval.shape != (relations.size(1),):
        raise ValueError(f"{model}: expected relation_index [2, R] and relation_interval [R], got "
                         f"{list(relations.shape)} and {list(interval.shape)}; {HINT}")
    if relations.numel() and (relations.min() < 0 or relations.max() >= n):
        raise ValueError(f"{model}: relation_index refers to element {int(relations.max())}, the batch has {n}")
    first, second = relations
    if (first == second).any():
        at = int(first[first == second][0])
        raise ValueError(f"{model}: element {at} is related to itself; a causal set's order is strict (irreflexive)")
    keys = first * n + second
    both_ways = torch.isin(keys, second * n + first)
    if both_ways.any():
        i = int(both_ways.nonzero()[0])
        raise ValueError(f"{model}: elements {int(first[i])} and {int(second[i])} precede each other (a cycle); the "
                         f"relation is not a partial order")
    graph = graph_of_nodes(data)
    if (graph[first] != graph[second]).any():
        raise ValueError(f"{model}: relation_index relates elements of different causal sets")
    _check_links(data.edge_index, keys, interval, n, model)
    _check_two_step_paths(first, second, interval, n, model)
    num_graphs = int(getattr(data, "num_graphs", 1) or 1)
    return OrderBatch(relations, interval, interval == 0, graph, num_graphs)


def _check_links(edge_index: torch.Tensor, relation_keys: torch.Tensor, interval: torch.Tensor, n: int,
                 model: str) -> None:
    """Every edge of ``edge_index`` is a relation, in its direction, and the edges are either the links (the
    relations with an empty interval) or all relations."""
    source, target = edge_index
    sorted_keys, order = torch.sort(relation_keys)
    edge_keys = source * n + target
    position = torch.searchsorted(sorted_keys, edge_keys).clamp(max=max(sorted_keys.numel() - 1, 0))
    found = sorted_keys[position] == edge_keys if sorted_keys.numel() else torch.zeros_like(edge_keys, dtype=torch.bool)
    if not found.all():
        i = int((~found).nonzero()[0])
        a, b = int(source[i]), int(target[i])
        backwards = bool(torch.isin(torch.tensor([b * n + a], device=relation_keys.device), relation_keys))
        why = (f"runs against the order (relation_index has {b} -> {a}): edges must point from past to future"
               if backwards else "is no relation of relation_index")
        raise ValueError(f"{model}: edge {a} -> {b} of edge_index {why}")
    links = int((interval == 0).sum())
    if edge_index.size(1) == relation_keys.numel():
        return  # all relations
    between = interval[order[position]]
    if edge_index.size(1) != links or (between > 0).any():
        raise ValueError(f"{model}: edge_index has {edge_index.size(1)} edges ({int((between > 0).sum())} of them "
                         f"with elements between their ends), but the order has {links} links and "
                         f"{relation_keys.numel()} relations; edge_index must be the links or all relations")


def _check_two_step_paths(first: torch.Tensor, second: torch.Tensor, interval: torch.Tensor, n: int,
                          model: str) -> None:
    """A checksum of transitivity that costs no product: the two-step paths i < k < j number sum_k in(k) out(k);
    in a transitive relation each joins a related pair, whose interval counts it, so the intervals sum to it. A
    relation a < c left out of a closed order (its intervals kept) is missed only when the elements between a and c
    number exactly the relations into a and out of c; ``dense_order`` checks every pair."""
    paths = int((torch.bincount(second, minlength=n) * torch.bincount(first, minlength=n)).sum())
    counted = int(interval.to(torch.float64).sum())
    if paths != counted:
        raise ValueError(f"{model}: the relation is not transitive, or relation_interval does not count the elements "
                         f"between: relation_index has {paths} two-step paths i < k < j, the intervals count "
                         f"{counted}; relation_index must hold every relation (the transitive closure), {HINT}")


def dense_order(data, order: OrderBatch, model: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The relation ``R`` [G, n, n] (R[g, i, j] = 1: i precedes j), the interval sizes ``between`` = R R (elements
    between i and j, for every pair) and the element mask [G, n] of each set, padded to the largest; refuses a
    relation that is not transitive and interval sizes that disagree with the product."""
    _, mask = to_dense_batch(data.x[:, :1], order.graph, batch_size=order.num_graphs)
    offset = torch.cumsum(order.set_sizes, 0) - order.set_sizes
    g = order.graph[order.relation_index[0]]
    i, j = order.relation_index - offset[g]
    R = data.x.new_zeros(order.num_graphs, mask.size(1), mask.size(1))
    R[g, i, j] = 1.0
    between = R @ R
    missing = (between > 0) & (R == 0)
    if missing.any():
        gg, a, c = (int(v) for v in missing.nonzero()[0])
        b = int(((R[gg, a] > 0) & (R[gg, :, c] > 0)).nonzero()[0])
        raise ValueError(f"{model}: the relation is not transitive: in set {gg}, {a} < {b} < {c} but not {a} < {c}; "
                         f"relation_index must hold every relation (the transitive closure), {HINT}")
    wrong = between[g, i, j] != order.interval
    if wrong.any():
        k = int(wrong.nonzero()[0])
        raise ValueError(f"{model}: relation_interval says {int(order.interval[k])} elements lie between "
                         f"{int(i[k])} and {int(j[k])} of set {int(g[k])}, the relation has {int(between[g, i, j][k])}")
    return R, between, mask


def set_features(data, width: int, model: str) -> torch.Tensor:
    """``data.set_features`` as [graphs, width], or a ValueError naming the width expected."""
    features = attribute(data, "set_features", model)
    graphs = int(getattr(data, "num_graphs", 1) or 1)
    if features.numel() != graphs * width:
        raise ValueError(f"{model}: expected set_features of {width} columns per set, got {list(features.shape)} "
                         f"for {graphs} set(s); the model's set_features must match the transform's")
    return features.reshape(graphs, width).to(data.x.dtype)
