"""``model:``: the built-in GNNClassifier's architecture, its defaults read from its signature, or your own model class."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..checks import boolean, choice, integer, list_of, mapping, number, pyobject_of
from .base import PyObjectName, Section, setting


def _gnn_default(keyword: str) -> PyObjectName:
    """The default of GNNClassifier's ``keyword``: the built-in model declares its defaults, the default job's
    model, once (config/ reads them by name: it imports nothing of models/)."""
    return PyObjectName("QuantumGrav.models.gnn.GNNClassifier", keyword)



@dataclass(frozen=True)
class ModelSection(Section):
    """``model:``: the built-in GNNClassifier's architecture, or your own model.type."""

    yaml: ClassVar[str] = "model"

    type: Any = setting(None, pyobject_of("model"), nullable=True,
                        doc="your model class (a subclass of torch.nn.Module), built as type(in_channels, "
                            "out_channels, **model.kwargs); its forward(batch) gets a PyG Batch and returns "
                            "[graphs, out_channels] (the contract and an example: docs/your_own_data.md); the keys "
                            "conv to graph_features then do not apply. null: the built-in "
                            "QuantumGrav.models.gnn.GNNClassifier")
    conv: type = setting(
        _gnn_default("conv"), pyobject_of("convolution"),
        "message-passing layer class (a subclass of torch.nn.Module), built as conv(in, out, **conv_kwargs): the "
        "default, QuantumGrav.models.sparse_attention.SparseTransformerConv, computes PyG's TransformerConv (same "
        "parameters, same state_dict) without [edges, heads, channels] tensors; PyG's own layers (TransformerConv, "
        "GraphConv, GCNConv, GINConv, GATv2Conv, SAGEConv) can be named instead")
    conv_kwargs: dict[str, Any] = setting(PyObjectName("QuantumGrav.models.gnn.DEFAULT_CONV_KWARGS"), mapping,
                                          "keyword arguments of every conv layer; the default is "
                                          "(Sparse)TransformerConv's (two attention heads, averaged): set it too "
                                          "when you change conv, e.g. --set model.conv_kwargs={} for GraphConv")
    hidden_channels: tuple[int, ...] = setting(_gnn_default("hidden_channels"), list_of(integer(1), min_len=1),
                                               "one message-passing layer per entry, its width")
    norm: str = setting(_gnn_default("norm"), choice("batch", "layer", "graph", "none"),
                        "normalisation after each layer")
    activation: str = setting(_gnn_default("activation"), choice("relu", "gelu", "elu", "tanh", "leaky_relu"),
                              "activation after each layer and in the head")
    dropout: float = setting(_gnn_default("dropout"), number(0.0, 0.99),
                             "dropout probability after each layer and in the head")
    pooling: str = setting(_gnn_default("pooling"), choice("mean", "max", "add", "mean_max"),
                           "per-graph readout of the node states (mean_max: both, concatenated)")
    readout: str = setting("auto", choice("auto", "graph", "node", "pair"),
                           "graph: the head sees each set's pooled node states and gives outputs per set; node: no "
                           "pooling, the head sees each element's state (with its set's invariants, under "
                           "graph_features) and gives outputs per element; pair: the head's states of both elements "
                           "of each pair, with the pair's relation in the input, give one output per pair "
                           "(models/pair_head.py); auto: node for a node-level task (node_binary), pair for a "
                           "pair-level one (relation_binary), graph otherwise")
    head_hidden: tuple[int, ...] = setting(_gnn_default("head_hidden"), list_of(integer(1)),
                                           "hidden widths of the classifier MLP")
    directions: str = setting(_gnn_default("directions"), choice("forward", "both"),
                              "forward: messages past -> future only; both: past -> future and future -> past, with "
                              "separate weights")
    graph_features: bool = setting(True, boolean, "hybrid: the set's order invariants (data.invariants) join the "
                                                  "pooled node states in the head (readout node: each element's "
                                                  "state); items without invariants get them derived from "
                                                  "edge_index")
    kwargs: dict[str, Any] = setting({}, mapping, "extra constructor arguments of a custom model.type")
