"""The built-in graph classifier: message passing, per-graph pooling and an MLP head (or, with ``readout="node"``,
the same head on every element's state, for questions about each element; with ``readout="pair"``, that head's
states of both elements scored per pair by ``pair_head.PairScorer``, for questions about each pair).

The model knows nothing about DDP (torchtitan's rule) nor about configs: wrapping, devices and gradient
synchronisation are the trainer's business, and ``QuantumGrav.training.model_builder`` maps the config's
``model:`` section to its arguments.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch_geometric import nn as pyg_nn

from .pair_head import PairScorer
from .sparse_attention import Adjacency, SparseTransformerConv, as_adjacency, shares_projections, summed_attention

# GNNClassifier's defaults are the default job's model: the config's model section reads them from here by name
# (this one and the signature's), so that GNNClassifier(in_channels, num_classes) is that model.
DEFAULT_CONV_KWARGS = {"heads": 2, "concat": False}
ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "elu": nn.ELU, "tanh": nn.Tanh, "leaky_relu": nn.LeakyReLU}
# Convolutions whose constructor takes an MLP instead of (in, out) channel counts. (GINEConv
# needs edge features, which causal-set graphs do not have.)
_MLP_CONVS = {"GINConv"}


def make_conv(conv_cls: type, in_channels: int, out_channels: int, conv_kwargs: dict[str, Any]) -> nn.Module:
    """One message-passing layer; GIN-style layers get a two-layer MLP as their `nn`."""
    if conv_cls.__name__ in _MLP_CONVS:
        mlp = nn.Sequential(nn.Linear(in_channels, out_channels), nn.ReLU(), nn.Linear(out_channels, out_channels))
        return conv_cls(mlp, **conv_kwargs)
    return conv_cls(in_channels, out_channels, **conv_kwargs)


def make_norm(kind: str, channels: int) -> nn.Module:
    if kind == "batch":
        return pyg_nn.BatchNorm(channels)
    if kind == "layer":
        return nn.LayerNorm(channels)  # per node: independent of batch composition
    if kind == "graph":
        return pyg_nn.GraphNorm(channels)
    return nn.Identity()


class BidirectionalConv(nn.Module):
    """Two message-passing layers, one along the edges (past -> future) and one against them, summed.

    Past and future of an element are different (a cone and its dual), so each direction gets
    its own weights instead of treating the graph as undirected. Two ``SparseTransformerConv`` of one shape (the
    default model's) run as one layer: both directions' projections are one GEMM before the sparse products and
    one after (``sparse_attention.summed_attention``), the same sum with fewer, larger products.
    """

    def __init__(self, forward_conv: nn.Module, backward_conv: nn.Module):
        super().__init__()
        self.forward_conv, self.backward_conv = forward_conv, backward_conv

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor | Adjacency) -> torch.Tensor:
        convs = (self.forward_conv, self.backward_conv)
        if shares_projections(convs):
            return summed_attention(convs, x, as_adjacency(edge_index, x.size(0)))[0]
        return self.forward_conv(x, edge_index) + self.backward_conv(x, reverse_edges(edge_index))


def reverse_edges(edge_index: torch.Tensor | Adjacency) -> torch.Tensor | Adjacency:
    """The edges against the order: a [2, E] edge_index with its rows swapped, or the flipped Adjacency."""
    return edge_index.flip() if isinstance(edge_index, Adjacency) else edge_index.flip(0)


class GraphFeatureNorm(nn.BatchNorm1d):
    """BatchNorm over the graphs of a batch for per-set features of very different scales (N ~ 100,
    fractions ~ 0.01). A training batch of one graph has no batch statistics: it uses the running ones."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and x.size(0) == 1:
            return nn.functional.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                            training=False, eps=self.eps)
        return super().forward(x)


class GNNClassifier(nn.Module):
    """Message passing -> per-graph pooling -> MLP head, giving class logits per causal set.

    The built-in model of ``model:`` in the config (``QG.build_model`` builds it from there); its arguments are
    that section's keys, and the section takes its defaults from here (the default job's model) but for
    ``graph_features``, which depends on the data: ``QG.build_model`` sets it from ``model.graph_features``.

    Args:
        in_channels: node features per element (``x``'s width).
        num_classes: outputs per graph.
        conv: a PyG message-passing layer class, built as ``conv(in, out, **conv_kwargs)``.
        conv_kwargs: extra arguments of every ``conv`` layer; None: two attention heads, averaged, for the
            default ``SparseTransformerConv``, and none for any other layer.
        hidden_channels: the width of each message-passing layer.
        norm: the normalisation after each layer: ``"batch"``, ``"layer"``, ``"graph"`` or ``"none"``.
        activation: ``"relu"``, ``"gelu"``, ``"elu"``, ``"tanh"`` or ``"leaky_relu"``.
        dropout: dropout after each layer and in the head.
        pooling: ``"mean_max"``, ``"mean"``, ``"max"`` or ``"add"`` over each graph's elements.
        head_hidden: the widths of the head's hidden layers.
        directions: ``"forward"``: messages along the order; ``"both"``: along and against it
            (``BidirectionalConv``).
        graph_features: K > 0 makes it a hybrid: the K per-set features in ``data.invariants``
            (standardised by a BatchNorm) join the pooled node states in the head, so the GNN starts from
            what the invariant baselines see.
        readout: ``"graph"``: outputs per graph ``[graphs, num_classes]``; ``"node"``: no pooling, the head reads
            each element's state (joined by its set's invariants, with ``graph_features``), outputs per element
            ``[nodes, num_classes]``: an element is judged against the set it lies in; ``"pair"``: the head's last
            hidden states of both elements of each candidate pair, and the pair's state in the input (the batch's
            ``pair_relation``, with its elements' ``violation_part``), give one logit per pair ``[pairs, 1]`` (``pair_head.PairScorer``; num_classes 1).

    Raises:
        ValueError: ``directions`` is neither ``"forward"`` nor ``"both"``, ``readout`` not ``"graph"``,
            ``"node"`` or ``"pair"``, or a pair readout asked for more than one output.

    Example:
        >>> import QuantumGrav as QG
        >>> model = QG.GNNClassifier(in_channels=10, num_classes=5, hidden_channels=[32, 32])
        >>> QG.count_parameters(model)["total_params"] > 0
        True
    """

    def __init__(self, in_channels: int, num_classes: int, *, conv: type = SparseTransformerConv,
                 conv_kwargs: dict | None = None, hidden_channels: list[int] = (128, 128, 128),
                 norm: str = "batch", activation: str = "relu", dropout: float = 0.1,
                 pooling: str = "mean", head_hidden: list[int] = (64,), directions: str = "both",
                 graph_features: int = 0, readout: str = "graph"):
        super().__init__()
        if directions not in ("forward", "both"):
            raise ValueError(f"directions: expected 'forward' or 'both', got {directions!r}")
        if readout not in ("graph", "node", "pair"):
            raise ValueError(f"readout: expected 'graph', 'node' or 'pair', got {readout!r}")
        if readout == "pair" and num_classes != 1:
            raise ValueError(f"readout 'pair' gives one logit per pair: num_classes must be 1, got {num_classes}")
        widths = [in_channels, *hidden_channels]
        if conv_kwargs is None:  # the default layer's arguments for the default layer, none for another one
            conv_kwargs = DEFAULT_CONV_KWARGS if conv is SparseTransformerConv else {}
        kwargs = dict(conv_kwargs)
        if directions == "both":
            self.convs = nn.ModuleList(BidirectionalConv(make_conv(conv, a, b, kwargs), make_conv(conv, a, b, kwargs))
                                       for a, b in zip(widths, widths[1:]))
        else:
            self.convs = nn.ModuleList(make_conv(conv, a, b, kwargs) for a, b in zip(widths, widths[1:]))
        self.norms = nn.ModuleList(make_norm(norm, b) for b in hidden_channels)
        self.norm_kind = norm
        # SparseTransformerConv layers share one CSR adjacency per batch (two sorts of the edges, not six)
        self.shares_adjacency = isinstance(conv, type) and issubclass(conv, SparseTransformerConv)
        self.activation = ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout)
        self.pooling, self.readout = pooling, readout
        pooled = hidden_channels[-1] * (2 if pooling == "mean_max" and readout == "graph" else 1) + graph_features
        self.graph_norm = GraphFeatureNorm(graph_features) if graph_features else None
        head: list[nn.Module] = []
        for width in head_hidden:
            head += [nn.Linear(pooled, width), ACTIVATIONS[activation](), nn.Dropout(dropout)]
            pooled = width
        # A pair readout scores pairs of the last hidden states; the others end in one linear map to the outputs.
        self.pair_scorer = PairScorer(pooled, rank=pooled) if readout == "pair" else None
        if readout != "pair":
            head.append(nn.Linear(pooled, num_classes))
        self.head = nn.Sequential(*head)

    def _pool(self, x: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        if self.pooling == "mean_max":
            return torch.cat([pyg_nn.global_mean_pool(x, batch), pyg_nn.global_max_pool(x, batch)], dim=-1)
        pool = {"mean": pyg_nn.global_mean_pool, "max": pyg_nn.global_max_pool, "add": pyg_nn.global_add_pool}
        return pool[self.pooling](x, batch)

    def forward(self, data) -> torch.Tensor:
        x, edge_index = data.x, data.edge_index
        batch = data.batch if getattr(data, "batch", None) is not None else x.new_zeros(x.size(0), dtype=torch.long)
        if self.shares_adjacency:
            edge_index = Adjacency.from_edge_index(edge_index, x.size(0))
        for conv, norm in zip(self.convs, self.norms):
            x = conv(x, edge_index)
            x = norm(x, batch) if self.norm_kind == "graph" else norm(x)
            x = self.dropout(self.activation(x))
        if self.readout == "node":
            return self.head(self._with_invariants(x, data, graph_of_state=batch))
        if self.readout == "pair":
            states = self.head(self._with_invariants(x, data, graph_of_state=batch))
            return self.pair_scorer(states, batch, getattr(data, "num_graphs", 1), data.pair_relation,
                                    data.violation_part)
        return self.head(self._with_invariants(self._pool(x, batch), data))

    def _with_invariants(self, states: torch.Tensor, data, graph_of_state: torch.Tensor | None = None) -> torch.Tensor:
        """``states`` (one row per graph, or per element: of graph ``graph_of_state[i]``) joined by their set's
        standardised invariants, with ``graph_features``."""
        if self.graph_norm is None:
            return states
        invariants = self.graph_norm(data.invariants.reshape(-1, self.graph_norm.num_features).to(states.dtype))
        return torch.cat([states, invariants if graph_of_state is None else invariants[graph_of_state]], dim=-1)


def count_parameters(model: nn.Module) -> dict[str, float]:
    """Count a model's parameters (no ``wandb.watch`` needed).

    Args:
        model: any ``torch.nn.Module``.

    Returns:
        ``{"total_params", "trainable_params", "size_mb"}``: the parameters, those with gradients, and
        their size in MB.

    Example:
        >>> import torch, QuantumGrav as QG
        >>> QG.count_parameters(torch.nn.Linear(3, 2))["total_params"]  # 3 x 2 weights, 2 biases
        8
    """
    model = getattr(model, "module", model)  # DDP-wrapped or not
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    size_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    return {"total_params": total, "trainable_params": trainable, "size_mb": round(size_mb, 3)}
