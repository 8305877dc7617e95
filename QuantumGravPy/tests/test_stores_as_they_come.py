"""Stores as they come (issue 62, part 6).

* A group that holds its links alone (``linkmat``, the transitive reduction, with the link degrees
  ``in_degrees_link``/``out_degrees_link`` beside it: the keys upstream's own notebooks read, ssciwr/QuantumGrav
  refactor-evaluators, docs/examples/train_simple_model.ipynb) is read as the transitive closure of its links, the
  user told so in one log line; its degrees and links are cross-checked; such a store trains end to end.
* QuantumGrav.jl numbers its kinds twice: produce_data.jl's ``cset_type_encoder`` and cset_factories.jl's exported
  ``encode_csettype`` (only 1 and 8 agree). A code that disagrees with the kind its store's name gives is refused in
  one line naming both (exit 2 from the CLI, nothing written), unless ``cset_type_encoding`` names the numbering
  that agrees; then every kind reads right.
"""

import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr

import QuantumGrav as QG
from QuantumGrav.data import causal_sets as cs
from QuantumGrav.common import logging_utils
from QuantumGrav.data.stores.kind_codes import ENCODINGS, ITEM_CODES, store_kind
from QuantumGrav.data.zarr_store import QuantumGravJLDataset, write_julia_group, write_julia_store

REPO = Path(__file__).resolve().parents[2]
PRODUCE_DATA, ENCODE_CSETTYPE = ENCODINGS["produce_data"], ENCODINGS["encode_csettype"]
POLYNOMIAL, LAYERED = 1, 6  # produce_data's codes
LINKS_LINE = "hold their links alone ('linkmat', no 'adj'): each causal relation is derived as the transitive closure"
NINE = [kind for code, kind in sorted(PRODUCE_DATA.items()) if code <= 9]


def sprinklings(num: int, n: int = 16, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [cs.sprinkle_diamond(n, 2, rng)[1] for _ in range(num)]


def layered(num: int, n: int = 16, seed: int = 1) -> list[np.ndarray]:
    return list(cs.random_layered_orders(num, n, np.random.default_rng(seed)))


def files_under(folder: Path) -> set[Path]:
    return set(folder.rglob("*"))


def _replace(store: Path, path: str, value: np.ndarray) -> None:
    root = zarr.open_group(str(store), mode="a", zarr_format=2)
    group, name = path.rsplit("/", 1)
    del root[path]
    root[group].create_array(name, shape=value.shape, dtype=value.dtype)[...] = value


# --------------------------------------------------------------------------- links only
def test_the_links_layout_is_linkmat_and_its_degrees_as_zarr_jl_stores_them(tmp_path):
    chain = np.array([[0, 1, 1], [0, 0, 1], [0, 0, 0]], dtype=bool)  # 1 < 2 < 3: links 1-2 and 2-3
    store = write_julia_store(tmp_path / "polynomial.zarr", [chain], [POLYNOMIAL], [True], links_only=True)
    group = zarr.open_group(str(store), mode="r")["cset_1"]
    assert sorted(group.array_keys()) == ["cset_type", "in_degrees_link", "linkmat", "manifold_like",
                                          "out_degrees_link"]
    julia_links = np.array([[0, 1, 0], [0, 0, 1], [0, 0, 0]], dtype=np.uint8)  # Julia's linkmat[i, j]: i linked to j
    assert np.array_equal(group["linkmat"][...], julia_links.T)  # numpy reads Zarr.jl's bytes transposed
    assert group["in_degrees_link"][...].tolist() == [0, 1, 1] and group["out_degrees_link"][...].tolist() == [1, 1, 0]


@pytest.mark.parametrize("edges", ["links", "relations"])
def test_a_links_only_store_reads_as_the_closure_of_its_links_and_says_so_once(tmp_path, caplog, monkeypatch, edges):
    """The same sets, stored whole (adj) and as their links (linkmat), give identical items; a permuted (not
    naturally labelled) set too. One log line per process says the relation was derived, whatever reads it."""
    monkeypatch.setattr(logging_utils, "_warned_messages", set())  # as in a fresh process
    sets = sprinklings(3) + layered(2)
    order = np.random.default_rng(5).permutation(16)
    sets.append(sets[0][np.ix_(order, order)])
    codes, manifold = [POLYNOMIAL] * 3 + [LAYERED] * 3, [True] * 3 + [False] * 3
    whole = write_julia_store(tmp_path / "whole.zarr", sets, codes, manifold)
    links = write_julia_store(tmp_path / "links.zarr", sets, codes, manifold, links_only=True)
    with caplog.at_level(logging.INFO, logger="QuantumGrav"):
        expected = QuantumGravJLDataset(whole, edges=edges, cache=False)
        assert not [r for r in caplog.records if LINKS_LINE in r.getMessage()]
        read = QuantumGravJLDataset(links, edges=edges)
        QuantumGravJLDataset(links, edges=edges, cache=False)  # told once, not per construction
    said = [r.getMessage() for r in caplog.records if LINKS_LINE in r.getMessage()]
    assert said == [f"QuantumGrav.jl data: the sets of links.zarr {LINKS_LINE} of the links"]
    for i in range(len(sets)):
        for key in ("x", "edge_index", "invariants", "y", "julia_cset_type"):
            assert np.array_equal(getattr(read[i], key).numpy(), getattr(expected[i], key).numpy()), (i, key)


def test_degrees_that_disagree_with_the_links_are_one_line(tmp_path):
    store = write_julia_store(tmp_path / "s.zarr", sprinklings(2), [POLYNOMIAL] * 2, [True] * 2, links_only=True)
    root = zarr.open_group(str(store), mode="r")
    in_degrees, out_degrees = root["cset_1/in_degrees_link"][...], root["cset_1/out_degrees_link"][...]
    _replace(store, "cset_1/in_degrees_link", out_degrees)  # the two swapped: a linkmat stored transposed
    k = int(np.flatnonzero(in_degrees != out_degrees)[0])
    with pytest.raises(QG.UserError) as refused:
        QuantumGravJLDataset(store, cache=False)
    assert str(refused.value) == (
        f"QuantumGrav.jl store {store}, group cset_1: 'in_degrees_link' gives element {k + 1} {out_degrees[k]} links "
        f"where 'linkmat' has {in_degrees[k]} (it is the other degree: is 'linkmat' stored transposed? Zarr.jl "
        f"stores Julia's linkmat[i, j] = 1, i linked to j, as numpy's [j, i]); the stored degrees and links disagree")
    _replace(store, "cset_1/in_degrees_link", in_degrees[:-1])
    with pytest.raises(QG.UserError, match=r"'in_degrees_link' has 15 entries for the 16 elements of 'linkmat'"):
        QuantumGravJLDataset(store, cache=False)


def test_a_linkmat_that_holds_implied_relations_is_no_set_of_links(tmp_path):
    """A store whose 'linkmat' is the whole relation (or any relation that chains of others imply) is refused: the
    links read back would not be those stored."""
    R = sprinklings(1)[0]
    store = write_julia_store(tmp_path / "s.zarr", [R], [POLYNOMIAL], [True], links_only=True)
    _replace(store, "cset_1/linkmat", R.astype(np.uint8).T)
    for name in ("in_degrees_link", "out_degrees_link"):
        del zarr.open_group(str(store), mode="a")[f"cset_1/{name}"]  # degrees are optional
    implied = int((R & ~cs.transitive_reduction(R)).sum())
    with pytest.raises(QG.UserError, match=rf"group cset_1: 'linkmat' holds {implied:,} relations that chains of its "
                                           r"other links already imply, so it is not the links"):
        QuantumGravJLDataset(store, cache=False)


def test_a_group_with_neither_adj_nor_linkmat_is_refused_before_anything_is_read(tmp_path):
    store = write_julia_store(tmp_path / "s.zarr", sprinklings(2), [POLYNOMIAL] * 2, [True] * 2, links_only=True)
    shutil.rmtree(store / "cset_2" / "linkmat")
    with pytest.raises(QG.UserError, match=r"group cset_2: array 'adj' is missing .*, and no 'linkmat' either"):
        QuantumGravJLDataset(store, cache=False)


def test_a_links_only_store_trains_end_to_end(cli_in_process, tmp_path, monkeypatch, caplog):
    """``train`` on a folder of links-only stores (2D sprinklings and layered orders, manifold_like), as shipped in
    configs/train_quantumgrav_jl.yaml: it ends, tests, and says once that the relations were derived (a warning: the
    trainer builds its data before its log is set up, and a process prints warnings without a handler)."""
    monkeypatch.setattr(logging_utils, "_warned_messages", set())
    rng, folder = np.random.default_rng(0), tmp_path / "output"
    sizes = rng.integers(20, 33, size=60)
    write_julia_store(folder / "polynomial_7_2026-01-01_00-00-00.zarr",
                      [cs.sprinkle_diamond(int(n), 2, rng)[1] for n in sizes[:30]], [POLYNOMIAL] * 30, [True] * 30,
                      links_only=True)
    write_julia_store(folder / "layered_8_2026-01-01_00-00-00.zarr",
                      [cs.random_layered_orders(1, int(n), rng)[0] for n in sizes[30:]], [LAYERED] * 30, [False] * 30,
                      links_only=True)
    done = cli_in_process(
        "train", "--config", str(REPO / "configs" / "train_quantumgrav_jl.yaml"), "--set", f"data.kwargs.path={folder}",
        "--set", f"training.path={tmp_path / 'runs'}", "--set", "training.num_epochs=2", "--set",
        "training.num_workers=0", "--set", "training.device=cpu", "--set", "training.figures=false", "--set",
        "training.preflight=false", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [r.levelname for r in caplog.records if LINKS_LINE in r.getMessage()] == ["WARNING"]
    runs = [run for run in (tmp_path / "runs").iterdir() if run.is_dir()]
    assert len(runs) == 1 and list(runs[0].rglob("*.pt")), sorted(p.name for p in runs[0].rglob("*"))
    assert "test            accuracy" in done.stdout, done.stdout[-2000:]
    # The run applied to stores numbered by encode_csettype: refused as they are, read with the store option.
    other = tmp_path / "other"
    encode_csettype_stores(other, ["polynomial", "layered"])
    evaluate = ["evaluate", "--run", str(runs[0]), "--data", str(other), "--out", str(tmp_path / "p" / "p.csv")]
    refused = cli_in_process(*evaluate, cwd=tmp_path)
    assert refused.returncode == 2 and "the store's name says layered" in refused.stderr, refused.stderr
    done = cli_in_process(*evaluate, "--store-option", "cset_type_encoding=encode_csettype", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "p" / "p.csv").read_text().count("\n") == 5  # a header and 4 sets


# --------------------------------------------------------------------------- the two numberings
def test_the_two_numberings_are_upstreams_and_agree_only_on_1_and_8():
    assert ENCODE_CSETTYPE == {1: "polynomial", 2: "layered", 3: "random", 4: "grid", 5: "destroyed",
                               6: "destroyed_ambiguous", 7: "merged", 8: "merged_ambiguous", 9: "complex_topology"}
    assert [code for code in ENCODE_CSETTYPE if PRODUCE_DATA[code] == ENCODE_CSETTYPE[code]] == [1, 8]
    assert sorted(ENCODE_CSETTYPE.values()) == sorted(NINE)


@pytest.mark.parametrize("name, kind", [
    ("merged_ambiguous_4242_2026-03-01_10-00-00.zarr", "merged_ambiguous"), ("merged_4242_2026.zarr", "merged"),
    ("complex_topology.zarr", "complex_topology"), ("random_0.zarr", "random"), ("grid", "grid"),
    ("randomized.zarr", None), ("my_sets.zarr", None), ("minkowski_kr_insertion_1.zarr", "minkowski_kr_insertion")])
def test_the_kind_a_stores_name_gives(name, kind):
    assert store_kind(Path("/data") / name) == kind


def encode_csettype_stores(folder: Path, kinds=NINE) -> list[Path]:
    """One store per kind named as produce_data names them, its codes those of encode_csettype."""
    codes = {kind: code for code, kind in ENCODE_CSETTYPE.items()}
    return [write_julia_store(folder / f"{kind}_{100 + k}_2026-01-01_00-00-00.zarr", sprinklings(2, seed=k),
                              [codes[kind]] * 2, [kind in ("polynomial", "complex_topology")] * 2)
            for k, kind in enumerate(kinds)]


def test_a_code_that_disagrees_with_the_stores_name_is_refused_in_one_line_writing_nothing(tmp_path):
    store, = encode_csettype_stores(tmp_path / "output", ["layered"])
    before = files_under(tmp_path)
    with pytest.raises(QG.UserError) as refused:
        QuantumGravJLDataset(store.parent, target="cset_type")
    assert str(refused.value) == (
        f"QuantumGrav.jl store {store}, group cset_1: cset_type code 2 is complex_topology in cset_type_encoder in "
        f"QuantumGrav.jl's examples/produce_data.jl, but the store's name says layered; if encode_csettype in "
        f"QuantumGrav.jl's src/cset_factories.jl numbered the codes (there 2 is layered), set "
        f"data.kwargs.cset_type_encoding: encode_csettype")
    assert files_under(tmp_path) == before  # no feature cache folder


def test_naming_the_encoding_reads_every_kind_right(tmp_path):
    """All nine kinds numbered by encode_csettype: read with it, each store's sets are its named kind (classes,
    labels, the produce_data code each item carries, describe); read without it, every store but the two whose codes
    agree is refused."""
    stores = encode_csettype_stores(tmp_path / "output")
    dataset = QuantumGravJLDataset(tmp_path / "output", target="cset_type", cset_type_encoding="encode_csettype")
    assert dataset.class_names == NINE  # ordered by produce_data's codes, as ever
    for index in range(len(dataset)):
        kind = store_kind(stores[[s.name for s in stores].index(dataset.store_and_group(index)[0])])
        item = dataset[index]
        assert dataset.class_names[int(item.y)] == kind and int(item.julia_cset_type) == ITEM_CODES[kind]
        assert dataset.describe(index)["kind"] == kind
    refused = []
    for store in stores:
        try:
            QuantumGravJLDataset(store, cache=False)
        except QG.UserError:
            refused.append(store_kind(store))
    assert sorted(refused) == sorted(set(NINE) - {"polynomial", "merged_ambiguous"})


def test_a_named_encoding_that_still_disagrees_is_refused_naming_the_one_that_agrees(tmp_path):
    store = write_julia_store(tmp_path / "layered_5_2026-01-01_00-00-00.zarr", layered(1), [LAYERED], [False])
    with pytest.raises(QG.UserError, match=r"cset_type code 6 is destroyed_ambiguous in encode_csettype in "
                                           r"QuantumGrav.jl's src/cset_factories.jl, but the store's name says "
                                           r"layered; if cset_type_encoder in QuantumGrav.jl's "
                                           r"examples/produce_data.jl numbered the codes \(there 6 is layered\), set "
                                           r"data.kwargs.cset_type_encoding: produce_data$"):
        QuantumGravJLDataset(store, cset_type_encoding="encode_csettype", cache=False)
    assert len(QuantumGravJLDataset(store, cset_type_encoding="produce_data", cache=False)) == 1


def test_a_later_set_that_disagrees_is_refused_when_read(tmp_path):
    store = write_julia_store(tmp_path / "polynomial.zarr", sprinklings(2), [POLYNOMIAL] * 2, [True] * 2)
    write_julia_group(zarr.open_group(str(store), mode="a"), 3, sprinklings(1)[0], 5, True)  # 5: grid
    dataset = QuantumGravJLDataset(store)
    dataset[1]
    # 5 is destroyed in encode_csettype: neither numbering agrees with the name
    with pytest.raises(QG.UserError, match=r"group cset_3: cset_type code 5 is grid in .*, but the store's name says "
                                           r"polynomial; if the store's name does not name the kind of its sets, "
                                           r"rename it$"):
        dataset[2]


def test_a_store_whose_name_names_no_kind_reads_in_the_named_numbering(tmp_path, caplog):
    store = write_julia_store(tmp_path / "run3.zarr", layered(2), [2, 2], [False, False])
    as_produce_data = QuantumGravJLDataset(store, target="cset_type", cache=False)
    as_encode_csettype = QuantumGravJLDataset(store, target="cset_type", cache=False,
                                              cset_type_encoding="encode_csettype")
    assert as_produce_data.class_names == ["complex_topology"] and as_encode_csettype.class_names == ["layered"]
    with pytest.raises(QG.UserError, match=r"unknown cset_type code 10; expected one of .*encode_csettype"):
        QuantumGravJLDataset(write_julia_store(tmp_path / "ten.zarr", layered(1), [10], [False]),
                             cset_type_encoding="encode_csettype", cache=False)
    with pytest.raises(QG.UserError, match=r"cset_type_encoding: expected one of produce_data, encode_csettype"):
        QuantumGravJLDataset(store, cset_type_encoding="julia")


def test_train_and_generate_refuse_a_mismatched_code_in_one_line_writing_nothing(cli_in_process, tmp_path):
    folder = tmp_path / "output"
    encode_csettype_stores(folder, ["polynomial", "layered"])
    before = files_under(tmp_path)
    config = str(REPO / "configs" / "train_quantumgrav_jl.yaml")
    for command in (["train", "--config", config, "--set", f"training.path={tmp_path / 'runs'}"],
                    ["generate", "--config", config, "--workers", "1"]):
        done = cli_in_process(*command, "--set", f"data.kwargs.path={folder}", cwd=tmp_path)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, done.stderr
        assert "cset_type code 2 is complex_topology in " in lines[0] and "the store's name says layered" in lines[0]
        assert files_under(tmp_path) == before, command
    done = cli_in_process("generate", "--config", config, "--workers", "1", "--set", f"data.kwargs.path={folder}",
                          "--set", "data.kwargs.cset_type_encoding=encode_csettype", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
