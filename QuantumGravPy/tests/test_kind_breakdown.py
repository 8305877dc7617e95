"""Recall per kind and against each defect's size (``evaluation/kinds.py``), and the weighted F1 that upstream
QuantumGrav reports, from the confusion matrix (exact under DDP) and for the baselines (scikit-learn)."""

import numpy as np
import pytest

from QuantumGrav.evaluation.kinds import (defect_size, kind_breakdown, recall_by_defect_size, recall_by_kind,
                                          smallest_detected)
from QuantumGrav.evaluation.tasks import BinaryTask, MulticlassTask, f1_scores


def test_the_detection_threshold_is_the_smallest_size_above_which_nine_in_ten_are_recognised():
    sizes = np.array([0.1, 0.05, 0.02, 0.01, 0.005, 0.002, 0.001, 0.0005, 0.0002, 0.0001])
    correct = np.array([1, 1, 1, 1, 1, 1, 1, 1, 0, 0], dtype=bool)
    assert smallest_detected(sizes, correct) == 0.0005  # the 8 largest: 8 of 8; with the 9th: 8 of 9 < 0.9
    correct[3] = False  # one miss among the large ones: 9 largest hold 7 of 9
    assert smallest_detected(sizes, correct) == 0.02  # 3 of 3; the 4th makes it 3 of 4
    assert smallest_detected(sizes, np.zeros(10, dtype=bool)) is None


def test_recall_per_kind_and_per_bin_of_equal_counts():
    kinds = ["grid", "destroyed", "grid", "destroyed", "grid"]
    assert recall_by_kind(kinds, np.array([1, 0, 1, 1, 0], dtype=bool)) == {
        "grid": {"sets": 3, "correct": 2, "recall": 2 / 3}, "destroyed": {"sets": 2, "correct": 1, "recall": 0.5}}
    sizes = np.arange(1, 9, dtype=float)
    result = recall_by_defect_size(sizes, sizes > 4, num_bins=4)
    assert [(row["sets"], row["correct"]) for row in result["bins"]] == [(2, 0), (2, 0), (2, 2), (2, 2)]
    assert result["smallest_at_90"] == 5.0


def test_a_sets_defect_size_follows_its_kind():
    assert defect_size({"kind": "destroyed_ambiguous", "flip_fraction": 0.003}) == 0.003
    assert defect_size({"kind": "merged", "block_fraction": 0.1, "block_size": 9}) == 0.1
    assert defect_size({"kind": "complex_topology", "n_vertical_cuts": 2, "n_finite_cuts": 3}) == 5
    assert defect_size({"kind": "grid", "lattice": "hexagonal"}) is None
    assert defect_size({"kind": "merged"}) is None, "a store of QuantumGrav.jl's own: no drawn parameters"


def test_the_breakdown_has_every_model_and_the_kinds_with_enough_sets():
    descriptions = [{"kind": "destroyed", "flip_fraction": f} for f in (0.1, 0.01, 0.001, 0.0001)]
    descriptions += [{"kind": "grid"}] * 2 + [{"kind": "merged", "block_fraction": 0.1}]
    correct = {"gnn": np.array([1, 1, 1, 0, 1, 1, 1], dtype=bool), "strong_baseline": np.ones(7, dtype=bool)}
    result = kind_breakdown(descriptions, correct)
    assert result["by_kind"]["gnn"]["destroyed"]["recall"] == 0.75 and result["by_kind"]["strong_baseline"]["grid"]
    assert list(result["by_defect_size"]) == ["destroyed"], "one merged set is too few for bins"
    assert result["by_defect_size"]["destroyed"]["gnn"]["smallest_at_90"] == 0.001


def test_weighted_f1_from_the_confusion_matrix_equals_scikit_learns():
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(3)
    truth = rng.integers(0, 4, 300)
    predicted = np.where(rng.random(300) < 0.7, truth, rng.integers(0, 4, 300))
    predicted[predicted == 3] = 2  # class 3 is never predicted: its F1 is 0
    confusion = [[int(((truth == i) & (predicted == j)).sum()) for j in range(4)] for i in range(4)]
    per_class, weighted = f1_scores(confusion)
    assert per_class == pytest.approx(f1_score(truth, predicted, average=None, labels=range(4), zero_division=0))
    assert weighted == pytest.approx(f1_score(truth, predicted, average="weighted", zero_division=0))
    assert "weighted_f1" in MulticlassTask(4).metric_names and "weighted_f1" in BinaryTask().metric_names
