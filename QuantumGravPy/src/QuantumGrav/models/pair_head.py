"""The pair head: one logit per candidate pair of elements (``data.relation_targets``: each set's pairs i < j, row by
row, the sets of a PyG batch in turn), from the head's states of both elements and the pair's state in the input.

For a pair (i, j) in input state s (unrelated, related, link) the score is a bilinear form of the two states,
one per input state, ``<A_s z_i, B_s z_j> + c_s``, plus a small MLP of what the order says of the pair
(``ORDER_FEATURES``: the interval between its ends, their common past and future, the cones of both ends, and the
nesting defect |F(j) \\ F(i)| + |P(i) \\ P(j)|, which is 0 for a relation removed from a closed order, and the exact 2D
test's local evidence: how many of the pair's ends lie on a violation of two-dimensionality and whether the pair is
an edge of a violating cycle, from its elements' ``violation_part``, found per set at data time,
``data.relation_targets.violation_part``; a sprinkling in 2D has none, and in d >= 3 every element violates, so
these say nothing there). Message passing
gives each element a summary of its surroundings, not which elements two of them share: those counts come from
products of the set's relation matrix, ``R R``, ``R R^T`` and ``R^T R``, read from the pairs' states in their natural
labelling (every relation from the lower index to the higher: ``data.relation_targets`` refuses another).

Each set's bilinear scores and order counts are matrices, one batched product each: no ``[pairs, 2 x width]``
tensor is built. Memory: ``4 (S + 3) G n_max^2`` bytes for a batch of G sets of at most n_max elements in S = 3
states (a batch of 8 sets of 1,024 elements: 200 MiB, and as much again for the gradient), and the MLP's
``[pairs, ORDER_HIDDEN]`` hidden layer, 4 x 16 bytes per pair (268 MiB for those 8 sets), against
``2 x width x 4`` bytes per pair for a concatenation of the states (at width 64, 268 MiB per set of 1,024 elements,
before an MLP's hidden layer). The products cost ``3 G n_max^3`` multiply-adds (a GPU's work at N = 1,024).

Each set's logits are offset by ``-log(pairs of the set)``: the log-odds of one change among its pairs, so that a
fresh model predicts a handful of changes per set whatever its size (the question is a few toggled relations among
N^2 / 2 pairs), and the plain BCE's negatives start with a summed gradient of about the positives' count instead of
drowning them (``tasks.relation.RelationBinaryTask``).
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.utils import to_dense_batch

NUM_PAIR_STATES = 3  # tasks.relation.PAIR_STATES: unrelated, related, link
ORDER_FEATURES = ("interval", "common_past", "common_future", "past_first", "future_first", "past_second",
                  "future_second", "nesting_defect", "violation_ends", "violation_cycle")
ORDER_HIDDEN = 16


class PairScorer(nn.Module):
    """One logit per candidate pair from element states ``z`` [nodes, width] and the pairs' input states.

    Args:
        width: the width of each element's state.
        rank: the rank of each state's bilinear form.
    """

    def __init__(self, width: int, rank: int):
        super().__init__()
        self.rank = rank
        self.first = nn.Linear(width, NUM_PAIR_STATES * rank)
        self.second = nn.Linear(width, NUM_PAIR_STATES * rank)
        self.state_bias = nn.Parameter(torch.zeros(NUM_PAIR_STATES))
        self.order = nn.Sequential(nn.Linear(len(ORDER_FEATURES) + NUM_PAIR_STATES, ORDER_HIDDEN), nn.ReLU(),
                                   nn.Linear(ORDER_HIDDEN, 1))

    def forward(self, z: torch.Tensor, node_graph: torch.Tensor, num_graphs: int, pair_state: torch.Tensor,
                violation_part: torch.Tensor) -> torch.Tensor:
        """``[pairs, 1]`` logits; ``node_graph``: each element's set (sorted, as PyG batches them); ``pair_state``:
        each candidate pair's input state (0, 1, 2), in the pairs' order; ``violation_part``: [nodes, 2], each
        element's violating part in its set's two tournaments (-1: none)."""
        first, mask = to_dense_batch(self.first(z), node_graph, batch_size=num_graphs)  # [G, n, S r]
        second, _ = to_dense_batch(self.second(z), node_graph, batch_size=num_graphs)
        graphs, n_max, _ = first.shape
        first = first.view(graphs, n_max, NUM_PAIR_STATES, self.rank).transpose(1, 2)  # [G, S, n, r]
        second = second.view(graphs, n_max, NUM_PAIR_STATES, self.rank).transpose(1, 2)
        scores = first @ second.transpose(-1, -2)  # [G, S, n, n]
        # The candidate pairs of every set, in the data's order: (g, i, j) row-major with i < j < n_g.
        upper = torch.ones(n_max, n_max, dtype=torch.bool, device=z.device).triu(1)
        pairs = upper & mask[:, :, None] & mask[:, None, :]  # [G, n, n]
        per_state = scores.permute(0, 2, 3, 1)[pairs]  # [pairs, S]
        state = pair_state.long().view(-1, 1)
        sizes = mask.sum(dim=1)
        parts, _ = to_dense_batch(violation_part, node_graph, fill_value=-1, batch_size=num_graphs)  # [G, n, 2]
        counts = order_counts(pair_state, pairs, sizes, z.dtype, parts)[pairs]  # [pairs, len(ORDER_FEATURES)]
        one_hot = nn.functional.one_hot(state.view(-1), NUM_PAIR_STATES).to(z.dtype)
        logits = per_state.gather(1, state) + self.state_bias[state] + self.order(torch.cat([counts, one_hot], 1))
        prior = torch.log((sizes * (sizes - 1) // 2).clamp(min=1).to(logits.dtype))
        return logits - torch.repeat_interleave(prior, sizes * (sizes - 1) // 2).view(-1, 1)


def order_counts(pair_state: torch.Tensor, pairs: torch.Tensor, sizes: torch.Tensor, dtype: torch.dtype,
                 parts: torch.Tensor) -> torch.Tensor:
    """[G, n, n, len(ORDER_FEATURES)]: for each pair (i, j) of each set (``pairs``: where they lie in the dense
    [G, n, n] layout), the counts ``ORDER_FEATURES`` as fractions of the set's N, from the relation matrix the pairs'
    states give (upper triangular: their natural labelling), then the pair's ends on a violation (0, 1, 2) and
    whether they share a violating part (0, 1), from the elements' ``parts`` [G, n, 2] (-1: on no cycle)."""
    relation = torch.zeros(pairs.shape, dtype=dtype, device=pair_state.device)
    relation[pairs] = (pair_state > 0).to(dtype)
    between = relation @ relation
    common_future, common_past = relation @ relation.transpose(1, 2), relation.transpose(1, 2) @ relation
    future, past = relation.sum(2), relation.sum(1)  # [G, n]
    first_past, first_future = past[:, :, None].expand_as(between), future[:, :, None].expand_as(between)
    second_past, second_future = past[:, None, :].expand_as(between), future[:, None, :].expand_as(between)
    nesting = (second_future - common_future + first_past - common_past) * (1 - relation)
    counts = torch.stack([between, common_past, common_future, first_past, first_future, second_past,
                          second_future, nesting], dim=-1) / sizes.clamp(min=1).to(dtype).view(-1, 1, 1, 1)
    on_violation = (parts >= 0).any(dim=-1).to(dtype)  # [G, n]
    ends = on_violation[:, :, None] + on_violation[:, None, :]
    shared = ((parts[:, :, None, :] == parts[:, None, :, :]) & (parts[:, :, None, :] >= 0)).any(dim=-1).to(dtype)
    return torch.cat([counts, ends[..., None], shared[..., None]], dim=-1)
