"""Stores from others are input like any other (issue 48).

* A group whose ``adj`` declares more elements than ``max_elements`` (or than the memory this process may use can
  hold) is one line naming store, group and shape, exit 2, nothing written and nothing allocated: in ``train``,
  ``evaluate`` (test_evaluate.py's bad inputs), ``generate`` and the Python API alike. The store of the tests declares
  200,000 x 200,000 (a tiny folder: its chunks were never written) beside 20 good groups.
* A set that is not a strict partial order, transitively closed (QuantumGrav.jl's ``complex_topology`` relation may
  miss implied relations) is refused in one line by default, or closed, or left out, and the count is reported.
"""

import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr

import QuantumGrav as QG
from QuantumGrav.data import causal_sets as cs
from QuantumGrav.data import orders
from QuantumGrav.data.zarr_store import QuantumGravJLDataset, write_julia_group, write_julia_store

REPO = Path(__file__).resolve().parents[2]
POLYNOMIAL, COMPLEX_TOPOLOGY = 1, 2
HUGE = 200_000


def good_sets(num: int, n: int = 14, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [cs.sprinkle_diamond(n, 2, rng)[1] for _ in range(num)]


def hostile_store(folder: Path) -> Path:
    """20 good groups and cset_21, whose adj declares 200,000 x 200,000 (uint8: 37.3 GiB) with no chunk written."""
    store = write_julia_store(folder / "hostile.zarr", good_sets(20), [POLYNOMIAL] * 20, [True] * 20)
    group = zarr.open_group(str(store), mode="a", zarr_format=2).create_group("cset_21")
    group.create_array("adj", shape=(HUGE, HUGE), chunks=(1000, 1000), dtype="uint8")
    for name, value in (("manifold_like", np.array([True])), ("cset_type", np.array([POLYNOMIAL], "<i8"))):
        group.create_array(name, shape=(1,), dtype=value.dtype)[...] = value
    return store


def written_files(folder: Path) -> set[Path]:
    return {path for path in folder.rglob("*")}


@pytest.fixture
def never_read(monkeypatch):
    """Fails the test if any group's arrays are read: the size is judged from the metadata alone."""
    def refuse(*args):
        raise AssertionError("a group was read before its declared size was checked")
    monkeypatch.setattr(QuantumGravJLDataset, "_read_arrays", refuse)


def test_the_declared_size_is_refused_before_anything_is_read_or_written(tmp_path, never_read):
    store = hostile_store(tmp_path)
    before = written_files(tmp_path)
    with pytest.raises(QG.UserError) as refused:
        QuantumGravJLDataset(store)
    message = str(refused.value)
    assert message == (f"QuantumGrav.jl store {store}, group cset_21: 'adj' declares 200,000 x 200,000 elements, more "
                       f"than max_elements (32,768, data.kwargs.max_elements); nothing was read. Leave the store out, "
                       f"or raise the limit if sets of that size are meant")
    assert written_files(tmp_path) == before  # no feature cache folder either


def test_a_set_whose_dense_matrix_cannot_fit_in_memory_is_refused(tmp_path, never_read):
    store = hostile_store(tmp_path)
    with pytest.raises(QG.UserError, match=rf"store {store}, group cset_21: 'adj' declares 200,000 x 200,000 elements: "
                                           r"reading it needs about 596\.0 GiB, more than the [\d,.]+ GiB this process "
                                           r"may use; nothing was read"):
        QuantumGravJLDataset(store, max_elements=10**6)


def test_a_limit_below_a_sets_size_refuses_it_and_a_bad_limit_is_one_message(tmp_path):
    store = write_julia_store(tmp_path / "s.zarr", good_sets(2, n=30), [POLYNOMIAL] * 2, [True] * 2)
    with pytest.raises(QG.UserError, match=r"group cset_1: 'adj' declares 30 x 30 elements, more than max_elements "
                                           r"\(29, "):
        QuantumGravJLDataset(store, max_elements=29)
    assert list(QuantumGravJLDataset(store, max_elements=30, cache=False).element_counts()) == [30, 30]
    with pytest.raises(QG.UserError, match="max_elements: expected a positive integer"):
        QuantumGravJLDataset(store, max_elements=0)


def _one_error_line(done) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


def test_train_and_generate_refuse_the_store_in_one_line_and_write_nothing(cli_in_process, tmp_path, never_read):
    store = hostile_store(tmp_path)
    before = written_files(tmp_path)
    config = str(REPO / "configs" / "train_quantumgrav_jl.yaml")
    for command in (["train", "--config", config, "--set", f"training.path={tmp_path / 'runs'}"],
                    ["generate", "--config", config, "--workers", "1"]):
        done = cli_in_process(*command, "--set", f"data.kwargs.path={store}", cwd=tmp_path)
        assert "group cset_21: 'adj' declares 200,000 x 200,000 elements" in _one_error_line(done)
        assert written_files(tmp_path) == before, command


# --------------------------------------------------------------------------- sets that are not partial orders
def intransitive_complex_topology(n: int = 16, seed: int = 3) -> np.ndarray:
    """A sprinkling with one implied relation taken out, as QuantumGrav.jl's complex_topology relation (its ray walk
    through the cuts) may leave it: i < j < k related, i < k not."""
    R = good_sets(1, n, seed)[0].copy()
    links = orders.transitive_reduction(R)
    i, j = map(int, np.argwhere(links)[0])
    k = int(np.flatnonzero(links[j])[0])
    assert R[i, k] and not links[i, k]
    R[i, k] = False
    return R


def mixed_store(folder: Path) -> tuple[Path, np.ndarray]:
    """Five good complex_topology sets, then an intransitive one (cset_6), then one with a cycle (cset_7)."""
    store = write_julia_store(folder / "complex_topology.zarr", good_sets(5, seed=1), [COMPLEX_TOPOLOGY] * 5,
                              [True] * 5)
    root = zarr.open_group(str(store), mode="a", zarr_format=2)
    broken = intransitive_complex_topology()
    write_julia_group(root, 6, broken, COMPLEX_TOPOLOGY, True)
    cycle = good_sets(1, seed=2)[0].copy()
    cycle[-1, 0] = True
    write_julia_group(root, 7, cycle, COMPLEX_TOPOLOGY, True)
    return store, broken


def test_by_default_a_set_that_is_not_closed_is_refused_with_what_to_do(tmp_path):
    store, _ = mixed_store(tmp_path)
    dataset = QuantumGravJLDataset(store, cache=False)  # read lazily: the first group is fine
    with pytest.raises(QG.UserError, match=r"group cset_6: 'adj' is not transitively closed; .* set "
                                           r"data.kwargs.not_partial_orders: close to add the implied relations, or "
                                           r"skip to leave such sets out"):
        dataset[5]


@pytest.mark.parametrize("cache", [True, False])
def test_skip_leaves_out_every_set_that_is_not_a_partial_order_and_counts_them(tmp_path, caplog, cache):
    store, _ = mixed_store(tmp_path)
    dataset = QuantumGravJLDataset(store, not_partial_orders="skip", cache=cache)
    assert len(dataset) == 5 and [dataset.store_and_group(i)[1] for i in range(5)] == [f"cset_{i}" for i in range(1, 6)]
    assert dataset.order_repairs == {"closed": [], "skipped": ["complex_topology.zarr/cset_6",
                                                               "complex_topology.zarr/cset_7"]}
    line = ("QuantumGrav.jl data: 2 of 7 sets were not strict partial orders, transitively closed (not_partial_orders: "
            "skip): they were left out (complex_topology.zarr/cset_6, complex_topology.zarr/cset_7)")
    assert dataset.order_repairs_line() == line and line in caplog.text
    if cache:  # a second reader finds the same sets, from the cache
        assert QuantumGravJLDataset(store, not_partial_orders="skip").order_repairs == dataset.order_repairs


def test_close_reads_the_transitive_closure_and_refuses_a_cycle(tmp_path):
    store, broken = mixed_store(tmp_path)
    with pytest.raises(QG.UserError, match="group cset_7: 'adj' has a cycle .* no closure makes it one: set "
                                           "data.kwargs.not_partial_orders: skip"):
        QuantumGravJLDataset(store, not_partial_orders="close")
    shutil.rmtree(store / "cset_7")
    closed = QuantumGravJLDataset(store, not_partial_orders="close")
    assert closed.order_repairs["closed"] == ["complex_topology.zarr/cset_6"] and len(closed) == 6
    reference = tmp_path / "reference.zarr"
    write_julia_store(reference, [orders.transitive_closure(broken)], [COMPLEX_TOPOLOGY], [True])
    expected = QuantumGravJLDataset(reference, cache=False)[0]
    for key in ("x", "edge_index", "invariants"):
        assert np.array_equal(getattr(closed[5], key).numpy(), getattr(expected, key).numpy()), key
    with pytest.raises(QG.UserError, match="not_partial_orders: expected one of"):
        QuantumGravJLDataset(store, not_partial_orders="ignore")


def test_train_skips_through_the_data_setting_and_reports_the_count(cli_in_process, tmp_path):
    store, _ = mixed_store(tmp_path)
    config = str(REPO / "configs" / "train_quantumgrav_jl.yaml")
    common = ["--config", config, "--set", f"data.kwargs.path={store}", "--set", f"training.path={tmp_path / 'runs'}",
              "--set", "training.num_epochs=1", "--set", "training.num_workers=0", "--set", "training.device=cpu",
              "--set", "testing.baselines=false", "--set", "training.figures=false", "--set", "training.preflight=false"]
    line = _one_error_line(cli_in_process("train", *common, cwd=tmp_path))
    assert "is not transitively closed" in line or "has a cycle" in line, line
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    done = cli_in_process("train", *common, "--set", "data.kwargs.not_partial_orders=skip", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "2 of 7 sets were not strict partial orders" in done.stdout + done.stderr
