"""The numpy causal-set generator: orders, closure/reduction, features, invariants, labels."""

import hashlib
import itertools

import numpy as np
import pytest
import torch

from QuantumGrav.data import causal_sets as cs
from QuantumGrav.data import orders as qg_orders


# --------------------------------------------------------------------------- brute-force references
def chain_order(n: int) -> np.ndarray:
    return np.triu(np.ones((n, n), dtype=bool), k=1)


def diamond_poset() -> np.ndarray:
    """a < b, a < c, b < d, c < d and the implied (redundant for the Hasse diagram) a < d."""
    R = np.zeros((4, 4), dtype=bool)
    for i, j in [(0, 1), (0, 2), (1, 3), (2, 3), (0, 3)]:
        R[i, j] = True
    return R


def reference_closure(R: np.ndarray) -> np.ndarray:
    closed = R.copy()
    n = len(R)
    for k, i, j in itertools.product(range(n), repeat=3):  # Warshall: k outermost
        closed[i, j] |= closed[i, k] and closed[k, j]
    return closed


def reference_reduction(R: np.ndarray) -> np.ndarray:
    n = len(R)
    links = np.zeros_like(R)
    for i, j in itertools.product(range(n), repeat=2):
        links[i, j] = R[i, j] and not any(R[i, k] and R[k, j] for k in range(n))
    return links


def reference_longest_past_chain(R: np.ndarray) -> list[int]:
    def longest(j: int) -> int:
        return max((longest(i) + 1 for i in range(len(R)) if R[i, j]), default=0)

    return [longest(j) for j in range(len(R))]


def small_random_orders(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    sprinkled = cs.sprinkle_diamond_batch(3, 10, 2, rng)[1]
    return [*sprinkled, *cs.destroy_order(sprinkled, 0.2, rng), *cs.random_layered_orders(3, 10, rng)]


# --------------------------------------------------------------------------- sprinkling
@pytest.mark.parametrize("dim", [2, 3, 4])
def test_sprinkling_lies_in_the_diamond_and_follows_light_cones(dim):
    coords, R = cs.sprinkle_diamond(40, dim, np.random.default_rng(dim))
    t, x = coords[:, 0], coords[:, 1:]
    assert coords.shape == (40, dim) and R.shape == (40, 40) and R.dtype == bool
    assert np.all(np.diff(t) >= 0) and np.all(np.linalg.norm(x, axis=1) <= 1 - np.abs(t))
    assert not np.tril(R).any(), "a time-sorted sprinkling is naturally labelled"
    for i, j in itertools.combinations(range(40), 2):
        assert R[i, j] == (t[j] - t[i] > np.linalg.norm(x[j] - x[i]))


@pytest.mark.parametrize("dim, exact", [(2, 1 / 2), (3, 8 / 35), (4, 1 / 10)])
def test_ordering_fraction_of_sprinklings_matches_theory(dim, exact):
    """Each pair of points sprinkled into a d-dim diamond is related with probability r(d) (Myrheim,
    Meyer): 1/2, 8/35, 1/10 for d = 2, 3, 4, for every N. The fraction fluctuates strongly from set
    to set, so: 160 sets of N = 100, tolerance 4 standard errors of their mean (false alarm 6e-5;
    measured 4 SE = 2.3%, 4.5%, 6.5% of r(d)). The test can fail: 4 SE must stay below 8% of r(d),
    far below the gaps between dimensions (r(3) is 54% below r(2), r(4) 56% below r(3))."""
    R = cs.sprinkle_diamond_batch(160, 100, dim, np.random.default_rng(10 + dim))[1]
    fractions = cs.order_invariants(R)[:, cs.INVARIANT_NAMES.index("ordering_fraction")]
    standard_error = fractions.std(ddof=1) / np.sqrt(len(fractions))
    assert 4 * standard_error < 0.08 * exact
    assert abs(fractions.mean() - exact) < 4 * standard_error
    assert cs.ordering_fraction_of_dimension(dim) == pytest.approx(exact)


@pytest.mark.parametrize("n, num_sets", [(16, 400), (128, 40)])
def test_links_of_2d_sprinklings_match_the_exact_expectation(n, num_sets):
    """E[N0] = (N + 1) H_N - 2N links in a 2d causal diamond of N sprinkled points (H_N the harmonic
    number). Tolerance: 4 standard errors of the mean over the sets (measured 2.6% of E[N0]); 4 SE must
    stay below 3% of E[N0], so a generator with the wrong point density or light cones fails (3d
    sprinklings have 22% fewer links at N = 16 and 52% more at N = 128)."""
    R = cs.sprinkle_diamond_batch(num_sets, n, 2, np.random.default_rng(n))[1]
    links = cs.order_invariants(R)[:, cs.INVARIANT_NAMES.index("links_per_element")] * n
    expected = (n + 1) * sum(1 / k for k in range(1, n + 1)) - 2 * n
    standard_error = links.std(ddof=1) / np.sqrt(num_sets)
    assert 4 * standard_error < 0.03 * expected
    assert abs(links.mean() - expected) < 4 * standard_error


def test_ordering_fraction_of_dimension_known_values():
    assert cs.ordering_fraction_of_dimension(1) == pytest.approx(1.0)
    assert cs.ordering_fraction_of_dimension(2) == pytest.approx(0.5)
    assert cs.ordering_fraction_of_dimension(4) == pytest.approx(0.1)


def test_myrheim_meyer_inverts_the_ordering_fraction():
    dims = np.linspace(1.2, 9.5, 40)
    recovered = cs.myrheim_meyer_dimension(cs.ordering_fraction_of_dimension(dims))
    np.testing.assert_allclose(recovered, dims, atol=1e-4)
    assert cs.myrheim_meyer_dimension(0.5) == pytest.approx(2.0, abs=1e-4)
    assert cs.myrheim_meyer_dimension(0.1) == pytest.approx(4.0, abs=1e-4)
    with pytest.raises(ValueError, match="ordering_fraction"):
        cs.myrheim_meyer_dimension(1.5)


@pytest.mark.parametrize("dim, tolerance", [(2, 0.15), (4, 0.3)])
def test_myrheim_meyer_recovers_the_dimension_of_sprinklings(dim, tolerance):
    R = cs.sprinkle_diamond_batch(8, 200, dim, np.random.default_rng(20 + dim))[1]
    estimates = cs.order_invariants(R)[:, cs.INVARIANT_NAMES.index("myrheim_meyer_dimension")]
    assert abs(np.median(estimates) - dim) < tolerance


# --------------------------------------------------------------------------- closure and reduction
def test_reduction_of_hand_made_orders():
    np.testing.assert_array_equal(cs.transitive_reduction(chain_order(5)), np.eye(5, k=1, dtype=bool))
    assert not cs.transitive_reduction(np.zeros((4, 4), dtype=bool)).any()
    links = cs.transitive_reduction(diamond_poset())
    assert not links[0, 3], "a < d is implied by a < b < d, so it is not a link"
    np.testing.assert_array_equal(links, reference_reduction(diamond_poset()))


def test_reduction_and_closure_match_brute_force_on_random_orders():
    orders = small_random_orders()
    for R in orders:
        np.testing.assert_array_equal(cs.transitive_reduction(R), reference_reduction(R))
        np.testing.assert_array_equal(cs.transitive_closure(R), reference_closure(R))
    batch = np.stack(orders)
    np.testing.assert_array_equal(cs.transitive_reduction(batch), [reference_reduction(R) for R in orders])


def test_closure_of_random_unclosed_relations_matches_brute_force():
    rng = np.random.default_rng(5)
    for n in (5, 9, 14):
        for _ in range(20):  # random strictly upper triangular relations: acyclic, mostly not transitive
            R = np.triu(rng.random((n, n)) < 0.25, k=1)
            closed = cs.transitive_closure(R)
            np.testing.assert_array_equal(closed, reference_closure(R))
            np.testing.assert_array_equal(cs.transitive_reduction(closed), reference_reduction(closed))


def test_closure_is_idempotent_and_undoes_reduction():
    R = cs.sprinkle_diamond_batch(4, 60, 3, np.random.default_rng(1))[1]
    closed = cs.transitive_closure(R)
    np.testing.assert_array_equal(closed, R)  # light-cone orders are already transitive
    np.testing.assert_array_equal(cs.transitive_closure(closed), closed)
    np.testing.assert_array_equal(cs.transitive_closure(cs.transitive_reduction(R)), R)
    sparse = np.eye(6, k=1, dtype=bool)
    np.testing.assert_array_equal(cs.transitive_closure(sparse), chain_order(6))


def test_destroyed_orders_stay_acyclic_and_closed():
    rng = np.random.default_rng(2)
    R = cs.sprinkle_diamond_batch(5, 50, 4, rng)[1]
    destroyed = cs.destroy_order(R, 0.02, rng)
    assert not np.tril(destroyed).any()
    np.testing.assert_array_equal(cs.transitive_closure(destroyed), destroyed)
    assert (destroyed != R).any(axis=(1, 2)).all(), "every set was changed"
    with pytest.raises(ValueError, match="fraction"):
        cs.destroy_order(R, 1.5, rng)


def test_layered_orders_have_height_at_most_the_number_of_layers():
    R = cs.random_layered_orders(6, 40, np.random.default_rng(3))
    assert not np.tril(R).any()
    np.testing.assert_array_equal(cs.transitive_closure(R), R)
    past, _ = cs.longest_chains(R)
    assert past.max() + 1 <= len(cs.LAYER_WEIGHTS)
    with pytest.raises(ValueError, match="layer_weights"):
        cs.random_layered_orders(1, 10, np.random.default_rng(0), layer_weights=(0.5, 0.2))


# --------------------------------------------------------------------------- features and invariants
def test_features_of_a_three_chain():
    features = cs.node_features(chain_order(3))
    column = {name: features[:, k] * 3 for k, name in enumerate(cs.NODE_FEATURES)}
    assert features.shape == (3, len(cs.NODE_FEATURES)) and features.dtype == np.float32
    np.testing.assert_allclose(column["longest_past_chain"], [0, 1, 2])
    np.testing.assert_allclose(column["longest_future_chain"], [2, 1, 0])
    np.testing.assert_allclose(column["past_cone_fraction"], [0, 1, 2])
    np.testing.assert_allclose(column["future_cone_fraction"], [2, 1, 0])
    np.testing.assert_allclose(column["in_link_fraction"], [0, 1, 1])
    np.testing.assert_allclose(column["out_link_fraction"], [1, 1, 0])
    np.testing.assert_allclose(column["past_interval_1_fraction"], [0, 0, 1])  # 0 < 2 with 1 between
    np.testing.assert_allclose(column["future_interval_1_fraction"], [1, 0, 0])
    assert not column["past_interval_2_fraction"].any() and not column["future_interval_2_fraction"].any()


def test_features_of_the_diamond_poset():
    features = cs.node_features(diamond_poset()) * 4
    column = dict(zip(cs.NODE_FEATURES, features.T))
    np.testing.assert_allclose(column["out_link_fraction"], [2, 1, 1, 0])
    np.testing.assert_allclose(column["future_cone_fraction"], [3, 1, 1, 0])
    np.testing.assert_allclose(column["longest_past_chain"], [0, 1, 1, 2])
    np.testing.assert_allclose(column["future_interval_2_fraction"], [1, 0, 0, 0])  # a < d with b, c between
    np.testing.assert_allclose(column["past_interval_2_fraction"], [0, 0, 0, 1])
    assert not column["past_interval_1_fraction"].any()


def test_node_features_of_a_batch_match_one_by_one():
    orders = np.stack(small_random_orders(seed=8))
    np.testing.assert_array_equal(cs.node_features(orders), np.stack([cs.node_features(R) for R in orders]))
    np.testing.assert_array_equal(cs.node_features(orders[0], cs.transitive_reduction(orders[0])),
                                  cs.node_features(orders[0]))


def test_longest_chains_match_brute_force_for_a_batch():
    orders = np.stack(small_random_orders(seed=4))
    past, future = cs.longest_chains(orders)
    for k, R in enumerate(orders):
        assert past[k].tolist() == reference_longest_past_chain(R)
        assert future[k].tolist() == reference_longest_past_chain(R.T[::-1, ::-1])[::-1]


def reference_abundances(R: np.ndarray, max_size: int) -> list[int]:
    n = len(R)
    sizes = [sum(R[i, k] and R[k, j] for k in range(n)) for i, j in itertools.product(range(n), repeat=2) if R[i, j]]
    return [sizes.count(k) for k in range(max_size + 1)]


def test_invariants_agree_with_direct_counts():
    R = cs.sprinkle_diamond(30, 2, np.random.default_rng(5))[1]
    invariants = dict(zip(cs.INVARIANT_NAMES, cs.order_invariants(R)))
    abundances = reference_abundances(R, 4)
    assert invariants["ordering_fraction"] == pytest.approx(R.sum() / (30 * 29 / 2))
    assert invariants["links_per_element"] == pytest.approx(reference_reduction(R).sum() / 30)
    assert invariants["height_fraction"] == pytest.approx((max(reference_longest_past_chain(R)) + 1) / 30)
    assert invariants["num_elements"] == 30
    for k in range(1, 5):
        assert invariants[f"interval_{k}_per_link"] == pytest.approx(abundances[k] / abundances[0])
    chains = sum(R[i, k] and R[k, j] for i, k, j in itertools.product(range(30), repeat=3))
    assert invariants["chains_3_per_relation"] == pytest.approx(chains / R.sum())
    assert invariants["minimal_fraction"] == pytest.approx((~R.any(axis=0)).sum() / 30)
    assert invariants["maximal_fraction"] == pytest.approx((~R.any(axis=1)).sum() / 30)
    assert invariants["largest_cone_fraction"] == pytest.approx((R.sum(axis=0) + R.sum(axis=1)).max() / 30)
    assert invariants["bd_action_2d_per_element"] == pytest.approx(cs.benincasa_dowker_action(R, 2) / 30)
    assert invariants["bd_action_4d_per_element"] == pytest.approx(cs.benincasa_dowker_action(R, 4) / 30)


def test_interval_abundances_match_brute_force_for_a_batch():
    orders = np.stack(small_random_orders(seed=6))
    abundances = cs.interval_abundances(orders, max_size=8)
    assert abundances.shape == (len(orders), 9) and abundances.dtype == np.int64
    for k, R in enumerate(orders):
        assert abundances[k].tolist() == reference_abundances(R, 8)
        assert abundances[k].sum() == R.sum(), "with max_size >= N - 2 every relation is counted once"


@pytest.mark.parametrize("n", [4, 7, 12])
def test_benincasa_dowker_actions_of_a_chain_and_an_antichain(n):
    """A chain has N_k = N - 1 - k; then S_2d = N - 2(N-1) + 4(N-2) - 2(N-3) = N and
    S_4d = (4/sqrt 6)(N - (N-1) + 9(N-2) - 16(N-3) + 8(N-4)) = (4/sqrt 6)(N - 1).
    An antichain has no intervals: both actions are N (times 4/sqrt 6 in 4d)."""
    chain, antichain = chain_order(n), np.zeros((n, n), dtype=bool)
    assert cs.benincasa_dowker_action(chain, 2) == pytest.approx(n)
    assert cs.benincasa_dowker_action(chain, 4) == pytest.approx(4 / np.sqrt(6) * (n - 1))
    assert cs.benincasa_dowker_action(antichain, 2) == pytest.approx(n)
    np.testing.assert_allclose(cs.benincasa_dowker_action(np.stack([antichain, chain]), 4),
                               4 / np.sqrt(6) * np.array([n, n - 1]))
    with pytest.raises(ValueError, match="dim"):
        cs.benincasa_dowker_action(chain, 3)


# --------------------------------------------------------------------------- generate_causal_sets
def test_generated_sets_have_consistent_sizes_and_labels():
    records = cs.generate_causal_sets(50, n_min=12, n_max=20, seed=7)
    assert len(records) == 50
    counts = {c: sum(r.cset_type == c for r in records) for c in cs.DEFAULT_CLASSES}
    assert set(counts.values()) == {10}, "classes are balanced"
    for r in records:
        n = r.num_elements
        assert 12 <= n <= 20 and r.link_matrix.shape == (n, n)
        assert r.features.shape == (n, len(cs.NODE_FEATURES)) and r.invariants.shape == (len(cs.INVARIANT_NAMES),)
        assert r.manifold_like == (r.cset_type in cs.MANIFOLD_CLASSES)
        assert r.dimension == cs.MANIFOLD_CLASSES.get(r.cset_type, -1)
        assert not np.tril(r.causal_matrix).any()
        np.testing.assert_array_equal(r.link_matrix, cs.transitive_reduction(r.causal_matrix))


def test_generation_is_reproducible():
    def fingerprint(seed):
        records = cs.generate_causal_sets(20, n_min=10, n_max=16, seed=seed)
        return [(r.cset_type, r.causal_matrix.tobytes(), r.features.tobytes()) for r in records]

    assert fingerprint(3) == fingerprint(3)
    assert fingerprint(3) != fingerprint(4)


def sets_fingerprint(records) -> str:
    """A hash of every array and label of the generated sets, bytes as they are."""
    digest = hashlib.sha256()
    for r in records:
        for array in (r.causal_matrix, r.link_matrix, r.features, r.invariants):
            digest.update(np.ascontiguousarray(array).tobytes())
        digest.update(f"{r.cset_type}{r.manifold_like}{r.dimension}{r.flip_fraction!r}".encode())
    return digest.hexdigest()[:16]


# Fingerprints of the sets made before the generator was made faster for large N (tiled product, chains along the
# links, runs of equal sets made in parts): the same seed must keep giving the same sets, byte for byte.
GENERATED_BEFORE = [
    ({"num": 40, "n_min": 20, "n_max": 40, "seed": 7}, "55b5079db8f8d850"),
    ({"num": 300, "n_min": 64, "n_max": 64, "seed": 5}, "63771bf06a4fe8a1"),
    ({"num": 6, "n_min": 530, "n_max": 600, "seed": 11, "destroy_fraction": [0.001, 0.1]}, "56371d048f4b3450"),
]


@pytest.mark.parametrize("kwargs, fingerprint", GENERATED_BEFORE)
def test_the_sets_of_a_seed_are_those_made_before_the_speed_ups(kwargs, fingerprint):
    kwargs = dict(kwargs)
    assert sets_fingerprint(cs.generate_causal_sets(kwargs.pop("num"), **kwargs)) == fingerprint


def test_sets_made_in_small_parts_and_tiles_are_the_same_sets(monkeypatch):
    """Runs of equal sets are made in parts that fit a memory budget, and products tile by tile: neither may
    change a set (each part draws its random numbers after the previous one, as one batch would)."""
    monkeypatch.setattr(cs, "_WORK_BYTES", cs._WORK_BYTES_PER_PAIR * 64 * 64 * 2)  # two sets of N = 64 per part
    monkeypatch.setattr(qg_orders, "_PRODUCT_TILE", 8)
    assert cs._sets_per_part(64) == 2 and cs._sets_per_part(2048) == 1
    for kwargs, fingerprint in GENERATED_BEFORE[:2]:
        kwargs = dict(kwargs)
        assert sets_fingerprint(cs.generate_causal_sets(kwargs.pop("num"), **kwargs)) == fingerprint


def test_the_tiled_triangular_product_equals_the_full_product(monkeypatch):
    monkeypatch.setattr(qg_orders, "_PRODUCT_TILE", 8)
    rng = np.random.default_rng(0)
    upper = np.triu(rng.random((3, 61, 61)) < 0.3, k=1)
    expected = np.matmul(upper.astype(np.int64), upper.astype(np.int64))
    np.testing.assert_array_equal(cs.elements_between(upper), expected)
    tiled = qg_orders._upper_triangular_square(torch.from_numpy(upper.astype(np.float32)))
    np.testing.assert_array_equal(tiled.numpy(), expected)
    general = rng.random((61, 61)) < 0.3  # not triangular: the full product
    np.testing.assert_array_equal(cs.elements_between(general), general.astype(np.int64) @ general.astype(np.int64))


def test_longest_chains_of_a_total_order_an_antichain_and_a_single_element():
    past, future = cs.longest_chains(chain_order(9))
    assert past.tolist() == list(range(9)) and future.tolist() == list(range(8, -1, -1))
    assert [a.tolist() for a in cs.longest_chains(np.zeros((5, 5), dtype=bool))] == [[0] * 5, [0] * 5]
    assert [a.tolist() for a in cs.longest_chains(np.zeros((1, 1), dtype=bool))] == [[0], [0]]


@pytest.mark.parametrize("kwargs, argument", [
    ({"n_min": 20, "n_max": 10}, "n_min"),
    ({"dimensions": (5,)}, "dimensions"),
    ({"classes": ("minkowski_2d", "flat")}, "classes"),
    ({"dimensions": (2,)}, "classes"),  # minkowski_3d needs dimension 3
    ({"destroy_fraction": 0.0}, "destroy_fraction"),
])
def test_bad_generation_arguments_are_named(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        cs.generate_causal_sets(5, **kwargs)
