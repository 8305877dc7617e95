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
* The **strongest** rival (``testing.strongest_baseline``): what a causal-set theorist with scikit-learn would
  build today. Gradient-boosted trees on the order invariants, the distribution over the elements of every
  per-element feature and the layer widths (as the strong baseline's ``invariants_and_elements``), plus the exact
  test of two-dimensionality (``causal_sets.is_two_dimensional`` and the share of the elements on a violation,
  ``TWO_DIMENSION_FEATURES``: every manifold-like kind in d = 2 is a 2D order) and the field's graph observables
  (``causal_sets.GRAPH_OBSERVABLE_NAMES``: link-degree histograms, the link Laplacian's lambda_2 and lambda_max,
  the interval-size histogram; arXiv:2605.27514). Its own columns (``STRONGEST_FEATURE_NAMES``) are computed from
  each set's edges (the causal matrix is their closure), about 10 ms per set at N = 128.

The classifiers are scikit-learn's (the field's well-kept implementations: solvers with
convergence checks, deterministic with a fixed ``random_state``). Both are fitted on the
train split and scored on the test split; the ``Baselines`` callback does so on rank 0 after
the test. On the default 1400 training sets both fit in 1.2 s (on one core). The
invariants themselves are computed once, at generation: 0.8 ms per set at N = 128 and 156 ms per
set at N = 1024 (``benchmarks/generation/bench_generation.py --num 640 --n 128`` and ``--num 20 --n 1024``,
on a shared 2-core machine).
"""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple, Sequence

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from ..config.sections.loaders import STRONG_BASELINE_FEATURES as STRONG_FEATURES
from ..data.causal_sets import (GRAPH_OBSERVABLE_NAMES, INVARIANT_NAMES, NODE_FEATURES, SIMPLE_INVARIANT_NAMES,
                                TWO_DIMENSION_FEATURES, elements_between, features_and_invariants, graph_observables,
                                natural_order, two_dimension_features)
from ..data.derived_invariants import NotACausalSet, causal_matrix_of_edges
from .scores import classification_metrics

# The kind of scikit-learn estimator the baselines are (scikit-learn's own words): what a target is, not a task of
# QuantumGrav.tasks (a binary and a multiclass task both take classifiers).
ESTIMATORS = ("classifier", "regressor")


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


def element_statistic_names() -> list[str]:
    """The names of ``element_statistics``' columns: ``<feature>_<statistic>``, then ``LAYER_STATISTICS``."""
    return [f"{feature}_{statistic}" for feature in NODE_FEATURES for statistic in ELEMENT_STATISTICS] \
        + list(LAYER_STATISTICS)


# The strongest rival's own columns, computed from each set's causal matrix (``strongest_features``).
STRONGEST_FEATURE_NAMES: tuple[str, ...] = (*element_statistic_names(), *TWO_DIMENSION_FEATURES,
                                            *GRAPH_OBSERVABLE_NAMES)


def strongest_features(graph: Any, index: int = 0) -> np.ndarray:
    """The strongest rival's own columns (``STRONGEST_FEATURE_NAMES``) of one graph, from its causal matrix: the
    closure of its ``edge_index`` (links or relations, past to future), in a natural labelling."""
    try:
        R = causal_matrix_of_edges(graph.edge_index, int(graph.num_nodes))
    except NotACausalSet as err:
        raise ValueError(f"item {index} is not a causal set (a partial order): {err}; the strongest baseline reads "
                         f"each set's order from its edges (give edge_index past -> future along the links or "
                         f"relations of a partial order, or set testing.strongest_baseline: false)") from None
    order = natural_order(R)
    R = R[np.ix_(order, order)]
    between = elements_between(R)
    elements, _ = features_and_invariants(R, between)
    return np.concatenate([element_statistics(elements), two_dimension_features(R), graph_observables(R, between)])


def baseline_features(graphs: Iterable, strong_features: str = "invariants", strongest: bool = False) -> np.ndarray:
    """The baselines' input per set: ``INVARIANT_NAMES`` first, then (``invariants_and_elements``) each set's
    ``element_statistics`` of its node features ``x``, then (``strongest``) its ``strongest_features``."""
    if strong_features not in STRONG_FEATURES:
        raise ValueError(f"strong_features: expected one of {STRONG_FEATURES}, got {strong_features!r}")
    graphs = list(graphs)
    columns = [invariants_matrix(graphs)]
    if strong_features == "invariants_and_elements":
        columns.append(np.stack([element_statistics(graph.x.numpy()) for graph in graphs]))
    if strongest:
        columns.append(np.stack([strongest_features(graph, index) for index, graph in enumerate(graphs)]))
    return np.hstack(columns)


def _columns(strong_features: str, strongest: bool) -> dict[str, list[int] | None]:
    """Which columns of ``baseline_features`` each baseline reads (None: all)."""
    strong = len(INVARIANT_NAMES) + (len(element_statistic_names()) if strong_features != "invariants" else 0)
    columns: dict[str, list[int] | None] = {"simple": [INVARIANT_NAMES.index(name) for name in SIMPLE_INVARIANT_NAMES],
                                            "strong": list(range(strong))}
    if strongest:
        columns["strongest"] = [*range(len(INVARIANT_NAMES)), *range(strong, strong + len(STRONGEST_FEATURE_NAMES))]
    return columns


def baseline_models(estimator: str, strong_features: str = "invariants",
                    strongest: bool = False) -> dict[str, tuple[Any, list[int] | None, str]]:
    """The (unfitted estimator, columns of ``baseline_features`` (None: all), description) of the simple and
    strong baseline, and (``strongest``) of the strongest rival."""
    # scikit-learn is imported here, not at the top: it (with scipy) is a quarter of ``import QuantumGrav``,
    # paid by every worker process, while only rank 0 fits the baselines, once per run.
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator: expected one of {ESTIMATORS}, got {estimator!r}")
    columns = _columns(strong_features, strongest)
    strong_inputs = f"all {len(INVARIANT_NAMES)} order invariants (+ interval abundances, Benincasa-Dowker actions, ...)"
    if strong_features == "invariants_and_elements":
        strong_inputs = (f"the {len(INVARIANT_NAMES)} order invariants and the distribution over the elements of "
                         f"each of the {len(NODE_FEATURES)} per-element features, and the layer widths")
    if estimator == "classifier":
        linear, linear_name = LogisticRegression(max_iter=5000), "logistic regression"
        trees = HistGradientBoostingClassifier
    else:
        linear, linear_name = Ridge(alpha=1.0), "ridge regression"
        trees = HistGradientBoostingRegressor
    models = {"simple": (make_pipeline(StandardScaler(), linear), columns["simple"],
                         f"{linear_name} on {', '.join(SIMPLE_INVARIANT_NAMES)}"),
              "strong": (trees(random_state=0), columns["strong"], f"gradient boosting on {strong_inputs}")}
    if strongest:
        models["strongest"] = (trees(random_state=0), columns["strongest"],
                               f"gradient boosting on the {len(INVARIANT_NAMES)} order invariants, the distribution "
                               f"over the elements of each per-element feature and the layer widths, the exact "
                               f"2D-order test and the graph observables ({len(GRAPH_OBSERVABLE_NAMES)}: link "
                               f"degrees, link-Laplacian extremes, interval sizes)")
    return models


def _metrics(estimator: str, truth: np.ndarray, predicted: np.ndarray, num_classes: int | None,
             positive_score: np.ndarray | None = None) -> dict[str, Any]:
    from sklearn.metrics import mean_absolute_error, mean_squared_error, r2_score

    if estimator == "regressor":
        return {"mse": float(mean_squared_error(truth, predicted)), "mae": float(mean_absolute_error(truth, predicted)),
                "r2": float(r2_score(truth, predicted))}
    return classification_metrics(truth, predicted, num_classes, positive_score)


class BaselineTest(NamedTuple):
    """The baselines' test: their kind of estimator, the test targets, each baseline's predictions and, for a
    binary classifier, each one's probability of class 1 per test set (for the ROC-AUC)."""

    estimator: str
    truth: np.ndarray
    predictions: dict[str, np.ndarray]
    positive_scores: dict[str, np.ndarray]


def fit_baselines(estimator: str, X_train: np.ndarray, y_train: np.ndarray, X_test: np.ndarray,
                  strong_features: str = "invariants",
                  strongest: bool = False) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Test-set predictions of the baselines fitted on (X_train, y_train), and for two classes each one's
    probability of class 1; X's columns are ``baseline_features``' (all INVARIANT_NAMES first).

    On one thread: for a thousand sets the OpenMP threads of gradient boosting only synchronise,
    and on a shared 2-core machine that made the fit 18x slower (22 s instead of 1.2 s for 1400 sets).
    """
    predictions, positive_scores = {}, {}
    with threadpool_limits(limits=1):
        for name, (model, columns, _) in baseline_models(estimator, strong_features, strongest).items():
            columns = slice(None) if columns is None else columns
            model.fit(X_train[:, columns], y_train)
            predictions[name] = model.predict(X_test[:, columns])
            if estimator == "classifier" and len(model.classes_) == 2:
                positive_scores[name] = model.predict_proba(X_test[:, columns])[:, 1]
    return predictions, positive_scores


def fit_and_predict(estimator: str, X_train: np.ndarray, y_train: np.ndarray, X_test: np.ndarray,
                    strong_features: str = "invariants", strongest: bool = False) -> dict[str, np.ndarray]:
    """Test-set predictions of the baselines fitted on (X_train, y_train) (``fit_baselines`` without the scores)."""
    return fit_baselines(estimator, X_train, y_train, X_test, strong_features, strongest)[0]


def infer_estimator(targets: np.ndarray) -> str:
    """'regressor' for floating-point targets, 'classifier' for integer class indices."""
    return "regressor" if np.issubdtype(targets.dtype, np.floating) else "classifier"


def predict_baselines(dataset, train_idx: Sequence[int], test_idx: Sequence[int],
                      estimator: str | None = None, strong_features: str = "invariants",
                      strongest: bool = False) -> BaselineTest:
    """Fit the baselines on the train sets and predict the test sets (``BaselineTest``: predictions of each,
    ``{"simple": ..., "strong": ...}`` and with ``strongest`` the strongest rival's). ``estimator`` defaults to the one
    the targets imply; ``strong_features`` chooses the strong baseline's input (``STRONG_FEATURES``). Features are
    computed for the train and test sets only."""
    if len(train_idx) == 0 or len(test_idx) == 0:
        raise ValueError(f"train_idx, test_idx: expected both non-empty, "
                         f"got {len(train_idx)} and {len(test_idx)} items")
    train, test = [dataset[int(i)] for i in train_idx], [dataset[int(i)] for i in test_idx]
    X_train, X_test = (baseline_features(items, strong_features, strongest) for items in (train, test))
    y_train, y_test = labels_vector(train), labels_vector(test)
    estimator = estimator or infer_estimator(y_train)
    if estimator == "classifier":
        y_train, y_test = y_train.astype(np.int64), y_test.astype(np.int64)  # binary 0/1 targets may be floats
    return BaselineTest(estimator, y_test,
                        *fit_baselines(estimator, X_train, y_train, X_test, strong_features, strongest))


def score_baselines(estimator: str, truth: np.ndarray, predictions: dict[str, np.ndarray],
                    num_classes: int | None = None, strong_features: str = "invariants",
                    positive_scores: dict[str, np.ndarray] | None = None) -> dict[str, dict[str, Any]]:
    """One entry per baseline in ``predictions`` (``{"simple": {...}, "strong": {...}, ...}``), each with
    ``method``, ``num_test`` and the metrics of the estimator's kind: ``classification_metrics`` (accuracy,
    balanced accuracy, weighted F1, per-class F1 and recall, and ROC-AUC where ``positive_scores`` has the
    baseline's) for a classifier, ``mse``, ``mae`` and ``r2`` for a regressor."""
    methods = baseline_models(estimator, strong_features, strongest="strongest" in predictions)
    positive_scores = positive_scores or {}
    return {name: {"method": methods[name][2], "num_test": int(len(truth)),
                   **_metrics(estimator, truth, predicted, num_classes, positive_scores.get(name))}
            for name, predicted in predictions.items()}


def evaluate_baselines(dataset, train_idx: Sequence[int], test_idx: Sequence[int],
                       estimator: str | None = None, strong_features: str = "invariants",
                       strongest: bool = False) -> dict[str, dict[str, Any]]:
    """Fit the baselines on the train sets, score them on the test sets (``predict_baselines``, then
    ``score_baselines``)."""
    test = predict_baselines(dataset, train_idx, test_idx, estimator, strong_features, strongest)
    num_classes = getattr(dataset, "num_classes", None) if test.estimator == "classifier" else None
    return score_baselines(test.estimator, test.truth, test.predictions, num_classes, strong_features,
                           test.positive_scores)


def flatten_baselines(baselines: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Summary keys: ``baseline_<metric>`` for the simple one, ``<name>_baseline_<metric>`` for the others
    (``strong_baseline_<metric>``, ``strongest_baseline_<metric>``)."""
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
