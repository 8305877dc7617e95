"""A trained run applied to new data: ``QG.load_run(run_dir)`` and ``python -m QuantumGrav evaluate``.

Three tiny runs are trained once for the module (conftest's TINY config on the generator: its cset types, a
multiclass task; manifold_like, binary; the Myrheim-Meyer dimension, regression) and applied to their own data, to
QuantumGrav.jl stores written with ``write_julia_store``, on one process and on two."""

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import QuantumGrav as QG
from conftest import TINY
from test_store_safety import hostile_store, mixed_store
from QuantumGrav.data import causal_sets as cs
from QuantumGrav.data.zarr_store import write_julia_store

POLYNOMIAL, GRID, LAYERED = 1, 5, 6  # codes of cset_type_encoder in QuantumGrav.jl's produce_data.jl
TARGETS = {"multiclass": "cset_type", "binary": "manifold_like", "regression": "myrheim_meyer_dimension"}
TARGETS_TASK = {"stores": "multiclass"}  # the task of each run not named for its task


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> Path:
    """A produce_data output folder: a store of 2d sprinklings (polynomial) and one of layered orders."""
    folder, rng = tmp_path_factory.mktemp("stores") / "output", np.random.default_rng(0)
    write_julia_store(folder / "polynomial_1.zarr", [cs.sprinkle_diamond(16, 2, rng)[1] for _ in range(6)],
                      [POLYNOMIAL] * 6, [True] * 6)
    write_julia_store(folder / "layered_2.zarr", list(cs.random_layered_orders(4, 16, rng)), [LAYERED] * 4, [False] * 4)
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory, data_root, stores) -> dict[str, Path]:
    """Task -> the directory of a tiny run trained for it on the generator's sets; "stores": one that learned the
    cset_type of the stores' sets."""
    folder = tmp_path_factory.mktemp("runs")
    on_stores = {"data.type": QG.config.yaml_io.resolve_pyobject("QuantumGrav.data.zarr_store.QuantumGravJLDataset"),
                 "data.kwargs": {"path": str(stores), "target": "cset_type"}}
    trained = {}
    for name, overrides in [*((task, {"data.target": target}) for task, target in TARGETS.items()),
                            ("stores", on_stores)]:
        config = QG.load_config(QG.apply_overrides(TINY, {
            "training.path": str(folder), "training.run_name": name, "data.root": str(data_root),
            "training.num_epochs": 2, **overrides}))
        trained[name] = Path(QG.launch(config, nproc=1)["run_dir"])
    return trained


def read_csv(path) -> list[dict[str, str]]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def metrics_of(result: dict) -> dict:
    """The numbers of an evaluation, without what names its run, data and files."""
    return {key: value for key, value in result.items()
            if key not in ("run", "data", "data_name", "predictions_csv", "metrics_json")}


# --------------------------------------------------------------------------- the same model, the same metrics
@pytest.mark.parametrize("name", ["multiclass", "binary", "regression", "stores"])
def test_on_its_own_test_split_a_run_reports_what_its_test_reported(runs, name):
    """The run's own config with --split test is the data of the run's test phase: the same sets, so the same
    metrics (counts exactly; the loss, a mean over other batches, to rounding)."""
    run = runs[name]
    tested = json.loads((run / "summary.json").read_text())
    result = QG.load_run(run).evaluate(run / "config.yaml", split="test")
    assert result["task"] == TARGETS_TASK.get(name, name) and result["count"] == tested["num_test"]
    for metric in QG.load_run(run).task.metric_names:
        assert result[metric] == pytest.approx(tested[f"test_{metric}"], rel=1e-6), metric
    if name != "regression":
        assert result["confusion"] == tested["confusion_matrix"]
        assert list(result["per_class_f1"]) == tested["class_names"]
    assert Path(result["predictions_csv"]) == run / "evaluations" / "config_test" / "predictions.csv"
    assert json.loads(Path(result["metrics_json"]).read_text()) == result


def test_the_csv_has_a_row_per_set_with_its_kind_truth_prediction_and_probability(runs):
    run = QG.load_run(runs["multiclass"])
    result = run.evaluate(runs["multiclass"] / "config.yaml")
    rows = read_csv(result["predictions_csv"])
    assert list(rows[0]) == ["set", "kind", "num_elements", "truth", "predicted", "score", "outside_training_range"]
    low, high = TINY["data"]["n_min"], TINY["data"]["n_max"]
    assert all(low <= int(row["num_elements"]) <= high for row in rows)
    assert [int(row["set"]) for row in rows] == list(range(TINY["data"]["num_samples"])) == list(range(result["count"]))
    assert all(row["kind"] == row["truth"] for row in rows), "the generator's cset types are this run's classes"
    assert {row["truth"] for row in rows} == set(run.task.class_names)
    assert all(1 / 5 <= float(row["score"]) <= 1 for row in rows), "the predicted class's softmax probability"
    assert result["accuracy"] == sum(row["truth"] == row["predicted"] for row in rows) / len(rows)
    for kind, found in result["per_kind"].items():
        of_kind = [row for row in rows if row["kind"] == kind]
        assert found["sets"] == len(of_kind) and found["recall"] == pytest.approx(
            sum(row["truth"] == row["predicted"] for row in of_kind) / len(of_kind))
    predicted = run.predict(runs["multiclass"] / "config.yaml")
    assert [{key: str(value) for key, value in row.items()} for row in predicted] == rows


def test_a_store_a_list_of_stores_and_a_folder_of_stores(runs, stores):
    """A run learned manifold_like on the generator's sets, applied to QuantumGrav.jl stores: one row per stored set
    (its store and group), its kind the store's cset_type name."""
    run = QG.load_run(runs["binary"])
    one = run.evaluate(stores / "polynomial_1.zarr")
    assert one["count"] == 6 and list(one["per_kind"]) == ["polynomial"]
    assert Path(one["predictions_csv"]).parent == runs["binary"] / "evaluations" / "polynomial_1"
    folder = run.evaluate(stores, out=stores.parent / "folder" / "predictions.csv")
    listed = run.evaluate([stores / "layered_2.zarr", stores / "polynomial_1.zarr"])
    assert metrics_of(folder) == metrics_of(listed)
    assert {kind: found["sets"] for kind, found in folder["per_kind"].items()} == {"layered": 4, "polynomial": 6}
    rows = read_csv(folder["predictions_csv"])
    assert list(rows[0]) == ["set", "store", "group", "kind", "num_elements", "truth", "predicted", "score",
                             "outside_training_range"]
    assert {row["num_elements"] for row in rows} == {"16"}
    assert [(row["store"], row["group"]) for row in rows] == [("layered_2.zarr", f"cset_{i}") for i in range(1, 5)] + [
        ("polynomial_1.zarr", f"cset_{i}") for i in range(1, 7)]
    assert all(row["truth"] == ("manifold_like" if row["kind"] == "polynomial" else "non_manifold_like") for row in rows)
    threshold = run.task.threshold
    assert all((float(row["score"]) >= threshold) == (row["predicted"] == "manifold_like") for row in rows)
    assert folder["per_kind"]["layered"]["recall"] == sum(row["predicted"] == "non_manifold_like"
                                                          for row in rows[:4]) / 4
    layered = folder["per_kind"]["layered"]
    assert layered["recall_low"] <= layered["recall"] <= layered["recall_high"]
    truth = [row["truth"] == "manifold_like" for row in rows]
    predicted = [row["predicted"] == "manifold_like" for row in rows]
    assert folder["balanced_accuracy"] == pytest.approx(  # the mean of the two classes' recalls
        (sum(p and t for p, t in zip(predicted, truth)) / 6 + sum(not p for p in predicted[:4]) / 4) / 2)
    positives = [float(row["score"]) for row in rows[4:]]
    assert folder["roc_auc"] == pytest.approx(  # how often a manifold-like set outscores a layered one
        sum((p > n) + 0.5 * (p == n) for p in positives for n in map(float, (r["score"] for r in rows[:4]))) / 24)


def test_the_command_prints_the_table_and_writes_the_files(cli_in_process, runs, stores, tmp_path):
    out = tmp_path / "out" / "predictions.csv"
    done = cli_in_process("evaluate", "--run", str(runs["binary"]), "--data", str(stores), "--out", str(out),
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "applied to output (10 causal sets)" in done.stdout
    for line in ("kind", "layered", "polynomial", "non_manifold_like", "weighted_f1", "balanced_accuracy", "roc_auc",
                 "95% interval", str(out)):
        assert line in done.stdout
    assert len(read_csv(out)) == 10 and json.loads((out.parent / "metrics.json").read_text())["count"] == 10


def test_two_processes_give_exactly_the_metrics_and_predictions_of_one(runs, tmp_path):
    """Each rank predicts its shard; rank 0 gathers them and computes every number from all sets in order."""
    run, config = QG.load_run(runs["binary"]), runs["binary"] / "config.yaml"
    one = run.evaluate(config, out=tmp_path / "one" / "p.csv")
    two = run.evaluate(config, out=tmp_path / "two" / "p.csv", nproc=2)
    assert metrics_of(two) == metrics_of(one) and two["count"] == TINY["data"]["num_samples"]
    assert read_csv(two["predictions_csv"]) == read_csv(one["predictions_csv"])


@pytest.mark.full_suite  # a torchrun agent and two fresh interpreters, as test_launchers.py's
def test_under_torchrun_the_ranks_share_the_work_and_rank_0_writes_what_one_process_writes(runs, tmp_path):
    run, config = runs["binary"], runs["binary"] / "config.yaml"
    one = QG.load_run(run).evaluate(config, out=tmp_path / "one" / "p.csv")
    library = str(Path(QG.__file__).parents[1])
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           f"--master_port={QG.find_free_port()}", "-m", "QuantumGrav", "evaluate", "--run-dir",
                           str(run), "--data", str(config), "--out", str(tmp_path / "two" / "p.csv")],
                          env={**os.environ, "PYTHONPATH": library}, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("applied to config") == 1, "rank 0 alone prints the table"
    assert read_csv(tmp_path / "two" / "p.csv") == read_csv(one["predictions_csv"])
    assert metrics_of(json.loads((tmp_path / "two" / "metrics.json").read_text())) == metrics_of(one)


def test_a_checkpoint_written_before_model_io_is_rebuilt_from_the_runs_data(runs, stores, tmp_path):
    old = tmp_path / "old_run"
    shutil.copytree(runs["binary"], old)
    checkpoint = torch.load(old / "checkpoints" / "best.pt", weights_only=True)
    del checkpoint["model_io"]
    torch.save(checkpoint, old / "checkpoints" / "best.pt")
    rebuilt, recorded = QG.load_run(old), QG.load_run(runs["binary"])
    assert rebuilt.task.class_names == recorded.task.class_names and rebuilt.in_channels == recorded.in_channels
    assert metrics_of(rebuilt.evaluate(stores)) == metrics_of(recorded.evaluate(stores))


# --------------------------------------------------------------------------- bad input: one line, exit 2, nothing written
def _config(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _without(run: Path, pattern: str) -> Path:
    for checkpoint in (run / "checkpoints").glob(pattern):
        checkpoint.unlink()
    return run


def _stores_with_a_grid(tmp: Path) -> Path:
    orders = list(cs.random_layered_orders(2, 10, np.random.default_rng(1)))
    write_julia_store(tmp / "mixed" / "layered.zarr", orders, [LAYERED] * 2, [False] * 2)
    write_julia_store(tmp / "mixed" / "grid.zarr", orders, [GRID] * 2, [False] * 2)
    return tmp / "mixed"


BAD_INPUTS = {  # name -> (task of the run, run or data as the case makes it, the phrase of the one line)
    "no such run": ("binary", lambda run, stores, tmp: (tmp / "nowhere", stores), "no such folder"),
    "not a run": ("binary", lambda run, stores, tmp: (stores, stores), "is not a run directory"),
    "no best.pt": ("binary", lambda run, stores, tmp: (_without(run, "best.pt"), stores),
                   "no checkpoints/best.pt (it holds last.pt, previous.pt)"),
    "no checkpoint": ("binary", lambda run, stores, tmp: (_without(run, "*.pt"), stores), "no checkpoint was written"),
    "no such data": ("binary", lambda run, stores, tmp: (run, tmp / "missing.yaml"), "no such file or folder"),
    "a regression run on stores": ("regression", lambda run, stores, tmp: (run, stores),
                                   "stores label their sets with manifold_like and cset_type only"),
    "the generator's classes on stores": ("multiclass", lambda run, stores, tmp: (run, stores),
                                          "are the generator's cset types"),
    "other classes": ("multiclass", lambda run, stores, tmp: (run, _config(tmp / "two_classes.yaml", (
        f"data: {{root: {tmp / 'data'}, num_samples: 6, n_min: 8, n_max: 10, classes: [minkowski_2d, layered]}}"))),
        "its classes are ['minkowski_2d', 'layered'], but the run learned"),
    "other node features": ("binary", lambda run, stores, tmp: (run, _config(tmp / "narrow.yaml", (
        "data: {type: !pyobject own_data_helpers.SetsWithThreeFeatures}"))),
        "have 3 node features (x's columns), but the run's model reads 10"),
    "a kind the run did not learn": ("stores", lambda run, stores, tmp: (run, _stores_with_a_grid(tmp)),
                                     "it holds grid sets, a kind the run did not learn (its classes: polynomial, "
                                     "layered)"),
    "a store declaring 200,000 x 200,000": ("stores", lambda run, stores, tmp: (run, hostile_store(tmp)),
                                            "group cset_21: 'adj' declares 200,000 x 200,000 elements, more than "
                                            "max_elements"),
    "a store option that is none": ("stores", lambda run, stores, tmp: (run, stores, "--store-option", "edges=links"),
                                    "store options: edges is not how stores are read"),
    "a config and a store": ("binary", lambda run, stores, tmp: (run, [_config(tmp / "c.yaml", "data: {}"), stores]),
                             "one YAML config, or QuantumGrav.jl stores"),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_is_one_line_and_exit_2_and_leaves_nothing(cli_in_process, runs, stores, tmp_path, case):
    task, make, phrase = BAD_INPUTS[case]
    run = tmp_path / "run"
    shutil.copytree(runs[task], run, ignore=shutil.ignore_patterns("evaluations"))  # earlier tests wrote some
    run_arg, data, *more = make(run, stores, tmp_path)
    data_args = [str(path) for path in data] if isinstance(data, list) else [str(data)]
    done = cli_in_process("evaluate", "--run", str(run_arg), "--data", *data_args, *more, cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert phrase in lines[0], lines[0]
    assert not (run / "evaluations").exists()


def test_an_out_that_is_a_folder_is_refused_before_any_work(runs, stores, tmp_path):
    with pytest.raises(QG.UserError, match="is a folder; give the predictions CSV's path"):
        QG.load_run(runs["binary"]).evaluate(stores, out=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_the_python_api_refuses_a_hostile_store_and_reads_sets_that_are_not_orders_as_asked(runs, tmp_path):
    """QG.load_run(...).evaluate: the declared size judged before anything is read; not_partial_orders through
    store_options (the CLI's --store-option), its count in the result's notes."""
    run = QG.load_run(runs["binary"])
    with pytest.raises(QG.UserError, match="group cset_21: 'adj' declares 200,000 x 200,000 elements"):
        run.evaluate(hostile_store(tmp_path), out=tmp_path / "hostile.csv")
    store, _ = mixed_store(tmp_path)
    with pytest.raises(QG.UserError, match="is not transitively closed|has a cycle"):
        run.evaluate(store, out=tmp_path / "refused.csv")
    assert not (tmp_path / "refused.csv").exists() and not (tmp_path / "hostile.csv").exists()
    result = run.evaluate(store, out=tmp_path / "skipped.csv", store_options={"not_partial_orders": "skip"})
    assert result["count"] == 5 and len(read_csv(tmp_path / "skipped.csv")) == 5
    assert any("2 of 7 sets were not strict partial orders" in note for note in result["notes"])


def test_the_command_reads_sets_that_are_not_orders_as_its_store_option_says(cli_in_process, runs, tmp_path):
    store, _ = mixed_store(tmp_path)
    out = tmp_path / "skipped" / "predictions.csv"
    done = cli_in_process("evaluate", "--run", str(runs["binary"]), "--data", str(store), "--out", str(out),
                          "--store-option", "not_partial_orders=skip", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "note: QuantumGrav.jl data: 2 of 7 sets were not strict partial orders" in done.stdout
    assert len(read_csv(out)) == 5
