"""Upstream QuantumGrav's reference model for manifold-likeness, as a rival to measure against
(``configs/upstream_gcn.yaml``): graph convolutions (GCNConv) on each element's in- and out-link degrees, each
followed by batch norm, ReLU, a linear skip connection from the block's input and dropout 0.3 (upstream's
``GNNBlock``), mean pooling over the elements, and a linear head.

It reads two columns of the library's node features, the link degrees divided by N (``feature_columns``), and
multiplies them by each set's N back into counts (``degrees_as_counts``), the raw degrees that upstream feeds.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn
from torch_geometric.nn import GCNConv, global_mean_pool

from . import generated_sources  # noqa: F401  (removes the files PyG writes for its layers at exit)


class UpstreamGCNBlock(nn.Module):
    """GCNConv, batch norm, ReLU, plus a linear projection of the input (the skip), then dropout."""

    def __init__(self, in_channels: int, out_channels: int, dropout: float, batch_norm_momentum: float = 0.1):
        super().__init__()
        self.conv = GCNConv(in_channels, out_channels)
        self.norm = nn.BatchNorm1d(out_channels, momentum=batch_norm_momentum)
        self.skip = nn.Linear(in_channels, out_channels)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.dropout(torch.relu(self.norm(self.conv(x, edge_index))) + self.skip(x))


class UpstreamGCN(nn.Module):
    """``model.type: !pyobject QuantumGrav.models.upstream_gcn.UpstreamGCN``, built as
    ``UpstreamGCN(in_channels, out_channels, **model.kwargs)``.

    Args:
        in_channels: node features per element in the data (the columns picked are ``feature_columns``).
        out_channels: outputs per set (1 for the binary question).
        feature_columns: the columns of ``x`` read: the in- and out-link degrees over N (columns 2 and 3 of the
            library's ``NODE_FEATURES``).
        degrees_as_counts: multiply those columns by each set's number of elements (upstream feeds counts).
        hidden_channels: one block per entry, its width (upstream: one block of 32).
        dropout: after each block (upstream: 0.3).
        batch_norm_momentum: the batch norms' running-average momentum, in torch's convention (the weight of the
            newest batch; torch's default 0.1, upstream's 0.2).
    """

    def __init__(self, in_channels: int, out_channels: int, *, feature_columns: Sequence[int] = (2, 3),
                 degrees_as_counts: bool = True, hidden_channels: Sequence[int] = (32,), dropout: float = 0.3,
                 batch_norm_momentum: float = 0.1):
        super().__init__()
        if not feature_columns or any(not 0 <= c < in_channels for c in feature_columns):
            raise ValueError(f"feature_columns: expected columns of the {in_channels} node features, "
                             f"got {list(feature_columns)}")
        self.register_buffer("columns", torch.tensor(list(feature_columns)), persistent=False)
        self.degrees_as_counts = degrees_as_counts
        widths = [len(feature_columns), *hidden_channels]
        if not 0.0 < batch_norm_momentum <= 1.0:
            raise ValueError(f"batch_norm_momentum: expected a number in (0, 1], got {batch_norm_momentum!r}")
        self.blocks = nn.ModuleList(UpstreamGCNBlock(a, b, dropout, batch_norm_momentum)
                                    for a, b in zip(widths, widths[1:]))
        self.head = nn.Linear(widths[-1], out_channels)

    def forward(self, batch) -> torch.Tensor:
        x = batch.x.index_select(1, self.columns)
        graph_of = batch.batch if batch.batch is not None else x.new_zeros(x.size(0), dtype=torch.long)
        if self.degrees_as_counts:
            x = x * torch.bincount(graph_of).index_select(0, graph_of).unsqueeze(1).to(x.dtype)
        for block in self.blocks:
            x = block(x, batch.edge_index)
        return self.head(global_mean_pool(x, graph_of))
