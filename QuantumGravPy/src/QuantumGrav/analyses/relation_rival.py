"""The rivals of the relation task (``relation_binary``): what answers "was this pair's relation toggled?" without a
GNN, so that its F1 and its sets with every change found have something to beat.

Each candidate pair (i, j), i < j, is described by what the order says of it (``PAIR_FEATURES``, counts as
fractions of the set's N): its state in the input (related, a link), the interval between its ends, the past and
future cones of both ends, their common past and common future, and the nesting defect of an unrelated pair,
|F(j) \\ F(i)| + |P(i) \\ P(j)|, also as a share of |F(j)| + |P(i)|. A relation removed from a closed order leaves
its ends unrelated with exactly nested cones (everything after j is still after i, everything before i still before
j), so that defect is 0 there, and otherwise only where those cones are empty (at the set's boundary); a related
pair gets 2, beyond any unrelated one.

The nesting defect alone does not locate a removed link: a sprinkling has hundreds of unrelated pairs with nested
cones (thin empty strips next to near-null spacelike pairs), about 490 per set of 256 elements against one removed
link. What singles it out is two-dimensionality (``data.order_dimension``): a 2D sprinkling is a 2D order, and a
change that makes it none leaves violations, cycles of the tournaments of the conjugate found by the exact test,
around it. So each pair also gets the test's local evidence: how many of its ends lie on a violation
(``violation_ends``: 0, 1 or 2), whether it is itself an edge of a violating cycle (its ends share a strongly
connected part of a tournament: ``violation_cycle``), and the size of the smallest such part as a fraction of N
(``violation_part``, 0 where none; a small part is a sharp location). Restricted to pairs with both ends on a
violation, the unrelated pairs with nested cones are 14 to 147 per set of 256 elements and keep most removed links.
This is a 2D fact: in d >= 3 a sprinkling is no 2D order, nearly every element "violates", and these features
carry nothing there; where a change leaves the set a 2D order (a third of the sets with one removed link at
N = 256) no exact 2D method sees it either.

The rule (the best single one) marks the pairs on one side of a threshold of one feature; every feature and side
is fitted on the training split (the threshold that maximises the training pairs' F1), and the best is the rival.
The strong rival, gradient-boosted trees, sees every feature; its probability threshold is fitted the same way.
Training pairs are N (N - 1) / 2 per set: every changed pair is kept, and the unchanged ones are sampled
(``SAMPLED_NEGATIVES`` in all, each standing for the unchanged pairs of its set that it was drawn from: a weight).
Both are scored on the test split's every pair with the task's own totals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from ..callbacks.state import RunState
from ..data.orders import _one_torch_thread
from ..tasks.levels import candidate_pairs, pair_graph_index
from ..tasks.relation import RelationBinaryTask
from . import dimension_repair
from .base import Analysis
from .dimension_repair import relation_of, violation_features
from .node_rival import best_threshold

PAIR_FEATURES: tuple[str, ...] = ("related", "link", "interval", "past_first", "future_first", "past_second",
                                  "future_second", "common_past", "common_future", "nesting_defect", "nesting_share",
                                  "violation_ends", "violation_cycle", "violation_part")
# Unchanged training pairs kept for fitting, over all training sets (every changed pair is kept).
SAMPLED_NEGATIVES = 200_000


def pair_features(item: Any) -> np.ndarray:
    """[pairs, len(PAIR_FEATURES)] float32: each candidate pair's features (the module's docstring), by matrix
    products of the set's relation (float32 counts: exact below 2^24 elements) and the 2D test's violating parts."""
    R = relation_of(item)
    n = len(R)
    with _one_torch_thread():
        relation = torch.from_numpy(R.astype(np.float32))
        between = relation @ relation
        common_future, common_past = relation @ relation.T, relation.T @ relation
    first, second = candidate_pairs(n)
    past, future = relation.sum(0), relation.sum(1)
    state = item.pair_relation.long()
    related = (state > 0).float()
    nesting = future[second] - common_future[first, second] + past[first] - common_past[first, second]
    share = nesting / (future[second] + past[first]).clamp(min=1.0)
    columns = [related, (state == 2).float(), between[first, second] / n, past[first] / n, future[first] / n,
               past[second] / n, future[second] / n, common_past[first, second] / n,
               common_future[first, second] / n, torch.where(related > 0, 2.0, nesting / n),
               torch.where(related > 0, 2.0, share)]
    features = np.empty((len(first), len(PAIR_FEATURES)), dtype=np.float32)
    features[:, :len(columns)] = torch.stack(columns, dim=1).numpy()
    features[:, len(columns):] = violation_features(R, first.numpy(), second.numpy())
    return features


def training_rows(items: Sequence[Any], seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features, labels and weights of the training pairs: all changed ones, and ``SAMPLED_NEGATIVES`` unchanged
    ones shared out over the sets, each weighted by the unchanged pairs of its set it stands for."""
    rng = np.random.default_rng(seed)
    per_set = max(1, math.ceil(SAMPLED_NEGATIVES / max(len(items), 1)))
    features, labels, weights = [], [], []
    for item in items:
        found, changed = pair_features(item), item.y.numpy() > 0.5
        unchanged = np.flatnonzero(~changed)
        kept = rng.choice(unchanged, size=min(per_set, len(unchanged)), replace=False)
        rows = np.concatenate([np.flatnonzero(changed), kept])
        features.append(found[rows])
        labels.append(changed[rows])
        weights.append(np.concatenate([np.ones(int(changed.sum())),
                                       np.full(len(kept), len(unchanged) / max(len(kept), 1))]))
    return np.concatenate(features), np.concatenate(labels), np.concatenate(weights)


@dataclass(frozen=True)
class PairRule:
    """Mark a pair when ``sign`` x its feature ``feature`` is above ``threshold``."""

    feature: str
    sign: int
    threshold: float

    def predict(self, item: Any) -> np.ndarray:
        return self.sign * pair_features(item)[:, PAIR_FEATURES.index(self.feature)] > self.threshold

    def describe(self) -> str:
        side = "above" if self.sign > 0 else "below"
        return f"{self.feature} {side} {self.sign * self.threshold:.4g}"


def fit_rule(rows: tuple[np.ndarray, np.ndarray, np.ndarray]) -> PairRule:
    """The feature, side and threshold of the best training F1 (``training_rows``' features, labels, weights)."""
    features, labels, weights = rows
    fitted = [(best_threshold(sign * features[:, column], labels, weights), name, sign)
              for column, name in enumerate(PAIR_FEATURES) for sign in (1, -1)]
    (threshold, _), name, sign = max(fitted, key=lambda found: found[0][1])
    return PairRule(name, sign, threshold)


def fit_trees(rows: tuple[np.ndarray, np.ndarray, np.ndarray], features: Sequence[str] = PAIR_FEATURES
              ) -> Callable[[Any], np.ndarray]:
    """Gradient-boosted trees on the training rows' ``features`` (all by default; fewer to measure what some add),
    and the probability threshold of their best training F1; returns what marks the pairs of an item. The trees are
    fitted on the sampled rows as they are (the changed pairs a minority of a few percent, not of a few per mille:
    weighting the unchanged ones back would spend the fit on them); the weights count in the threshold, which sets
    the marked pairs' share as in the data."""
    # Imported here, as the baselines' scikit-learn: only rank 0 fits it, once per run.
    from sklearn.ensemble import HistGradientBoostingClassifier

    columns = [PAIR_FEATURES.index(name) for name in features]
    found, labels, weights = rows
    with threadpool_limits(limits=1):  # rank 0 alone: the other ranks' cores stay theirs
        trees = HistGradientBoostingClassifier(random_state=0).fit(found[:, columns], labels)
        threshold, _ = best_threshold(trees.predict_proba(found[:, columns])[:, 1], labels, weights)

    def predict(item: Any) -> np.ndarray:
        with threadpool_limits(limits=1):
            return trees.predict_proba(pair_features(item)[:, columns])[:, 1] > threshold

    return predict


TREES_DESCRIPTION = ("gradient-boosted trees on each pair's features (relation, link, interval, cones, nesting defect, "
                     "2D violations at its ends)")


def rival_totals(predict: Callable[[Any], np.ndarray], items: Sequence[Any], task: RelationBinaryTask
                 ) -> list[torch.Tensor]:
    """The task's totals of ``predict`` (an item -> which of its pairs it marks) on each of ``items``."""
    totals = []
    for item in items:
        marked = torch.from_numpy(predict(item))
        logits = torch.where(marked, math.inf, -math.inf).view(-1, 1)  # positive at any threshold in (0, 1]
        graphs = pair_graph_index(torch.zeros(int(item.num_nodes), dtype=torch.long), 1)
        totals.append(task.batch_totals(logits, task.target(item.y), torch.zeros(()), graphs))
    return totals


def rival_metrics(totals: Sequence[torch.Tensor], task: RelationBinaryTask) -> dict[str, float]:
    """The task's metrics but the loss, from per-set totals (``rival_totals``)."""
    scores = task.metrics(sum(totals, task.zero_totals(torch.device("cpu"))))
    return {name: scores[name] for name in task.metric_names if name != "loss"}


class RelationRival(Analysis):
    """After the test of a relation task (rank 0, with ``testing.baselines``: the relation task's declared rivals): the
    rivals fitted on the training split and scored on the test split beside the model's ``test_<metric>``: the best
    single rule as ``rival_<metric>`` (the rule as ``rival_rule``), boosted trees on per-pair features as
    ``trees_<metric>``, and on 2D sets the 2D repair (``dimension_repair``) as ``repair_<metric>`` (in d >= 3 no
    sprinkling is a 2D order: no repair there); on data that describe their sets' ``changed_relations`` (exact k), the
    model's and the rivals' metrics per k as ``result["by_changed_relations"]``."""

    def on_test_end(self, state: RunState, result: dict[str, Any]) -> None:
        rows = training_rows([state.dataset[i] for i in state.split["train"]])
        rule = fit_rule(rows)
        test = [state.dataset[i] for i in state.test_order]  # in the order of the model's predictions
        per_set = {"gnn": model_set_totals(state, test)}
        rivals = [("rival", rule.predict), ("trees", fit_trees(rows))]
        if sprinkled_in_two_dimensions(state.dataset):
            rivals.append(("repair", dimension_repair.predict_repair))
            result.update(repair_rival=dimension_repair.REPAIR_DESCRIPTION)
        for prefix, predict in rivals:
            per_set[prefix] = rival_totals(predict, test, state.task)
            scores = rival_metrics(per_set[prefix], state.task)
            result.update({f"{prefix}_{name}": value for name, value in scores.items()})
        result.update(rival_rule=rule.describe(), trees_rival=TREES_DESCRIPTION)
        if hasattr(state.dataset, "describe"):
            sizes = [state.dataset.describe(i).get("changed_relations") for i in state.test_order]
            result["by_changed_relations"] = by_changed_relations(sizes, per_set, state.task)


def sprinkled_in_two_dimensions(dataset: Any) -> bool:
    """Whether the data's manifold-like sets are 2D sprinklings, where the 2D repair applies: a generated
    dataset says its dimension; QuantumGrav.jl's stores (produce_data.jl's default) are 2D."""
    settings = getattr(dataset, "settings", None)
    return not isinstance(settings, dict) or settings.get("dimension", 2) == 2


def model_set_totals(state: RunState, test: list) -> list[torch.Tensor]:
    """The task's totals of each test set from the model's test predictions (its marked and its changed pairs)."""
    totals = []
    for item, (marked, changed, _) in zip(test, state.test_predictions):
        logits, truth = torch.full((item.y.numel(), 1), -np.inf), torch.zeros(item.y.numel())
        logits[marked], truth[changed] = np.inf, 1.0
        totals.append(state.task.batch_totals(logits, state.task.target(truth), torch.zeros(())))
    return totals


def by_changed_relations(sizes: list, per_set: dict[str, list[torch.Tensor]], task) -> dict[str, dict[str, Any]]:
    """Per realised count of changed relations k (sets that record one), each predictor's pair F1, precision,
    recall, share of sets with every change found, and the sets counted."""
    found: dict[str, dict[str, Any]] = {}
    for k in sorted({size for size in sizes if size is not None}):
        sets = [position for position, size in enumerate(sizes) if size == k]
        found[str(k)] = {"sets": len(sets)}
        for name, totals in per_set.items():
            metrics = task.metrics(sum((totals[p] for p in sets), task.zero_totals(torch.device("cpu"))))
            found[str(k)][name] = {m: metrics[m] for m in ("f1", "precision", "recall", "all_found")}
    return found
