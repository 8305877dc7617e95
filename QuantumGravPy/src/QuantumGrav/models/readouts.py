"""Readouts of a set's element states that keep their distribution instead of a mean.

A defect of a few elements among a thousand moves a mean by a thousandth; the strongest rival reads whole
distributions (link-degree histograms, deciles of every per-element feature). ``GraphReadout``:

* ``mean``: PyG's mean pooling (the default GNN's readout), the baseline of the others;
* ``distribution``: the states projected to ``width`` channels, then per channel their mean, standard deviation,
  extremes and quantiles 0.1, 0.25, 0.5, 0.75 and 0.9 over the set's elements: PyG's ``MultiAggregation`` of its
  ``Mean``/``Std``/``Min``/``Max``/``QuantileAggregation`` (PNA's aggregators, and the quantiles that the trees read);
* ``topk``: ``width`` learned anomaly scores per element and, for each score, its ``k`` largest values in the set
  (sorted), beside the mean of the states: evidence that sits in a few elements is kept, not averaged away. PyG's
  ``SortAggregation`` sorts whole rows by one channel; this per-channel top-k is written here (``torch.topk`` on the
  padded states).
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn import aggr, global_mean_pool
from torch_geometric.utils import to_dense_batch

READOUTS = ("mean", "distribution", "topk")
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


class GraphReadout(nn.Module):
    """Element states [nodes, channels] and their sets -> one row per set [graphs, ``out_width``].

    Args:
        channels: the width of the element states.
        kind: one of ``READOUTS``.
        width: the channels that ``distribution`` summarises (a projection of the states) and the scores of
            ``topk``.
        k: the largest values kept per score (``topk``); sets with fewer elements are padded with zeros.
    """

    def __init__(self, channels: int, kind: str = "mean", width: int = 32, k: int = 8):
        super().__init__()
        if kind not in READOUTS:
            raise ValueError(f"readout: expected one of {', '.join(READOUTS)}, got {kind!r}")
        if width < 1 or k < 1:
            raise ValueError(f"readout: width and k must be >= 1, got width={width}, k={k}")
        self.kind, self.k, self.channels = kind, k, channels
        if kind == "mean":
            self.out_width = channels
        elif kind == "distribution":
            self.project = nn.Linear(channels, width)
            self.summaries = aggr.MultiAggregation([aggr.MeanAggregation(), aggr.StdAggregation(),
                                                    aggr.MinAggregation(), aggr.MaxAggregation(),
                                                    aggr.QuantileAggregation(list(QUANTILES))])
            self.out_width = width * (4 + len(QUANTILES))
        else:
            self.scores = nn.Linear(channels, width)
            self.out_width = channels + width * k

    def forward(self, x: torch.Tensor, graph: torch.Tensor, num_graphs: int) -> torch.Tensor:
        if x.dim() != 2 or x.size(1) != self.channels or graph.shape != (x.size(0),):
            raise ValueError(f"readout ({self.kind}): expected element states [elements, {self.channels}] and a set "
                             f"index per element, got states {list(x.shape)} and {list(graph.shape)} set indices")
        if self.kind == "mean":
            return global_mean_pool(x, graph, size=num_graphs)
        if self.kind == "distribution":
            return self.summaries(self.project(x), graph, dim_size=num_graphs)
        scores, mask = to_dense_batch(self.scores(x), graph, fill_value=float("-inf"), batch_size=num_graphs)
        if scores.size(1) < self.k:  # fewer elements than k in every set: pad the elements
            scores = nn.functional.pad(scores, (0, 0, 0, self.k - scores.size(1)), value=float("-inf"))
        top = scores.topk(self.k, dim=1).values  # [graphs, k, width], largest first
        top = torch.where(torch.isinf(top), torch.zeros_like(top), top)
        return torch.cat([global_mean_pool(x, graph, size=num_graphs), top.transpose(1, 2).flatten(1)], dim=1)
