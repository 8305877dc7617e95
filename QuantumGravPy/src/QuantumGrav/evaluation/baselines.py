"""Physics baselines: predict the target of a causal set from its order invariants, without a GNN.

A GNN is only worth its cost where it beats what a causal-set physicist would do first:
compute a few whole-set invariants and hand them to an off-the-shelf classifier.

* The **simple** baseline: a linear model (logistic regression; Ridge for a continuous target)
  on ``causal_sets.SIMPLE_INVARIANT_NAMES``: ordering fraction, Myrheim-Meyer dimension,
  height, links per element, N.
* The **strong** baseline: gradient-boosted trees on all of ``causal_sets.INVARIANT_NAMES``,
  which add the interval abundances N_1..N_4 per link, 3-chains per relation, the 2d and 4d
  Benincasa-Dowker actions, the fractions of minimal and maximal elements and the largest cone.

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

from ..data.causal_sets import INVARIANT_NAMES, SIMPLE_INVARIANT_NAMES

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


def baseline_models(task: str) -> dict[str, tuple[Any, list[int], str]]:
    """The (unfitted estimator, invariant columns, description) of the simple and strong baseline."""
    # scikit-learn is imported here, not at the top: it (with scipy) is a quarter of ``import QuantumGrav``,
    # paid by every worker process, while only rank 0 fits the baselines, once per run.
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if task not in TASKS:
        raise ValueError(f"task: expected one of {TASKS}, got {task!r}")
    simple_columns = [INVARIANT_NAMES.index(name) for name in SIMPLE_INVARIANT_NAMES]
    all_columns = list(range(len(INVARIANT_NAMES)))
    if task == "classification":
        linear, linear_name = LogisticRegression(max_iter=5000), "logistic regression"
        trees, trees_name = HistGradientBoostingClassifier(random_state=0), "gradient boosting"
    else:
        linear, linear_name = Ridge(alpha=1.0), "ridge regression"
        trees, trees_name = HistGradientBoostingRegressor(random_state=0), "gradient boosting"
    return {"simple": (make_pipeline(StandardScaler(), linear), simple_columns,
                       f"{linear_name} on {', '.join(SIMPLE_INVARIANT_NAMES)}"),
            "strong": (trees, all_columns, f"{trees_name} on all {len(INVARIANT_NAMES)} order invariants "
                                           "(+ interval abundances, Benincasa-Dowker actions, ...)")}


def _metrics(task: str, truth: np.ndarray, predicted: np.ndarray, num_classes: int | None) -> dict[str, Any]:
    from sklearn.metrics import accuracy_score, mean_absolute_error, mean_squared_error, r2_score, recall_score

    if task == "regression":
        return {"mse": float(mean_squared_error(truth, predicted)), "mae": float(mean_absolute_error(truth, predicted)),
                "r2": float(r2_score(truth, predicted))}
    labels = list(range(num_classes if num_classes is not None else int(truth.max()) + 1))
    recall = recall_score(truth, predicted, labels=labels, average=None, zero_division=0.0)
    return {"accuracy": float(accuracy_score(truth, predicted)), "per_class_recall": [float(r) for r in recall]}


def fit_and_predict(task: str, X_train: np.ndarray, y_train: np.ndarray,
                    X_test: np.ndarray) -> dict[str, np.ndarray]:
    """Test-set predictions of both baselines fitted on (X_train, y_train); X has all INVARIANT_NAMES.

    On one thread: for a thousand sets the OpenMP threads of gradient boosting only synchronise,
    and on a shared 2-core machine that made the fit 18x slower (22 s instead of 1.2 s for 1400 sets).
    """
    predictions = {}
    with threadpool_limits(limits=1):
        for name, (estimator, columns, _) in baseline_models(task).items():
            predictions[name] = estimator.fit(X_train[:, columns], y_train).predict(X_test[:, columns])
    return predictions


def infer_task(targets: np.ndarray) -> str:
    """'regression' for floating-point targets, 'classification' for integer class indices."""
    return "regression" if np.issubdtype(targets.dtype, np.floating) else "classification"


def predict_baselines(dataset, train_idx: Sequence[int], test_idx: Sequence[int],
                      task: str | None = None) -> tuple[str, np.ndarray, dict[str, np.ndarray]]:
    """Fit the simple and the strong baseline on the train sets: (task, test targets, test predictions of
    each, ``{"simple": ..., "strong": ...}``). ``task`` defaults to the one the targets imply."""
    if len(train_idx) == 0 or len(test_idx) == 0:
        raise ValueError(f"train_idx, test_idx: expected both non-empty, "
                         f"got {len(train_idx)} and {len(test_idx)} items")
    X, y = invariants_matrix(dataset), labels_vector(dataset)
    task = task or infer_task(y)
    if task == "classification":
        y = y.astype(np.int64)  # a binary task may store its 0/1 targets as floats
    train, test = np.asarray(train_idx), np.asarray(test_idx)
    return task, y[test], fit_and_predict(task, X[train], y[train], X[test])


def score_baselines(task: str, truth: np.ndarray, predictions: dict[str, np.ndarray],
                    num_classes: int | None = None) -> dict[str, dict[str, Any]]:
    """``{"simple": {...}, "strong": {...}}``, each with ``method``, ``num_test`` and the metrics of the
    task: ``accuracy`` and ``per_class_recall`` for classification, ``mse``, ``mae`` and ``r2`` for regression."""
    return {name: {"method": method, "num_test": int(len(truth)),
                   **_metrics(task, truth, predictions[name], num_classes)}
            for name, (_, _, method) in baseline_models(task).items()}


def evaluate_baselines(dataset, train_idx: Sequence[int], test_idx: Sequence[int],
                       task: str | None = None) -> dict[str, dict[str, Any]]:
    """Fit the simple and the strong baseline on the train sets, score both on the test sets
    (``predict_baselines``, then ``score_baselines``)."""
    task, truth, predictions = predict_baselines(dataset, train_idx, test_idx, task)
    num_classes = getattr(dataset, "num_classes", None) if task == "classification" else None
    return score_baselines(task, truth, predictions, num_classes)


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
