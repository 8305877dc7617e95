"""A physics baseline: classify causal sets from a few order invariants, without a GNN.

The invariants (``causal_sets.INVARIANT_NAMES``) are what a causal-set physicist would
look at first: the ordering fraction and its Myrheim-Meyer dimension, the height
(longest chain, a proxy for proper time), the number of links and N. A GNN is only
worth its cost where it beats a simple classifier on these.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import torch

from .causal_sets import INVARIANT_NAMES

BASELINE_METHOD = "logistic regression on order invariants (" + ", ".join(INVARIANT_NAMES) + ")"


def invariants_matrix(graphs: Iterable) -> np.ndarray:
    """Per-set invariants (num_sets x len(INVARIANT_NAMES), float64) of a dataset or list of ``Data``."""
    rows = [graph.invariants.reshape(-1) for graph in graphs]
    if not rows:
        raise ValueError("graphs: expected at least one Data object with an 'invariants' attribute, got none")
    return torch.stack(rows).double().numpy()


def labels_vector(graphs: Iterable) -> np.ndarray:
    """The class index ``y`` of each graph, as an int64 array."""
    return np.asarray([int(graph.y.reshape(-1)[0]) for graph in graphs], dtype=np.int64)


def myrheim_meyer_estimates(graphs: Iterable) -> np.ndarray:
    """Myrheim-Meyer dimension estimate of each set (from its ordering fraction)."""
    return invariants_matrix(graphs)[:, INVARIANT_NAMES.index("myrheim_meyer_dimension")]


class InvariantBaseline:
    """Multinomial logistic regression on standardised invariants, trained by full-batch
    gradient descent from zero weights (so deterministic: no random state at all)."""

    def __init__(self, *, steps: int = 2000, learning_rate: float = 0.5, l2: float = 1e-3):
        if steps < 1 or learning_rate <= 0 or l2 < 0:
            raise ValueError(f"steps, learning_rate, l2: expected steps >= 1, learning_rate > 0, l2 >= 0, "
                             f"got {steps}, {learning_rate}, {l2}")
        self.steps, self.learning_rate, self.l2 = steps, learning_rate, l2
        self.mean: np.ndarray | None = None
        self.scale: np.ndarray | None = None
        self.weights: np.ndarray | None = None
        self.bias: np.ndarray | None = None

    def _standardise(self, X: np.ndarray) -> np.ndarray:
        return (np.asarray(X, dtype=float) - self.mean) / self.scale

    def _logits(self, Z: np.ndarray) -> np.ndarray:
        return Z @ self.weights + self.bias

    def fit(self, X: np.ndarray, y: np.ndarray, num_classes: int | None = None) -> "InvariantBaseline":
        X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=np.int64)
        if X.ndim != 2 or len(X) != len(y) or len(y) == 0:
            raise ValueError(f"X, y: expected a (num_sets, num_features) matrix and num_sets labels, "
                             f"got shapes {X.shape} and {y.shape}")
        num_classes = int(y.max()) + 1 if num_classes is None else num_classes
        self.mean, std = X.mean(axis=0), X.std(axis=0)
        self.scale = np.where(std > 0, std, 1.0)
        Z, targets = self._standardise(X), np.eye(num_classes)[y]
        self.weights, self.bias = np.zeros((X.shape[1], num_classes)), np.zeros(num_classes)
        for _ in range(self.steps):
            logits = self._logits(Z)
            probs = np.exp(logits - logits.max(axis=1, keepdims=True))
            probs /= probs.sum(axis=1, keepdims=True)
            grad = (probs - targets) / len(y)
            self.weights -= self.learning_rate * (Z.T @ grad + self.l2 * self.weights)
            self.bias -= self.learning_rate * grad.sum(axis=0)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        if self.weights is None:
            raise RuntimeError("InvariantBaseline.predict: call fit(X, y) first")
        return self._logits(self._standardise(X)).argmax(axis=1)

    def score(self, X: np.ndarray, y: np.ndarray) -> float:
        """Accuracy on (X, y)."""
        return float(np.mean(self.predict(X) == np.asarray(y)))


def evaluate_baseline(dataset, train_idx: Sequence[int], test_idx: Sequence[int]) -> dict:
    """Fit ``InvariantBaseline`` on the train sets, return its test accuracy."""
    if len(train_idx) == 0 or len(test_idx) == 0:
        raise ValueError(f"train_idx, test_idx: expected both non-empty, "
                         f"got {len(train_idx)} and {len(test_idx)} items")
    X, y = invariants_matrix(dataset), labels_vector(dataset)
    train, test = np.asarray(train_idx), np.asarray(test_idx)
    num_classes = getattr(dataset, "num_classes", None)
    model = InvariantBaseline().fit(X[train], y[train], num_classes=num_classes)
    return {"accuracy": model.score(X[test], y[test]), "num_test": int(len(test)), "method": BASELINE_METHOD}
