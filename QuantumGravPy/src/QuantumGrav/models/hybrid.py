"""The controls of the order models: the default GNN with the strongest rival's per-set features in its head (a
hybrid), and that head alone on the same features, so that what the graph layers add is measured on one footing.

The strongest rival is gradient boosting on the order invariants, the element statistics, the exact 2D-order test and
the field's graph observables (``evaluation.baselines``). ``data.transforms.OrderStructure`` gives each set the
test's bit and violation share and the observables as ``set_features``; these models read them beside the order
invariants (``data.invariants``):

* ``SetFeatureGNN``: ``gnn.GNNClassifier`` (every argument of it, the default model's by default) whose head reads
  the invariants and the set features, standardised together (its ``graph_features`` are both);
* ``SetFeatureMLP``: the same head (its hidden widths, activation, dropout and standardisation) on the same
  features, with no graph layers.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from .gnn import ACTIVATIONS, GNNClassifier, GraphFeatureNorm
from .order_inputs import set_features as read_set_features


def per_set_features(data, invariants: int, set_features: int, model: str) -> torch.Tensor:
    """[graphs, invariants + set_features]: ``data.invariants`` (when ``invariants`` > 0) then
    ``data.set_features``, each checked for its width."""
    columns = []
    graphs = int(getattr(data, "num_graphs", 1) or 1)
    if invariants:
        found = getattr(data, "invariants", None)
        if not isinstance(found, torch.Tensor) or found.numel() != graphs * invariants:
            shape = list(found.shape) if isinstance(found, torch.Tensor) else None
            raise ValueError(f"{model}: expected the order invariants ({invariants} per set) as data.invariants, got "
                             f"{shape}; the built-in datasets carry them (data.derived_invariants derives them)")
        columns.append(found.reshape(graphs, invariants).to(data.x.dtype))
    if set_features:
        columns.append(read_set_features(data, set_features, model))
    return torch.cat(columns, dim=1)


class SetFeatureGNN(GNNClassifier):
    """``model.type: !pyobject QuantumGrav.models.hybrid.SetFeatureGNN`` (``configs/order_hybrid.yaml``).

    Args:
        in_channels, num_classes: as ``GNNClassifier``.
        invariants: the width of ``data.invariants`` read (15, ``causal_sets.INVARIANT_NAMES``; 0: none).
        set_features: the width of ``data.set_features`` read (36 for the rival's: 2 of the exact test, 34
            observables).
        **gnn_kwargs: ``GNNClassifier``'s other arguments (the default model's when left out).
    """

    def __init__(self, in_channels: int, num_classes: int, *, invariants: int = 15, set_features: int = 36,
                 **gnn_kwargs: Any):
        if invariants + set_features < 1:
            raise ValueError("SetFeatureGNN: give the head some per-set features (invariants or set_features)")
        super().__init__(in_channels, num_classes, graph_features=invariants + set_features, **gnn_kwargs)
        self.widths = (invariants, set_features)

    def forward(self, data) -> torch.Tensor:
        view = copy.copy(data)  # the batch itself is left as it is
        view.invariants = per_set_features(data, *self.widths, "SetFeatureGNN")
        return super().forward(view)


class SetFeatureMLP(nn.Module):
    """``model.type: !pyobject QuantumGrav.models.hybrid.SetFeatureMLP`` (``configs/order_head_only.yaml``): the
    head of ``SetFeatureGNN`` without graph layers, on the same per-set features.

    Args:
        in_channels: unused (the model reads no element features); out_channels: outputs per set.
        invariants, set_features: as ``SetFeatureGNN``.
        head_hidden, activation, dropout: the head's, as ``GNNClassifier``'s.
    """

    def __init__(self, in_channels: int, out_channels: int, *, invariants: int = 15, set_features: int = 36,
                 head_hidden: tuple[int, ...] = (64,), activation: str = "relu", dropout: float = 0.1):
        super().__init__()
        width = invariants + set_features
        if width < 1:
            raise ValueError("SetFeatureMLP: give it some per-set features (invariants or set_features)")
        self.widths = (invariants, set_features)
        self.norm = GraphFeatureNorm(width)
        layers: list[nn.Module] = []
        for hidden in head_hidden:
            layers += [nn.Linear(width, hidden), ACTIVATIONS[activation](), nn.Dropout(dropout)]
            width = hidden
        self.head = nn.Sequential(*layers, nn.Linear(width, out_channels))

    def forward(self, data) -> torch.Tensor:
        return self.head(self.norm(per_set_features(data, *self.widths, "SetFeatureMLP")))
