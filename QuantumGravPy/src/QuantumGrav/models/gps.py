"""Upstream's next model as a row: GPS layers (Rampasek et al., NeurIPS 2022; PyG's ``GPSConv``), each local
message passing along the links plus global attention over all of a set's elements, with a positional encoding.

Upstream QuantumGrav adds a GPS layer on its refactor branch. Here each layer is PyG's ``GPSConv``: a ``GINEConv``
over the links both ways (the direction an edge attribute, so past and future stay apart) and multi-head attention
over the set, summed, with batch norm and an MLP. The positional encoding is the random-walk one of the symmetrised
links (``data.order_pe``, PyG's ``AddRandomWalkPE`` in ``data.transforms.OrderStructure``), joined to ``x``; the
links are checked against the transform's relations (``order_inputs.read_order``) before they are read.

What it can compute: attention is permutation-equivariant over a set with these inputs, so GPS is bounded by what
its positional encoding distinguishes plus 1-WL: random-walk return probabilities count closed walks (cycles of the
link graph), not interval sizes, and nothing here orients the incomparable pairs. It is measured as upstream's row,
not as a model that can decide two-dimensionality. Attention costs N^2 per head and set.
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn import GINEConv, GPSConv

from .gnn import ACTIVATIONS, GraphFeatureNorm
from .order_inputs import attribute, graph_of_nodes, read_order, set_features
from .readouts import GraphReadout


class GPSNetwork(nn.Module):
    """``model.type: !pyobject QuantumGrav.models.gps.GPSNetwork`` (``configs/order_gps.yaml``).

    Args:
        in_channels: element features ``x``; out_channels: outputs per set.
        channels, layers, heads: the width, the ``GPSConv`` layers and their attention heads.
        pe_channels: the width of ``data.order_pe`` (0: none).
        readout, readout_width: ``readouts.GraphReadout``'s (upstream pools by the mean).
        set_features: F > 0 makes it a hybrid (``data.set_features`` in the head).
        head_hidden, dropout, activation: the classifier head and the layers.
    """

    def __init__(self, in_channels: int, out_channels: int, *, channels: int = 64, layers: int = 3, heads: int = 4,
                 pe_channels: int = 8, readout: str = "mean", readout_width: int = 32, set_features: int = 0,
                 head_hidden: tuple[int, ...] = (64,), dropout: float = 0.1, activation: str = "relu"):
        super().__init__()
        if channels % heads:
            raise ValueError(f"GPSNetwork: channels ({channels}) must be a multiple of heads ({heads})")
        self.in_channels, self.pe_channels, self.set_width = in_channels, pe_channels, set_features
        self.embed = nn.Linear(in_channels + pe_channels, channels)

        def local() -> GINEConv:
            mlp = nn.Sequential(nn.Linear(channels, channels), ACTIVATIONS[activation](), nn.Linear(channels, channels))
            return GINEConv(mlp, edge_dim=2)

        self.layers = nn.ModuleList(GPSConv(channels, local(), heads=heads, dropout=dropout, act=activation)
                                    for _ in range(layers))
        self.readout = GraphReadout(channels, readout, readout_width)
        self.set_norm = GraphFeatureNorm(set_features) if set_features else None
        width = self.readout.out_width + set_features
        head: list[nn.Module] = []
        for hidden in head_hidden:
            head += [nn.Linear(width, hidden), ACTIVATIONS[activation](), nn.Dropout(dropout)]
            width = hidden
        self.head = nn.Sequential(*head, nn.Linear(width, out_channels))

    def forward(self, data) -> torch.Tensor:
        x = data.x if not self.pe_channels else torch.cat([data.x, attribute(data, "order_pe", "GPSNetwork")], 1)
        if x.size(1) != self.in_channels + self.pe_channels:
            raise ValueError(f"GPSNetwork: expected {self.in_channels} node features and {self.pe_channels} "
                             f"order_pe columns, got {x.size(1)} columns in all")
        read_order(data, "GPSNetwork")  # the links checked against the order: a backward or cyclic input is refused
        source = data.edge_index[0]
        edge_index = torch.cat([data.edge_index, data.edge_index.flip(0)], 1)
        direction = torch.cat([torch.zeros_like(source), torch.ones_like(source)])
        edge_attr = nn.functional.one_hot(direction, 2).to(x.dtype)
        graph = graph_of_nodes(data)
        num_graphs = int(getattr(data, "num_graphs", 1) or 1)
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x, edge_index, graph, edge_attr=edge_attr)
        parts = [self.readout(x, graph, num_graphs)]
        if self.set_norm is not None:
            parts.append(self.set_norm(set_features(data, self.set_width, "GPSNetwork")))
        return self.head(torch.cat(parts, 1))
