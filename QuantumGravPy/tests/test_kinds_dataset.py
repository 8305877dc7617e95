"""QuantumGrav.jl's nine kinds as training data: generated once as its stores (whatever the number of processes that
draw them), each set with its drawn parameters, read back by the stores' reader; ``configs/manifold_like.yaml``
trains on them on one and two processes, and on the same stores read as QuantumGrav.jl's."""

import csv
import json

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")

import QuantumGrav as QG  # noqa: E402
from QuantumGrav.data.kinds import KindsDataset, stores as kinds_stores  # noqa: E402
from QuantumGrav.data.kinds.catalogue import CSET_TYPE_NUMBERS, GENERATORS, generate_kind  # noqa: E402
from QuantumGrav.data.zarr_store import QuantumGravJLDataset  # noqa: E402

from conftest import REPO  # noqa: E402

SMALL = {"n_min": 24, "n_max": 32}


def stored_relations(store) -> list[np.ndarray]:
    root = zarr.open_group(str(store), mode="r")
    count = sum(1 for name in root.group_keys())
    return [np.asarray(root[f"cset_{i}/adj"][...]).T.astype(bool) for i in range(1, count + 1)]


def test_the_sets_do_not_depend_on_how_many_processes_draw_them(tmp_path):
    kinds = ["grid", "layered"]
    one = kinds_stores.write_kind_stores(tmp_path / "one", kinds, num_per_kind=70, seed=4, n_range=(24, 32))
    two = kinds_stores.write_kind_stores(tmp_path / "two", kinds, num_per_kind=70, seed=4, n_range=(24, 32),
                                         workers=2)
    for kind, a, b in zip(kinds, one, two):
        first, second = stored_relations(a), stored_relations(b)
        assert len(first) == 70 and all(np.array_equal(x, y) for x, y in zip(first, second, strict=True))
        rng = np.random.default_rng([4, CSET_TYPE_NUMBERS[kind], 1])  # set 65 is the first of block 1
        assert np.array_equal(first[64], generate_kind(kind, rng, n_range=(24, 32)).relation)


def test_generated_once_then_reused_and_other_settings_generate_another_folder(tmp_path):
    dataset = KindsDataset(tmp_path, num_per_kind=3, workers=1, **SMALL)
    assert len(dataset) == 27 and dataset.class_names == ["non_manifold_like", "manifold_like"]
    record = json.loads((dataset.folder / "generation.json").read_text())
    assert record["kinds"] == list(GENERATORS) and record["num_per_kind"] == 3 and record["seed"] == 0
    written = {path: path.stat().st_mtime_ns for path in dataset.folder.rglob("adj/.zarray")}
    again = KindsDataset(tmp_path, num_per_kind=3, workers=1, **SMALL)
    assert again.folder == dataset.folder
    assert {path: path.stat().st_mtime_ns for path in again.folder.rglob("adj/.zarray")} == written, "not rewritten"
    other = KindsDataset(tmp_path, num_per_kind=3, seed=1, workers=1, **SMALL)
    assert other.folder != dataset.folder and len(list(tmp_path.iterdir())) == 2
    multiclass = KindsDataset(tmp_path, num_per_kind=3, workers=1, target="cset_type", **SMALL)
    assert multiclass.folder == dataset.folder and multiclass.class_names == list(GENERATORS)
    assert sorted(int(item.y) for item in multiclass) == sorted(list(range(9)) * 3)
    assert sum(int(item.y) for item in dataset) == 6, "3 polynomial and 3 complex_topology sets"


def test_every_set_keeps_its_kind_its_drawn_parameters_and_merged_sets_their_block(tmp_path):
    dataset = KindsDataset(tmp_path, kinds=["destroyed", "merged"], num_per_kind=2, seed=7, workers=1, **SMALL)
    described = [dataset.describe(i) for i in range(len(dataset))]
    assert [d["kind"] for d in described] == ["destroyed", "destroyed", "merged", "merged"], "stores by name"
    assert all(0 < d["flip_fraction"] for d in described[:2])
    # the realised defect, as counts: what a detection yardstick plots against and predictions.csv carries
    assert all(d["changed_relations"] == d["added_relations"] + d["removed_relations"] > 0 for d in described[:2])
    rng = np.random.default_rng([7, CSET_TYPE_NUMBERS["merged"], 0])
    expected = generate_kind("merged", rng, n_range=(24, 32))
    assert described[2]["block_size"] == expected.params["block_size"] == int(expected.node_labels.sum())
    labels = zarr.open_group(str(dataset.folder / "merged_7.zarr"), mode="r")["cset_1/node_labels"][...]
    assert np.array_equal(labels.astype(bool), expected.node_labels)
    start = described[2]["block_start"]
    assert labels[start:start + described[2]["block_size"]].all() and labels.sum() == described[2]["block_size"]


def test_sets_in_another_dimension_with_exact_defects_take_the_sizes_in_turn_and_record_them(tmp_path):
    kinds = ["polynomial", "destroyed", "merged_ambiguous", "grid"]
    dataset = KindsDataset(tmp_path, kinds=kinds, num_per_kind=5, seed=3, dimension=4, changed_relations=[1, 8],
                           block_sizes=[4, 12], workers=1, **SMALL)
    described = [dataset.describe(i) for i in range(len(dataset))]
    by_kind = {kind: [d for d in described if d["kind"] == kind] for kind in kinds}
    assert [d["changed_relations"] for d in by_kind["destroyed"]] == [1, 8, 1, 8, 1]
    assert [d["block_size"] for d in by_kind["merged_ambiguous"]] == [4, 12, 4, 12, 4]
    assert all(d["dimension"] == 4 for kind in kinds[:3] for d in by_kind[kind])
    assert "dimension" not in by_kind["grid"][0], "grid stays a 2D lattice"
    record = json.loads((dataset.folder / "generation.json").read_text())
    assert (record["dimension"], record["changed_relations"], record["block_sizes"]) == (4, [1, 8], [4, 12])
    rng = np.random.default_rng([3, CSET_TYPE_NUMBERS["destroyed"], 0])
    first = generate_kind("destroyed", rng, n_range=(24, 32), dimension=4, defect_size=1)
    second = generate_kind("destroyed", rng, n_range=(24, 32), dimension=4, defect_size=8)
    stored = stored_relations(dataset.folder / "destroyed_3.zarr")
    assert np.array_equal(stored[0], first.relation) and np.array_equal(stored[1], second.relation)
    two_d = KindsDataset(tmp_path, kinds=kinds, num_per_kind=5, seed=3, workers=1, **SMALL)
    assert two_d.folder != dataset.folder and all(two_d.describe(i)["dimension"] == 2 for i in range(5))


def test_a_failed_generation_leaves_no_folder_that_looks_finished(tmp_path, monkeypatch):
    def fails(*args):
        raise RuntimeError("disk full")

    monkeypatch.setattr(kinds_stores, "write_block", fails)
    with pytest.raises(RuntimeError, match="disk full"):
        KindsDataset(tmp_path, num_per_kind=2, workers=1, **SMALL)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kwargs, message", [
    ({"kinds": ["grid", "trousers"]}, r"kinds: expected distinct names .* \('trousers' unknown\)"),
    ({"kinds": ["grid", "grid"]}, "kinds: expected distinct names"),
    ({"num_per_kind": 0}, "num_per_kind: expected an integer >= 1, got 0"),
    ({"n_min": 10}, "n_min, n_max: expected integers with 21 <= n_min <= n_max"),
    ({"n_min": 40, "n_max": 30}, "n_min, n_max: expected integers with 21 <= n_min <= n_max"),
    ({"workers": 0}, "workers: expected a positive integer or null"),
    ({"dimension": 5}, "dimension: expected one of 2, 3, 4, got 5"),
    ({"dimension": 3}, "dimension 3: complex_topology is 2-dimensional only"),
    ({"kinds": ["grid"], "changed_relations": [1, 2]}, "changed_relations: applies to destroyed and "
                                                       "destroyed_ambiguous sets, and kinds has none"),
    ({"kinds": ["merged"], "block_sizes": [4, 24]}, r"block_sizes: expected a list of distinct integers from 4 to 23"),
    ({"kinds": ["destroyed"], "changed_relations": [0]}, "changed_relations: expected a list of distinct integers "
                                                         "from 1 to 276"),
    ({"kinds": ["destroyed"], "changed_relations": 4}, "changed_relations: expected a list"),
])
def test_bad_settings_are_one_message_and_write_nothing(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        KindsDataset(tmp_path, **{"num_per_kind": 2, **SMALL, **kwargs})
    assert list(tmp_path.iterdir()) == []


def test_generate_writes_the_stores_and_their_cache_and_a_bad_setting_exits_2(tmp_path, cli_in_process):
    config = REPO / "configs" / "manifold_like.yaml"
    common = ("--set", f"data.kwargs.path={tmp_path / 'kinds'}", "--set", "data.kwargs.num_per_kind=2",
              "--set", "data.kwargs.n_min=24", "--set", "data.kwargs.n_max=32", "--workers", "2")
    result = cli_in_process("generate", "--config", str(config), *common, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    folder, = (tmp_path / "kinds").iterdir()
    assert f"{folder}: 9 stores, 18 of 18 causal sets cached" in result.stdout
    assert sorted(p.name for p in folder.glob("*.zarr")) == sorted(f"{kind}_0.zarr" for kind in GENERATORS)
    assert len(list(folder.glob("*.qg_features/*.shard"))) == 18
    assert len(QuantumGravJLDataset(folder, target="cset_type")) == 18, "produce_data's layout, read as such"
    bad = cli_in_process("generate", "--config", str(config), *common, "--set", "data.kwargs.kinds=[grid,pants]",
                         cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "('pants' unknown)" in bad.stderr
    assert "Traceback" not in bad.stderr and len(list((tmp_path / "kinds").iterdir())) == 1


def _job_settings(tmp_path, target: str) -> list[str]:
    return [f"data.kwargs.path={tmp_path / 'kinds'}", "data.kwargs.num_per_kind=6", "data.kwargs.n_min=24",
            "data.kwargs.n_max=32", "data.kwargs.workers=1", f"data.kwargs.target={target}",
            f"training.path={tmp_path / 'runs'}", "training.num_epochs=2", "training.batch_size=8",
            "training.num_workers=0", "training.device=cpu", "training.figures=false",
            "training.progress_bar=false", "testing.baselines=false"]


@pytest.mark.parametrize("target, classes", [("manifold_like", ["non_manifold_like", "manifold_like"]),
                                             ("cset_type", list(GENERATORS))])
def test_manifold_like_yaml_trains_on_generated_sets_and_on_the_same_stores_read_as_quantumgrav_jls(
        tmp_path, target, classes):
    config = QG.load_config(REPO / "configs" / "manifold_like.yaml", _job_settings(tmp_path, target))
    trainer = QG.Trainer(config)
    loaders = trainer.prepare_dataloaders()
    trainer.run_training(*loaders[:2])
    test = trainer.run_test(loaders[2])
    trainer.close()
    assert trainer.task.class_names == classes and test["num_test"] == len(loaders[2].dataset) == 8
    assert 0 <= test["test_weighted_f1"] <= 1 and len(test["per_class_f1"]) == len(classes)
    by_kind = test["by_kind"]["gnn"]  # the test sets' kinds, read from their stores' groups
    assert set(by_kind) <= set(GENERATORS) and sum(row["sets"] for row in by_kind.values()) == 8
    other = KindsDataset(tmp_path / "other", num_per_kind=2, seed=1, workers=1, **SMALL)  # sets it never saw
    applied = QG.load_run(trainer.run_dir).evaluate(str(other.folder))
    assert applied["count"] == 18 and set(applied["per_kind"]) == set(GENERATORS)
    other = KindsDataset(tmp_path / "other", num_per_kind=4, seed=1, workers=1, kinds=["destroyed"], **SMALL)
    by_size = QG.load_run(trainer.run_dir).evaluate(str(other.folder))["by_defect_size"]["destroyed"]
    assert by_size["size"] == "changed_relations" and sum(row["sets"] for row in by_size["model"]["bins"]) == 4
    folder, = (tmp_path / "kinds").iterdir()
    stores = QG.load_config(REPO / "configs" / "train_quantumgrav_jl.yaml", [
        f"data.kwargs.path={folder}", f"data.kwargs.target={target}", *_job_settings(tmp_path, target)[6:]])
    trainer = QG.Trainer(stores)
    split = trainer.prepare_dataloaders()
    trainer.run_training(*split[:2])
    on_stores = trainer.run_test(split[2])
    trainer.close()
    assert trainer.task.class_names == classes and on_stores["num_test"] == test["num_test"]
    assert [len(loader.dataset) for loader in split] == [len(loader.dataset) for loader in loaders]


@pytest.mark.full_suite
def test_manifold_like_yaml_trains_on_two_processes(tmp_path, cli_in_process):
    overrides = [item for setting in _job_settings(tmp_path, "manifold_like") for item in ("--set", setting)]
    result = cli_in_process("train", "--config", str(REPO / "configs" / "manifold_like.yaml"), "--nproc", "2",
                            *overrides, "--set", "training.run_name=two", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "runs" / "two" / "metrics.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 2
    assert len(list((tmp_path / "kinds").iterdir())) == 1, "rank 0 generated the stores, rank 1 read them"


def test_manifold_like_dimensions_yaml_trains_in_4_dimensions_and_a_2d_only_kind_exits_2(tmp_path, cli_in_process):
    config = REPO / "configs" / "manifold_like_dimensions.yaml"
    settings = ["data.kwargs.dimension=4", *_job_settings(tmp_path, "manifold_like")]
    trainer = QG.Trainer(QG.load_config(config, settings))
    loaders = trainer.prepare_dataloaders()
    trainer.run_training(*loaders[:2])
    test = trainer.run_test(loaders[2])
    trainer.close()
    assert test["num_test"] == len(loaders[2].dataset) and 0 <= test["test_weighted_f1"] <= 1
    folder, = (tmp_path / "kinds").iterdir()
    assert json.loads((folder / "generation.json").read_text())["dimension"] == 4
    bad = cli_in_process("generate", "--config", str(config), "--set", f"data.kwargs.path={tmp_path / 'other'}",
                         "--set", "data.kwargs.kinds=[polynomial,complex_topology]", "--set",
                         "data.kwargs.num_per_kind=2", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "complex_topology is 2-dimensional only" in bad.stderr
    assert "Traceback" not in bad.stderr and not (tmp_path / "other").exists()


def test_the_smoke_test_switch_shrinks_the_kinds_to_four_small_sets_each(monkeypatch):
    monkeypatch.setenv("QUANTUMGRAV_SMOKE_TEST", "1")
    kwargs = QG.load_config(REPO / "configs" / "manifold_like.yaml")["data"]["kwargs"]
    assert (kwargs["num_per_kind"], kwargs["n_min"], kwargs["n_max"]) == (4, 24, 32)
    monkeypatch.delenv("QUANTUMGRAV_SMOKE_TEST")
    kwargs = QG.load_config(REPO / "configs" / "manifold_like.yaml")["data"]["kwargs"]
    assert (kwargs["num_per_kind"], kwargs["n_min"], kwargs["n_max"]) == (1000, 64, 128)


def test_generate_makes_exact_defects_and_the_smoke_switch_keeps_the_sizes_its_small_sets_hold(
        tmp_path, cli_in_process, monkeypatch):
    """Under the smoke-test switch: the sets shrink to 24-32 elements, the command's own N too (its warning names
    it), and keep the exact defect sizes they can hold; generate writes exact defects in 4D."""
    monkeypatch.setenv("QUANTUMGRAV_SMOKE_TEST", "1")
    sizes = ["data.kwargs.changed_relations=[1,2,4,8,16,32,64,128,256,512]", "data.kwargs.block_sizes=[4,8,16,32,64]"]
    config = REPO / "configs" / "manifold_like_dimensions.yaml"
    kwargs = QG.load_config(config, sizes)["data"]["kwargs"]
    assert (kwargs["n_min"], kwargs["block_sizes"], kwargs["changed_relations"]) == (
        24, [4, 8, 16], [1, 2, 4, 8, 16, 32, 64, 128, 256]), "24 elements: 23 in a block at most, 276 pairs"
    kwargs = QG.load_config(config, [*sizes, "data.kwargs.n_min=128", "data.kwargs.n_max=128"])["data"]["kwargs"]
    assert (kwargs["n_min"], kwargs["block_sizes"]) == (24, [4, 8, 16]), "the command's N shrinks too"
    result = cli_in_process("generate", "--config", str(config), "--set", f"data.kwargs.path={tmp_path / 'kinds'}",
                            "--set", "data.kwargs.dimension=4", *(item for size in sizes for item in ("--set", size)),
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    folder, = (tmp_path / "kinds").iterdir()
    described = QuantumGravJLDataset(folder).describe
    sets = [described(i) for i in range(32)]
    assert [d["changed_relations"] for d in sets if d["kind"] == "destroyed"] == [1, 2, 4, 8]
    assert [d["block_size"] for d in sets if d["kind"] == "merged"] == [4, 8, 16, 4]
    assert {d["dimension"] for d in sets if d["kind"] != "grid" and "dimension" in d} == {4}
    monkeypatch.delenv("QUANTUMGRAV_SMOKE_TEST")
    assert QG.load_config(config, sizes)["data"]["kwargs"]["block_sizes"] == [4, 8, 16, 32, 64], "as given"


def test_upstreams_model_trains_on_the_same_sets_and_stops_on_the_weighted_f1(tmp_path):
    config = QG.load_config(REPO / "configs" / "upstream_gcn.yaml", _job_settings(tmp_path, "manifold_like"))
    trainer = QG.Trainer(config)
    loaders = trainer.prepare_dataloaders()
    trainer.run_training(*loaders[:2])
    test = trainer.run_test(loaders[2])
    trainer.close()
    assert type(trainer.core_model).__name__ == "UpstreamGCN" and trainer.early_stopping.metric == "val_weighted_f1"
    assert all(0 <= row["val_weighted_f1"] <= 1 for row in trainer.history) and "test_weighted_f1" in test
    assert 0 <= test["test_balanced_accuracy"] <= 1 and (test["test_roc_auc"] is None or 0 <= test["test_roc_auc"] <= 1)
