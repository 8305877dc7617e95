"""Message passing over typed relations: links and longer relations as separate edge types (each both ways),
optionally the unrelated pairs as a third, and the interval size |I(x, y)| of every related pair as an edge attribute.

What it can compute: message passing along the links alone is bounded by 1-WL on the link graph and cannot count the
elements between two related ones (a triangle count) nor tell a link from a longer relation once it reads relations.
Here both are inputs: each edge carries its type and log(1 + |I|) and |I| / N, one product of the causal matrix with
itself computed per set by ``data.transforms.OrderStructure``. The model is still 1-WL bounded on this labelled
complete graph: it sees interval sizes, not how the incomparable pairs can be oriented, so it cannot decide
two-dimensionality in general (``pair_network`` can compute that). Every element hears from its whole past and
future (its cones) in one layer.

The layers are PyG's: ``GINEConv`` (sum aggregation, as powerful as 1-WL with edge labels; the default: one
[edges, channels] message tensor per layer) or ``TransformerConv`` with ``edge_dim`` (attention over the typed
edges; heads x more memory). Readouts keep distributions (``readouts.GraphReadout``); an element-level realizer head
(``realizer.RealizerHead``) and the rival's set features (a hybrid) are options.
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn import BatchNorm, GINEConv, TransformerConv

from .gnn import ACTIVATIONS, GraphFeatureNorm
from .order_inputs import attribute, dense_order, read_order, set_features
from .readouts import GraphReadout
from .realizer import RealizerHead, add_to_loss

EDGE_TYPES = ("link", "link_backward", "longer_relation", "longer_relation_backward", "unrelated")
CONVS = ("gine", "transformer")
EDGE_DIM = len(EDGE_TYPES) + 2  # the type, then log(1 + |I|) / log(N) and |I| / N


def typed_edges(data, order, incomparable: bool, model: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Every relation both ways and (``incomparable``) every unrelated pair both ways, with attributes
    [edges, EDGE_DIM]: the one-hot type and the interval size (zero for unrelated pairs)."""
    first, second = order.relation_index
    sizes = order.set_sizes.to(order.interval.dtype)[order.graph[first]]
    interval = torch.stack([torch.log1p(order.interval) / torch.log(sizes.clamp(min=2)), order.interval / sizes], 1)
    kind = torch.where(order.is_link, 0, 2)
    sources, targets, kinds, intervals = [first, second], [second, first], [kind, kind + 1], [interval, interval]
    if incomparable:
        unrelated = attribute(data, "incomparable_index", model)
        sources += [unrelated[0], unrelated[1]]
        targets += [unrelated[1], unrelated[0]]
        kinds += [torch.full_like(unrelated[0], 4)] * 2
        intervals += [interval.new_zeros(unrelated.size(1), 2)] * 2
    kinds = torch.cat(kinds)
    attributes = torch.cat([nn.functional.one_hot(kinds, len(EDGE_TYPES)).to(interval.dtype), torch.cat(intervals)], 1)
    return torch.stack([torch.cat(sources), torch.cat(targets)]), attributes


class TypedRelationGNN(nn.Module):
    """``model.type: !pyobject QuantumGrav.models.typed_relations.TypedRelationGNN``
    (``configs/order_typed_relations.yaml``).

    Args:
        in_channels: element features ``x``; out_channels: outputs per set.
        hidden_channels: one layer per entry, its width.
        conv: ``"gine"`` or ``"transformer"`` (``heads`` attention heads, averaged).
        incomparable: the unrelated pairs as a third edge type (needs ``OrderStructure(incomparable=True)``).
        pe_channels: the width of ``data.order_pe`` joined to ``x`` (0: none).
        readout, readout_width: ``readouts.GraphReadout``'s.
        realizer_dimension, realizer_weight: an element-level ``realizer.RealizerHead`` (0: none).
        set_features: F > 0 makes it a hybrid (``data.set_features`` in the head).
        head_hidden, dropout, activation: the classifier head and the layers.
    """

    def __init__(self, in_channels: int, out_channels: int, *, hidden_channels: tuple[int, ...] = (64, 64, 64),
                 conv: str = "gine", heads: int = 2, incomparable: bool = False, pe_channels: int = 0,
                 readout: str = "distribution", readout_width: int = 32, realizer_dimension: int = 0,
                 realizer_weight: float = 1.0, set_features: int = 0, head_hidden: tuple[int, ...] = (64,),
                 dropout: float = 0.1, activation: str = "relu"):
        super().__init__()
        if conv not in CONVS:
            raise ValueError(f"TypedRelationGNN: conv must be one of {CONVS}, got {conv!r}")
        if not hidden_channels:
            raise ValueError("TypedRelationGNN: hidden_channels needs at least one layer")
        self.in_channels, self.pe_channels, self.incomparable, self.set_width = (in_channels, pe_channels,
                                                                                 incomparable, set_features)
        widths = [in_channels + pe_channels, *hidden_channels]
        self.convs = nn.ModuleList(self._conv(conv, a, b, heads, activation) for a, b in zip(widths, widths[1:]))
        self.norms = nn.ModuleList(BatchNorm(b) for b in hidden_channels)
        self.activation, self.dropout = ACTIVATIONS[activation](), nn.Dropout(dropout)
        self.readout = GraphReadout(hidden_channels[-1], readout, readout_width)
        self.realizer = (RealizerHead(hidden_channels[-1], realizer_dimension, level="element", temperature=1.0)
                         if realizer_dimension else None)
        self.realizer_weight = realizer_weight
        self.set_norm = GraphFeatureNorm(set_features) if set_features else None
        width = self.readout.out_width + set_features + (RealizerHead.num_features if self.realizer else 0)
        head: list[nn.Module] = []
        for hidden in head_hidden:
            head += [nn.Linear(width, hidden), ACTIVATIONS[activation](), nn.Dropout(dropout)]
            width = hidden
        self.head = nn.Sequential(*head, nn.Linear(width, out_channels))

    @staticmethod
    def _conv(kind: str, a: int, b: int, heads: int, activation: str) -> nn.Module:
        if kind == "transformer":
            return TransformerConv(a, b, heads=heads, concat=False, edge_dim=EDGE_DIM)
        return GINEConv(nn.Sequential(nn.Linear(a, b), ACTIVATIONS[activation](), nn.Linear(b, b)), edge_dim=EDGE_DIM)

    def forward(self, data) -> torch.Tensor:
        order = read_order(data, "TypedRelationGNN")
        x = data.x if not self.pe_channels else torch.cat([data.x, attribute(data, "order_pe", "TypedRelationGNN")], 1)
        if x.size(1) != self.in_channels + self.pe_channels:
            raise ValueError(f"TypedRelationGNN: expected {self.in_channels} node features and {self.pe_channels} "
                             f"order_pe columns, got {x.size(1)} columns in all")
        edge_index, edge_attr = typed_edges(data, order, self.incomparable, "TypedRelationGNN")
        for conv, norm in zip(self.convs, self.norms):
            update = self.dropout(self.activation(norm(conv(x, edge_index, edge_attr))))
            x = x + update if update.shape == x.shape else update
        parts, extra = [self.readout(x, order.graph, order.num_graphs)], None
        if self.realizer is not None:
            R, _, mask = dense_order(data, order, "TypedRelationGNN")
            dense = x.new_zeros(*mask.shape, x.size(1))
            dense[mask] = x
            features, extra = self.realizer(dense, R, mask)
            parts.append(features)
        if self.set_norm is not None:
            parts.append(self.set_norm(set_features(data, self.set_width, "TypedRelationGNN")))
        out = self.head(torch.cat(parts, 1))
        return out if extra is None else add_to_loss(out, extra, self.realizer_weight)

