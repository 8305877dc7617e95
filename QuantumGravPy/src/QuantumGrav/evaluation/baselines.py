"""Physics baselines: predict the target of a causal set from its order invariants, without a GNN.

A GNN is only worth its cost where it beats what a causal-set physicist would do first:
compute a few whole-set invariants and hand them to an off-the-shelf classifier.

* The **simple** baseline: a linear model (logistic regression; Ridge for a continuous target)
  on ``causal_sets.SIMPLE_INVARIANT_NAMES``: ordering fraction, Myrheim-Meyer dimension,
  height, links per element, N.
* The **strong** baseline: gradient-boosted trees on all of ``causal_sets.INVARIANT_NAMES``,
  which add the interval abundances N_1..N_4 per link, 3-chains per relation, the 2d and 4d
  Benincasa-Dowker actions, the fractions of minimal and maximal elements and the largest cone.
  With ``testing.strong_baseline: invariants_and_elements`` (``configs/manifold_like.yaml``) it also gets the
  distribution over the set's elements of every per-element feature (``causal_sets.NODE_FEATURES``: cone sizes,
  link degrees, longest chains, interval counts; their mean, spread, extremes and deciles) and the widths of
  the layers of equal longest past chain: what separates QuantumGrav.jl's kinds (a grid's regular degrees, a
  layered order's few wide layers, an inserted block's anomalous elements) where whole-set invariants average
  it away.

The classifiers are scikit-learn's (the field's well-kept implementations: solvers with
convergence checks, deterministic with a fixed ``random_state``). Both are fitted on the
train split and scored on the test split; the ``Baselines`` callback does so on rank 0 after
the test. On the default 1400 training sets both fit in 1.2 s (on one core). The
invariants themselves are computed once, at generation: 0.8 ms per set at N = 128 and 156 ms per
set at N = 1024 (``benchmarks/bench_generation.py --num 640 --n 128`` and ``--num 20 --n 1024``,
on a shared 2-core machine).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from ..config.training_sections import STRONG_BASELINE_FEATURES as STRONG_FEATURES
from ..data.causal_sets import INVARIANT_NAMES, NODE_FEATURES, SIMPLE_INVARIANT_NAMES

TASKS = ("classification", "regression")


def invariants_matrix(graphs: Iterable) -> np.ndarray:
    """Per-set invariants (num_sets x len(INVARIANT_NAMES), float64) of a dataset or list of ``Data``."""
    rows = [graph.invariants.reshape(-1) for graph in graphs]
    if not rows:
        raise ValueError("graphs: expected at least one Data object with an 'invariants' attribute, got none")
    return torch.stack(rows).double().numpy()


def labels_vector(graphs: Iterable) -> np.ndarray:
    """The target ``y`` of each graph: int64 class indices, or float64 for a continuous target."""
    targets = [graph.y.reshape(-1) for graph in graphs]
    if any(len(t) != 1 for t in targets):
        raise ValueError("graphs: the baselines expect one target value per graph (y of shape [1])")
    return torch.cat(targets).numpy().astype(np.float64 if targets[0].is_floating_point() else np.int64)


def myrheim_meyer_estimates(graphs: Iterable) -> np.ndarray:
    """Myrheim-Meyer dimension estimate of each set (from its ordering fraction)."""
    return invariants_matrix(graphs)[:, INVARIANT_NAMES.index("myrheim_meyer_dimension")]


_QUANTILES = (0.1, 0.5, 0.9)
ELEMENT_STATISTICS = ("mean", "std", "min", "max", *(f"q{round(100 * q)}" for q in _QUANTILES))
LAYER_STATISTICS = ("layers_per_element", "widest_layer_fraction", "layer_width_spread", "single_element_layers")


def element_statistics(x: np.ndarray) -> np.ndarray:
    """The distribution of each per-element feature over a set's elements (``ELEMENT_STATISTICS`` of every
    column of ``x``, column by column), then ``LAYER_STATISTICS``: the widths of the layers of elements with
    equal longest past chain (the level, ``longest_past_chain`` x N)."""
    x = np.asarray(x, dtype=np.float64)
    columns = [x.mean(0), x.std(0), x.min(0), x.max(0), *np.quantile(x, _QUANTILES, axis=0)]
    n = len(x)
    level = np.rint(x[:, NODE_FEATURES.index("longest_past_chain")] * n).astype(np.int64)
    widths = np.bincount(level - level.min())
    widths = widths[widths > 0]
    layers = [len(widths) / n, widths.max() / n, widths.std() / widths.mean(), float((widths == 1).sum()) / n]
    return np.concatenate([np.stack(columns, axis=1).reshape(-1), layers])


def baseline_features(graphs: Iterable, strong_features: str = "invariants") -> np.ndarray:
    """The baselines' input per set: ``INVARIANT_NAMES`` first, then (``invariants_and_elements``) each set's
    ``element_statistics`` of its node features ``x``."""
    if strong_features not in STRONG_FEATURES:
        raise ValueError(f"strong_features: expected one of {STRONG_FEATURES}, got {strong_features!r}")
    graphs = list(graphs)
    invariants = invariants_matrix(graphs)
    if strong_features == "invariants":
        return invariants
    return np.hstack([invariants, np.stack([element_statistics(graph.x.numpy()) for graph in graphs])])


def baseline_models(task: str, strong_features: str = "invariants") -> dict[str, tuple[Any, list[int] | None, str]]:
    """The (unfitted estimator, columns of ``baseline_features`` (None: all), description) of the simple and
    strong baseline."""
    # scikit-learn is imported here, not at the top: it (with scipy) is a quarter of ``import QuantumGrav``,
    # paid by every worker process, while only rank 0 fits the baselines, once per run.
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if task not in TASKS:
        raise ValueError(f"task: expected one of {TASKS}, got {task!r}")
    simple_columns = [INVARIANT_NAMES.index(name) for name in SIMPLE_INVARIANT_NAMES]
    strong_inputs = f"all {len(INVARIANT_NAMES)} order invariants (+ interval abundances, Benincasa-Dowker actions, ...)"
    if strong_features == "invariants_and_elements":
        strong_inputs = (f"the {len(INVARIANT_NAMES)} order invariants and the distribution over the elements of "
                         f"each of the {len(NODE_FEATURES)} per-element features, and the layer widths")
    if task == "classification":
        linear, linear_name = LogisticRegression(max_iter=5000), "logistic regression"
        trees, trees_name = HistGradientBoostingClassifier(random_state=0), "gradient boosting"
    else:
        linear, linear_name = Ridge(alpha=1.0), "ridge regression"
        trees, trees_name = HistGradientBoostingRegressor(random_state=0), "gradient boosting"
    return {"simple": (make_pipeline(StandardScaler(), linear), simple_columns,
                       f"{linear_name} on {', '.join(SIMPLE_INVARIANT_NAMES)}"),
            "strong": (trees, None, f"{trees_name} on {strong_inputs}")}


def _metrics(task: str, truth: np.ndarray, predicted: np.ndarray, num_classes: int | None) -> dict[str, Any]:
    from sklearn.metrics import (accuracy_score, f1_score, mean_absolute_error, mean_squared_error, r2_score,
                                 recall_score)

    if task == "regression":
        return {"mse": float(mean_squared_error(truth, predicted)), "mae": float(mean_absolute_error(truth, predicted)),
                "r2": float(r2_score(truth, predicted))}
    labels = list(range(num_classes if num_classes is not None else int(truth.max()) + 1))
    recall = recall_score(truth, predicted, labels=labels, average=None, zero_division=0.0)
    f1 = f1_score(truth, predicted, labels=labels, average=None, zero_division=0.0)
    return {"accuracy": float(accuracy_score(truth, predicted)), "per_class_recall": [float(r) for r in recall],
            "per_class_f1": [float(f) for f in f1],
            "weighted_f1": float(f1_score(truth, predicted, labels=labels, average="weighted", zero_division=0.0))}


def fit_and_predict(task: str, X_train: np.ndarray, y_train: np.ndarray, X_test: np.ndarray,
                    strong_features: str = "invariants") -> dict[str, np.ndarray]:
    """Test-set predictions of both baselines fitted on (X_train, y_train); X's columns are
    ``baseline_features``' (all INVARIANT_NAMES first).

    On one thread: for a thousand sets the OpenMP threads of gradient boosting only synchronise,
    and on a shared 2-core machine that made the fit 18x slower (22 s instead of 1.2 s for 1400 sets).
    """
    predictions = {}
    with threadpool_limits(limits=1):
        for name, (estimator, columns, _) in baseline_models(task, strong_features).items():
            columns = slice(None) if columns is None else columns
            predictions[name] = estimator.fit(X_train[:, columns], y_train).predict(X_test[:, columns])
    return predictions


def infer_task(targets: np.ndarray) -> str:
    """'regression' for floating-point targets, 'classification' for integer class indices."""
    return "regression" if np.issubdtype(targets.dtype, np.floating) else "classification"


def predict_baselines(dataset, train_idx: Sequence[int], test_idx: Sequence[int], task: str | None = None,
                      strong_features: str = "invariants") -> tuple[str, np.ndarray, dict[str, np.ndarray]]:
    """Fit the simple and the strong baseline on the train sets: (task, test targets, test predictions of
    each, ``{"simple": ..., "strong": ...}``). ``task`` defaults to the one the targets imply;
    ``strong_features`` chooses the strong baseline's input (``STRONG_FEATURES``)."""
    if len(train_idx) == 0 or len(test_idx) == 0:
        raise ValueError(f"train_idx, test_idx: expected both non-empty, "
                         f"got {len(train_idx)} and {len(test_idx)} items")
    X, y = baseline_features(dataset, strong_features), labels_vector(dataset)
    task = task or infer_task(y)
    if task == "classification":
        y = y.astype(np.int64)  # a binary task may store its 0/1 targets as floats
    train, test = np.asarray(train_idx), np.asarray(test_idx)
    return task, y[test], fit_and_predict(task, X[train], y[train], X[test], strong_features)


def score_baselines(task: str, truth: np.ndarray, predictions: dict[str, np.ndarray],
                    num_classes: int | None = None, strong_features: str = "invariants") -> dict[str, dict[str, Any]]:
    """``{"simple": {...}, "strong": {...}}``, each with ``method``, ``num_test`` and the metrics of the
    task: ``accuracy``, ``weighted_f1``, ``per_class_f1`` and ``per_class_recall`` for classification, ``mse``,
    ``mae`` and ``r2`` for regression."""
    return {name: {"method": method, "num_test": int(len(truth)),
                   **_metrics(task, truth, predictions[name], num_classes)}
            for name, (_, _, method) in baseline_models(task, strong_features).items()}


def evaluate_baselines(dataset, train_idx: Sequence[int], test_idx: Sequence[int], task: str | None = None,
                       strong_features: str = "invariants") -> dict[str, dict[str, Any]]:
    """Fit the simple and the strong baseline on the train sets, score both on the test sets
    (``predict_baselines``, then ``score_baselines``)."""
    task, truth, predictions = predict_baselines(dataset, train_idx, test_idx, task, strong_features)
    num_classes = getattr(dataset, "num_classes", None) if task == "classification" else None
    return score_baselines(task, truth, predictions, num_classes, strong_features)


def flatten_baselines(baselines: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Summary keys: ``baseline_<metric>`` for the simple one, ``strong_baseline_<metric>`` for the strong one."""
    flat = {}
    for name, result in baselines.items():
        prefix = "baseline" if name == "simple" else f"{name}_baseline"
        flat.update({f"{prefix}_{key}": value for key, value in result.items() if key != "num_test"})
    return flat


def describe_baselines(baselines: dict[str, dict[str, Any]]) -> list[str]:
    """One line per baseline for the log and the CLI summary, e.g. 'strong baseline  accuracy 0.967 (...)'."""
    lines = []
    for name, result in baselines.items():
        scores = "  ".join(f"{key} {result[key]:.3f}" for key in ("accuracy", "mse", "mae", "r2") if key in result)
        lines.append(f"{name} baseline  {scores}  ({result['method']})")
    return lines
