"""The tutorial notebooks, run through papermill with NON-default parameters.

``pytest notebooks --nbval`` runs every notebook in its test mode (notebooks/conftest.py sets
QUANTUMGRAV_SMOKE_TEST=1) against its stored outputs, which are full-size runs. These tests check that the
parameters really steer the notebooks and that what they teach still holds for other values: a different data
set size, model width, number of epochs, early-stopping patience and validation mode. The notebooks that have a
test mode run here in it too (``smoke_test=True``): what a test does not give explicitly takes its test value,
never its full-size one, and what it gives is kept (data sizes at most the smoke-test data's). Each notebook prints a one-line
JSON summary in its last cell; the tests read it from the executed copy (written to tmp_path),
and look at the files the runs left behind. Notebook 06 (ten processes, torchrun restarts) runs once,
under nbval: its cells assert what it teaches in terms of its parameters, and test_restarts.py
continues runs on other world sizes than its default.
"""

from __future__ import annotations

import ast
import csv
import json
import os
import re
import shutil
from pathlib import Path
from unittest import mock

import pytest

papermill = pytest.importorskip("papermill")
nbformat = pytest.importorskip("nbformat")

import QuantumGrav as QG  # noqa: E402
from QuantumGrav.data.causal_sets import NODE_FEATURES  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    """One data cache for the notebooks of this module (never the repository's notebooks/_data)."""
    return tmp_path_factory.mktemp("notebook_data")


def run_notebook(name: str, output_dir: Path, smoke_test: bool = False, cwd: Path = NOTEBOOKS,
                 **parameters) -> nbformat.NotebookNode:
    """Execute notebooks/<name> with ``parameters`` (working directory ``cwd``: notebooks/, like Jupyter and
    nbval) into output_dir and return the executed notebook. A failing cell raises. ``smoke_test``: in the
    notebook's test mode (the kernel inherits QUANTUMGRAV_SMOKE_TEST=1)."""
    output = output_dir / name
    switch = {"QUANTUMGRAV_SMOKE_TEST": "1" if smoke_test else "0"}
    with mock.patch.dict(os.environ, switch):
        papermill.execute_notebook(str(NOTEBOOKS / name), str(output), parameters=parameters, cwd=str(cwd),
                                   kernel_name="python3", progress_bar=False, log_output=False)
    return nbformat.read(output, as_version=4)


def last_cell_summary(notebook: nbformat.NotebookNode) -> dict:
    """The JSON line printed by the notebook's last code cell."""
    last = [cell for cell in notebook.cells if cell.cell_type == "code"][-1]
    text = "".join(out.get("text", "") for out in last.outputs
                   if out.output_type == "stream" and out.name == "stdout")
    return json.loads(text)


def stored_summary(name: str) -> dict:
    return last_cell_summary(nbformat.read(NOTEBOOKS / name, as_version=4))


def test_causal_sets_notebook_with_a_smaller_dataset(tmp_path, data_root):
    notebook = run_notebook("01_causal_sets.ipynb", tmp_path, smoke_test=True, n_draw=32, num_samples=30, n_min=8,
                            n_max=10, mm_repeats=8, seed=7, data_root=str(data_root))
    summary = last_cell_summary(notebook)
    assert summary["num_samples"] == 30 and summary["num_classes"] == 5
    assert 8 <= summary["n_range"][0] <= summary["n_range"][1] <= 10
    assert summary["num_test"] == len(QG.split_indices(30, (0.7, 0.15, 0.15), 42)[2])
    assert 0.0 <= summary["baseline_accuracy"] <= 1.0
    for d, estimate in summary["myrheim_meyer_dimension"].items():
        assert abs(estimate - int(d)) < 0.3


def test_single_process_notebook_with_a_narrower_model_and_fewer_epochs(tmp_path, data_root):
    runs = tmp_path / "runs"
    notebook = run_notebook("02_train_single_process.ipynb", tmp_path, smoke_test=True, hidden_channels=16,
                            num_epochs=2, extra_epochs=1, data_root=str(data_root), runs_root=str(runs))
    summary = last_cell_summary(notebook)

    assert summary["hidden_channels"] == [16, 16, 16]
    config = QG.load_config(REPO / "configs" / "train.yaml", {"model.hidden_channels": [16, 16, 16]})
    expected = QG.count_parameters(QG.build_model(config["model"], len(NODE_FEATURES), 5))["total_params"]
    assert summary["parameters"] == expected
    assert summary["parameters"] < stored_summary("02_train_single_process.ipynb")["parameters"]  # width 128 there
    assert summary["first_run_epochs"] == [0, 1]
    assert summary["resumed_epochs"] == [0, 1, 2]

    # The resumed run continued in the same directory: one run, three epochs in metrics.csv.
    (run_dir,) = runs.iterdir()
    with open(run_dir / "metrics.csv", newline="") as f:
        assert [int(row["epoch"]) for row in csv.DictReader(f)] == [0, 1, 2]
    assert sorted(summary["run_files"]) == summary["run_files"]
    assert {"checkpoints/best.pt", "checkpoints/last.pt", "summary.json", "logs/rank_0.log"} <= set(summary["run_files"])
    run_summary = json.loads((run_dir / "summary.json").read_text())  # rewritten by the resumed run
    assert run_summary["stopped_at_epoch"] == 2 and run_summary["stop_reason"] == "completed 3 epochs"


def test_ddp_notebook_stops_every_rank_at_the_same_epoch(tmp_path, data_root):
    runs = tmp_path / "runs"
    notebook = run_notebook("04_train_ddp.ipynb", tmp_path, smoke_test=True, world_size=2, num_epochs=3, patience=1,
                            min_delta=10.0, validation_mode="rank0", data_root=str(data_root), runs_root=str(runs))
    summary = last_cell_summary(notebook)

    assert summary["world_size"] == 2 and summary["num_epochs"] == 3 and summary["validation_mode"] == "rank0"
    assert summary["early_stopped"] is True
    assert summary["stopped_at_epoch"] == 1  # patience 1: epoch 0 is the best, epoch 1 does not improve by 10
    assert summary["trained_epochs"] == [0, 1]
    assert summary["ranks_stopped_at"] == {"0": 1, "1": 1}
    assert summary["single_process_validation_agrees"] is True
    # Two processes with batch 32 end where one process with batch 64 ends, to float precision.
    combined = summary["combined_batches"]
    assert combined["train_graphs"] % 2 == 0 and combined["max_difference"] < 1e-5 < combined["max_change"]
    # The step arithmetic of one process against two: the two-process figure is what the run itself did.
    steps = summary["steps_per_epoch"]
    assert set(steps) == {"1", "2"} and steps["1"] >= steps["2"] >= 1

    # The DDP run directory (the others: the notebook's one-process check and its throughput runs) has a log per rank.
    ddp_run = runs / summary["run_dir"]
    for rank in (0, 1):
        log = (ddp_run / "logs" / f"rank_{rank}.log").read_text()
        assert f"[RANK {rank}]" in log and "training finished at epoch 1: early stopping" in log
    assert f"({steps['2']} train batches per process per epoch)" in (ddp_run / "logs" / "rank_0.log").read_text()
    run_summary = json.loads((ddp_run / "summary.json").read_text())
    assert run_summary["stopped_at_epoch"] == 1 and run_summary["derived"]["effective_batch_size"] == 2 * 32
    assert set(summary["throughput_graphs_per_s"]) == {"1", "2", "3"}

    # The notebook shows the refusal of a notebook-defined loss function.
    outputs = "".join(out.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                      for out in cell.outputs if out.output_type == "stream")
    assert "UserError: criterion = __main__.smoothed_cross_entropy: spawned worker processes cannot import" in outputs


# The notebooks whose stored outputs are full-size runs with a header: all of them.
WITH_HEADER = ("01_causal_sets.ipynb", "02_train_single_process.ipynb", "03_ddp_by_hand.ipynb", "04_train_ddp.ipynb",
               "05_logging_and_wandb.ipynb", "06_fault_tolerance.ipynb", "07_your_own_data.ipynb",
               "08_hyperparameter_search.ipynb", "09_manifold_like.ipynb", "10_higher_dimensions_and_located_defects.ipynb")


def test_stored_outputs_are_full_size_runs_whose_header_gives_the_minutes_they_took():
    runs = json.loads((NOTEBOOKS / "stored_runs.json").read_text())
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        outputs = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs]
        texts = "".join(out.get("text", "") for out in outputs)
        assert "QUANTUMGRAV_SMOKE_TEST" not in texts, f"{path.name}: a test-mode output is stored"
        if not any("print_run_header(" in cell.source for cell in notebook.cells):
            assert path.name not in WITH_HEADER, f"{path.name} prints no header"
            continue
        record = runs[path.name]
        header = outputs[0].text.splitlines()[0]  # the notebook's first output
        assert header == f"stored outputs: {record['run']}, {record['minutes']} min on {record['cpu_cores']} CPU cores"


# A folder of the machine that ran a notebook (/home/..., /work/...): what a reader's clone does not have. Not a URL
# (after ':'), not a relative path (after a word, '.' or '~'), not a unit (graphs/s).
ABSOLUTE_PATH = re.compile(r"(?<![\w./~:\-])/(?:[\w.+@~\-]+/)+[\w.+@~\-]*")
# Examples that the repository's own files print, not folders of a machine: configs/train_quantumgrav_jl.yaml's comment.
EXAMPLE_PATHS = {"/scratch/me/qg_features"}
# Notebooks whose stored outputs predate relative run paths, each with why it was not re-executed yet. Strict: a
# notebook re-executed since must leave the list.
ABSOLUTE_PATHS_LEFT: dict[str, str] = {}


def _stored_texts(notebook: Path) -> list[str]:
    texts = []
    for cell in nbformat.read(notebook, as_version=4).cells:
        for out in cell.get("outputs", []):
            texts += [out.get("text", ""), "\n".join(out.get("traceback", []))]
            texts += [value for key, value in out.get("data", {}).items() if key.startswith("text/")]
    return texts


@pytest.mark.parametrize("name", [pytest.param(path.name, marks=[pytest.mark.xfail(
    strict=True, reason=ABSOLUTE_PATHS_LEFT[path.name])] if path.name in ABSOLUTE_PATHS_LEFT else [])
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))])
def test_stored_outputs_show_run_paths_relative_to_the_notebook(name):
    found = [match for text in _stored_texts(NOTEBOOKS / name) for match in ABSOLUTE_PATH.findall(text)
             if match not in EXAMPLE_PATHS]
    assert not found, f"{name}: absolute paths in its stored outputs: {sorted(set(found))[:5]}"


def test_your_own_data_notebook_with_other_sets_and_a_lower_threshold(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(NOTEBOOKS))  # the run's config names my_causal_sets classes
    runs = tmp_path / "runs"
    notebook = run_notebook("07_your_own_data.ipynb", tmp_path, smoke_test=True, num_sets=90, num_epochs=2,
                            launch_epochs=2, hidden=16, threshold=0.4, seed=3, runs_root=str(runs))
    summary = last_cell_summary(notebook)

    assert summary["num_sets"] == 90 and summary["launch_epochs"] == [0, 1]
    assert summary["binary_metrics"] == ["test_accuracy", "test_balanced_accuracy", "test_f1", "test_loss",
                                        "test_precision", "test_recall", "test_roc_auc", "test_weighted_f1"]
    assert summary["regression_metrics"] == ["test_loss", "test_mae", "test_r2", "test_rmse"]
    # Three runs: binary and regression on one process, binary on two (a log per rank).
    run_summaries = {run.name: json.loads((run / "summary.json").read_text()) for run in runs.iterdir()}
    assert len(run_summaries) == 3
    (ddp_run,) = [run for run in runs.iterdir() if (run / "logs" / "rank_1.log").exists()]
    config = QG.load_config(ddp_run / "config.yaml")
    assert config["task"]["threshold"] == 0.4 and config["data"]["kwargs"]["num_sets"] == 90
    assert any((run / "figures" / "predictions.png").exists() for run in runs.iterdir())

    outputs = "".join(out.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                      for out in cell.outputs if out.output_type == "stream")
    assert "ConfigError: dataset (the object passed to the trainer): item 0 does not fit the binary task" in outputs
    assert "UserError: data.type = __main__.NotebookSets: spawned worker processes cannot import" in outputs


def test_hyperparameter_search_notebook_on_one_process_with_fewer_trials(tmp_path, data_root):
    runs = tmp_path / "runs"
    notebook = run_notebook("08_hyperparameter_search.ipynb", tmp_path, smoke_test=True, trials=3, nproc=1,
                            num_epochs=2, retrain_epochs=3, data_root=str(data_root), runs_root=str(runs))
    summary = last_cell_summary(notebook)

    assert summary["trials"] == 3 and summary["nproc"] == 1 and summary["finished"] == 3
    assert summary["best_is_complete"] is True and summary["retrained_epochs"] == [0, 1, 2]
    folder = runs / "studies" / "notebook"
    with open(folder / "trials.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert sum(row["state"] in ("COMPLETE", "PRUNED") for row in rows) == 3
    for row in rows:  # every trial a run of one process, under the study folder
        assert Path(row["run_dir"]).parent == folder / "trials"
        assert sorted(p.name for p in (Path(row["run_dir"]) / "logs").iterdir()) == ["rank_0.log"]
    best = QG.load_config(folder / "best.yaml")
    assert best["training"]["num_epochs"] == 2 and best["data"]["num_samples"] == 40  # the smoke-test data
    (retrained,) = [run for run in runs.iterdir() if run.name.startswith("run-")]  # the retrained best trial
    retrained_summary = json.loads((retrained / "summary.json").read_text())  # retrained for retrain_epochs, with both baselines
    assert retrained_summary["stopped_at_epoch"] == 2
    assert {"baseline_accuracy", "strong_baseline_accuracy"} <= set(retrained_summary)


def test_ddp_by_hand_notebook_on_three_processes(tmp_path, data_root):
    """Notebook 03 writes its scripts next to itself (%%writefile) and runs them with torchrun: here in a copy of
    notebooks/, so that nbval's run of the same notebook may write the repository's copies at the same time."""
    folder = tmp_path / "notebooks"
    shutil.copytree(NOTEBOOKS, folder, ignore=shutil.ignore_patterns("_data", "_runs", ".ipynb_checkpoints"))
    notebook = run_notebook("03_ddp_by_hand.ipynb", tmp_path, cwd=folder, world_size=3, num_samples=110,
                            hang_timeout_s=4, data_root=str(data_root), runs_root=str(tmp_path / "runs"))
    summary = last_cell_summary(notebook)

    train, val, _ = QG.split_indices(110, (0.7, 0.15, 0.15), 42)
    assert summary["world_size"] == 3 and summary["train_graphs"] == len(train)
    assert summary["val_shards"] == [len(val[rank::3]) for rank in range(3)] and len(set(summary["val_shards"])) > 1
    assert summary["graphs_per_rank"] == -(-len(train) // 3)  # padded up to a whole number per rank
    # Stopped by rank 0's early stopping on its own patience, every rank after the same epoch.
    assert summary["stopped_early"] and set(summary["ranks_left_after"]) == {"0", "1", "2"}
    assert len(set(summary["ranks_left_after"].values())) == 1
    assert summary["same_metrics_on_every_rank"] and summary["same_parameters_on_every_rank"]
    assert summary["checksums_gathered"] == 3 and summary["exact_equals_one_process"]
    assert summary["set_epoch_reshuffles"] and summary["no_set_epoch_replays"]
    assert summary["hang_timed_out"] and summary["hang_failed_in_backward"]  # a rank waiting for rank 0
    assert summary["rank0_state_failed_ranks"] and 0 not in summary["rank0_state_failed_ranks"]
    assert summary["first_script_same_weights"]
    # The scripts and every run's results stayed in the copy and under runs_root.
    assert (folder / "ddp_train.py").read_text() == (NOTEBOOKS / "ddp_train.py").read_text()
    assert sorted(p.name for p in (tmp_path / "runs" / "03_ddp_by_hand" / "train").iterdir()) == [
        "rank_0.json", "rank_1.json", "rank_2.json", "settings.json", "weights.pt"]


def _hazard_table() -> list[tuple[str, str]]:
    """(handled in, proven by) of each row of the table of DDP hazards in docs/ddp_hazards.md."""
    text = (REPO / "docs" / "ddp_hazards.md").read_text()
    lines = text[text.index("| hazard | handled in"):].splitlines()
    rows = [line.split("|")[2:4] for line in lines[2:] if line.startswith("| ")]
    return [(handled.strip(), proven.strip()) for handled, proven in rows]


def _names_by_file(column: str) -> list[tuple[str, str]]:
    """'`a.py`: `f`, `C.m`; `b.py`: `g`' -> [("a.py", "f"), ("a.py", "C.m"), ("b.py", "g")]."""
    pairs = []
    for part in column.split(";"):
        file, names = part.split(":", 1)
        pairs += [(file.strip().strip("`"), name) for name in re.findall(r"`([\w.]+)`", names)]
    return pairs


def _defines(path: Path, dotted: str) -> bool:
    scope = ast.parse(path.read_text()).body
    for name in dotted.split("."):
        found = [node for node in scope if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name]
        if not found:
            return False
        scope = found[0].body
    return True


def test_the_table_of_ddp_hazards_names_library_code_and_tests_that_exist():
    rows = _hazard_table()
    assert len(rows) >= 10
    library, tests = REPO / "QuantumGravPy" / "src" / "QuantumGrav", REPO / "QuantumGravPy" / "tests"
    for handled, proven in rows:
        code, checks = _names_by_file(handled), _names_by_file(proven)
        assert code and checks, (handled, proven)
        for file, name in code:
            assert _defines(library / file, name), f"{file} defines no {name}"
        for file, name in checks:
            assert name.startswith("test_") and _defines(tests / file, name), f"{file} has no test {name}"


def test_the_scripts_next_to_notebook_03_are_the_ones_its_cells_write():
    """first_ddp.py and ddp_train.py are committed (a terminal runs them too) and written by 03's %%writefile cells:
    the two must not drift apart."""
    written: dict[str, str] = {}
    for cell in nbformat.read(NOTEBOOKS / "03_ddp_by_hand.ipynb", as_version=4).cells:
        first, _, body = cell.source.partition("\n")
        if cell.cell_type == "code" and first.startswith("%%writefile"):
            name = first.split()[-1]
            written[name] = (written.get(name, "") if " -a " in f" {first} " else "") + body + "\n"
    assert set(written) == {"first_ddp.py", "ddp_train.py"}
    for name, text in written.items():
        assert (NOTEBOOKS / name).read_text() == text, f"notebooks/{name} differs from what notebook 03 writes"


def test_higher_dimensions_notebook_in_two_dimensions(tmp_path):
    runs = tmp_path / "runs"
    notebook = run_notebook("10_higher_dimensions_and_located_defects.ipynb", tmp_path, smoke_test=True, dimension=2,
                            changed_k=3, block_m=5, data_root=str(tmp_path / "data"), runs_root=str(runs))
    summary = last_cell_summary(notebook)

    # The drawn defects have exactly the sizes asked for, in the dimension asked for.
    assert summary["dimension"] == 2 and summary["changed_relations"] == 3 and summary["block_elements"] == 5
    assert {d: abs(estimate - int(d)) < 0.5 for d, estimate in summary["myrheim_meyer_dimension"].items()} == \
        {"2": True, "3": True, "4": True}
    assert summary["live_false_alarms"][1] > 0 and summary["live_sets"] == 3 * 20
    # The node run and the relation run, each applied to new sets: one CSV row per element of the node run's sets.
    assert sorted(path.name for path in runs.iterdir()) == sorted([summary["node_run"], summary["relation_run"]])
    for run in runs.iterdir():
        assert json.loads((run / "summary.json").read_text())["stopped_at_epoch"] == 1  # 2 epochs in test mode
        assert QG.load_config(run / "config.yaml")["data"]["kwargs"]["dimension"] == 2
    assert summary["applied_rows"] == summary["applied_sets"] * summary["block_n"]
    assert summary["relations_applied_sets"] >= 1 and summary["drawn_relation_set"][1] >= 1
