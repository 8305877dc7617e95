"""QuantumGrav.jl's shared building blocks and its `polynomial` kind (data/kinds/), checked against physics."""

import numpy as np
import pytest

from QuantumGrav.data.kinds.common import draw_n, random_pairs
from QuantumGrav.data.sprinkling import ConformalBox, light_cone_relation, sprinkle
from QuantumGrav.data.kinds.polynomial import generate_polynomial


def is_transitive(relation: np.ndarray) -> bool:
    steps = relation.astype(np.int32)
    return not ((steps @ steps > 0) & ~relation).any()


def is_two_dimensional_order(relation: np.ndarray, points: np.ndarray) -> bool:
    """i precedes j iff both light-cone coordinates u = t - s and v = t + s grow."""
    u, v = points[:, 0] - points[:, 1], points[:, 0] + points[:, 1]
    both = (u[None, :] >= u[:, None]) & (v[None, :] >= v[:, None])
    return np.array_equal(relation, np.triu(both, k=1))


def test_a_polynomial_set_is_a_time_labelled_two_dimensional_order():
    sample = generate_polynomial(200, np.random.default_rng(1))
    relation = sample.relation
    assert sample.kind == "polynomial" and sample.manifold_like and relation.shape == (200, 200)
    assert not np.tril(relation).any(), "only i < j may be related: the elements are labelled by time"
    assert is_transitive(relation)
    assert 5 <= sample.params["conformal_order"] <= 15 and 2.0 <= sample.params["conformal_decay"] <= 8.0


def test_a_sprinkling_is_a_two_dimensional_order_sorted_by_time():
    points = sprinkle(np.random.default_rng(2), 300, ConformalBox(np.array([[1.0, 0.3], [0.2, 0.1]])))
    assert len(points) == 300 and np.all(np.diff(points[:, 0]) >= 0) and np.abs(points).max() <= 1.0
    assert is_two_dimensional_order(light_cone_relation(points), points)


def test_a_uniform_density_relates_half_the_pairs():
    """With f constant, dt and ds are iid, so P(|dt| >= |ds|) = 1/2 exactly."""
    rng = np.random.default_rng(3)
    flat = ConformalBox(np.ones((1, 1)))
    fractions = [light_cone_relation(sprinkle(rng, 400, flat)).mean() * 400 / 399 * 2 for _ in range(5)]
    assert np.mean(fractions) == pytest.approx(0.5, abs=0.01)


def test_the_draws_follow_quantumgrav_jls_distributions():
    rng = np.random.default_rng(4)
    counts = [draw_n(rng) for _ in range(2000)]
    assert min(counts) == 64 and max(counts) == 128, "DiscreteUniform(64, 128), both ends included"
    first, second = random_pairs(rng, 6, 60_000)
    assert (first < second).all() and first.max() == 4 and second.max() == 5
    # j is uniform on i+1..n-1 given i: for i = 3 (n = 6), j = 4 and 5 equally often
    late = second[first == 3]
    assert np.mean(late == 4) == pytest.approx(0.5, abs=0.03)
