"""What rank 0 adds after training and testing: the baselines fitted and scored beside the model (for the node and the
relation task their rival rule and trees), the destroyed sets recognised per flip fraction, and the figures (PNGs in ``run_dir/figures/``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch_geometric.data import Batch

from ..data.orders import transitive_closure
from ..evaluation.baselines import flatten_baselines, predict_baselines, score_baselines
from ..evaluation.destroyed_sets import MODEL_LABELS, destroyed_curves, flip_fractions
from ..evaluation.figures import (FIGURE_DIR, plot_confusion_matrix, plot_destroyed_by_flip_fraction,
                                  plot_inserted_block, plot_predictions, plot_recall_by_kind, plot_training_curves)
from ..evaluation.kinds import kind_breakdown
from ..evaluation import dimension_repair, relation_rival
from ..evaluation.node_rival import TREES_DESCRIPTION, fit_rule, fit_trees, rival_metrics
from ..evaluation.tasks import ClassificationTask
from .base import Callback, Decision
from .state import RunState


class Baselines(Callback):
    """After the test (rank 0, with ``testing.baselines``): the baselines (with ``testing.strongest_baseline`` the
    strongest rival too) fitted on the training split and scored on the test split, next to the model's result. Their predictions on the test split are kept in
    ``state.baseline_predictions`` (the destroyed-set curves compare them with the model's)."""

    main_process_only = True

    def on_test_end(self, state: RunState, result: dict[str, Any]) -> None:
        if getattr(state.dataset[0], "invariants", None) is None:  # the generator's per-set invariants
            return
        classification = isinstance(state.task, ClassificationTask)
        features, strongest = state.config["testing"]["strong_baseline"], state.config["testing"]["strongest_baseline"]
        test = predict_baselines(state.dataset, state.split["train"], state.split["test"],
                                 "classification" if classification else "regression", features, strongest)
        baselines = score_baselines(test.task, test.truth, test.predictions,
                                    state.task.num_classes if classification else None, features, test.positive_scores)
        result.update(**flatten_baselines(baselines), baselines=baselines)
        state.baseline_predictions = test.predictions


class NodeRival(Callback):
    """After the test of a node task (rank 0, with ``testing.baselines``): the rivals (``evaluation.node_rival``)
    fitted on the training split and scored on the test split beside the model's ``test_<metric>``: the best simple
    rule as ``rival_<metric>`` (the rule itself as ``rival_rule``), the strong rival, trees, as ``trees_<metric>``."""

    main_process_only = True

    def on_test_end(self, state: RunState, result: dict[str, Any]) -> None:
        train = [state.dataset[i] for i in state.split["train"]]
        test = [state.dataset[i] for i in state.split["test"]]
        rule = fit_rule(train)
        for prefix, predict in (("rival", rule.predict), ("trees", fit_trees(train))):
            scores = rival_metrics(predict, test, state.task)
            result.update({f"{prefix}_{name}": value for name, value in scores.items()})
        result.update(rival_rule=rule.describe(), trees_rival=TREES_DESCRIPTION)


class RelationRival(Callback):
    """After the test of a relation task (rank 0, with ``testing.baselines``): the rivals
    (``evaluation.relation_rival``) fitted on the training split and scored on the test split beside the model's
    ``test_<metric>``: the best single rule as ``rival_<metric>`` (the rule as ``rival_rule``), boosted trees on
    per-pair features as ``trees_<metric>``, and on 2D sets the 2D repair (``evaluation.dimension_repair``) as
    ``repair_<metric>`` (in d >= 3 no sprinkling is a 2D order: no repair there); on data that describe their
    sets' ``changed_relations`` (exact k), the model's and the rivals' metrics per k as
    ``result["by_changed_relations"]``."""

    main_process_only = True

    def on_test_end(self, state: RunState, result: dict[str, Any]) -> None:
        rows = relation_rival.training_rows([state.dataset[i] for i in state.split["train"]])
        rule = relation_rival.fit_rule(rows)
        test = [state.dataset[i] for i in state.test_order]  # in the order of the model's predictions
        per_set = {"gnn": model_set_totals(state, test)}
        rivals = [("rival", rule.predict), ("trees", relation_rival.fit_trees(rows))]
        if sprinkled_in_two_dimensions(state.dataset):
            rivals.append(("repair", dimension_repair.predict_repair))
            result.update(repair_rival=dimension_repair.REPAIR_DESCRIPTION)
        for prefix, predict in rivals:
            per_set[prefix] = relation_rival.rival_totals(predict, test, state.task)
            result.update({f"{prefix}_{name}": value
                           for name, value in relation_rival.rival_metrics(per_set[prefix], state.task).items()})
        result.update(rival_rule=rule.describe(), trees_rival=relation_rival.TREES_DESCRIPTION)
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



class DestroyedSetCurves(Callback):
    """After the test of a classifier (rank 0): the curves of the model and, when they ran, the baselines
    (``state.baseline_predictions``), as ``result["destroyed_by_flip_fraction"]``; nothing for data
    without varying flip fractions."""

    main_process_only = True

    def on_test_end(self, state: RunState, result: dict[str, Any]) -> None:
        if not isinstance(state.task, ClassificationTask):
            return
        gnn = np.array(state.test_predictions, dtype=np.float64).reshape(-1, 3)  # prediction, truth, fraction
        results = {"gnn": (gnn[:, 2], gnn[:, 0] == gnn[:, 1])}
        if state.baseline_predictions:
            test = [state.dataset[i] for i in state.split["test"]]
            fractions, truth = flip_fractions(test), np.array([int(g.y.reshape(-1)[0]) for g in test])
            results.update({f"{name}_baseline": (fractions, predicted == truth)
                            for name, predicted in state.baseline_predictions.items()})
        generated = getattr(state.dataset, "generation_params", None) or {}
        span = generated.get("destroy_fraction") if isinstance(generated.get("destroy_fraction"), list) else ()
        curves = destroyed_curves(results, span)
        if curves:
            result["destroyed_by_flip_fraction"] = curves



class KindBreakdown(Callback):
    """After the test of a classifier on data that describe their sets (``describe(i)``: QuantumGrav.jl's kinds):
    recall per kind and against each defect's size for the model and, when they ran, the baselines
    (``evaluation/kinds.py``), as ``result["by_kind"]`` and ``result["by_defect_size"]``."""

    main_process_only = True

    def on_test_end(self, state: RunState, result: dict[str, Any]) -> None:
        if not isinstance(state.task, ClassificationTask) or not hasattr(state.dataset, "describe"):
            return
        test = list(state.split["test"])
        predicted = {index: int(p) for index, (p, _, _) in zip(state.test_order, state.test_predictions)}
        truth = {index: int(t) for index, (_, t, _) in zip(state.test_order, state.test_predictions)}
        correct = {"gnn": np.array([predicted[i] == truth[i] for i in test])}
        correct.update({f"{name}_baseline": np.asarray(predictions) == np.array([truth[i] for i in test])
                        for name, predictions in state.baseline_predictions.items()})
        result.update(kind_breakdown([state.dataset.describe(i) for i in test], correct))
        # The kinds the data holds (each store's) that the test split has no set of: their recall is undefined.
        present = set(result["by_kind"]["gnn"])
        result["kinds_without_test_sets"] = [kind for kind in getattr(state.dataset, "found_cset_types", None) or []
                                             if kind not in present]


class Figures(Callback):
    main_process_only = True

    def on_fit_end(self, state: RunState, decision: Decision) -> None:
        if state.history:
            self._draw(state, "training_curves", plot_training_curves, state.history,
                       metric=f"val_{state.task.metric_names[1]}")

    def on_test_end(self, state: RunState, result: dict[str, Any]) -> None:
        if "confusion_matrix" in result:
            self._draw(state, "confusion_matrix", plot_confusion_matrix, result["confusion_matrix"],
                       result["class_names"])
        else:
            self._draw(state, "predictions", plot_predictions, [(p, t) for p, t, _ in state.test_predictions])
        if result.get("by_kind"):
            self._draw(state, "recall_by_kind", plot_recall_by_kind, result["by_kind"], result["by_defect_size"],
                       MODEL_LABELS, absent=result.get("kinds_without_test_sets", ()))
        if state.task.node_level:
            *example, title = inserted_block_example(state)
            self._draw(state, "inserted_block", plot_inserted_block, *example, title=title)
        if "destroyed_by_flip_fraction" in result:
            self._draw(state, "destroyed_by_flip_fraction", plot_destroyed_by_flip_fraction,
                       result["destroyed_by_flip_fraction"], MODEL_LABELS)

    @staticmethod
    def _draw(state: RunState, name: str, plot: Callable[..., Path], *data: Any, **options: Any) -> None:
        state.figures[name] = plot(*data, state.run_dir / FIGURE_DIR / f"{name}.png", **options)


@torch.no_grad()
def inserted_block_example(state: RunState) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """The first test set with an inserted block (else the first test set): its relation matrix, true block, the
    block the model predicts, and a title naming the set."""
    test = state.split["test"]
    index = next((i for i in test if float(state.dataset[i].y.sum()) > 0), test[0])
    item = state.dataset[index]
    was_training = state.model.training
    state.model.eval()
    outputs = state.model(Batch.from_data_list([item]).to(next(state.model.parameters()).device))
    state.model.train(was_training)
    links = np.zeros((item.num_nodes, item.num_nodes), dtype=bool)
    links[item.edge_index[0].numpy(), item.edge_index[1].numpy()] = True
    predicted = state.task.predict(outputs.float()).cpu().numpy() > 0
    kind = state.dataset.describe(index)["kind"] if hasattr(state.dataset, "describe") else "causal set"
    return (transitive_closure(links), item.y.view(-1).numpy() > 0.5, predicted,
            f"Test set {index} ({kind}, {item.num_nodes} elements)")

