"""The config's ``model:`` section mapped to a model, and the check of that model on one real causal set: the
edge between the config and ``models/``, which knows no config."""

from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn
from torch_geometric.data import Batch

from ..config.sections.model import ModelSection
from ..config.yaml_io import pyobject_path
from ..data.causal_sets import INVARIANT_NAMES
from ..common.errors import ConfigError
from ..models.gnn import GNNClassifier, make_conv
from ..tasks.levels import LEVELS, SET
from ..tasks.registry import tasks_at
from .optimization import build_named


def build_model(model_cfg: Mapping[str, Any] | ModelSection, in_channels: int,
                out_channels: int, *, level: str = "graph") -> nn.Module:
    """The model the config describes.

    A custom ``model.type`` is built as ``type(in_channels, out_channels, **model.kwargs)`` and its
    ``forward(batch)`` gets a PyG ``Batch`` (x, edge_index, batch and every other attribute of the
    dataset's items, e.g. graph-level ``invariants`` [graphs, K]) and returns ``[graphs, out_channels]``.
    ``graph_features: true`` feeds the data's ``invariants`` (columns ``causal_sets.INVARIANT_NAMES``) to the
    built-in model's head.

    Args:
        model_cfg: the config's ``model`` section (a resolved config's ``config["model"]``, a part of one, or
            ``config.sections.model``); keys it leaves out take ``GNNClassifier``'s defaults.
        in_channels: node features per element.
        out_channels: outputs per graph (per element for a node task, per pair for a relation task), the task's
            width: the number of classes, or 1 for binary, regression, node_binary and relation_binary tasks.
        level: what the task asks about, as its level's readout (``task.level.readout``): ``"graph"``, ``"node"``
            (each element) or ``"pair"`` (each pair of elements); ``model.readout: auto`` is that level's readout,
            and an explicit ``model.readout`` must fit it.

    Returns:
        The model (a ``GNNClassifier`` unless ``model.type`` names another ``nn.Module``).

    Example:
        >>> import QuantumGrav as QG
        >>> model = QG.build_model(QG.load_config()["model"], in_channels=10, out_channels=5)
        >>> type(model).__name__
        'GNNClassifier'
    """
    if isinstance(model_cfg, ModelSection):
        model_cfg = vars(model_cfg)
    # Any named class, GNNClassifier too, is built from model.kwargs: the keys conv to graph_features do not apply.
    if model_cfg.get("type") is not None:
        return model_cfg["type"](in_channels, out_channels, **model_cfg.get("kwargs", {}))
    keys = ("conv", "conv_kwargs", "hidden_channels", "norm", "activation", "dropout", "pooling", "head_hidden",
            "directions")
    if "conv" in model_cfg:
        first_width = (model_cfg.get("hidden_channels") or [in_channels])[0]
        _check_conv_kwargs(model_cfg["conv"], model_cfg.get("conv_kwargs") or {}, in_channels, first_width)
    graph_features = len(INVARIANT_NAMES) if model_cfg.get("graph_features") else 0
    return GNNClassifier(in_channels, out_channels, graph_features=graph_features,
                         readout=_readout(model_cfg.get("readout", "auto"), level),
                         **{k: model_cfg[k] for k in keys if k in model_cfg})


def build_configured_model(section: ModelSection, in_channels: int, task: Any) -> nn.Module:
    """``build_model`` for a config's model section and a task (its ``output_width`` and ``level``), an argument
    the model rejects reported as the config's key (``model.kwargs`` for a named ``model.type``, else ``model``):
    training, the preflight and an applied run build the same model this way."""
    key = "model.kwargs" if section.type is not None else "model"
    return build_named(key, build_model, section, in_channels, task.output_width, level=task.level.readout)


_LEVEL_OF_READOUT = {level.readout: level for level in LEVELS}


def _readout(readout: str, level: str) -> str:
    """model.readout resolved for the task: auto follows it, an explicit one that does not fit is the key's error."""
    if readout not in ("auto", level):
        learns = ("a task with one y per causal set" if _LEVEL_OF_READOUT[level] is SET else
                  f"a {level}-level task (task.type {' or '.join(tasks_at(_LEVEL_OF_READOUT[level]))})")
        raise ConfigError(f"model.readout: {readout} gives outputs per {_LEVEL_OF_READOUT[readout].row_text}, but the "
                          f"run learns {learns}; set model.readout to {level} or auto")
    return level


def _check_conv_kwargs(conv: type, conv_kwargs: dict[str, Any], in_channels: int, out_channels: int) -> None:
    """A convolution that rejects model.conv_kwargs is that key's error (checked on the first layer). The default
    conv_kwargs are TransformerConv's ({heads: 2, concat: false}), so a config that changes only model.conv
    lands here."""
    try:
        make_conv(conv, in_channels, out_channels, conv_kwargs)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"model.conv_kwargs: {conv.__name__} rejects {conv_kwargs} ({err}); conv_kwargs are the "
                          f"arguments of model.conv, and the default ones are TransformerConv's: give "
                          f"{conv.__name__}'s with it, e.g. --set 'model.conv_kwargs={{}}'") from None


def describe_item(item) -> str:
    """What a causal set's ``Data`` holds, e.g. 'x float32 [12, 10], edge_index int64 [2, 30], y int64 [1]'."""
    parts = []
    for key, value in item:
        shown = (f"{str(value.dtype).removeprefix('torch.')} {list(value.shape)}" if isinstance(value, torch.Tensor)
                 else type(value).__name__)
        parts.append(f"{key} {shown}")
    return ", ".join(parts)


def _builtin_model_needs(model_cfg: dict[str, Any]) -> str:
    needs = ("the built-in model passes its layers (model.conv) x (float [nodes, features]) and edge_index (long "
             "[2, edges]) only, no edge features")
    if model_cfg.get("graph_features"):
        needs += f", and reads invariants ([1, {len(INVARIANT_NAMES)}]) in its head (model.graph_features)"
    return needs


def _check_invariants(item, model_cfg: dict[str, Any]) -> None:
    """The built-in model with graph_features reads a row of the K order invariants per causal set."""
    if model_cfg.get("type") is not None or not model_cfg.get("graph_features"):
        return
    invariants, width = getattr(item, "invariants", None), len(INVARIANT_NAMES)
    if invariants is None:
        raise ConfigError(f"model.graph_features: the model's head reads each causal set's order invariants "
                          f"(invariants, [1, {width}]), but the item has none ({describe_item(item)}); wrap the "
                          f"dataset in QuantumGrav.data.derived_invariants.OrderInvariants to derive them from "
                          f"edge_index (the trainer does), or set model.graph_features: false")
    if not isinstance(invariants, torch.Tensor) or invariants.numel() != width:
        got = list(invariants.shape) if isinstance(invariants, torch.Tensor) else type(invariants).__name__
        raise ConfigError(f"model.graph_features: the model's head reads a row of the {width} order invariants "
                          f"(causal_sets.INVARIANT_NAMES) per causal set, but the item's invariants are {got}; "
                          f"give items invariants of shape [1, {width}] or none (they are then derived from "
                          f"edge_index), or set model.graph_features: false")


@torch.no_grad()
def check_model_forward(model: nn.Module, item, task, model_cfg: dict[str, Any], device: torch.device) -> None:
    """One forward pass on a real causal set ``item``, so that a model that cannot run on these graphs (a
    layer that needs edge features, a graph attribute the data lack) or returns the wrong shape for
    ``task`` is a ConfigError naming the key to change and saying what the model needs and what the item
    has, before any run exists, not a crash in epoch 0."""
    custom = model_cfg.get("type")
    name = f"model.type ({pyobject_path(custom)})" if custom is not None else "model"
    _check_invariants(item, model_cfg)
    graph = Batch.from_data_list([item]).to(device)
    was_training = model.training
    model.eval()
    try:
        outputs = model(graph)
    except torch.OutOfMemoryError:  # the device, not the config: as it is
        raise
    except Exception as err:  # noqa: BLE001 - any other failure here is a model that does not fit the data
        needs = (f"the batch holds only {describe_item(graph)}" if custom is not None else
                 f"{_builtin_model_needs(model_cfg)}; the item has {describe_item(item)}")
        raise ConfigError(f"{name}: a forward pass on one causal set failed ({type(err).__name__}: {err}); "
                          f"{needs}") from err  # Python callers keep the model's own traceback
    finally:
        model.train(was_training)
    expected = [task.level.rows(int(item.num_nodes)), task.output_width]
    if not isinstance(outputs, torch.Tensor) or list(outputs.shape) != expected:
        got = f"shape {list(outputs.shape)}" if isinstance(outputs, torch.Tensor) else type(outputs).__name__
        rows = task.level.rows_text
        raise ConfigError(f"{name}: expected outputs of shape {expected} ({rows} x outputs of the {task.type} task) "
                          f"for one causal set, got {got}; the model is built with out_channels={task.output_width}")
