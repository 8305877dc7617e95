"""Sensitivity curves (``evaluation/sensitivity.py``): the threshold at a false-alarm rate chosen on null scores,
the realised rate, and the detection rate against an exact defect size with its 90 % crossing."""

import numpy as np
import pytest

from QuantumGrav.evaluation.kinds import BELOW_SMALLEST, CROSSING, NOT_REACHED
from QuantumGrav.analyses.sensitivity import (detection_curve, false_alarms, pooled_curve, pooled_false_alarms,
                                                threshold_at_false_alarm)


def test_the_threshold_lets_exactly_five_in_a_hundred_null_sets_through():
    null = np.random.default_rng(0).permutation(100).astype(float)  # 0..99 in any order
    threshold = threshold_at_false_alarm(null, 0.05)
    assert threshold == 94.0  # 95, 96, 97, 98, 99 lie above it
    assert false_alarms(null, threshold)["false_alarms"] == 5 and false_alarms(null, threshold)["rate"] == 0.05
    # any lower threshold lets a sixth through: it is the lowest at 5 %
    assert false_alarms(null, np.nextafter(threshold, -np.inf))["false_alarms"] == 6
    # 5 % of 30 sets is 1.5: one may exceed, not two
    assert threshold_at_false_alarm(np.arange(30.0), 0.05) == 28.0
    # no false alarm allowed: nothing lies above the threshold
    assert threshold_at_false_alarm([3.0, 1.0, 2.0], 0.0) == 3.0


def test_tied_scores_are_never_split_so_the_rate_stays_at_most_the_target():
    tied_top = [0.0] * 90 + [1.0] * 10  # ten sets share the highest score: none may exceed, not five
    threshold = threshold_at_false_alarm(tied_top, 0.05)
    assert threshold == 1.0 and false_alarms(tied_top, threshold)["false_alarms"] == 0
    tied_below = [0.0] * 97 + [1.0, 2.0, 3.0]
    threshold = threshold_at_false_alarm(tied_below, 0.05)
    assert threshold == 0.0 and false_alarms(tied_below, threshold)["rate"] == pytest.approx(0.03)


def test_bad_null_scores_are_refused_with_a_message():
    with pytest.raises(ValueError, match="at least one null"):
        threshold_at_false_alarm([], 0.05)
    with pytest.raises(ValueError, match="NaN or infinite"):
        threshold_at_false_alarm([0.1, float("nan")], 0.05)
    with pytest.raises(ValueError, match=r"rate: expected a false-alarm rate in \[0, 1\)"):
        threshold_at_false_alarm([0.1, 0.2], 1.0)


def test_the_realised_false_alarm_rate_comes_with_its_count_and_interval():
    row = false_alarms([0.1, 0.2, 0.9, 0.95], threshold=0.5)
    assert (row["sets"], row["false_alarms"], row["rate"]) == (4, 2, 0.5)
    assert row["rate_low"] < 0.5 < row["rate_high"]
    pooled = pooled_false_alarms([row, false_alarms([0.0] * 6, 0.5)])
    assert (pooled["sets"], pooled["false_alarms"], pooled["rate"]) == (10, 2, 0.2)


def sets_at(rates: dict[int, tuple[int, int]]) -> tuple[list[int], list[bool]]:
    """Test sets at each size: ``{size: (sets, detected)}``."""
    sizes, detected = [], []
    for size, (sets, hits) in rates.items():
        sizes += [size] * sets
        detected += [True] * hits + [False] * (sets - hits)
    return sizes, detected


def test_each_size_is_a_point_with_its_count_and_the_crossing_is_interpolated_on_a_log_axis():
    curve = detection_curve(*sets_at({1: (40, 4), 2: (40, 20), 4: (40, 32), 8: (40, 40), 16: (40, 40)}))
    assert [p["size"] for p in curve["points"]] == [1, 2, 4, 8, 16]
    assert [(p["sets"], p["correct"]) for p in curve["points"]][2] == (40, 32)
    assert curve["points"][1]["recall"] == 0.5
    assert curve["points"][1]["recall_low"] < 0.5 < curve["points"][1]["recall_high"]
    crossing = curve["threshold_at_90"]
    # 0.8 at 4, 1.0 at 8: 0.9 is halfway between them on a log axis, at sqrt(32)
    assert crossing["reading"] == CROSSING and crossing["threshold"] == pytest.approx(np.sqrt(32))
    low, high = crossing["interval"]["low"], crossing["interval"]["high"]
    assert low["threshold"] < crossing["threshold"] < high["threshold"]


def test_curves_above_or_below_the_level_everywhere_say_so():
    everywhere = detection_curve(*sets_at({1: (50, 50), 4: (50, 49)}))["threshold_at_90"]
    assert everywhere["reading"] == BELOW_SMALLEST and everywhere["smallest_drawn"] == 1.0
    nowhere = detection_curve(*sets_at({1: (50, 0), 4: (50, 30)}))["threshold_at_90"]
    assert nowhere["reading"] == NOT_REACHED and nowhere["interval"]["high"]["reading"] == NOT_REACHED


def test_a_drawn_size_without_test_sets_keeps_its_place_and_does_not_move_the_crossing():
    sizes, detected = sets_at({1: (40, 4), 4: (40, 32), 8: (40, 40)})
    with_empty = detection_curve(sizes, detected, drawn_sizes=[1, 2, 4, 8])
    empty = with_empty["points"][1]
    assert (empty["size"], empty["sets"], empty["correct"], empty["recall"]) == (2.0, 0, 0, None)
    assert with_empty["threshold_at_90"] == detection_curve(sizes, detected)["threshold_at_90"]
    with pytest.raises(ValueError, match="one of each per set"):
        detection_curve([1, 2], [True])


def test_seeds_pool_by_summing_each_sizes_counts():
    first = detection_curve(*sets_at({1: (10, 2), 2: (10, 10)}))
    second = detection_curve(*sets_at({1: (30, 28), 4: (5, 5)}))
    pooled = pooled_curve([first, second])
    assert [(p["size"], p["sets"], p["correct"]) for p in pooled["points"]] == [(1, 40, 30), (2, 10, 10), (4, 5, 5)]
    assert pooled["points"][0]["recall"] == 0.75
