"""A QuantumGrav.jl store's set as a graph: its causal matrix read from ``adj`` and checked, and the node features,
edges and order invariants derived from it (``graph_tensors``), with what becomes of a set that is not a strict
partial order, transitively closed (``NOT_PARTIAL_ORDERS``; ``QuantumGravJLDataset``'s ``not_partial_orders``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..dataset import past_to_future_edges
from ..invariants import features_and_invariants
from ..orders import elements_between, natural_order, transitive_closure
from .limits import store_error
from ...common.errors import UserError

# What to do with a set whose adj is not a strict partial order, transitively closed (QuantumGrav.jl's
# complex_topology relation may miss implied relations): refuse the data (one line), close the relation (add the
# implied relations; a cycle cannot be closed) or leave the set out.
NOT_PARTIAL_ORDERS: tuple[str, ...] = ("refuse", "close", "skip")
# A cached graph's order_problem: none, a relation that missed implied relations (the graph is its closure's), a cycle
# (no graph: only the labels are cached).
ORDER_OK, ORDER_CLOSED, ORDER_CYCLE = 0, 1, 2
def causal_matrix(stored_adj: np.ndarray, store: Path, group: str, array: str = "adj") -> np.ndarray:
    """The causal matrix R (bool, R[i, j]: i precedes j) of an ``adj`` as numpy reads it from the store:
    the transpose (Zarr.jl reverses Julia's dimensions; Julia's adj[i, j] means i precedes j). Only its
    shape and entries are checked here; that it is a strict partial order is checked by ``graph_tensors``,
    with the product that the features need anyway. ``array``: the stored array's name (``linkmat``, the links in
    the same layout), for messages."""
    if stored_adj.ndim != 2 or stored_adj.shape[0] != stored_adj.shape[1] or stored_adj.shape[0] == 0:
        raise store_error(store, group, f"'{array}' has shape {stored_adj.shape}; expected a non-empty square "
                                          f"N x N {'causal' if array == 'adj' else 'link'} matrix")
    if stored_adj.dtype.kind not in "biu" or ((stored_adj != 0) & (stored_adj != 1)).any():
        raise store_error(store, group, f"'{array}' ({stored_adj.dtype}) has entries other than 0 and 1")
    return np.ascontiguousarray(stored_adj.T.astype(bool))


# What a group that holds its links alone (``linkmat``) may hold beside them, as upstream's notebooks read them: each
# element's number of links from its past and to its future.
LINK_DEGREE_ARRAYS = ("in_degrees_link", "out_degrees_link")


def relation_of_links(stored_links: np.ndarray, degrees: dict[str, np.ndarray], store: Path, group: str) -> np.ndarray:
    """The causal matrix of a group that stores its links alone: the transitive closure of ``linkmat`` (read as
    ``adj`` is: transposed), checked against what the group says of them: its link degrees where stored
    (``LINK_DEGREE_ARRAYS``), and that no stored link is implied by a chain of others (then it would be no link,
    and the links read back from the relation would not be those stored). A cycle is left to ``graph_tensors``."""
    links = causal_matrix(stored_links, store, group, "linkmat")
    counted = {"in_degrees_link": links.sum(axis=0), "out_degrees_link": links.sum(axis=1)}
    for name, stored in degrees.items():
        _check_degrees(name, np.asarray(stored).ravel(), counted, store, group)
    relation = transitive_closure(links)
    if not relation.diagonal().any():
        implied = int((links & (elements_between(relation) > 0)).sum())
        if implied:
            raise store_error(store, group, f"'linkmat' holds {implied:,} relations that chains of its other links "
                                              f"already imply, so it is not the links (the transitive reduction "
                                              f"QuantumGrav.jl's transitive_reduction! writes); store the links, or "
                                              f"the whole causal matrix as 'adj'")
    return relation


def _check_degrees(name: str, stored: np.ndarray, counted: dict[str, np.ndarray], store: Path, group: str) -> None:
    other = next(key for key in counted if key != name)
    if stored.shape == counted[name].shape and np.array_equal(stored, counted[name]):
        return
    if stored.shape != counted[name].shape:
        problem = f"has {stored.size} entries for the {counted[name].size} elements of 'linkmat'"
    else:
        k = int(np.flatnonzero(stored != counted[name])[0])
        swapped = (" (it is the other degree: is 'linkmat' stored transposed? Zarr.jl stores Julia's "
                   "linkmat[i, j] = 1, i linked to j, as numpy's [j, i])" if np.array_equal(stored, counted[other])
                   else "")
        problem = f"gives element {k + 1} {stored[k]:g} links where 'linkmat' has {counted[name][k]}{swapped}"
    raise store_error(store, group, f"'{name}' {problem}; the stored degrees and links disagree")


class NotAPartialOrder(UserError):
    """A group's ``adj`` that is not a strict partial order, transitively closed: ``cycle`` says whether no closure
    can make it one."""

    def __init__(self, message: str, cycle: bool):
        super().__init__(message)
        self.cycle = cycle


_ORDER_HINT = ("set data.kwargs.not_partial_orders: close to add the implied relations, or skip to leave such sets "
               "out (the count is reported)")


def _order_problem(R: np.ndarray, store: Path, group: str) -> NotAPartialOrder:
    """Why ``R`` is not a causal matrix (a transitively closed strict order): a cycle, or missing relations."""
    return order_error(store, group, cycle=bool(transitive_closure(R).diagonal().any()))


def order_error(store: Path, group: str, cycle: bool) -> NotAPartialOrder:
    if cycle:
        return NotAPartialOrder(str(store_error(store, group, (
            "'adj' has a cycle (or relates an element to itself); expected a causal matrix, a strict partial order; "
            "no closure makes it one: set data.kwargs.not_partial_orders: skip to leave such sets out"))), cycle=True)
    return NotAPartialOrder(str(store_error(store, group, (
        "'adj' is not transitively closed; expected the causal matrix make_adj writes, with every relation, not only "
        f"the links; {_ORDER_HINT}"))), cycle=False)


def graph_tensors(R: np.ndarray, edges: str, store: Path, group: str
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Node features, past -> future edge index and order invariants ([1, K], ``INVARIANT_NAMES``) of a
    causal matrix in any labelling, exactly as ``CausalSetDataset`` builds them for a naturally labelled one;
    one clear error (``NotAPartialOrder``) if ``R`` is not a strict partial order, transitively closed.

    All from one product ``R @ R`` of the naturally relabelled matrix (strictly upper triangular, so
    ``elements_between`` multiplies only the tiles on and above the diagonal): R is closed iff every
    two-step path is a relation, and a strictly upper-triangular R has no cycle. A matrix that no sort by
    past size makes upper triangular is no closed order; ``_order_problem`` then says why."""
    if np.tril(R).any() and not np.triu(R).any():
        raise store_error(store, group, "'adj' is in the other orientation: every relation points from a later "
                                          "element to an earlier one (QuantumGrav.jl's sets are time-labelled, and "
                                          "Zarr.jl stores Julia's adj transposed); write the transpose of your "
                                          "causal matrix, as write_julia_store does")
    order = None if not np.tril(R).any() else natural_order(R)
    natural = R if order is None else R[np.ix_(order, order)]
    if np.tril(natural).any():
        raise _order_problem(R, store, group)
    between = elements_between(natural)
    if ((between > 0) & ~natural).any():
        raise _order_problem(R, store, group)
    natural_features, invariants = features_and_invariants(natural, between)
    adjacency = natural & (between == 0) if edges == "links" else natural
    if order is None:
        features = natural_features
    else:  # back to the store's labelling: node k of the item is element k + 1 of the Julia set
        features, position = np.empty_like(natural_features), np.argsort(order)
        features[order] = natural_features
        adjacency = adjacency[np.ix_(position, position)]
    return torch.from_numpy(features), past_to_future_edges(adjacency), torch.from_numpy(invariants).reshape(1, -1)


def describe_order_repairs(repairs: dict[str, list[str]], kept: int, mode: str) -> str | None:
    """One line: how many sets (``repairs``: "closed" and "skipped", each a list of ``store/group``) were not partial
    orders and what became of them, naming the first few; None if none. ``kept``: the sets read."""
    for done, names in repairs.items():
        if names:
            total = kept + len(repairs["skipped"])
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            how = "their transitive closure was read instead" if done == "closed" else "they were left out"
            return (f"QuantumGrav.jl data: {len(names)} of {total} sets were not strict partial orders, transitively "
                    f"closed (not_partial_orders: {mode}): {how} ({shown})")
    return None
