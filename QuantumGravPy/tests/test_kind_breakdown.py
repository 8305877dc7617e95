"""Recall per kind (``evaluation/kinds.py``) and against each defect's size (``analyses/kind_breakdown.py``), and the weighted F1 that upstream
QuantumGrav reports, from the confusion matrix (exact under DDP) and for the baselines (scikit-learn)."""

import numpy as np
import pytest

from QuantumGrav.analyses.kind_breakdown import defect_size, detection_threshold, kind_breakdown, recall_by_defect_size
from QuantumGrav.evaluation.kinds import BELOW_SMALLEST, NOT_REACHED, describe_threshold, recall_by_kind, wilson_interval
from QuantumGrav.tasks.binary import BinaryTask
from QuantumGrav.tasks.classification import f1_scores
from QuantumGrav.tasks.multiclass import MulticlassTask


def bins_of(*recalls: float) -> list[dict]:
    """Bins [1, 2), [2, 4), [4, 8), ... with the given recalls."""
    return [{"low": 2.0 ** b, "high": 2.0 ** (b + 1), "recall": r} for b, r in enumerate(recalls)]


def test_the_detection_threshold_is_where_the_curve_crosses_nine_in_ten():
    crossing = detection_threshold(bins_of(0.5, 0.8, 1.0, 1.0))
    # between the centres sqrt(2 * 4) (recall 0.8) and sqrt(4 * 8) (1.0), halfway on a log axis: 4
    assert crossing["reading"] == "crossing" and crossing["threshold"] == pytest.approx(4.0)
    # a dip below the level among larger defects moves the threshold up: the last crossing on the way up counts
    assert detection_threshold(bins_of(1.0, 0.5, 1.0, 1.0))["threshold"] > crossing["threshold"]
    below = detection_threshold(bins_of(0.95, 0.9, 1.0))
    assert below == {"threshold": None, "reading": BELOW_SMALLEST, "smallest_drawn": 1.0}
    assert describe_threshold(below) == "below the smallest drawn (1)"
    assert detection_threshold(bins_of(1.0, 0.8))["reading"] == NOT_REACHED
    assert describe_threshold(detection_threshold([])) == NOT_REACHED


def test_the_old_cumulative_reading_would_have_claimed_the_smallest_bin():
    """4 of 6 recognised in the smallest bin, all in the others: cumulative from the top that is still above nine in
    ten, and was reported as the smallest size drawn; the curve crosses above the smallest bin."""
    sizes = np.array([1, 1, 1, 1, 1, 1] + [10] * 30 + [100] * 30 + [1000] * 30, dtype=float)
    correct = np.array([1, 1, 1, 1, 0, 0] + [1] * 90, dtype=bool)
    threshold = recall_by_defect_size(sizes, correct)["threshold_at_90"]
    assert threshold["reading"] == "crossing" and threshold["threshold"] > 1.0


def test_recall_per_kind_and_per_bin_come_with_counts_and_intervals():
    kinds = ["grid", "destroyed", "grid", "destroyed", "grid"]
    found = recall_by_kind(kinds, np.array([1, 0, 1, 1, 0], dtype=bool))
    assert {kind: (row["sets"], row["correct"], row["recall"]) for kind, row in found.items()} == {
        "destroyed": (2, 1, 0.5), "grid": (3, 2, 2 / 3)}
    assert found["grid"]["recall_low"] < 2 / 3 < found["grid"]["recall_high"]
    sizes = np.arange(1, 9, dtype=float)
    result = recall_by_defect_size(sizes, sizes > 4, num_bins=4)
    assert [(row["sets"], row["correct"]) for row in result["bins"]] == [(2, 0), (2, 0), (2, 2), (2, 2)]
    assert result["threshold_at_90"]["reading"] == "crossing"
    centres = [np.sqrt(row["low"] * row["high"]) for row in result["bins"]]
    assert centres[1] < result["threshold_at_90"]["threshold"] < centres[2]  # between the last bin below and above
    repeated = recall_by_defect_size(np.array([4.0] * 9 + [5.0]), np.ones(10, dtype=bool))
    assert [row["sets"] for row in repeated["bins"]] == [10], "equal sizes never split: one bin"


def test_the_wilson_interval_matches_its_formula():
    low, high = wilson_interval(40, 50)
    z, p, n = 1.959963984540054, 0.8, 50
    centre, half = (p + z * z / (2 * n)) / (1 + z * z / n), z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (
        1 + z * z / n)
    assert (low, high) == pytest.approx((centre - half, centre + half))
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_a_sets_defect_size_is_the_realised_one():
    assert defect_size({"kind": "destroyed_ambiguous", "flip_fraction": 0.003, "changed_relations": 7}) == 7
    assert defect_size({"kind": "merged", "block_fraction": 0.1, "block_size": 9}) == 9
    assert defect_size({"kind": "complex_topology", "n_vertical_cuts": 2, "n_finite_cuts": 3}) == 5
    assert defect_size({"kind": "grid", "lattice": "hexagonal"}) is None
    assert defect_size({"kind": "merged"}) is None, "a store of QuantumGrav.jl's own: no recorded defect"
    assert defect_size({"kind": "destroyed", "flip_fraction": 0.1}) is None, "drawn, not realised"


def test_the_breakdown_has_every_model_and_the_kinds_with_enough_sets():
    descriptions = [{"kind": "destroyed", "changed_relations": c} for c in (400, 40, 4, 1)]
    descriptions += [{"kind": "grid"}] * 2 + [{"kind": "merged", "block_size": 9}]
    correct = {"gnn": np.array([1, 1, 1, 0, 1, 1, 1], dtype=bool), "strong_baseline": np.ones(7, dtype=bool)}
    result = kind_breakdown(descriptions, correct)
    assert result["by_kind"]["gnn"]["destroyed"]["recall"] == 0.75 and result["by_kind"]["strong_baseline"]["grid"]
    assert list(result["by_defect_size"]) == ["destroyed"], "one merged set is too few for bins"
    destroyed = result["by_defect_size"]["destroyed"]
    assert destroyed["size"] == "changed_relations"
    assert destroyed["gnn"]["threshold_at_90"]["reading"] == "crossing"
    assert destroyed["strong_baseline"]["threshold_at_90"] == {"threshold": None, "reading": BELOW_SMALLEST,
                                                                "smallest_drawn": 1.0}


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
