"""QuantumGrav.jl's `destroyed`, `destroyed_ambiguous`, `merged` and `merged_ambiguous` kinds (data/kinds/),
checked against physics."""

import numpy as np
import pytest

from QuantumGrav.data.kinds.catalogue import generate_kind
from QuantumGrav.data.kinds.common import conformal_coefficients
from QuantumGrav.data.sprinkling import ConformalBox, light_cone_relation, sprinkle
from QuantumGrav.data.kinds.destroyed import (DESTROYED_AMBIGUOUS, DestroyedSettings, destroy, destroy_exactly,
                                              draw_flip_fraction, flip_count, generate_destroyed,
                                              generate_destroyed_ambiguous, toggled_pairs)
from QuantumGrav.data.kinds.layered import layer_sizes
from QuantumGrav.data.kinds.merged import (MERGED_AMBIGUOUS, MergedSettings, block_size, generate_merged,
                                           generate_merged_ambiguous, insert_block, layered_block)
from QuantumGrav.data.orders import transitive_reduction

GENERATORS = [generate_destroyed, generate_destroyed_ambiguous, generate_merged, generate_merged_ambiguous]


def is_transitive(relation: np.ndarray) -> bool:
    steps = relation.astype(np.int32)
    return not ((steps @ steps > 0) & ~relation).any()


def sprinkled_order(rng: np.random.Generator, n: int) -> np.ndarray:
    return light_cone_relation(sprinkle(rng, n, ConformalBox(np.ones((1, 1)))))


@pytest.mark.parametrize("generate", GENERATORS, ids=lambda generate: generate.__name__)
def test_every_set_is_a_time_labelled_transitive_order_of_n_elements_reproducible_per_seed(generate):
    for seed in range(3):
        sample = generate(97, np.random.default_rng(seed))
        relation = sample.relation
        assert relation.shape == (97, 97) and relation.dtype == bool and not sample.manifold_like
        assert sample.kind == generate.__name__.removeprefix("generate_")
        assert not np.tril(relation).any(), "only i < j may be related: the elements are labelled by time"
        assert is_transitive(relation)
        again = generate(97, np.random.default_rng(seed))
        assert np.array_equal(again.relation, relation) and again.params == sample.params


# destroyed


def test_toggles_reach_the_expected_number_of_pairs_by_parity():
    """A pair drawn k times is toggled iff k is odd: with f draws of probability p each, the expected number of
    toggled pairs is sum (1 - (1 - 2p)^f) / 2, which is about f for few flips and saturates for many."""
    n = 120
    i, j = np.triu_indices(n, k=1)
    probability = 1.0 / ((n - 1) * (n - 1 - i))  # QuantumGrav.jl's pair draw, late pairs favoured
    rng = np.random.default_rng(5)
    for flip_fraction in (1e-3, 1e-2, 0.5):
        flips = flip_count(n, flip_fraction)
        counts = [toggled_pairs(rng, n, flips).sum() for _ in range(20)]
        expected = ((1 - (1 - 2 * probability) ** flips) / 2).sum()
        assert np.mean(counts) == pytest.approx(expected, rel=0.05, abs=1.0)
        assert max(counts) <= flips
        assert not np.tril(toggled_pairs(rng, n, flips)).any()


def test_the_flip_count_is_the_ceiling_of_the_flip_fraction_of_pairs_and_at_least_one():
    assert flip_count(100, 0.5) == 2475 and flip_count(100, 0.10001) == 496
    assert flip_count(64, 1e-9) == 1 and flip_count(10, 1.0) == 45


def test_destroying_keeps_every_untoggled_relation_adds_every_toggled_one_and_closes():
    rng = np.random.default_rng(6)
    sprinkled = sprinkled_order(rng, 150)
    toggled = toggled_pairs(rng, 150, 300)
    relation = destroy(sprinkled, toggled)
    assert is_transitive(relation) and not np.tril(relation).any()
    assert not (sprinkled & ~toggled & ~relation).any(), "the closure only adds relations"
    assert relation[toggled & ~sprinkled].all(), "a pair toggled on is related"


def test_a_non_link_toggled_off_is_restored_by_the_closure_and_a_lone_link_is_removed():
    rng = np.random.default_rng(7)
    sprinkled = sprinkled_order(rng, 120)
    links = transitive_reduction(sprinkled)
    i, j = np.argwhere(sprinkled & ~links)[0]
    only = np.zeros_like(sprinkled)
    only[i, j] = True
    assert np.array_equal(destroy(sprinkled, only), sprinkled)
    a, b = np.argwhere(links)[0]
    only = np.zeros_like(sprinkled)
    only[a, b] = True
    assert np.array_equal(destroy(sprinkled, only), sprinkled & ~only)


def test_a_destroyed_set_differs_from_its_sprinkling_by_about_the_drawn_flip_fraction_of_toggled_pairs():
    rng = np.random.default_rng(8)
    for generate in (generate_destroyed, generate_destroyed_ambiguous):
        for _ in range(10):
            params = generate(110, rng).params
            pairs = 110 * 109 / 2
            assert params["flips"] == flip_count(110, params["flip_fraction"])
            assert params["toggled_fraction"] <= params["flips"] / pairs
            if params["flip_fraction"] < 0.02:  # few flips rarely hit one pair twice
                assert params["toggled_fraction"] >= 0.7 * params["flips"] / pairs
            assert params["added_fraction"] > 0 or params["toggled_fraction"] * pairs <= 2


def test_default_destroyed_sets_are_far_more_ordered_than_a_sprinkling_and_ambiguous_ones_close_to_it():
    """Uniform(0, 1) flip fractions relate most pairs after the closure; 1e-4 to 1e-2 leave the ordering
    fraction near a sprinkling's (about 1/2 for near-uniform densities)."""
    rng = np.random.default_rng(9)

    def ordering_fraction(sample):
        return sample.relation.sum() / (sample.n * (sample.n - 1) / 2)

    destroyed = [ordering_fraction(generate_destroyed(80, rng)) for _ in range(12)]
    ambiguous = [ordering_fraction(generate_destroyed_ambiguous(80, rng)) for _ in range(12)]
    assert np.median(destroyed) > 0.85
    assert 0.3 < np.median(ambiguous) < 0.7


def test_flip_fractions_are_drawn_from_quantumgrav_jls_range_and_the_ambiguous_log_uniform_range():
    rng = np.random.default_rng(10)
    default = np.array([draw_flip_fraction(rng, DestroyedSettings()) for _ in range(4000)])
    assert default.min() >= 0.0 and default.max() <= 1.0 and np.mean(default) == pytest.approx(0.5, abs=0.02)
    ambiguous = np.array([draw_flip_fraction(rng, DESTROYED_AMBIGUOUS) for _ in range(4000)])
    assert ambiguous.min() >= 1e-4 and ambiguous.max() <= 1e-2
    assert np.mean(np.log10(ambiguous)) == pytest.approx(-3.0, abs=0.03), "log-uniform: decades equally likely"
    sample = generate_destroyed(70, rng, DestroyedSettings(flip_fraction_range=(0.2, 0.2)))
    assert sample.params["flip_fraction"] == 0.2 and 5 <= sample.params["conformal_order"] <= 15


# merged


def test_the_inserted_block_is_a_three_layer_order_with_near_equal_layers():
    rng = np.random.default_rng(11)
    for n in (4, 5, 9, 300):
        sizes = layer_sizes(rng, n, 3, 0.1 * n / 3)
        assert sizes.sum() == n and len(sizes) == 3 and sizes.min() >= 1 and sizes[-1] >= 2
    sizes = np.array([layer_sizes(rng, 300, 3, 10.0) for _ in range(300)])
    assert sizes.mean(axis=0) == pytest.approx([100, 100, 100], abs=2.5)
    block, sizes = layered_block(rng, 60, 0.3)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    layers = [slice(starts[k], starts[k + 1]) for k in range(3)]
    assert not any(block[layer, layer].any() for layer in layers), "layers are antichains"
    links = transitive_reduction(block)
    assert np.array_equal(links[layers[1], layers[2]], block[layers[1], layers[2]])
    bottom_to_top = (block[layers[0], layers[1]].astype(int) @ block[layers[1], layers[2]].astype(int)) > 0
    assert np.array_equal(block[layers[0], layers[2]], bottom_to_top), "the first layer precedes the third via the middle"


def insertion(seed: int, cross_link: float, n1: int = 90, n2: int = 12, position: int = 40):
    rng = np.random.default_rng(seed)
    sprinkled = sprinkled_order(rng, n1)
    block, _ = layered_block(rng, n2, 0.5)
    into_block = rng.random((position, n2)) < cross_link
    out_of_block = rng.random((n2, n1 - position)) < cross_link
    return sprinkled, block, into_block, out_of_block, insert_block(sprinkled, block, position, into_block,
                                                                  out_of_block)


def test_the_inserted_blocks_own_order_and_the_sprinklings_order_on_each_side_are_preserved():
    sprinkled, block, into_block, out_of_block, merged = insertion(12, 0.2)
    before, inside, after = slice(0, 40), slice(40, 52), slice(52, 102)
    assert is_transitive(merged) and not np.tril(merged).any()
    assert np.array_equal(merged[inside, inside], block), "no path leaves the block and re-enters it"
    assert np.array_equal(merged[before, before], sprinkled[:40, :40])
    assert np.array_equal(merged[after, after], sprinkled[40:, 40:])
    assert not (sprinkled[:40, 40:] & ~merged[before, after]).any(), "the closure only adds relations"
    assert merged[before, inside][into_block].all() and merged[inside, after][out_of_block].all()


def test_relations_through_the_block_relate_spacelike_sprinkled_elements():
    sprinkled, _, _, _, merged = insertion(13, 1.0)
    assert merged[:40, 52:].all(), "every earlier element precedes the whole block, which precedes every later one"
    assert (~sprinkled[:40, 40:]).any()
    sprinkled, block, _, _, merged = insertion(13, 0.0)
    assert not merged[:40, 40:52].any() and not merged[40:52, 52:].any(), "without cross links the block floats"
    assert np.array_equal(merged[:40, 52:], sprinkled[:40, 40:])


@pytest.mark.parametrize("generate", [generate_merged, generate_merged_ambiguous], ids=lambda g: g.__name__)
def test_merged_labels_mark_exactly_the_inserted_block_of_height_at_most_three(generate):
    rng = np.random.default_rng(14)
    for _ in range(6):
        sample = generate(110, rng)
        start, size = sample.params["block_start"], sample.params["block_size"]
        expected = np.zeros(110, dtype=bool)
        expected[start:start + size] = True
        assert np.array_equal(sample.node_labels, expected)
        assert sum(sample.params["block_layer_sizes"]) == size
        inside = sample.relation[start:start + size, start:start + size].astype(int)
        assert not (inside @ inside @ inside).any(), "no chain of four elements inside the block"


def test_block_sizes_follow_quantumgrav_jls_rounding_and_the_ambiguous_range():
    assert block_size(100, 0.025) == 4 and block_size(100, 0.125) == 12 and block_size(100, 0.135) == 14
    assert block_size(100, 0.999) == 99, "capped so the set keeps exactly n elements"
    rng = np.random.default_rng(15)
    sizes = [generate_merged_ambiguous(128, rng).params for _ in range(25)]
    assert all(4 <= p["block_size"] <= max(4, round(0.05 * 128)) for p in sizes)
    assert all(0.0 <= p["cross_link_probability"] <= 0.1 for p in sizes)
    assert MERGED_AMBIGUOUS.block_fraction_range == (0.005, 0.05)
    params = generate_merged(90, rng, MergedSettings(block_fraction_range=(0.3, 0.3))).params
    assert params["block_size"] == 27 and 0 <= params["block_start"] <= 63


def test_an_ambiguous_destroyed_set_always_differs_from_its_sprinkling():
    rng = np.random.default_rng(11)
    samples = [generate_kind("destroyed_ambiguous", rng, n=64) for _ in range(200)]
    assert all(sample.params["changed_fraction"] > 0 for sample in samples)
    # one or two toggles that remove relations the closure restores: drawn again, which happens often at this end
    assert any(sample.params["toggle_draws"] > 1 for sample in samples)


@pytest.mark.parametrize("kind", ["destroyed", "destroyed_ambiguous"])
def test_a_destroyed_set_records_its_realised_defect_as_counts_of_changed_relations(kind):
    """changed = added + removed relations of the closed result against the same sprinkling (drawn again from the
    same stream): the counts a detector's yardstick is plotted against."""
    for seed in range(4):
        sample = generate_kind(kind, np.random.default_rng(seed), n=80)
        rng = np.random.default_rng(seed)
        coefficients, _, _ = conformal_coefficients(rng)
        sprinkled = light_cone_relation(sprinkle(rng, 80, ConformalBox(coefficients)))
        added = int((sample.relation & ~sprinkled).sum())
        removed = int((sprinkled & ~sample.relation).sum())
        params = sample.params
        assert (params["added_relations"], params["removed_relations"]) == (added, removed)
        assert params["changed_relations"] == added + removed > 0
        assert params["changed_relations"] == round(params["changed_fraction"] * 80 * 79 / 2)


# defects of an exact size

CHANGES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
BLOCKS = [4, 8, 16, 32, 64]


def sprinkling_of(seed: int, n: int, dimension: int) -> np.ndarray:
    """The sprinkling a destroyed set of this seed was made from (its generator's first draws)."""
    rng = np.random.default_rng(seed)
    coefficients, _, _ = conformal_coefficients(rng, dimension=dimension)
    return light_cone_relation(sprinkle(rng, n, ConformalBox(coefficients)))


@pytest.mark.parametrize("dimension", [2, 3, 4])
@pytest.mark.parametrize("kind", ["destroyed", "destroyed_ambiguous"])
def test_a_destroyed_set_of_an_exact_size_differs_from_its_sprinkling_in_exactly_that_many_relations(kind,
                                                                                                   dimension):
    for seed, changes in enumerate(CHANGES):
        sample = generate_kind(kind, np.random.default_rng(seed), n=256, dimension=dimension, defect_size=changes)
        sprinkled = sprinkling_of(seed, 256, dimension)
        assert int((sample.relation ^ sprinkled).sum()) == changes == sample.params["changed_relations"]
        assert sample.params["added_relations"] + sample.params["removed_relations"] == changes
        assert is_transitive(sample.relation) and not np.tril(sample.relation).any()
        params = sample.params
        assert params["dimension"] == dimension and 1 <= params["toggles"] <= params["pair_draws"]
        assert "flip_fraction" not in sample.params, "no fraction was drawn"


@pytest.mark.parametrize("dimension", [2, 4])
def test_exact_defects_hold_at_1024_elements(dimension):
    for seed, changes in enumerate((1, 256)):
        sample = generate_destroyed(1024, np.random.default_rng(seed), dimension=dimension, changes=changes)
        assert int((sample.relation ^ sprinkling_of(seed, 1024, dimension)).sum()) == changes
    sample = generate_merged(1024, np.random.default_rng(2), dimension=dimension, block_elements=64)
    assert int(sample.node_labels.sum()) == 64 == sample.params["block_size"]


def test_an_exact_count_of_changes_removes_only_links_and_adds_only_closed_cones():
    """Each kept toggle turns a link off (one relation) or turns a pair on and relates everything up to its first
    element to everything from its second on: the removed relations were links of the sprinkling or of a
    previous toggle's result, and the result is the closure of the sprinkling with its added relations."""
    rng = np.random.default_rng(21)
    sprinkled = sprinkled_order(rng, 200)
    for changes in (3, 40):
        relation, drawn = destroy_exactly(rng, sprinkled, changes)
        removed, added = sprinkled & ~relation, relation & ~sprinkled
        assert int(removed.sum() + added.sum()) == changes and drawn["toggles"] >= 1
        assert not (removed & ~transitive_reduction(sprinkled | added)).any(), "only links are ever removed"


def test_an_exact_count_that_the_draws_do_not_reach_is_refused_and_an_impossible_one_is_an_error(monkeypatch):
    from QuantumGrav.data.kinds import destroyed
    from QuantumGrav.data.kinds.common import SetRefused

    rng = np.random.default_rng(22)
    sprinkled = sprinkled_order(rng, 30)
    monkeypatch.setattr(destroyed, "MAX_PAIR_DRAWS_PER_CHANGE", 0)
    with pytest.raises(SetRefused, match="0 pair draws changed 0 of the 5 relations asked for"):
        destroy_exactly(rng, sprinkled, 5)
    with pytest.raises(ValueError, match=r"changes: expected 1 to 435 \(the pairs of 30 elements\), got 436"):
        destroy_exactly(rng, sprinkled, 436)


@pytest.mark.parametrize("dimension", [2, 3, 4])
@pytest.mark.parametrize("kind", ["merged", "merged_ambiguous"])
def test_a_merged_set_of_an_exact_size_has_a_block_of_exactly_that_many_elements(kind, dimension):
    for seed, size in enumerate(BLOCKS):
        sample = generate_kind(kind, np.random.default_rng(seed), n=256, dimension=dimension, defect_size=size)
        assert int(sample.node_labels.sum()) == size == sample.params["block_size"] == sum(
            sample.params["block_layer_sizes"])
        start = sample.params["block_start"]
        assert sample.node_labels[start:start + size].all() and sample.relation.shape == (256, 256)
        assert sample.params["block_fraction"] == size / 256 and is_transitive(sample.relation)
    with pytest.raises(ValueError, match=r"block_elements: expected 4 to 255 .* got 256"):
        generate_kind(kind, np.random.default_rng(0), n=256, dimension=dimension, defect_size=256)
