"""What is learned and how it is judged: the ``task``, ``criterion``, ``early_stopping`` and ``model`` sections,
with the task types and metrics they allow (``evaluation/tasks.py`` reads them from here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .checks import boolean, choice, integer, list_of, mapping, number, pyobject_of
from .section import PyObjectName, Section, setting

TASK_TYPES: tuple[str, ...] = ("multiclass", "binary", "regression", "node_binary")
TASK_METRICS: dict[str, tuple[str, ...]] = {
    "multiclass": ("loss", "accuracy", "weighted_f1"),
    "binary": ("loss", "accuracy", "precision", "recall", "f1", "weighted_f1"),
    "regression": ("loss", "mae", "rmse", "r2"),
    # per element: is it inside the inserted block? Node accuracy .. F1, and the mean block IoU per set
    "node_binary": ("loss", "accuracy", "precision", "recall", "f1", "iou"),
}
_MAXIMISED = ("accuracy", "precision", "recall", "f1", "weighted_f1", "r2", "iou")
EARLY_STOPPING_METRICS: tuple[str, ...] = tuple(dict.fromkeys(f"val_{m}" for ms in TASK_METRICS.values() for m in ms))


def metric_mode(metric: str) -> str:
    """'max' for metrics that improve upwards (accuracy, F1, R^2, ...), 'min' for loss, MAE, RMSE."""
    return "max" if metric.removeprefix("val_") in _MAXIMISED else "min"


_CRITERION_DOC = (
    "loss(outputs, target): a torch.nn.Module class (instantiated first), a function of torch.nn.functional, a "
    "function of your own code (a module outside the Python installation) or one marked with "
    "@QuantumGrav.loss_function; null: the task's (cross_entropy, binary_cross_entropy_with_logits, mse_loss). "
    "Another package's function is refused unless marked (see Trust above)")


@dataclass(frozen=True)
class TaskSection(Section):
    """``task:`` and the top-level ``criterion``: what y is learned as, and with which loss."""

    yaml: ClassVar[str] = "task"

    type: str = setting("auto", choice("auto", *TASK_TYPES),
                        "multiclass | binary | regression (one y per graph) | node_binary (one 0/1 y per element: "
                        "one logit per element, its metrics per element, and the mean block IoU per set); auto: the "
                        "dataset's task attribute (the generator's follows data.target, the stores' reader's "
                        "data.kwargs.target), else regression for float y, multiclass for integer y")
    threshold: float = setting(0.5, number(0.0, 1.0, exclusive_min=True),
                               "binary, node_binary: a graph (an element) is predicted positive when "
                               "sigmoid(logit) >= threshold")
    criterion: Any = setting(None, pyobject_of("loss"), _CRITERION_DOC, nullable=True, key="criterion")


@dataclass(frozen=True)
class EarlyStoppingSection(Section):
    """``early_stopping:``: when a run that stopped improving ends."""

    yaml: ClassVar[str] = "early_stopping"

    enabled: bool = setting(True, boolean, "false: train all num_epochs")
    metric: str = setting("val_loss", choice(*EARLY_STOPPING_METRICS),
                          "one the task reports: multiclass val_loss, val_accuracy, val_weighted_f1 (F1 of each class "
                          "weighted by its sets, as upstream QuantumGrav stops on); binary also val_precision, "
                          "val_recall, val_f1 (of the positive class); regression val_loss, val_mae, val_rmse, val_r2; "
                          "node_binary val_loss, val_accuracy, val_precision, val_recall, val_f1, val_iou")
    # Resolved to metric_mode(metric) when null: a resolved config's mode is never null.
    mode: str | None = setting(None, choice("min", "max"), nullable=True,
                               doc="default: max for accuracy, precision, recall, f1, weighted_f1, r2, iou; min for "
                                   "loss, mae, rmse")
    patience: int = setting(10, integer(1), "epochs without improvement before the run stops")
    min_delta: float = setting(0.0, number(0.0), "the least change of the metric that counts as an improvement")
    window: int = setting(3, integer(1), "judge the metric's mean over the last window epochs, so that one lucky "
                                         "epoch is not the best one (the best epoch is the window's last); 1: each "
                                         "epoch alone")
    grace: int = setting(0, integer(0), "the first epochs, in which an epoch without improvement does not count "
                                        "toward patience (upstream QuantumGrav's grace_period: 8)")


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
    readout: str = setting("auto", choice("auto", "graph", "node"),
                           "graph: the head sees each set's pooled node states and gives outputs per set; node: no "
                           "pooling, the head sees each element's state (with its set's invariants, under "
                           "graph_features) and gives outputs per element; auto: node for a node-level task "
                           "(node_binary), graph otherwise")
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
