"""Importable objects for the multi-process tests (spawned workers import them by name)."""

import torch
from torch import nn

import QuantumGrav as QG

_calls = {"n": 0}


class ModelWithUnusedHead(nn.Module):
    """A GNN classifier plus a head that forward() never uses: DDP sees parameters without gradients."""

    def __init__(self, in_channels: int, num_classes: int):
        super().__init__()
        self.body = QG.GNNClassifier(in_channels, num_classes, hidden_channels=[8], head_hidden=[], norm="none")
        self.unused_head = nn.Linear(8, num_classes)

    def forward(self, data):
        return self.body(data)


def loss_failing_on_rank_1(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy, except that rank 1 raises on its 5th call (the trainer's signature check is the first)."""
    _calls["n"] += 1
    if QG.get_rank() == 1 and _calls["n"] == 5:
        raise ValueError("simulated failure in the loss on rank 1")
    return torch.nn.functional.cross_entropy(logits, target)


def loss_per_graph(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """A common mistake: reduction='none' returns one loss per graph instead of a scalar."""
    return torch.nn.functional.cross_entropy(logits, target, reduction="none")
