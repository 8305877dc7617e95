"""QuantumGrav.jl's `layered`, `grid` and `random` kinds (data/kinds/), checked against physics."""

import math

import numpy as np
import pytest

from QuantumGrav.data.kinds.grid import LATTICES, GridSettings, edge_vectors, generate_grid, grid_points
from QuantumGrav.data.kinds.layered import (LayeredSettings, close_layers, consecutive_layer_edges,
                                            generate_layered, layer_sizes)
from QuantumGrav.data.kinds.random_order import (FLIP_TABLE, OrderingFractionNotReached, RandomOrderSettings,
                                                 closure_bits, flip_parameter, generate_random_order,
                                                 unpack_relation)
from QuantumGrav.data.orders import longest_chains, transitive_closure, transitive_reduction

GENERATORS = {"layered": generate_layered, "grid": generate_grid, "random": generate_random_order}


def is_transitive(relation: np.ndarray) -> bool:
    steps = relation.astype(np.int32)
    return not ((steps @ steps > 0) & ~relation).any()


def height(relation: np.ndarray) -> int:
    """Elements in the longest chain."""
    past, _ = longest_chains(relation)
    return int(past.max()) + 1


def ordering_fraction(relation: np.ndarray) -> float:
    n = relation.shape[0]
    return relation.sum() / (n * (n - 1) / 2)


@pytest.mark.parametrize("kind", GENERATORS)
def test_every_set_is_a_time_labelled_partial_order_reproducible_per_seed(kind):
    generate = GENERATORS[kind]
    for seed in range(4):
        sample = generate(64 + 21 * seed, np.random.default_rng(seed))
        relation = sample.relation
        assert sample.kind == kind and not sample.manifold_like and relation.shape == (sample.n, sample.n)
        assert relation.dtype == bool and not np.tril(relation).any(), "only i < j may be related"
        assert is_transitive(relation)
        again = generate(sample.n, np.random.default_rng(seed))
        assert np.array_equal(again.relation, relation) and again.params == sample.params


# layered


def test_layered_links_are_exactly_the_sampled_edges_between_consecutive_layers():
    """Every path climbs one layer per step, so no sampled edge is implied by others and nothing else is a link;
    their number is p * sum m_k m_(k+1) on average."""
    rng = np.random.default_rng(10)
    sizes = np.array([20, 25, 18, 30, 22])
    expected, counted = 0.3 * np.sum(sizes[:-1] * sizes[1:]), []
    for _ in range(20):
        edges = consecutive_layer_edges(rng, sizes, 0.3)
        relation = close_layers(edges, sizes)
        assert np.array_equal(relation, transitive_closure(edges))
        assert np.array_equal(transitive_reduction(relation), edges)
        counted.append(edges.sum())
    assert np.mean(counted) == pytest.approx(expected, rel=0.02)


def test_layers_are_antichains_and_two_layers_apart_relate_with_one_minus_one_minus_p_squared_to_the_m():
    """a in layer 1 precedes c in layer 3 iff some b of the m middle elements has both links: 1 - (1 - p^2)^m."""
    rng = np.random.default_rng(11)
    sizes, p = np.array([30, 5, 30]), 0.3
    related = [close_layers(consecutive_layer_edges(rng, sizes, p), sizes)[:30, 35:].mean() for _ in range(40)]
    assert np.mean(related) == pytest.approx(1 - (1 - p * p) ** 5, abs=0.02)
    sample = generate_layered(128, np.random.default_rng(12))
    starts = np.cumsum([0] + sample.params["layer_sizes"])
    for first, last in zip(starts[:-1], starts[1:]):
        assert not sample.relation[first:last, first:last].any()
    links = np.argwhere(transitive_reduction(sample.relation))
    layer_of = np.searchsorted(starts, np.arange(sample.n), side="right") - 1
    assert np.all(layer_of[links[:, 1]] == layer_of[links[:, 0]] + 1), "links join consecutive layers only"


def test_layered_height_is_the_layer_count():
    """No chain is longer than L (each layer is an antichain); with links likely enough, one climbs all L."""
    likely_links = LayeredSettings(link_probability_range=(0.5, 1.0))
    for seed in range(10):
        sample = generate_layered(96, np.random.default_rng(seed), likely_links)
        assert height(sample.relation) == sample.params["layer_count"]
        default = generate_layered(64, np.random.default_rng(100 + seed))
        assert height(default.relation) <= default.params["layer_count"]


def test_layered_draws_follow_quantumgrav_jls_distributions():
    rng = np.random.default_rng(13)
    samples = [generate_layered(64, rng) for _ in range(300)]
    counts = [s.params["layer_count"] for s in samples]
    assert set(counts) == set(range(3, 21)), "L = ceil(U(2, 20)) takes 3..20"
    assert all(0.05 <= s.params["link_probability"] <= 1.0 and 0 <= s.params["layer_spread"] <= 1 for s in samples)
    for sample in samples:
        sizes = np.array(sample.params["layer_sizes"])
        assert sizes.sum() == 64 and sizes.min() >= 1 and sizes[-1] >= 2
    sizes = layer_sizes(rng, 2048, 10, 0.5)
    assert np.abs(sizes - 204.8).max() <= 4, "a spread below 1 keeps the layers nearly equal"
    with pytest.raises(ValueError, match="n must exceed L"):
        layer_sizes(rng, 5, 5, 0.5)


# grid


def regenerated_points(sample) -> tuple[np.ndarray, np.ndarray]:
    params = sample.params
    edges = edge_vectors(params["lattice"], params["segment_ratio"], params["oblique_angle_deg"])
    return grid_points(sample.n, edges, params["rotation_deg"])


def grid_of(lattice: str, n: int, seed: int):
    return generate_grid(n, np.random.default_rng(seed), GridSettings(lattices=(lattice,)))


def test_a_grid_has_exactly_n_points_cut_from_the_last_rows():
    """At n = 2,048, k = 46: 2,116 lattice points, the last 68 (row 45 and the end of row 44) cut."""
    sample = grid_of("hexagonal", 2048, 20)
    points, indices = regenerated_points(sample)
    assert sample.relation.shape == (2048, 2048) and len(points) == 2048
    assert len({tuple(index) for index in indices}) == 2048
    assert indices[:, 1].max() == 44 and np.sum(indices[:, 1] == 44) == 24
    assert np.abs(points).max() == pytest.approx(1.0) and np.abs(points).max() <= 1.0 + 1e-12


@pytest.mark.parametrize("lattice", LATTICES)
def test_a_grid_is_a_two_dimensional_order(lattice):
    """i precedes j iff both light-cone coordinates u = t - s and v = t + s grow."""
    sample = grid_of(lattice, 150, 21)
    points, _ = regenerated_points(sample)
    assert np.all(np.diff(points[:, 0]) >= 0), "labelled by time"
    u, v = points[:, 0] - points[:, 1], points[:, 0] + points[:, 1]
    both = (u[None, :] >= u[:, None]) & (v[None, :] >= v[:, None])
    assert np.array_equal(sample.relation, np.triu(both, k=1))


@pytest.mark.parametrize("lattice", LATTICES)
def test_a_grid_order_depends_only_on_the_lattice_displacement(lattice):
    """The patch is a lattice: whether x precedes y depends on y - x alone, so every element has the same
    neighbourhood wherever the patch contains it."""
    sample = grid_of(lattice, 144, 22)
    _, indices = regenerated_points(sample)
    displacement = indices[None, :, :] - indices[:, None, :] + 12
    keys = (displacement[..., 0] * 25 + displacement[..., 1]).ravel()
    pairs = np.bincount(keys, minlength=625)
    related = np.bincount(keys, weights=sample.relation.ravel(), minlength=625)
    assert np.all((related == 0) | (related == pairs)), "a displacement relates every pair or none"
    assert 0 < related.sum() < pairs.sum() - 144


@pytest.mark.parametrize("lattice", LATTICES)
def test_each_lattice_has_its_cell(lattice):
    """The scaled, rotated points are c + a e1 + b e2 exactly; e1 and e2 have the lattice's length ratio and
    angle (rotation and scaling keep both)."""
    sample = grid_of(lattice, 100, 23)
    points, indices = regenerated_points(sample)
    design = np.column_stack([np.ones(len(indices)), indices])
    fit, *_ = np.linalg.lstsq(design, points, rcond=None)
    assert np.abs(design @ fit - points).max() < 1e-9
    e1, e2 = fit[1], fit[2]
    ratio = np.linalg.norm(e2) / np.linalg.norm(e1)
    angle = math.degrees(math.acos(e1 @ e2 / np.linalg.norm(e1) / np.linalg.norm(e2)))
    b, gamma = sample.params["segment_ratio"], sample.params["oblique_angle_deg"]
    expected = {"quadratic": (1.0, 90.0), "rectangular": (b, 90.0),
                "rhombic": (1.0, math.degrees(2 * math.atan(b))), "hexagonal": (1.0, 60.0),
                "triangular": (1.0, 60.0), "oblique": (b, gamma)}[lattice]
    assert (ratio, angle) == pytest.approx(expected, rel=1e-9)


def test_grid_draws_follow_quantumgrav_jls_distributions():
    rng = np.random.default_rng(24)
    params = [generate_grid(16, rng).params for _ in range(400)]
    assert {p["lattice"] for p in params} == set(LATTICES)
    for p in params:
        assert 0 <= p["rotation_deg"] <= 180
        if p["lattice"] == "quadratic":
            assert p["segment_ratio"] == 1.0
        else:
            assert 0.2 <= p["segment_ratio"] <= 5.0
        if p["lattice"] == "oblique":
            assert 0 <= p["oblique_angle_deg"] <= 59
        else:
            assert p["oblique_angle_deg"] == 60.0
    with pytest.raises(ValueError, match="unknown lattice"):
        edge_vectors("kagome", 1.0, 60.0)
    with pytest.raises(ValueError, match="at least 2 points"):
        grid_points(1, edge_vectors("quadratic", 1.0, 60.0), 0.0)


# random


@pytest.mark.parametrize("seed", range(6))
def test_a_random_order_reaches_its_ordering_fraction_within_a_hundredth(seed):
    rng = np.random.default_rng(30 + seed)
    sample = generate_random_order(64 + 12 * seed, rng)
    goal, reached = sample.params["target_ordering_fraction"], sample.params["ordering_fraction"]
    assert 0.1 <= goal <= 1.0
    assert ordering_fraction(sample.relation) == pytest.approx(reached, abs=1e-12)
    assert abs(reached - goal) < 0.01


def test_a_random_order_of_2048_elements_reaches_its_ordering_fraction():
    sample = generate_random_order(2048, np.random.default_rng(37))
    goal, reached = sample.params["target_ordering_fraction"], ordering_fraction(sample.relation)
    assert abs(reached - goal) < 0.01 and reached == pytest.approx(sample.params["ordering_fraction"])
    assert not np.tril(sample.relation).any()


def test_random_relations_gather_among_late_labels():
    """Block C draws the first element uniformly and the second after it, so late pairs are favoured."""
    sample = generate_random_order(128, np.random.default_rng(38), RandomOrderSettings(goal_range=(0.2, 0.2)))
    relation = sample.relation
    assert relation[64:, 64:].sum() > 2 * relation[:64, :64].sum()


def test_the_bit_row_closure_is_the_transitive_closure():
    rng = np.random.default_rng(39)
    for n, density in ((70, 0.02), (130, 0.05), (200, 0.3)):
        edges = np.triu(rng.random((n, n)) < density, k=1)
        assert np.array_equal(unpack_relation(closure_bits(edges)), transitive_closure(edges))


def test_the_flip_parameter_is_upstreams_table_bilinear_and_clamped():
    assert flip_parameter(0.5, 2048) == pytest.approx(FLIP_TABLE[5, 4])
    assert flip_parameter(0.5, 64) == pytest.approx(FLIP_TABLE[5, 0]), "n below 128 counts as 128"
    assert flip_parameter(1.0, 5000) == pytest.approx(FLIP_TABLE[-1, -1]), "goals above 0.99 count as 0.99"
    corners = FLIP_TABLE[5:7, 3:5]
    assert flip_parameter(0.55, 1536) == pytest.approx(corners.mean())


def test_a_search_that_never_converges_raises():
    hopeless = RandomOrderSettings(max_iter=3, num_tries=2, abs_tol=0.0)
    with pytest.raises(OrderingFractionNotReached, match="in 2 tries"):
        generate_random_order(64, np.random.default_rng(40), hopeless)
