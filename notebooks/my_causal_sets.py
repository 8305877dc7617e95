"""Your own causal sets and your own model, as notebooks/07_your_own_data.ipynb writes them.

They live in a module, not in the notebook, because ``QG.launch`` starts fresh worker processes that
import every class of the config by name (``data.type: !pyobject my_causal_sets.MyCausalSets``); a class
defined in a notebook cell cannot be imported there.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch_geometric import nn as pyg_nn
from torch_geometric.data import Data, InMemoryDataset

from QuantumGrav.data import causal_sets as cs


class MyCausalSets(InMemoryDataset):
    """Causal sets made with your own code: sprinklings into 2d, 3d and 4d causal diamonds and, unless
    ``target="dimension"``, as many non-manifold-like orders (random layered orders, or sprinklings with
    a fraction of their pairs flipped).

    ``target="manifold_like"``: y = 1 for a sprinkling, 0 otherwise (an integer: a binary task).
    ``target="dimension"``: sprinklings only, y = their spacetime dimension as a float (a regression task).

    Each item has ``x`` (the library's node features of the causal matrix), ``edge_index`` (the links,
    past to future), ``y`` and a graph-level ``invariants`` row (ordering fraction, Myrheim-Meyer
    dimension, ...). The same arguments give the same sets on every rank.
    """

    def __init__(self, num_sets: int = 120, n_min: int = 16, n_max: int = 32, target: str = "manifold_like",
                 seed: int = 0):
        if target not in ("manifold_like", "dimension"):
            raise ValueError(f"target: expected 'manifold_like' or 'dimension', got {target!r}")
        super().__init__(root=None)
        rng = np.random.default_rng(seed)
        items = [self._make_item(i, rng, n_min, n_max, target) for i in range(num_sets)]
        self.data, self.slices = self.collate(items)

    @staticmethod
    def _make_item(i: int, rng: np.random.Generator, n_min: int, n_max: int, target: str) -> Data:
        n, dimension = int(rng.integers(n_min, n_max + 1)), int(rng.choice([2, 3, 4]))
        causal = cs.sprinkle_diamond(n, dimension, rng)[1]
        manifold_like = target == "dimension" or i % 2 == 0
        if not manifold_like:  # half of the sets: destroyed sprinklings or layered orders
            causal = (cs.destroy_order(causal, 0.02, rng) if i % 4 == 1
                      else cs.random_layered_orders(1, n, rng)[0])
        links = cs.transitive_reduction(causal)
        y = (torch.tensor([float(dimension)]) if target == "dimension"
             else torch.tensor([int(manifold_like)], dtype=torch.long))
        return Data(x=torch.from_numpy(cs.node_features(causal, links)),
                    edge_index=torch.from_numpy(np.stack(np.nonzero(links))).long(), y=y,
                    invariants=torch.from_numpy(cs.order_invariants(causal)).reshape(1, -1), num_nodes=n)


class GraphAndInvariantsGNN(nn.Module):
    """A model that reads the graph and graph-level features: message passing on (x, edge_index), mean
    and max pooling per graph, concatenated with the graph's ``invariants`` row, then an MLP head.

    The contract of ``model.type``: built as ``GraphAndInvariantsGNN(in_channels, out_channels,
    **model.kwargs)``; ``forward(batch)`` returns ``[graphs, out_channels]``.
    """

    def __init__(self, in_channels: int, out_channels: int, hidden: int = 32,
                 num_invariants: int = len(cs.INVARIANT_NAMES)):
        super().__init__()
        self.conv1 = pyg_nn.GraphConv(in_channels, hidden)
        self.conv2 = pyg_nn.GraphConv(hidden, hidden)
        self.invariant_norm = nn.BatchNorm1d(num_invariants)  # N and the ratios live on different scales
        self.head = nn.Sequential(nn.Linear(2 * hidden + num_invariants, hidden), nn.ReLU(),
                                  nn.Linear(hidden, out_channels))

    def forward(self, batch) -> torch.Tensor:
        x = torch.relu(self.conv1(batch.x, batch.edge_index))
        x = torch.relu(self.conv2(x, batch.edge_index))
        pooled = torch.cat([pyg_nn.global_mean_pool(x, batch.batch), pyg_nn.global_max_pool(x, batch.batch)], dim=-1)
        return self.head(torch.cat([pooled, self.invariant_norm(batch.invariants)], dim=-1))
