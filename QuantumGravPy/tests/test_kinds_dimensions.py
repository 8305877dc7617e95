"""The kinds sprinkled in d = 3 and 4 (QuantumGrav.jl's make_polynomial_manifold_cset(...; d)): polynomial,
destroyed, merged and their ambiguous ends, checked against flat-space physics in each dimension."""

import math

import numpy as np
import pytest
from numpy.polynomial import chebyshev

from QuantumGrav.data.invariants import myrheim_meyer_dimension, ordering_fraction_of_dimension
from QuantumGrav.data.kinds.catalogue import DIMENSIONAL_KINDS, generate_kind, generator_options
from QuantumGrav.data.kinds.common import conformal_coefficients
from QuantumGrav.data.sprinkling import ConformalBox, conformal_factor, light_cone_relation, sprinkle
from QuantumGrav.data.kinds.polynomial import generate_polynomial

# The ordering fraction of a uniform sprinkling of the box [-1, 1]^d with Minkowski's light cones:
# P(|dt| >= |dx|), each coordinate difference triangular on [-2, 2]; in spherical coordinates over the positive
# orthant of the differences, the integrals are elementary (d = 2: 1/2, as dt and ds are iid).
BOX_ORDERING_FRACTION = {2: 0.5, 3: math.pi / 6 - 7 / 30, 4: math.pi / 30 + 8 / 105 - 1 / 168}


def flat_sprinklings(dimension: int, n: int, count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [sprinkle(rng, n, ConformalBox(np.ones((1,) * dimension))) for _ in range(count)]


def is_transitive(relation: np.ndarray) -> bool:
    steps = relation.astype(np.int32)
    return not ((steps @ steps > 0) & ~relation).any()


@pytest.mark.parametrize("dimension", [2, 3, 4])
def test_a_flat_box_sprinkling_relates_the_exact_fraction_of_pairs_of_its_dimension(dimension):
    fractions = [light_cone_relation(points).sum() / (1500 * 1499 / 2)
                 for points in flat_sprinklings(dimension, 1500, 5, seed=dimension)]
    assert np.mean(fractions) == pytest.approx(BOX_ORDERING_FRACTION[dimension], abs=0.01)
    others = [BOX_ORDERING_FRACTION[d] for d in BOX_ORDERING_FRACTION if d != dimension]
    assert all(abs(np.mean(fractions) - other) > 0.1 for other in others), "the test tells the dimensions apart"


@pytest.mark.parametrize("dimension", [2, 3, 4])
def test_the_causal_diamond_inside_a_flat_sprinkling_has_the_myrheim_meyer_dimension_of_the_box(dimension):
    """The points of the diamond |x| <= 1 - |t| (inside the box): their ordering fraction is Myrheim and Meyer's
    r(d), so their Myrheim-Meyer dimension is d."""
    fractions = []
    for points in flat_sprinklings(dimension, 3000, 4, seed=10 + dimension):
        inside = np.linalg.norm(points[:, 1:], axis=1) <= 1 - np.abs(points[:, 0])
        diamond = light_cone_relation(points[inside])
        fractions.append(diamond.sum() / (inside.sum() * (inside.sum() - 1) / 2))
    assert np.mean(fractions) == pytest.approx(ordering_fraction_of_dimension(dimension), abs=0.015)
    assert myrheim_meyer_dimension(np.mean(fractions)) == pytest.approx(dimension, abs=0.3)


@pytest.mark.parametrize("dimension", [3, 4])
def test_a_polynomial_set_is_its_points_flat_light_cone_order_whatever_the_conformal_factor(dimension):
    """g = f^2 eta has eta's null cones: a pair is related iff g(dx, dx) <= 0 with dt >= 0 (here at the pair's
    midpoint, from the same stream's points and factor). The factor changes the density of the points only."""
    for seed in range(3):
        sample = generate_polynomial(150, np.random.default_rng(seed), dimension=dimension)
        rng = np.random.default_rng(seed)
        coefficients, order, decay = conformal_coefficients(rng, dimension=dimension)
        points = sprinkle(rng, 150, ConformalBox(coefficients))
        assert coefficients.shape == (order + 1,) * dimension and points.shape == (150, dimension)
        difference = points[None, :, :] - points[:, None, :]
        interval = -difference[..., 0] ** 2 + (difference[..., 1:] ** 2).sum(axis=-1)
        factor = conformal_factor((points[None, :, :] + points[:, None, :]).reshape(-1, dimension) / 2,
                                  coefficients).reshape(150, 150)
        assert np.all(factor != 0), "f^2 > 0: g and eta agree on which displacements are causal"
        future_causal = (factor ** 2 * interval <= 0) & (difference[..., 0] >= 0)
        assert np.array_equal(sample.relation, np.triu(future_causal, 1))
        assert sample.params == {"conformal_order": order, "conformal_decay": decay, "dimension": dimension}
        assert sample.manifold_like and is_transitive(sample.relation)


def test_the_conformal_factor_of_d_variables_is_the_chebyshev_series_of_its_coefficients():
    rng = np.random.default_rng(3)
    points = rng.uniform(-1, 1, size=(50, 4))
    coefficients = rng.standard_normal((4, 4, 4))
    assert np.allclose(conformal_factor(points[:, :3], coefficients),
                       chebyshev.chebval3d(*points[:, :3].T, coefficients))
    coefficients = rng.standard_normal((3, 3, 3, 3))
    direct = sum(coefficients[a, b, c, e] * np.prod([chebyshev.chebval(points[:, axis], np.eye(3)[degree])
                                                     for axis, degree in enumerate((a, b, c, e))], axis=0)
                 for a in range(3) for b in range(3) for c in range(3) for e in range(3))
    assert np.allclose(conformal_factor(points, coefficients), direct)


@pytest.mark.parametrize("dimension", [3, 4])
def test_the_points_follow_the_squared_factor_along_each_coordinate(dimension):
    """f = 1 + x_k / 2 along one coordinate k: the density (1 + x/2)^2 has mean (2/3) / (13/6) = 4/13 along it and
    0 along the others; the time coordinate is sorted."""
    for axis in range(dimension):
        coefficients = np.zeros((2,) * dimension)
        coefficients[(0,) * dimension] = 1.0
        coefficients[tuple(1 if k == axis else 0 for k in range(dimension))] = 0.5
        points = sprinkle(np.random.default_rng(axis), 6000, ConformalBox(coefficients))
        means = points.mean(axis=0)
        assert means[axis] == pytest.approx(4 / 13, abs=0.025)
        assert np.abs(np.delete(means, axis)).max() < 0.025 and np.all(np.diff(points[:, 0]) >= 0)


def test_the_coefficients_decay_with_the_sum_of_their_degrees_and_the_dimension():
    """c[a_1..a_d] = r^-(a_1 + .. + a_d + d) z: the same normal draws, scaled back, are QuantumGrav.jl's z."""
    coefficients, order, decay = conformal_coefficients(np.random.default_rng(4), dimension=3)
    check = np.random.default_rng(4)
    check.integers(5, 16), check.uniform(2.0, 8.0)
    z = check.standard_normal((order + 1,) * 3)
    a, b, c = np.indices(coefficients.shape)
    assert np.allclose(coefficients, decay ** -(a + b + c + 3.0) * z)


@pytest.mark.parametrize("kind", sorted(DIMENSIONAL_KINDS))
@pytest.mark.parametrize("dimension", [3, 4])
def test_every_kind_built_on_a_sprinkling_draws_it_in_the_dimension_asked(kind, dimension):
    sample = generate_kind(kind, np.random.default_rng(5), n=120, dimension=dimension)
    assert sample.params["dimension"] == dimension and sample.kind == kind
    assert sample.relation.shape == (120, 120) and not np.tril(sample.relation).any()
    assert is_transitive(sample.relation)
    again = generate_kind(kind, np.random.default_rng(5), n=120, dimension=dimension)
    assert np.array_equal(again.relation, sample.relation)


def test_a_sprinkling_in_more_dimensions_relates_fewer_pairs_in_each_kind():
    """Of the same kind and seeds, 4D sprinklings relate fewer pairs than 3D, and 3D fewer than 2D: the light
    cone takes a smaller share of the box (polynomial sets; the defects are built on them)."""
    means = {d: np.mean([generate_polynomial(200, np.random.default_rng(s), dimension=d).relation.mean()
                         for s in range(6)]) for d in (2, 3, 4)}
    assert means[2] > means[3] > means[4]


def test_dimensions_outside_2_to_4_and_2d_only_kinds_are_refused_with_a_clear_message():
    with pytest.raises(ValueError, match=r"dimension: expected one of 2, 3, 4, got 5"):
        generate_kind("polynomial", np.random.default_rng(0), n=30, dimension=5)
    with pytest.raises(ValueError, match="complex_topology is 2-dimensional only"):
        generator_options("complex_topology", 3)
    assert generator_options("grid", 4) == {} and generator_options("layered", 3) == {}
    assert generator_options("merged", 3, 8) == {"dimension": 3, "block_elements": 8}
