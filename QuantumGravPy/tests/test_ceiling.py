"""The ceiling (``analyses.ceiling``): the sets no model can call and those the exact 2D-order test cannot."""

import numpy as np

from QuantumGrav.data import causal_sets as cs
from QuantumGrav.analyses.ceiling import callable_sets, ceiling_counts, exact_test_predictions, unchanged_by_its_defect


def test_a_defect_that_changed_nothing_is_one_no_model_can_call():
    _, R = cs.sprinkle_diamond(20, 2, np.random.default_rng(0))
    assert unchanged_by_its_defect({"kind": "destroyed_ambiguous", "changed_relations": 0}, R)
    assert not unchanged_by_its_defect({"kind": "destroyed", "changed_relations": 3}, R)
    assert not unchanged_by_its_defect({"kind": "destroyed", "flip_fraction": 0.1}, R), "nothing realised recorded"
    isolated = np.zeros((24, 24), dtype=bool)
    isolated[:20, :20] = R  # a block of 4 elements related to nothing at labels 20..23
    block = {"kind": "merged_ambiguous", "block_start": 20, "block_size": 4}
    assert unchanged_by_its_defect(block, isolated)
    tied = isolated.copy()
    tied[0, 21] = True  # one cross relation: the block now changes the order
    assert not unchanged_by_its_defect(block, tied)
    assert not unchanged_by_its_defect({"kind": "polynomial"}, R)
    assert callable_sets([block, block], [isolated, tied]).tolist() == [False, True]


def test_the_ceiling_counts_per_kind():
    rng = np.random.default_rng(1)
    flat = cs.sprinkle_diamond(30, 2, rng)[1]
    three_d = cs.sprinkle_diamond(150, 3, rng)[1]
    descriptions = [{"kind": "polynomial"}, {"kind": "destroyed", "changed_relations": 0},
                    {"kind": "destroyed", "changed_relations": 5}, {"kind": "layered"}]
    relations = [flat, flat, three_d, flat]
    assert exact_test_predictions(relations).tolist() == [1, 1, 0, 1]
    assert ceiling_counts(descriptions, relations, [1, 0, 0, 0]) == {
        "destroyed": {"sets": 2, "no_model_can_call": 1, "two_dimensional": 1, "exact_test_cannot_call": 1},
        "layered": {"sets": 1, "no_model_can_call": 0, "two_dimensional": 1, "exact_test_cannot_call": 1},
        "polynomial": {"sets": 1, "no_model_can_call": 0, "two_dimensional": 1, "exact_test_cannot_call": 0}}
