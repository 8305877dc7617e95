"""QuantumGrav.jl's `complex_topology` kind (data/kinds/complex_topology.py): a sprinkling cut by slits that causal
curves cannot cross, checked against upstream's golden cases and physics."""

import numpy as np
import pytest

from QuantumGrav.data.sprinkling import light_cone_relation
from QuantumGrav.data.kinds.complex_topology import (ComplexTopologySettings, cut_relation, cut_segments,
                                                     draw_cut_count, draw_cuts, generate_complex_topology, near_cuts,
                                                     segments_intersect)
from QuantumGrav.data.kinds.polynomial import polynomial_points

TOLERANCE = ComplexTopologySettings().tolerance


def is_transitive(relation: np.ndarray) -> bool:
    steps = relation.astype(np.float32)
    return not ((steps @ steps > 0) & ~relation).any()


def kept_points_and_cuts(seed: int, n: int, settings=ComplexTopologySettings()):
    """The generator's steps in its order: cut counts, the truncated sprinkling, the cuts, the points kept."""
    rng = np.random.default_rng(seed)
    counts = draw_cut_count(rng, settings.vertical_cut_range), draw_cut_count(rng, settings.finite_cut_range)
    points, _ = polynomial_points(rng, n, truncated=True)
    branch_points, finite_cuts = draw_cuts(rng, *counts, settings.tolerance)
    return points[~near_cuts(points, branch_points, finite_cuts, settings.tolerance)], branch_points, finite_cuts


def distance_to_segment(points: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    along = np.clip((points - start) @ (end - start) / ((end - start) @ (end - start)), 0.0, 1.0)
    return np.linalg.norm(points - start - along[:, None] * (end - start), axis=1)


def random_cut_geometry(seed: int, n: int = 300):
    rng = np.random.default_rng(seed)
    branch_points, finite_cuts = draw_cuts(rng, 3, 5, TOLERANCE)
    points = rng.uniform(-1.0, 1.0, size=(n, 2))
    points = points[np.argsort(points[:, 0])]
    return points[~near_cuts(points, branch_points, finite_cuts, TOLERANCE)], branch_points, finite_cuts


def crosses_a_cut(starts: np.ndarray, ends: np.ndarray, cuts: np.ndarray) -> np.ndarray:
    """Which segments starts[m] -> ends[m] properly cross some cut (k, 2, 2)."""
    def cross(u, v):
        return u[..., 0] * v[..., 1] - u[..., 1] * v[..., 0]
    p, q, a, b = cuts[None, :, 0], cuts[None, :, 1], starts[:, None], ends[:, None]
    return ((cross(q - p, a - p) * cross(q - p, b - p) < 0) & (cross(b - a, p - a) * cross(b - a, q - a) < 0)).any(1)


def lattice_relation(cells: np.ndarray, cuts: np.ndarray, size: int) -> np.ndarray:
    """An independent reference: staircase walks on the lattice t, s = -1 + 2 k / size, one step in t with s
    moving by -1, 0 or +1 cells (each a causal segment), a step refused when it crosses a cut; cell j is after
    cell i when some walk from i reaches it. ``cells`` (lattice indices) sorted by t, one per time step."""
    grid = -1 + 2 * np.arange(size + 1) / size
    reached = np.zeros((len(cells), size + 1), dtype=bool)
    relation = np.zeros((len(cells), len(cells)), dtype=bool)
    for k in range(size + 1):
        if k:
            stepped = np.zeros_like(reached)
            for move in (-1, 0, 1):
                start = np.arange(max(0, -move), size + 1 - max(0, move))
                free = start[~crosses_a_cut(np.column_stack([np.full(len(start), grid[k - 1]), grid[start]]),
                                            np.column_stack([np.full(len(start), grid[k]), grid[start + move]]), cuts)]
                stepped[:, free + move] |= reached[:, free]
            reached = stepped
        here = np.flatnonzero(cells[:, 0] == k)
        relation[:, here] = reached[:, cells[here, 1]]
        reached[here, cells[here, 1]] = True
    return relation


X, Y = (0.0, 0.0), (2.0, 0.0)
# test_branchedcsetgeneration.jl:774-831 (spec §2's table): cuts as (t, s) endpoints, x = (0, 0), y = (2, 0)
GOLDEN = [
    ("no cut", [], [], Y, True),
    ("spacelike cut across the whole diamond", [], [((1, -1.1), (1, 1.1))], Y, False),
    ("timelike cut through x and y's diamond", [], [((0, -0.1), (2, 0.1))], Y, False),
    ("spacelike cut with a way around", [], [((1, -0.9), (1, 1.1))], Y, True),
    ("timelike cut beside the straight path", [], [((0, 0.1), (1, 0.2))], Y, True),
    ("timelike cut through both diamond edges", [], [((0, 0.5), (2, 0.5))], Y, True),
    ("two cuts that block together", [], [((0, 0.5), (0.9, 0.5)), ((1, 0.8), (1, -2))], Y, False),
    ("two cuts that leave a gap", [], [((0, 0.5), (0.9, 0.5)), ((1, 0.5), (1, -2))], Y, True),
    ("vertical cut between x and y", [(0, 0.5)], [], (2.0, 1.0), False),
    # ours: a vertical cut is walked around below its branch point when that lies in x's future
    ("vertical cut passed below its branch point", [(0.5, 0.3)], [], (2.0, 0.6), True),
]


@pytest.mark.parametrize("name, branch_points, finite_cuts, y, related", GOLDEN, ids=[case[0] for case in GOLDEN])
def test_upstreams_golden_cases_block_or_keep_the_pair(name, branch_points, finite_cuts, y, related):
    points = np.array([X, y], dtype=float)
    relation = cut_relation(points, np.array(branch_points, float).reshape(-1, 2),
                            np.array(finite_cuts, float).reshape(-1, 2, 2))
    assert relation[0, 1] == related and not relation[1, 0]


@pytest.mark.parametrize("seed", range(3))
def test_the_relation_agrees_with_staircase_walks_around_the_cuts(seed):
    """Every lattice walk is a causal curve that avoids the cuts, so the walks never relate a pair the relation
    leaves apart; the converse misses only paths that graze the light cone closer than a lattice step."""
    rng, size = np.random.default_rng(seed), 256
    branch_points, finite_cuts = draw_cuts(rng, 3, 5, TOLERANCE)
    cells = rng.integers(0, size + 1, size=(300, 2))
    cells = cells[np.unique(cells[:, 0], return_index=True)[1]]
    cells = cells[~near_cuts(-1 + 2 * cells / size, branch_points, finite_cuts, TOLERANCE)]
    points = -1 + 2 * cells / size
    exact = cut_relation(points, branch_points, finite_cuts)
    walked = np.triu(lattice_relation(cells, cut_segments(branch_points, finite_cuts), size), k=1)
    assert not (walked & ~exact).any()
    assert (exact & ~walked).sum() <= 1e-3 * light_cone_relation(points).sum()
    assert exact.sum() < light_cone_relation(points).sum(), "the cuts remove some relations"


def test_a_set_is_time_labelled_transitive_and_within_the_minkowski_order_of_its_kept_points():
    sample = generate_complex_topology(400, np.random.default_rng(11))
    points, _, _ = kept_points_and_cuts(11, 400)
    relation, minkowski = sample.relation, light_cone_relation(points)
    assert sample.kind == "complex_topology" and sample.manifold_like
    assert np.all(np.diff(points[:, 0]) >= 0) and relation.shape == (len(points), len(points))
    assert not np.tril(relation).any(), "only i < j may be related: the elements are labelled by time"
    assert not (relation & ~minkowski).any(), "cuts only remove relations of the flat light cone"
    assert is_transitive(relation), "joined causal curves that avoid the cuts are one such curve"
    assert sample.params["cut_relation_fraction"] == pytest.approx(1 - relation.sum() / minkowski.sum())


@pytest.mark.parametrize("seed", range(6))
def test_every_drawn_set_is_transitive_without_a_closure(seed):
    sample = generate_complex_topology(256, np.random.default_rng(100 + seed))
    assert is_transitive(sample.relation) and not np.tril(sample.relation).any()


def test_each_added_cut_only_removes_relations():
    points, branch_points, finite_cuts = random_cut_geometry(5)
    previous = light_cone_relation(points)
    for count in range(1, len(finite_cuts) + 1):
        relation = cut_relation(points, branch_points[:0], finite_cuts[:count])
        assert not (relation & ~previous).any()
        previous = relation
    for count in range(1, len(branch_points) + 1):
        relation = cut_relation(points, branch_points[:count], finite_cuts)
        assert not (relation & ~previous).any()
        previous = relation
    assert previous.sum() < light_cone_relation(points).sum()


def test_without_cuts_the_relation_is_exactly_the_polynomial_one():
    settings = ComplexTopologySettings(vertical_cut_range=(0.0, 0.0), finite_cut_range=(0.0, 0.0))
    sample = generate_complex_topology(300, np.random.default_rng(7), settings)
    points, _, _ = kept_points_and_cuts(7, 300, settings)
    assert sample.n == 300 and sample.params["n_removed"] == 0
    assert np.array_equal(sample.relation, light_cone_relation(points))
    assert np.array_equal(cut_relation(points, np.zeros((0, 2)), np.zeros((0, 2, 2))), light_cone_relation(points))


def test_points_within_the_tolerance_of_a_cut_are_removed():
    sample = generate_complex_topology(500, np.random.default_rng(3))
    points, branch_points, finite_cuts = kept_points_and_cuts(3, 500)
    # vertical cuts reach the latest sprinkled time, which no kept point exceeds
    tops = np.column_stack([np.ones(len(branch_points)), branch_points[:, 1]])
    for start, end in list(finite_cuts) + list(zip(branch_points, tops)):
        assert distance_to_segment(points, start, end).min() >= TOLERANCE
    assert sample.n == 500 - sample.params["n_removed"] == len(points) and sample.params["n_sprinkled"] == 500


def test_the_cuts_are_drawn_as_upstream_draws_them():
    rng = np.random.default_rng(9)
    for _ in range(30):
        branch_points, finite_cuts = draw_cuts(rng, 5, 5, TOLERANCE)
        assert np.abs(branch_points).max() <= 1 and np.abs(finite_cuts).max() <= 1
        assert np.all(np.diff(branch_points[:, 0]) >= 0) and np.all(np.diff(finite_cuts[:, 0, 0]) >= 0)
        assert np.all(finite_cuts[:, 0, 0] <= finite_cuts[:, 1, 0]), "each segment ordered by t"
        vertical = [np.array([point, [1.0, point[1]]]) for point in branch_points]
        cuts = vertical + list(finite_cuts)
        for i, cut in enumerate(cuts):
            crossings = sum(segments_intersect(cut, other, TOLERANCE) for j, other in enumerate(cuts) if j != i
                            and (i >= 5 or j >= 5))
            assert crossings <= 1, "no cut crosses more than one other"


def test_the_cut_counts_and_conformal_factor_follow_quantumgrav_jls_defaults():
    rng = np.random.default_rng(4)
    counts = np.array([draw_cut_count(rng, (1.0, 5.0)) for _ in range(20_000)])
    frequencies = np.bincount(counts, minlength=6)[1:] / len(counts)
    assert counts.min() == 1 and counts.max() == 5, "round(U(1, 5)), half to even"
    assert frequencies == pytest.approx([1 / 8, 1 / 4, 1 / 4, 1 / 4, 1 / 8], abs=0.015)
    params = generate_complex_topology(128, np.random.default_rng(2)).params
    assert 1 <= params["n_vertical_cuts"] <= 5 and 1 <= params["n_finite_cuts"] <= 5
    assert 5 <= params["conformal_order"] <= 15 and 2.0 <= params["conformal_decay"] <= 8.0
    assert 0.0 <= params["cut_relation_fraction"] <= 1.0


def test_the_same_seed_gives_the_same_set():
    first = generate_complex_topology(200, np.random.default_rng(21))
    second = generate_complex_topology(200, np.random.default_rng(21))
    assert np.array_equal(first.relation, second.relation) and first.params == second.params


def test_a_set_of_2048_elements_is_generated_and_stays_in_time_order():
    sample = generate_complex_topology(2048, np.random.default_rng(8))
    assert 1900 < sample.n <= 2048 and not np.tril(sample.relation).any()
    assert 0.0 < sample.params["cut_relation_fraction"] < 1.0
