"""The sensitivity study (issue 49, item 3) draws the destroyed sets' k from the list it is given, reads each curve
at exactly those k, and keeps one list per results file: pooled curves of two lists would add up the points of two
different studies."""

import json
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks" / "sensitivity"))
import study_sensitivity  # noqa: E402

CHANGES = [2, 8]


def run_study(monkeypatch, work, changes):
    monkeypatch.setattr(sys, "argv", [
        "study_sensitivity.py", "--rows", "strongest_baseline", "--n", "72", "--dimensions", "3", "--seeds", "1",
        "--per-kind", "15", "--changed-relations", *map(str, changes), "--data", str(work / "data"),
        "--workers", "2", "--json", str(work / "results.json")])
    return study_sensitivity.main()


def test_the_curves_are_read_at_the_given_k_and_a_results_file_keeps_one_list(tmp_path, monkeypatch, capsys):
    assert run_study(monkeypatch, tmp_path, CHANGES) == 0
    (run,) = json.loads((tmp_path / "results.json").read_text())["runs"]
    assert run["changed_relations"] == CHANGES
    assert run["costs"]["generation_workers"] == 2
    assert [point["size"] for point in run["curves"]["destroyed"]["points"]] == CHANGES
    assert sum(point["sets"] for point in run["curves"]["destroyed"]["points"]) == run["counts"]["test"]["destroyed"]

    before = (tmp_path / "results.json").read_text()
    with pytest.raises(SystemExit) as refused:
        run_study(monkeypatch, tmp_path, [4, 16])
    assert refused.value.code == 2
    assert "holds runs with destroyed sets of k in [2, 8], not [4, 16]" in capsys.readouterr().err
    assert (tmp_path / "results.json").read_text() == before
