"""A trained run applied to data it never saw, safely (issue 48).

The smoke model (``QUANTUMGRAV_SMOKE_TEST=1``, configs/manifold_like.yaml: QuantumGrav.jl's nine kinds, 4 sets of
each of 24-32 elements) is trained once for the module, then applied:

* to sets of 300 and 2,048 elements: every one is flagged as outside the range the run was trained on (a CSV
  column, a count and a note, a warning), or refused with ``--out-of-range refuse``; its own training sets are not;
* to new stores of the nine kinds: the CSV has each set's N and the defect parameters its store records; a metric
  the sets cannot define is undefined, not 0; a threshold carries how to read it, and none is shown for a model that
  predicts one class for every set.
"""

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import QuantumGrav as QG
from QuantumGrav.data import causal_sets as cs
from QuantumGrav.data.dataset import split_indices
from QuantumGrav.data.kinds import KindsDataset
from QuantumGrav.data.training_range import outside_training_range
from QuantumGrav.data.zarr_store import write_julia_store
from QuantumGrav.evaluation.predictions import describe_evaluation

REPO = Path(__file__).resolve().parents[2]
POLYNOMIAL, LAYERED = 1, 6


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("smoke")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("QUANTUMGRAV_SMOKE_TEST", "1")
        config = QG.load_config(REPO / "configs" / "manifold_like.yaml", [
            f"data.kwargs.path={folder / 'kinds'}", f"training.path={folder / 'runs'}", "training.run_name=smoke",
            "training.device=cpu", "training.num_workers=0", "training.progress_bar=false", "training.figures=false",
            "testing.baselines=false"])
        return Path(QG.launch(config, nproc=1)["run_dir"])


@pytest.fixture(scope="module")
def large_sets(tmp_path_factory) -> Path:
    """Three 2d sprinklings of 300 elements and two of 2,048, and two layered orders of 300, as produce_data
    writes them."""
    folder, rng = tmp_path_factory.mktemp("large") / "output", np.random.default_rng(0)
    write_julia_store(folder / "polynomial.zarr", [cs.sprinkle_diamond(n, 2, rng)[1] for n in (300, 300, 300, 2048,
                                                                                                2048)],
                      [POLYNOMIAL] * 5, [True] * 5)
    write_julia_store(folder / "layered.zarr", list(cs.random_layered_orders(2, 300, rng)), [LAYERED] * 2, [False] * 2)
    return folder


def read_csv(path) -> list[dict[str, str]]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


# --------------------------------------------------------------------------- the range a run was trained on
def test_the_checkpoint_records_the_training_splits_range(smoke_run):
    best = torch.load(smoke_run / "checkpoints" / "best.pt", weights_only=True)
    recorded = best["training_range"]
    low, high = recorded["num_elements"]
    assert 24 <= low <= high <= 32 and recorded["sets"] == len(split_indices(36, [0.7, 0.15, 0.15], 42)[0])
    assert set(recorded["invariants"]) == set(QG.data.causal_sets.INVARIANT_NAMES), "the default head reads them"
    assert recorded["invariants"]["num_elements"] == [float(low), float(high)]
    summary = json.loads((smoke_run / "summary.json").read_text())
    assert summary["training_range"] == recorded


def test_sets_of_300_and_2048_elements_are_flagged_in_the_csv_the_result_and_the_log(smoke_run, large_sets, tmp_path,
                                                                                     caplog):
    run = QG.load_run(smoke_run)
    low, high = run.training_range["num_elements"]
    with caplog.at_level("WARNING", logger="QuantumGrav.evaluate"):
        result = run.evaluate(large_sets, out=tmp_path / "large.csv")
    line = (f"7 of 7 sets lie outside the range the run was trained on (N {low}-{high} and its head invariants; "
            f"outside in: num_elements 7")
    assert result["outside_training_range"] == 7 and result["notes"][0].startswith(line)
    assert line in caplog.text
    rows = read_csv(tmp_path / "large.csv")
    assert [int(row["num_elements"]) for row in rows] == [300, 300] + [300, 300, 300, 2048, 2048]
    assert all(row["outside_training_range"].split(";")[0] == "num_elements" for row in rows)
    assert run.predict(large_sets) == [{**row, "num_elements": int(row["num_elements"]), "set": int(row["set"]),
                                        "score": pytest.approx(float(row["score"]))} for row in rows]


def test_the_command_flags_them_and_refuses_them_when_asked(cli_in_process, smoke_run, large_sets, tmp_path):
    out = tmp_path / "flagged" / "predictions.csv"
    done = cli_in_process("evaluate", "--run", str(smoke_run), "--data", str(large_sets), "--out", str(out),
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "note: 7 of 7 sets lie outside the range the run was trained on" in done.stdout
    refused_out = tmp_path / "refused" / "predictions.csv"
    refused = cli_in_process("evaluate", "--run", str(smoke_run), "--data", str(large_sets), "--out",
                             str(refused_out), "--out-of-range", "refuse", cwd=tmp_path)
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(lines) == 1 and "7 of 7 sets lie outside the range" in lines[0]
    assert "nothing was written" in lines[0] and not refused_out.parent.exists()
    with pytest.raises(QG.UserError, match="7 of 7 sets lie outside the range"):
        QG.load_run(smoke_run).evaluate(large_sets, out=refused_out, out_of_range="refuse")
    with pytest.raises(QG.UserError, match="out_of_range: expected one of"):
        QG.load_run(smoke_run).evaluate(large_sets, out=refused_out, out_of_range="ignore")
    assert not refused_out.parent.exists()


def test_its_own_training_sets_are_inside_the_range(smoke_run, monkeypatch):
    monkeypatch.setenv("QUANTUMGRAV_SMOKE_TEST", "1")
    rows = QG.load_run(smoke_run).predict(smoke_run / "config.yaml")
    train = split_indices(len(rows), [0.7, 0.15, 0.15], 42)[0]
    assert all(rows[i]["outside_training_range"] == "" for i in train)


def test_an_invariant_is_judged_against_its_range_widened_by_a_twentieth_of_its_width():
    recorded = {"num_elements": [24, 32], "invariants": {"ordering_fraction": [0.2, 0.4], "num_elements": [24, 32]}}
    position = QG.data.causal_sets.INVARIANT_NAMES.index("ordering_fraction")
    rows = torch.zeros(4, len(QG.data.causal_sets.INVARIANT_NAMES), dtype=torch.float64)
    rows[:, position] = torch.tensor([0.3, 0.409, 0.411, 0.189])
    assert outside_training_range(recorded, [24, 32, 28, 33], rows) == [
        [], [], ["ordering_fraction"], ["num_elements", "ordering_fraction"]]
    assert outside_training_range({"num_elements": [24, 32]}, [23], None) == [["num_elements"]]


# --------------------------------------------------------------------------- predictions a physicist can plot
@pytest.fixture(scope="module")
def other_kinds(tmp_path_factory) -> Path:
    return KindsDataset(tmp_path_factory.mktemp("other"), num_per_kind=4, n_min=24, n_max=32, seed=1, workers=1).folder


def test_the_csv_has_each_sets_n_and_the_defect_parameters_its_store_records(smoke_run, other_kinds, tmp_path):
    result = QG.load_run(smoke_run).evaluate(other_kinds, out=tmp_path / "kinds.csv")
    rows = read_csv(tmp_path / "kinds.csv")
    assert len(rows) == 36 and all(24 <= int(row["num_elements"]) <= 32 for row in rows)
    dataset = KindsDataset(other_kinds.parent, num_per_kind=4, n_min=24, n_max=32, seed=1, workers=1)
    for index, row in enumerate(rows):
        described = dataset.describe(index)
        assert row["kind"] == described["kind"] and int(row["num_elements"]) == dataset[index].num_nodes
        for name, value in described.items():
            if name not in ("store", "group", "kind"):
                assert row[name] == (json.dumps(value) if isinstance(value, (list, dict)) else str(value)), name
    destroyed = [row for row in rows if row["kind"] == "destroyed"]
    assert all(float(row["flip_fraction"]) > 0 for row in destroyed)
    assert all(row["flip_fraction"] == "" for row in rows if row["kind"] == "grid"), "a column other kinds leave empty"
    assert "by_defect_size" in result


def test_a_threshold_carries_its_caveat_and_a_constant_predictor_shows_none(smoke_run, other_kinds, tmp_path):
    class Constant(torch.nn.Module):
        """Calls every set with more than ``n`` elements manifold-like: with n = 28 some and not others, with
        n = 1000 none."""

        def __init__(self, n: int):
            super().__init__()
            self.n = torch.nn.Parameter(torch.tensor(float(n)))

        def forward(self, batch):
            return (torch.bincount(batch.batch, minlength=batch.num_graphs).float() - self.n).view(-1, 1)

    run = QG.load_run(smoke_run)
    run.model = Constant(28)
    varied = run.evaluate(other_kinds, out=tmp_path / "varied.csv")
    table = describe_evaluation(varied)
    assert varied["constant_prediction"] is None and "90% recall crossed at" in table
    assert ("thresholds: read each threshold beside the recall of the manifold-like kinds (polynomial, "
            "complex_topology) above: a model that calls nearly every set not manifold-like recognises the smallest "
            "defects for free") in table
    run.model = Constant(1000)
    constant = run.evaluate(other_kinds, out=tmp_path / "constant.csv")
    table = describe_evaluation(constant)
    assert constant["constant_prediction"] == "non_manifold_like" and "90% recall crossed at" not in table
    assert ("thresholds: none shown; the model predicts non_manifold_like for every set, so a detection threshold "
            "would measure that, not the defects") in table
    assert constant["precision"] is None and constant["f1"] == 0.0 and constant["recall"] == 0.0
    assert constant["undefined"] == {"precision": "no set was predicted manifold_like (precision divides by them)"}
    assert "precision undefined" in table and "undefined: precision: no set was predicted manifold_like" in table
    assert json.loads(Path(constant["metrics_json"]).read_text())["precision"] is None


def test_a_class_with_no_set_has_no_f1_and_no_recall(smoke_run, large_sets, tmp_path):
    """Only layered orders: no manifold-like set, so its recall (and its F1, when none is predicted) is undefined."""
    result = QG.load_run(smoke_run).evaluate(large_sets / "layered.zarr", out=tmp_path / "layered.csv")
    assert result["recall"] is None and "recall" in result["undefined"]
    assert result["undefined"]["recall"] == "no set is manifold_like (recall divides by them)"
    predicted_positive = result["confusion"][0][1]
    assert (result["per_class_f1"]["manifold_like"] is None) == (predicted_positive == 0)
    table = describe_evaluation(result)
    assert "recall undefined" in table


# --------------------------------------------------------------------------- a run that cannot measure says so
def test_a_smoke_run_whose_test_split_has_no_positive_says_what_is_undefined_and_why(cli_in_process, tmp_path,
                                                                                       monkeypatch):
    """The smoke test of configs/manifold_like.yaml: its 5 test sets hold no manifold-like set (split seed 42), so
    precision, recall and F1 of manifold-like sets are not measured; most kinds have no test set at all."""
    monkeypatch.setenv("QUANTUMGRAV_SMOKE_TEST", "1")
    done = cli_in_process("train", "--config", str(REPO / "configs" / "manifold_like.yaml"), "--set",
                          f"data.kwargs.path={tmp_path / 'kinds'}", "--set", f"training.path={tmp_path / 'runs'}",
                          "--set", "training.num_workers=0", "--set", "training.device=cpu", "--set",
                          "testing.baselines=false", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    notes = [line.removeprefix("note").strip() for line in done.stdout.splitlines() if line.startswith("note ")]
    assert notes[0] == ("undefined on the test split (5 sets): precision: no set was predicted manifold_like "
                        "(precision divides by them); recall: no set is manifold_like (recall divides by them); f1, F1 "
                        "of manifold_like: no set is manifold_like, and none was predicted manifold_like. metrics.csv "
                        "and summary.json carry 0 there (scikit-learn's zero_division) or NaN; read them as not "
                        "measured")
    assert notes[1].startswith("the test split (5 sets) holds no set of ") and "polynomial" in notes[1]
    run_dir = next((tmp_path / "runs").iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["notes"] == notes and (run_dir / "figures" / "recall_by_kind.png").stat().st_size > 0


def test_the_recall_figure_labels_a_kind_without_test_sets_and_an_empty_panel(monkeypatch, tmp_path):
    from QuantumGrav.analyses import figures

    drawn = {}
    monkeypatch.setattr(figures, "save_figure", lambda figure, path: drawn.setdefault("figure", figure) and path)
    by_kind = {"gnn": {"grid": {"sets": 2, "correct": 2, "recall": 1.0}}}
    figures.plot_recall_by_kind(by_kind, {}, {}, tmp_path / "r.png", absent=["polynomial"])
    bars, curves = drawn["figure"].axes
    assert [label.get_text() for label in bars.get_xticklabels()] == ["grid", "polynomial"]
    assert [text.get_text() for text in bars.texts] == ["no test set"]
    assert curves.texts and curves.texts[0].get_text().startswith("no test set of a kind with a drawn defect")


def test_the_recall_figure_gives_each_defect_its_panel_each_model_its_colour_and_each_bin_its_count(monkeypatch,
                                                                                                     tmp_path):
    from QuantumGrav.analyses import figures
    from QuantumGrav.analyses.kind_breakdown import kind_breakdown

    drawn = {}
    monkeypatch.setattr(figures, "save_figure", lambda figure, path: drawn.setdefault("figure", figure) and path)
    descriptions = ([{"kind": "destroyed", "changed_relations": size} for size in range(1, 9)]
                    + [{"kind": "merged", "block_size": size, "block_start": 0} for size in range(1, 9)]
                    + [{"kind": "polynomial"}] * 3)
    rng = np.random.default_rng(0)
    correct = {name: rng.random(len(descriptions)) > 0.3 for name in ("gnn", "strongest_baseline", "exact_test")}
    found = kind_breakdown(descriptions, correct)
    figures.plot_recall_by_kind(found["by_kind"], found["by_defect_size"], {"exact_test": "exact test"},
                                tmp_path / "r.png")
    bars, *panels = drawn["figure"].axes
    assert [panel.get_title() for panel in panels] == list(found["by_defect_size"]) == ["destroyed", "merged"]
    bar_colours = {tuple(patch.get_facecolor()) for patch in bars.patches}
    assert len(bar_colours) == 3  # one per model
    for panel, kind in zip(panels, found["by_defect_size"]):
        lines = {line.get_label(): line.get_color() for line in panel.lines}
        assert lines == {"gnn": "C0", "strongest_baseline": "C1", "exact test": "C2"}
        bins = found["by_defect_size"][kind]["gnn"]["bins"]
        assert [text.get_text() for text in panel.texts] == [f"n={row['sets']}" for row in bins]
        assert sum(row["sets"] for row in bins) == 8
