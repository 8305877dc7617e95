"""The located-blocks study (issue 49, item 4: the node task per kind and per block size, with its rivals) scores
the GNN and both rivals in the task's own words on the run's own test split: its numbers for all sets are those the
run itself reported (the GNN's test metrics, the rule's and the trees'), and its pooled rows add the totals of the
seeds before dividing."""

import json
import sys

import pytest
import torch

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks" / "located_blocks"))
import study_located_blocks  # noqa: E402


@pytest.fixture(scope="module")
def study(tmp_path_factory, monkeypatch_module):
    work = tmp_path_factory.mktemp("located_blocks")
    results = work / "results.json"
    monkeypatch_module.setattr(sys, "argv", [
        "study_located_blocks.py", "--seeds", "1", "--per-kind", "10", "--n", "48", "56", "--block-sizes", "8", "12",
        "--epochs", "2", "--data", str(work / "data"), "--runs", str(work / "runs"), "--json", str(results)])
    assert study_located_blocks.main() == 0
    return json.loads(results.read_text())


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_the_study_reproduces_what_the_run_reported_for_the_gnn_and_both_rivals(study):
    (run,) = study["runs"]
    summary = json.loads((REPO / run["run_dir"] / "summary.json").read_text())
    every = run["metrics"]["all"]
    for marker, prefix in (("gnn", "test"), ("rule", "rival"), ("trees", "trees")):
        for metric in ("accuracy", "recall", "f1", "iou"):
            assert every[marker][metric] == pytest.approx(summary[f"{prefix}_{metric}"]), (marker, metric)
    assert run["rival_rule"] == summary["rival_rule"]
    assert run["sets"]["all"] == summary["num_test"]
    sizes = {name for name in run["sets"] if name.startswith("block_size=")}
    assert sizes <= {"block_size=8", "block_size=12"} and sizes
    assert sum(run["sets"][name] for name in sizes) == run["sets"]["all"]
    assert sum(run["sets"][f"kind={kind}"] for kind in ("merged", "merged_ambiguous") if f"kind={kind}" in run["sets"]) \
        == run["sets"]["all"]


def test_pooled_rows_add_the_totals_of_the_seeds_before_dividing(study):
    from QuantumGrav.analyses.node_rival import totals_metrics
    from QuantumGrav.tasks.node import NodeBinaryTask

    (run,) = study["runs"]
    group = next(name for name in run["totals"] if name.startswith("kind="))
    other = {**run, "seed": 2, "totals": {"all": run["totals"][group]}, "sets": {"all": run["sets"][group]}}
    pooled = study_located_blocks.pooled([run, other])
    summed = torch.tensor(run["totals"]["all"]["trees"]) + torch.tensor(run["totals"][group]["trees"])
    assert pooled["all"]["trees"] == pytest.approx(totals_metrics(summed, NodeBinaryTask()), nan_ok=True)
    assert pooled["all"]["seeds"] == [1, 2] and pooled["all"]["sets"] == run["sets"]["all"] + run["sets"][group]
    assert pooled[group]["seeds"] == [1]
