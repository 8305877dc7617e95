"""The notebooks' test mode (QG.shrink_for_smoke_test), their header line (QG.print_run_header) and the stamp that
scripts/execute_notebooks.sh puts on a full-size run (scripts/stamp_notebook_run.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import QuantumGrav as QG
from QuantumGrav.config.smoke_test import SMOKE_DATA, SMOKE_TEST_ENV

REPO = Path(__file__).resolve().parents[2]
FULL = {"num_samples": 2000, "n_min": 64, "n_max": 128, "num_epochs": 40, "world_size": 2}


def test_without_the_switch_nothing_changes_and_nothing_is_printed(monkeypatch, capsys):
    monkeypatch.delenv(SMOKE_TEST_ENV, raising=False)
    namespace = dict(FULL)
    assert QG.shrink_for_smoke_test(namespace, num_samples=40, num_epochs=3) == {}
    assert namespace == FULL and capsys.readouterr().out == ""


def test_the_switch_shrinks_to_the_test_values_and_never_grows(monkeypatch, capsys):
    monkeypatch.setenv(SMOKE_TEST_ENV, "1")
    namespace = {**FULL, "num_epochs": 2}
    changed = QG.shrink_for_smoke_test(namespace, num_samples=40, n_min=8, n_max=12, num_epochs=3, world_size=2)
    assert namespace == {"num_samples": 40, "n_min": 8, "n_max": 12, "num_epochs": 2, "world_size": 2}
    assert changed == {"num_samples": (2000, 40), "n_min": (64, 8), "n_max": (128, 12)}
    assert capsys.readouterr().out == (f"test mode ({SMOKE_TEST_ENV}=1): num_samples 2000 -> 40, n_min 64 -> 8, "
                                       "n_max 128 -> 12\n")


def test_papermill_parameters_are_kept_but_data_sizes_stay_within_the_smoke_data(monkeypatch):
    monkeypatch.setenv(SMOKE_TEST_ENV, "1")
    # IPython's input history: the parameters cell, then the cell papermill injected for -p world_size 3 ...
    history = ["", "num_samples = 2000\nworld_size = 2\n",
               "# Parameters\nworld_size = 3\nnum_epochs = 5\nnum_samples = 500\nn_min = 10\n"]
    namespace = {"In": history, "num_samples": 500, "n_min": 10, "n_max": 128, "num_epochs": 5, "world_size": 3}
    QG.shrink_for_smoke_test(namespace, num_samples=30, n_min=8, n_max=12, num_epochs=2, world_size=2)
    assert (namespace["world_size"], namespace["num_epochs"]) == (3, 5)  # asked for: kept
    # load_config shrinks every config to SMOKE_DATA under the switch: the notebook's variables must say the same
    assert [namespace[k] for k in ("num_samples", "n_min", "n_max")] == [SMOKE_DATA[k] for k in ("num_samples",
                                                                                                 "n_min", "n_max")]


def test_the_notebook_variables_agree_with_the_config_load_config_builds(monkeypatch):
    monkeypatch.setenv(SMOKE_TEST_ENV, "1")
    namespace = dict(FULL)
    QG.shrink_for_smoke_test(namespace, num_samples=40, n_min=8, n_max=12)
    data = QG.load_config(REPO / "configs" / "train.yaml", {f"data.{k}": namespace[k] for k in SMOKE_DATA})["data"]
    assert {k: data[k] for k in SMOKE_DATA} == {k: namespace[k] for k in SMOKE_DATA}


@pytest.mark.parametrize(("test_values", "message"), [
    ({"num_sample": 40}, "no parameter named ['num_sample']"),
    ({"num_samples": 100}, "the test data sizes {'num_samples': 100} exceed SMOKE_DATA"),
])
def test_a_wrong_call_is_refused_in_either_mode(monkeypatch, test_values, message):
    for switch in ("0", "1"):
        monkeypatch.setenv(SMOKE_TEST_ENV, switch)
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("{", r"\{")):
            QG.shrink_for_smoke_test(dict(FULL), **test_values)


def test_the_header_says_the_size_and_marks_a_test_mode_run(monkeypatch, capsys):
    monkeypatch.delenv(SMOKE_TEST_ENV, raising=False)
    QG.print_run_header("2,000 causal sets of 64-128 elements", epochs=40, processes=2)
    QG.print_run_header("2,000 causal sets", epochs=None, processes=1)
    monkeypatch.setenv(SMOKE_TEST_ENV, "1")
    QG.print_run_header("40 causal sets of 8-12 elements", epochs=1, processes=1)
    assert capsys.readouterr().out.splitlines() == [
        "this run: 2,000 causal sets of 64-128 elements, up to 40 epochs, 2 processes",
        "this run: 2,000 causal sets, 1 process",
        f"this run: 40 causal sets of 8-12 elements, up to 1 epoch, 1 process (test mode: {SMOKE_TEST_ENV}=1: the "
        "numbers below say nothing at this size and the text describes the full-size run; unset it for real results)"]


def _executed_notebook(path: Path, header: str) -> Path:
    notebook = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("QG.print_run_header(...)")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=header + "\nmore\n")]
    notebook.cells = [nbformat.v4.new_markdown_cell("# title"), cell]
    nbformat.write(notebook, path)
    return path


def _stamp(notebook: Path, record: Path) -> subprocess.CompletedProcess:
    code = ("import sys; sys.path.insert(0, 'scripts'); import stamp_notebook_run as s; "
            f"print(s.stamp(s.Path({str(notebook)!r}), 353.0, 2, s.Path({str(record)!r})))")
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)


def test_the_stamp_puts_the_minutes_of_this_run_in_the_header_and_the_record(tmp_path):
    notebook = _executed_notebook(tmp_path / "02_x.ipynb", "this run: 2,000 causal sets, 40 epochs, 1 process")
    record = tmp_path / "stored_runs.json"
    assert _stamp(notebook, record).stdout.strip() == "stored outputs: 2,000 causal sets, 40 epochs, 1 process, 5.9 min on 2 CPU cores"
    output = nbformat.read(notebook, as_version=4).cells[1].outputs[0]
    assert output.text == "stored outputs: 2,000 causal sets, 40 epochs, 1 process, 5.9 min on 2 CPU cores\nmore\n"
    assert json.loads(record.read_text()) == {
        "02_x.ipynb": {"run": "2,000 causal sets, 40 epochs, 1 process", "minutes": 5.9, "cpu_cores": 2}}


@pytest.mark.parametrize(("header", "message"), [
    ("this run: 40 causal sets, 1 process (test mode: QUANTUMGRAV_SMOKE_TEST=1: the numbers below say nothing at "
     "this size and the text describes the full-size run; unset it for real results)",
     "ran in test mode"),
    ("stored outputs: 2,000 causal sets, 1 process, 5.9 min on 2 CPU cores", "its first output is not the line"),
])
def test_the_stamp_refuses_a_test_mode_run_and_a_notebook_without_a_header(tmp_path, header, message):
    notebook = _executed_notebook(tmp_path / "02_x.ipynb", header)
    before = notebook.read_bytes()
    result = _stamp(notebook, tmp_path / "stored_runs.json")
    assert result.returncode != 0 and message in result.stderr
    assert notebook.read_bytes() == before and not (tmp_path / "stored_runs.json").exists()


def test_nbval_runs_the_notebooks_in_test_mode_and_the_rest_of_the_suite_without_it(tmp_path):
    """The root conftest.py: a notebook's kernel sees the switch, a test collected after it in the same process
    does not, and the suite's own conftest keeps the name ``conftest`` that its modules import helpers from."""
    (tmp_path / "conftest.py").write_text((REPO / "conftest.py").read_text())
    folder, tests = tmp_path / "notebooks", tmp_path / "tests"
    folder.mkdir()
    tests.mkdir()
    cell = nbformat.v4.new_code_cell("import os\nprint(os.environ.get('QUANTUMGRAV_SMOKE_TEST'))")
    cell.outputs, cell.execution_count = [nbformat.v4.new_output("stream", name="stdout", text="1\n")], 1
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [cell]
    nbformat.write(notebook, folder / "switch.ipynb")
    (tests / "conftest.py").write_text("HELPER = 'the suite'\n")
    for name in ("test_before.py", "test_after.py"):
        (tests / name).write_text(
            "import os\n\nfrom conftest import HELPER\n\n\ndef test_the_switch_is_off():\n"
            "    assert 'QUANTUMGRAV_SMOKE_TEST' not in os.environ and HELPER == 'the suite'\n")
    env = {key: value for key, value in os.environ.items() if key != SMOKE_TEST_ENV}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval",
                             "tests/test_before.py", "notebooks/switch.ipynb", "tests/test_after.py"], cwd=tmp_path,
                            env=env, capture_output=True, text=True)
    assert result.returncode == 0 and "3 passed" in result.stdout, result.stdout + result.stderr
