"""The field's graph observables (``data.graph_observables``) on orders whose values are known in closed form."""

import math

import numpy as np
import pytest

from QuantumGrav.data import causal_sets as cs
from QuantumGrav.data.graph_observables import INTERVAL_BINS, MAX_LINK_DEGREE


def chain(n: int) -> np.ndarray:
    return np.triu(np.ones((n, n), dtype=bool), 1)


def two_layers(low: int, high: int) -> np.ndarray:
    """Every one of ``low`` elements below every one of ``high``: links form the complete bipartite graph."""
    R = np.zeros((low + high, low + high), dtype=bool)
    R[:low, low:] = True
    return R


def side_by_side(*orders: np.ndarray) -> np.ndarray:
    n = sum(len(R) for R in orders)
    joined, start = np.zeros((n, n), dtype=bool), 0
    for R in orders:
        joined[start:start + len(R), start:start + len(R)] = R
        start += len(R)
    return joined


@pytest.mark.parametrize("n", [10, 100])  # the dense and the sparse (Lanczos) eigensolver
def test_a_chain_is_a_path_graph(n):
    observables = dict(zip(cs.GRAPH_OBSERVABLE_NAMES, cs.graph_observables(chain(n))))
    assert observables["in_link_degree_0"] == pytest.approx(1 / n)
    assert observables["in_link_degree_1"] == pytest.approx((n - 1) / n)
    assert observables["out_link_degree_1"] == pytest.approx((n - 1) / n)
    # The normalised Laplacian of a path of n vertices has the eigenvalues 1 - cos(pi k / (n - 1)), k = 0 .. n - 1.
    assert observables["link_laplacian_lambda_2"] == pytest.approx(1 - math.cos(math.pi / (n - 1)), abs=1e-7)
    assert observables["link_laplacian_lambda_max"] == pytest.approx(2.0, abs=1e-7)


def test_interval_sizes_of_a_chain_match_a_direct_count():
    n = 30
    sizes = [(j - i - 1) / (n - 2) for i in range(n) for j in range(i + 1, n)]
    expected = np.bincount(np.minimum((np.array(sizes) * INTERVAL_BINS).astype(int), INTERVAL_BINS - 1),
                           minlength=INTERVAL_BINS) / len(sizes)
    assert np.allclose(cs.interval_size_histogram(chain(n)), expected)


@pytest.mark.parametrize("low, high", [(3, 4), (40, 50)])
def test_two_complete_layers_have_the_spectrum_of_a_complete_bipartite_graph(low, high):
    # K_{a,b}: normalised Laplacian eigenvalues 0, 1 (a + b - 2 times) and 2
    assert cs.link_laplacian_extremes(cs.transitive_reduction(two_layers(low, high))) == pytest.approx((1.0, 2.0))
    in_degrees, out_degrees = cs.link_degree_histograms(cs.transitive_reduction(two_layers(low, high)))
    assert in_degrees[0] == pytest.approx(low / (low + high))
    assert in_degrees[min(low, MAX_LINK_DEGREE)] == pytest.approx(high / (low + high))
    assert out_degrees.sum() == pytest.approx(1.0)


def test_an_antichain_and_pieces_apart():
    observables = dict(zip(cs.GRAPH_OBSERVABLE_NAMES, cs.graph_observables(np.zeros((70, 70), dtype=bool))))
    assert observables["in_link_degree_0"] == 1.0 and observables["out_link_degree_0"] == 1.0
    assert observables["link_laplacian_lambda_2"] == 1.0 and observables["link_laplacian_lambda_max"] == 1.0
    assert all(observables[f"interval_size_{b}_of_{INTERVAL_BINS}"] == 0.0 for b in range(INTERVAL_BINS))
    apart = cs.transitive_reduction(side_by_side(chain(40), chain(40)))
    assert cs.link_laplacian_extremes(apart)[0] == pytest.approx(0.0, abs=1e-12)
    # an isolated element beside one linked piece leaves the piece's lambda_2
    with_isolated = cs.transitive_reduction(side_by_side(chain(80), np.zeros((1, 1), dtype=bool)))
    assert cs.link_laplacian_extremes(with_isolated)[0] == pytest.approx(1 - math.cos(math.pi / 79), abs=1e-7)


def test_the_sparse_spectrum_agrees_with_a_dense_one_on_sprinklings():
    rng = np.random.default_rng(1)
    for dim in (2, 4):
        links = cs.transitive_reduction(cs.sprinkle_diamond(150, dim, rng)[1])
        W = (links | links.T).astype(float)
        degree = W.sum(axis=1)
        scale = np.where(degree > 0, 1 / np.sqrt(np.maximum(degree, 1)), 0.0)
        spectrum = np.linalg.eigvalsh(np.eye(len(W)) - scale[:, None] * W * scale[None, :])
        assert cs.link_laplacian_extremes(links) == pytest.approx((spectrum[1], spectrum[-1]), abs=1e-7)


def test_the_interval_histogram_of_2d_sprinklings_does_not_drift_with_n():
    rng = np.random.default_rng(2)
    small = np.mean([cs.interval_size_histogram(cs.sprinkle_diamond(200, 2, rng)[1]) for _ in range(4)], axis=0)
    large = np.mean([cs.interval_size_histogram(cs.sprinkle_diamond(800, 2, rng)[1]) for _ in range(2)], axis=0)
    assert np.abs(small - large).max() < 0.03
    assert small.sum() == pytest.approx(1.0)


def test_the_observables_have_their_names_and_bad_input_is_named():
    assert len(cs.graph_observables(chain(5))) == len(cs.GRAPH_OBSERVABLE_NAMES)
    assert len(set(cs.GRAPH_OBSERVABLE_NAMES)) == len(cs.GRAPH_OBSERVABLE_NAMES)
    with pytest.raises(ValueError, match="square"):
        cs.graph_observables(np.zeros((3, 4), dtype=bool))
