"""The nine kinds together: QuantumGrav.jl's names and codes, every generator's contract, and stores written in
QuantumGrav.jl's layout that our reader reads back."""

import hashlib
import json

import numpy as np
import pytest

from QuantumGrav.data.kinds.catalogue import (CSET_TYPE_NUMBERS, DIMENSIONAL_KINDS, GENERATORS, MANIFOLD_LIKE_KINDS,
                                              generate_kind)
from QuantumGrav.data.kinds.stores import plain, write_kind_stores

zarr = pytest.importorskip("zarr")
from QuantumGrav.data.zarr_store import QuantumGravJLDataset  # noqa: E402

SMALL = (16, 24)


def test_the_kinds_have_produce_datas_names_codes_and_labels():
    assert CSET_TYPE_NUMBERS == {"polynomial": 1, "complex_topology": 2, "destroyed": 3, "merged": 4, "grid": 5,
                                 "layered": 6, "random": 7, "merged_ambiguous": 8, "destroyed_ambiguous": 9}
    assert MANIFOLD_LIKE_KINDS == {"polynomial", "complex_topology"}
    with pytest.raises(ValueError, match="kind: expected one of polynomial, complex_topology"):
        generate_kind("minkowski_4d", np.random.default_rng(0))


@pytest.mark.parametrize("kind", list(GENERATORS))
def test_every_kind_gives_a_time_labelled_order_of_its_drawn_size(kind):
    rng = np.random.default_rng(5)
    sample = generate_kind(kind, rng)
    relation = sample.relation
    assert sample.kind == kind and sample.manifold_like == (kind in MANIFOLD_LIKE_KINDS)
    assert relation.dtype == bool and relation.shape == (sample.n, sample.n) and not np.tril(relation).any()
    steps = relation.astype(np.int32)
    assert not ((steps @ steps > 0) & ~relation).any(), "transitive"
    # complex_topology drops the points too close to a cut; every other kind has the drawn 64..128 elements
    assert (56 if kind == "complex_topology" else 64) <= sample.n <= 128
    again = generate_kind(kind, np.random.default_rng(5))
    assert np.array_equal(again.relation, relation), "the same seed gives the same set"


# Fingerprints of three sets of each kind (d = 2, and d = 4 where a kind has a dimension) from the stream of a
# store's first block, made before the kinds and the built-in generator shared one sprinkler (issue 62): the same
# seed keeps giving the same sets, parameters and labels, byte for byte.
KINDS_MADE_BEFORE = {
    "polynomial": "7b1aa509bffe4c1b", "polynomial_d4": "b98ed1708efbd976", "complex_topology": "cd573798f546795a",
    "destroyed": "e52a72df3fccfb1f", "destroyed_d4": "beebd4483638610e", "merged": "9c635970aa50d1ac",
    "merged_d4": "c7bc3158980d93cf", "grid": "f15d0421895daba2", "layered": "20d77302dd83ae1d",
    "random": "36305cf656300229", "merged_ambiguous": "1367ec1f463962aa", "merged_ambiguous_d4": "828a656703e80b18",
    "destroyed_ambiguous": "5acf93d13b0db475", "destroyed_ambiguous_d4": "1e8533e85f499133"}


def kind_fingerprint(kind: str, dimension: int) -> str:
    digest = hashlib.sha256()
    rng = np.random.default_rng([5, CSET_TYPE_NUMBERS[kind], 0])
    for _ in range(3):
        sample = generate_kind(kind, rng, n_range=(24, 40), dimension=dimension)
        digest.update(np.packbits(sample.relation).tobytes())
        digest.update(json.dumps(plain(sample.params), sort_keys=True).encode())
        for labels in (sample.node_labels, sample.relation_labels):
            if labels is not None:
                digest.update(np.packbits(labels).tobytes())
    return digest.hexdigest()[:16]


@pytest.mark.parametrize("name", sorted(KINDS_MADE_BEFORE))
def test_the_sets_of_a_seed_are_those_made_before(name):
    kind, _, dimension = name.partition("_d")
    assert kind in GENERATORS and (not dimension or kind in DIMENSIONAL_KINDS)
    assert kind_fingerprint(kind, int(dimension or 2)) == KINDS_MADE_BEFORE[name]


def test_stores_of_every_kind_are_read_back_as_written(tmp_path):
    stores = write_kind_stores(tmp_path, num_per_kind=2, seed=3, n_range=SMALL)
    assert [store.name for store in stores] == [f"{kind}_3.zarr" for kind in GENERATORS]
    for kind, store in zip(GENERATORS, stores):
        rng = np.random.default_rng([3, CSET_TYPE_NUMBERS[kind], 0])  # block 0: the first 64 sets
        for i in (1, 2):
            expected = generate_kind(kind, rng, n_range=SMALL).relation
            group = zarr.open_group(str(store), mode="r")[f"cset_{i}"]
            assert np.array_equal(np.asarray(group["adj"][...]).T.astype(bool), expected), "adj as Zarr.jl leaves it"
            assert int(group["cset_type"][0]) == CSET_TYPE_NUMBERS[kind]
    dataset = QuantumGravJLDataset(tmp_path, target="cset_type", cache=False)
    assert len(dataset) == 18 and dataset.class_names == list(GENERATORS)
    assert sorted(int(dataset[i].y) for i in range(len(dataset))) == sorted(list(range(9)) * 2)
    binary = QuantumGravJLDataset(tmp_path, target="manifold_like", cache=False)
    assert sum(int(binary[i].y) for i in range(len(binary))) == 4, "2 polynomial + 2 complex_topology sets"


def test_an_unknown_kind_writes_nothing(tmp_path):
    with pytest.raises(ValueError, match="'trousers' unknown"):
        write_kind_stores(tmp_path, kinds=["polynomial", "trousers"], num_per_kind=1, n_range=SMALL)
    assert not any(tmp_path.iterdir())


def test_a_refused_draw_is_drawn_again_as_quantumgrav_jl_does(monkeypatch):
    from QuantumGrav.data.kinds import catalogue
    from QuantumGrav.data.kinds.common import SetRefused

    calls = []

    def refuses_twice(n, rng, **options):
        calls.append(n)
        if len(calls) < 3:
            raise SetRefused("no set this time")
        return catalogue.generate_polynomial(n, rng, **options)

    monkeypatch.setitem(catalogue.GENERATORS, "polynomial", refuses_twice)
    sample = catalogue.generate_kind("polynomial", np.random.default_rng(0))
    assert len(calls) == 3 and sample.n == calls[-1], "each attempt draws a new element count"
    attempts = []

    def always_refuses(n, rng, **options):
        attempts.append(n)
        raise SetRefused("never")

    monkeypatch.setitem(catalogue.GENERATORS, "polynomial", always_refuses)
    with pytest.raises(SetRefused, match="never"):
        catalogue.generate_kind("polynomial", np.random.default_rng(0), n=50)
    assert attempts == [50] * catalogue.ATTEMPTS, "a given element count is kept; the last refusal is raised"
