"""The rivals of the node task (``node_binary``): what answers "is this element inside the inserted block?" without
a GNN, so that its node F1 and block IoU have something to beat.

A rule marks an element when one of its features is anomalous for its own set: the element's value of a score
(a node feature of ``x``, or the link degree, or the cone size), minus the set's median, over the set's mean
absolute deviation from it, above a threshold (or below its negative). Every score and direction is fitted on
the training split (the threshold that maximises the training elements' F1, found exactly from one sort), and
the rule with the best training F1 is the rival. The strong rival sees more of the same: gradient-boosted trees
on every score of the element, raw and as its anomaly, fitted on the training split's elements. Both are scored on
the test split with the task's own totals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from ..callbacks.state import RunState
from ..data.causal_sets import NODE_FEATURES
from ..tasks.node import NodeBinaryTask
from .base import Analysis

# Scores built from the node features beside the features themselves: links at the element (in and out), and the
# elements related to it (its past and future cones).
COMBINED_SCORES: dict[str, tuple[str, str]] = {
    "link_degree": ("in_link_fraction", "out_link_fraction"),
    "cone_size": ("past_cone_fraction", "future_cone_fraction"),
}
SCORE_NAMES: tuple[str, ...] = (*NODE_FEATURES, *COMBINED_SCORES)


def element_scores(x: torch.Tensor) -> np.ndarray:
    """Each element's scores (``SCORE_NAMES``, one column each) from its node features ``x``."""
    features = x.double().numpy()
    combined = [features[:, NODE_FEATURES.index(a)] + features[:, NODE_FEATURES.index(b)]
                for a, b in COMBINED_SCORES.values()]
    return np.column_stack([features, *combined])


def anomalies(scores: np.ndarray) -> np.ndarray:
    """Each column's deviation from the set's median in units of its mean absolute deviation from it (a column
    that does not vary in the set is 0 everywhere)."""
    centred = scores - np.median(scores, axis=0)
    spread = np.abs(centred).mean(axis=0)
    return np.divide(centred, spread, out=np.zeros_like(centred), where=spread > 0)


@dataclass(frozen=True)
class AnomalyRule:
    """Mark an element when ``sign`` x its anomaly of score ``score`` is above ``threshold``."""

    score: str
    sign: int
    threshold: float

    def predict(self, x: torch.Tensor) -> np.ndarray:
        return self.sign * anomalies(element_scores(x))[:, SCORE_NAMES.index(self.score)] > self.threshold

    def describe(self) -> str:
        side = "above" if self.sign > 0 else "below"
        return (f"{self.score} {side} the set's median by more than {abs(self.threshold):.2f} mean absolute "
                f"deviations")


def best_threshold(values: np.ndarray, labels: np.ndarray, weights: np.ndarray | None = None) -> tuple[float, float]:
    """The threshold t maximising the F1 of ``values > t`` against ``labels`` (both per element), and that F1: every
    cut of the sorted values is tried at once (cumulative true positives). ``weights``: how many items each row
    stands for (rows sampled from more; None: one each)."""
    weights = np.ones(len(values)) if weights is None else np.asarray(weights, dtype=np.float64)
    order = np.argsort(-values, kind="stable")
    ordered, hits = values[order], labels[order] * weights[order]
    true_positives = np.cumsum(hits)
    marked = np.cumsum(weights[order])
    f1 = 2 * true_positives / (marked + hits.sum())
    cuts = np.flatnonzero(np.append(ordered[1:] != ordered[:-1], True))  # after the last of equal values only
    best = cuts[np.argmax(f1[cuts])]
    below = ordered[best + 1] if best + 1 < len(ordered) else ordered[best] - 1.0
    return float((ordered[best] + below) / 2), float(f1[best])


def fit_rule(items: Sequence[Any]) -> AnomalyRule:
    """The score, direction and threshold of the best training F1 over ``items`` (``Data`` with x and 0/1 ``y``
    per element)."""
    values = np.concatenate([anomalies(element_scores(item.x)) for item in items])
    labels = np.concatenate([item.y.view(-1).numpy() for item in items]) > 0.5
    fitted = [(best_threshold(sign * values[:, column], labels), name, sign)
              for column, name in enumerate(SCORE_NAMES) for sign in (1, -1)]
    (threshold, _), name, sign = max(fitted, key=lambda found: found[0][1])
    return AnomalyRule(name, sign, threshold)


def element_inputs(x: torch.Tensor) -> np.ndarray:
    """What the strong rival sees of each element: its scores and their anomalies in its set."""
    scores = element_scores(x)
    return np.column_stack([scores, anomalies(scores)])


def fit_trees(items: Sequence[Any]) -> Callable[[torch.Tensor], np.ndarray]:
    """Gradient-boosted trees fitted on the elements of ``items``; returns what marks the elements of an ``x``."""
    # Imported here, as the baselines' scikit-learn: only rank 0 fits it, once per run.
    from sklearn.ensemble import HistGradientBoostingClassifier

    inputs = np.concatenate([element_inputs(item.x) for item in items])
    labels = np.concatenate([item.y.view(-1).numpy() for item in items]) > 0.5
    with threadpool_limits(limits=1):  # rank 0 alone: the other ranks' cores stay theirs
        trees = HistGradientBoostingClassifier(random_state=0).fit(inputs, labels)

    def predict(x: torch.Tensor) -> np.ndarray:
        with threadpool_limits(limits=1):
            return trees.predict(element_inputs(x)).astype(bool)

    return predict


TREES_DESCRIPTION = "gradient-boosted trees on each element's scores, raw and as anomalies in its set"


def rival_metrics(predict: Callable[[torch.Tensor], np.ndarray], items: Sequence[Any],
                  task: NodeBinaryTask) -> dict[str, float]:
    """The node accuracy, precision, recall, F1 and mean block IoU on ``items`` of ``predict`` (an element's
    features ``x`` -> which elements it marks), from the task's totals."""
    return totals_metrics(marked_totals([predict(item.x) for item in items], items, task), task)


def marked_totals(marks: Sequence[np.ndarray], items: Sequence[Any], task: NodeBinaryTask) -> torch.Tensor:
    """The task's totals over ``items`` of the elements ``marks`` marks (one bool array per item, whoever marked
    them: a rival, or a model's thresholded predictions), so that every marker is scored in the task's own words;
    totals of several seeds add up before they are divided (``totals_metrics``)."""
    totals = task.zero_totals(torch.device("cpu"))
    for marked, item in zip(marks, items):
        logits = torch.where(torch.as_tensor(marked), math.inf, -math.inf).view(-1, 1)  # positive at any threshold
        totals += task.batch_totals(logits, task.target(item.y), torch.zeros(()))
    return totals


def totals_metrics(totals: torch.Tensor, task: NodeBinaryTask) -> dict[str, float]:
    """The task's metrics but the loss, from its totals."""
    scores = task.metrics(totals)
    return {name: scores[name] for name in task.metric_names if name != "loss"}


class NodeRival(Analysis):
    """After the test of a node task (rank 0, with ``testing.baselines``: the node task's declared rivals): the rivals
    fitted on the training split and scored on the test split beside the model's ``test_<metric>``: the best simple
    rule as ``rival_<metric>`` (the rule itself as ``rival_rule``), the strong rival, trees, as ``trees_<metric>``."""

    def on_test_end(self, state: RunState, result: dict[str, Any]) -> None:
        train = [state.dataset[i] for i in state.split["train"]]
        test = [state.dataset[i] for i in state.split["test"]]
        rule = fit_rule(train)
        for prefix, predict in (("rival", rule.predict), ("trees", fit_trees(train))):
            scores = rival_metrics(predict, test, state.task)
            result.update({f"{prefix}_{name}": value for name, value in scores.items()})
        result.update(rival_rule=rule.describe(), trees_rival=TREES_DESCRIPTION)
