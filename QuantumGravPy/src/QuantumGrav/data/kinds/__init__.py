"""The nine kinds of causal sets that QuantumGrav.jl generates, one module per kind, on the building blocks of
``common`` (a random conformal factor, sprinkling, the random pairs of destroyed and random orders)."""

from .dataset import KindsDataset

__all__ = ["KindsDataset"]
