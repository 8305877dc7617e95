"""The pair head: one logit per candidate pair of elements (``data.relation_targets``: each set's pairs i < j, row by
row, the sets of a PyG batch in turn), from the head's states of both elements and the pair's state in the input.

For a pair (i, j) in input state s (unrelated, related, link) the score is a bilinear form of the two states,
one per input state: ``<A_s z_i, B_s z_j> + c_s``. Each set's scores are then matrices, ``(A_s Z)(B_s Z)^T``, one
batched product per state: no ``[pairs, 2 x width]`` tensor is built. Memory: ``4 S G n_max^2`` bytes for the
scores of a batch of G sets of at most n_max elements in S = 3 states (a batch of 8 sets of 1,024 elements:
100 MiB, and as much again for its gradient), against ``2 x width x 4`` bytes per pair for a concatenation (at
width 64, 268 MiB per set of 1,024 elements, before the MLP's hidden layer).

Each set's logits are offset by ``-log(pairs of the set)``: the log-odds of one change among its pairs, so that a
fresh model predicts a handful of changes per set whatever its size (the question is a few toggled relations among
N^2 / 2 pairs), and the plain BCE's negatives start with a summed gradient of about the positives' count instead of
drowning them (``evaluation.tasks.RelationBinaryTask``).
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.utils import to_dense_batch

NUM_PAIR_STATES = 3  # data.relation_targets.PAIR_STATES: unrelated, related, link


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

    def forward(self, z: torch.Tensor, node_graph: torch.Tensor, num_graphs: int,
                pair_state: torch.Tensor) -> torch.Tensor:
        """``[pairs, 1]`` logits; ``node_graph``: each element's set (sorted, as PyG batches them); ``pair_state``:
        each candidate pair's input state (0, 1, 2), in the pairs' order."""
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
        logits = per_state.gather(1, state) + self.state_bias[state]
        sizes = mask.sum(dim=1)
        prior = torch.log((sizes * (sizes - 1) // 2).clamp(min=1).to(logits.dtype))
        return logits - torch.repeat_interleave(prior, sizes * (sizes - 1) // 2).view(-1, 1)
