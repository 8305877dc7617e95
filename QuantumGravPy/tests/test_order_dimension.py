"""The exact test of order dimension <= 2 (``data.order_dimension``): constructed 2D orders pass, the standard
examples, crowns and 3D sprinklings fail, and every answer agrees with Golumbic's implication classes."""

import numpy as np
import pytest

from QuantumGrav.data import causal_sets as cs
from QuantumGrav.data.kinds.catalogue import generate_kind
from QuantumGrav.data.kinds.grid import LATTICES, GridSettings, generate_grid
from QuantumGrav.data.orders import transitive_closure


def dominance(points: np.ndarray) -> np.ndarray:
    """x < y iff every coordinate of x is below y's: the order of a product of chains."""
    return np.all(points[:, None, :] < points[None, :, :], axis=-1)


def standard_example(n: int) -> np.ndarray:
    """S_n: a_1..a_n, b_1..b_n with a_i < b_j iff i != j (dimension n)."""
    R = np.zeros((2 * n, 2 * n), dtype=bool)
    R[:n, n:] = ~np.eye(n, dtype=bool)
    return R


def crown(n: int) -> np.ndarray:
    """The 2n-crown: a_i < b_i and a_i < b_(i+1 mod n) (dimension 3 for n >= 3)."""
    R = np.zeros((2 * n, 2 * n), dtype=bool)
    for i in range(n):
        R[i, n + i] = R[i, n + (i + 1) % n] = True
    return R


def relabelled(R: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    order = rng.permutation(len(R))
    return R[np.ix_(order, order)]


def implication_classes_agree(R: np.ndarray) -> bool:
    """Golumbic's criterion, by brute force: the incomparability graph is a comparability graph iff no implication
    class holds an edge both ways (Golumbic, Algorithmic Graph Theory, Thm. 5.4). Union-find over directed edges."""
    n = len(R)
    unrelated = ~(R | R.T) & ~np.eye(n, dtype=bool)
    parent = {edge: edge for edge in zip(*np.nonzero(unrelated))}

    def find(edge):
        while parent[edge] != edge:
            parent[edge] = parent[parent[edge]]
            edge = parent[edge]
        return edge

    for x in range(n):
        neighbours = np.flatnonzero(unrelated[x])
        for a, y in enumerate(neighbours):
            for z in neighbours[a + 1:]:
                if not unrelated[y, z]:  # (x, y) forces (x, z), and (y, x) forces (z, x)
                    parent[find((x, y))] = find((x, z))
                    parent[find((y, x))] = find((z, x))
    return all(find((i, j)) != find((j, i)) for i, j in parent)


def random_order(rng: np.random.Generator) -> np.ndarray:
    """A small order of one of several shapes: 2D and 3D dominance orders (with ties), closed random DAGs, and
    lexicographic sums (an order with orders substituted for its elements: many modules)."""
    n, shape = int(rng.integers(2, 24)), int(rng.integers(5))
    if shape == 0:
        return dominance(np.stack([np.arange(n), rng.permutation(n)], axis=1))
    if shape == 1:
        return dominance(rng.integers(0, 4, size=(n, int(rng.integers(2, 4)))))
    if shape == 2:
        return transitive_closure(np.triu(rng.random((n, n)) < rng.uniform(0.05, 0.5), 1))
    if shape == 3:
        return dominance(rng.random((n, 3)))
    outer = transitive_closure(np.triu(rng.random((4, 4)) < 0.5, 1))
    blocks = [dominance(rng.random((int(rng.integers(1, 5)), int(rng.integers(2, 4))))) for _ in range(4)]
    offsets = np.cumsum([0] + [len(b) for b in blocks])
    R = np.zeros((offsets[-1], offsets[-1]), dtype=bool)
    for a, block in enumerate(blocks):
        R[offsets[a]:offsets[a + 1], offsets[a]:offsets[a + 1]] = block
        for b in np.flatnonzero(outer[a]):
            R[offsets[a]:offsets[a + 1], offsets[b]:offsets[b + 1]] = True
    return R


@pytest.mark.parametrize("n", [0, 1, 2, 5, 40])
def test_chains_and_antichains_are_two_dimensional(n):
    chain = np.triu(np.ones((n, n), dtype=bool), 1)
    antichain = np.zeros((n, n), dtype=bool)
    assert cs.is_two_dimensional(chain) and cs.is_two_dimensional(antichain)
    assert not cs.two_dimension_violations(chain).any()


@pytest.mark.parametrize("n", [30, 150])
def test_sprinklings_of_2d_diamonds_pass_in_any_labelling(n):
    rng = np.random.default_rng(n)
    for _ in range(3):
        _, R = cs.sprinkle_diamond(n, 2, rng)
        assert cs.is_two_dimensional(R)
        assert cs.is_two_dimensional(relabelled(R, rng))


def test_curved_2d_sprinklings_and_grids_pass():
    rng = np.random.default_rng(5)
    for _ in range(4):
        assert cs.is_two_dimensional(generate_kind("polynomial", rng, n=120).relation)
    for lattice in LATTICES:  # lattice points on a common light ray are unrelated: ties of u or v
        grid = generate_grid(100, rng, GridSettings(lattices=(lattice,)))
        assert cs.is_two_dimensional(grid.relation), lattice


@pytest.mark.parametrize("n", [3, 4, 6])
def test_standard_examples_fail(n):
    assert not cs.is_two_dimensional(standard_example(n))
    assert not cs.is_two_dimensional(standard_example(n)[::-1, ::-1])
    assert cs.is_two_dimensional(standard_example(2))  # S_2 is two-dimensional


@pytest.mark.parametrize("n", [3, 4, 5, 8])
def test_crowns_fail(n):
    assert not cs.is_two_dimensional(crown(n))


def test_3d_sprinklings_of_enough_elements_fail():
    rng = np.random.default_rng(3)
    for dim in (3, 4):
        for _ in range(3):
            assert not cs.is_two_dimensional(cs.sprinkle_diamond(200, dim, rng)[1])


def test_a_realizer_certifies_every_yes():
    rng = np.random.default_rng(8)
    R = relabelled(generate_kind("polynomial", rng, n=80).relation, rng)
    position = np.empty(len(R), dtype=int)
    position[cs.conjugate_order(R)] = np.arange(len(R))
    left_of = ~(R | R.T) & (position[:, None] < position[None, :])
    for linear in (R | left_of, R | left_of.T):  # two linear orders whose intersection is R
        assert sorted(linear.sum(axis=1)) == list(range(len(R)))
    assert np.array_equal((R | left_of) & (R | left_of.T), R)


def test_answers_agree_with_golumbics_implication_classes():
    rng = np.random.default_rng(2026)
    answers = []
    for _ in range(150):
        R = relabelled(random_order(rng), rng)
        answers.append(cs.is_two_dimensional(R))
        assert answers[-1] == implication_classes_agree(R), R.astype(int)
    assert 20 <= sum(answers) <= 130  # both answers were tried


def test_violations_are_local_to_the_part_that_is_not_two_dimensional():
    rng = np.random.default_rng(4)
    _, sprinkled = cs.sprinkle_diamond(60, 2, rng)
    R = np.zeros((66, 66), dtype=bool)  # S_3 below a 2D sprinkling: every element of S_3 precedes all of it
    R[:6, :6], R[6:, 6:], R[:6, 6:] = standard_example(3), sprinkled, True
    violations = cs.two_dimension_violations(R)
    assert 3 <= violations.sum() <= 6 and not violations[6:].any()
    assert cs.two_dimension_features(R)[0] == 0.0
    assert cs.two_dimension_features(R)[1] == pytest.approx(violations.mean())
    assert list(cs.two_dimension_features(sprinkled)) == [1.0, 0.0]


def test_violating_parts_are_the_strong_parts_of_three_or_more_and_give_the_violations():
    """Each tournament's parts: an element's label is shared by at least two others (a cycle needs three), the
    elements labelled in either tournament are the violations, and a 2D order has none."""
    from QuantumGrav.data.order_dimension import two_dimension_violation_parts

    rng = np.random.default_rng(4)
    _, sprinkled = cs.sprinkle_diamond(60, 2, rng)
    R = np.zeros((66, 66), dtype=bool)
    R[:6, :6], R[6:, 6:], R[:6, 6:] = standard_example(3), sprinkled, True
    parts = two_dimension_violation_parts(R)
    for part in parts:
        labelled = part[part >= 0]
        assert (np.bincount(labelled)[labelled] >= 3).all() and not (part[6:] >= 0).any()
    assert np.array_equal((parts[0] >= 0) | (parts[1] >= 0), cs.two_dimension_violations(R))
    assert all((part == -1).all() for part in two_dimension_violation_parts(sprinkled))


def test_kinds_that_are_not_manifold_like_fail_at_64_elements():
    rng = np.random.default_rng(64)
    for kind in ("destroyed", "layered", "random"):
        assert not cs.is_two_dimensional(generate_kind(kind, rng, n=64).relation), kind


@pytest.mark.parametrize("R, message", [(np.zeros((2, 3), dtype=bool), "square"),
                                        (np.eye(3, dtype=bool), "precedes itself"),
                                        (np.ones((2, 2), dtype=bool) ^ np.eye(2, dtype=bool), "both ways"),
                                        (np.full((2, 2), 2), "0/1")])
def test_bad_causal_matrices_are_named(R, message):
    with pytest.raises(ValueError, match=message):
        cs.is_two_dimensional(R)
