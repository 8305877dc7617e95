"""A trained node run (configs/inserted_block.yaml: which elements of a merged set are inside its inserted block)
applied to new data: ``QG.load_run(run_dir).evaluate`` / ``.predict`` and ``python -m QuantumGrav evaluate``.

A tiny node run is trained once for the module, then applied to its own test split (the metrics its test reported),
to its whole data (one CSV row per element, checked against the stored labels), to stores written as QuantumGrav.jl
writes them, which record no block (scores only, every metric undefined with the reason; beside a store of sets
without a block, measured on those), on one process and on two (the same rows and numbers), and to bad input (one
line, exit code 2, nothing written)."""

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

zarr = pytest.importorskip("zarr")

import QuantumGrav as QG  # noqa: E402
from QuantumGrav.data.kinds import KindsDataset  # noqa: E402
from QuantumGrav.data.kinds.catalogue import generate_kind  # noqa: E402
from QuantumGrav.data.zarr_store import write_julia_group, write_julia_store  # noqa: E402

from test_node_task import CONFIG, job_settings  # noqa: E402

POLYNOMIAL, MERGED, MERGED_AMBIGUOUS = 1, 4, 8  # codes of cset_type_encoder in QuantumGrav.jl's produce_data.jl
ELEMENT_COLUMNS = ["set", "store", "group", "element", "kind", "num_elements", "truth", "predicted", "score",
                   "outside_training_range"]
NODE_METRICS = ("loss", "accuracy", "precision", "recall", "f1", "iou")
UNLABELLED = "no set of the data records its truth, so its elements are scored only (the predictions CSV)"


@pytest.fixture(scope="module")
def node_run(tmp_path_factory) -> Path:
    """configs/inserted_block.yaml on 24 sets of 24-40 elements, 3 epochs, at a threshold where the young model
    marks some elements."""
    folder = tmp_path_factory.mktemp("node")
    settings = job_settings(folder / "kinds", folder, **{"training.run_name": "node", "training.num_epochs": 3,
                                                         "task.threshold": 0.45, "testing.baselines": False})
    return Path(QG.launch(QG.load_config(CONFIG, settings), nproc=1)["run_dir"])


def write_merged_stores(folder: Path, zarr_format: int = 2) -> Path:
    """A produce_data output folder: merged and merged_ambiguous sets of 24-40 elements, written as QuantumGrav.jl
    writes them (adj, manifold_like, cset_type: no node_labels, so their blocks are not recorded)."""
    rng = np.random.default_rng(7)
    for kind, code in (("merged", MERGED), ("merged_ambiguous", MERGED_AMBIGUOUS)):
        sets = [generate_kind(kind, rng, n_range=(24, 40)).relation for _ in range(3)]
        write_julia_store(folder / f"{kind}_1.zarr", sets, [code] * 3, [False] * 3, zarr_format=zarr_format)
    return folder


@pytest.fixture(scope="module")
def julia_stores(tmp_path_factory) -> Path:
    return write_merged_stores(tmp_path_factory.mktemp("julia") / "output")


def read_csv(path) -> list[dict[str, str]]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def numbers_of(result: dict) -> dict:
    """An evaluation's numbers, without what names its run, data and files."""
    return {key: value for key, value in result.items()
            if key not in ("run", "data", "data_name", "predictions_csv", "metrics_json")}


def as_cell(value) -> str:
    """A value as the CSV writes it: lists as JSON, None empty."""
    return "" if value is None else json.dumps(value) if isinstance(value, list) else str(value)


def by_set(rows: list[dict]) -> dict[int, list[dict]]:
    found: dict[int, list[dict]] = {}
    for row in rows:
        found.setdefault(int(row["set"]), []).append(row)
    return found


def with_polynomial_sets(tmp: Path, zarr_format: int = 2) -> Path:
    """The merged stores and one of 2d sprinklings (polynomial: no block, so every element's truth is known:
    outside any block)."""
    folder, rng = write_merged_stores(tmp / "mixed", zarr_format), np.random.default_rng(8)
    sprinklings = [generate_kind("polynomial", rng, n_range=(24, 40)).relation for _ in range(2)]
    write_julia_store(folder / "polynomial_1.zarr", sprinklings, [POLYNOMIAL] * 2, [True] * 2, zarr_format=zarr_format)
    return folder


# --------------------------------------------------------------------------- labelled data: the run's own numbers
def test_on_its_own_test_split_a_node_run_reports_what_its_test_reported(node_run):
    """The run's config with split test is the data of its test phase: the same elements, so the same confusion,
    F1 and IoU to the bit (integer totals, NodeBinaryTask's), the loss to rounding."""
    tested = json.loads((node_run / "summary.json").read_text())
    result = QG.load_run(node_run).evaluate(node_run / "config.yaml", split="test")
    assert (result["task"], result["unit"], result["unlabelled_sets"]) == ("node_binary", "element", 0)
    assert result["count"] == result["scored_sets"] == tested["num_test"]
    assert result["nodes"] == result["rows"] == tested["num_test_elements"]
    assert result["confusion"] == tested["confusion_matrix"]
    for metric in NODE_METRICS:
        if metric in result["undefined"]:  # the run's test reports 0 (or NaN) where the sets cannot define it
            assert result[metric] is None and (tested[f"test_{metric}"] == 0 or math.isnan(tested[f"test_{metric}"]))
        else:
            assert result[metric] == pytest.approx(tested[f"test_{metric}"], rel=1e-6, abs=0), metric
    assert json.loads(Path(result["metrics_json"]).read_text()) == result
    assert len(read_csv(result["predictions_csv"])) == tested["num_test_elements"]


def test_the_csv_has_a_row_per_element_with_its_truth_score_and_the_sets_block(node_run):
    """Every element of every set, in the data's order: its stored label, the probability that it is in the block
    and the prediction at the run's threshold, with its set's kind, N and block; the metrics are those rows'."""
    run = QG.load_run(node_run)
    result = run.evaluate(node_run / "config.yaml")
    rows = read_csv(result["predictions_csv"])
    assert list(rows[0])[:len(ELEMENT_COLUMNS)] == ELEMENT_COLUMNS
    assert {"block_size", "block_start", "block_fraction"} <= set(rows[0])
    dataset = KindsDataset(**run.config["data"]["kwargs"])
    sets = by_set(rows)
    assert list(sets) == list(range(len(dataset))) == list(range(result["count"]))
    block_sets, ious = 0, {}
    for index, elements in sets.items():
        labels = dataset[index].y
        assert [int(row["element"]) for row in elements] == list(range(len(labels)))
        assert {int(row["num_elements"]) for row in elements} == {len(labels)}
        assert [row["truth"] == "inserted_block" for row in elements] == labels.bool().tolist()
        assert {row["kind"] for row in elements} == {dataset.describe(index)["kind"]}
        assert {int(row["block_size"]) for row in elements} == {int(labels.sum())}
        true = np.array([row["truth"] == "inserted_block" for row in elements])
        marked = np.array([row["predicted"] == "inserted_block" for row in elements])
        assert all((float(row["score"]) >= run.task.threshold) == m for row, m in zip(elements, marked))
        if true.any():
            block_sets += 1
            ious[index] = (true & marked).sum() / (true | marked).sum()
    true = np.array([row["truth"] == "inserted_block" for row in rows])
    marked = np.array([row["predicted"] == "inserted_block" for row in rows])
    assert 0 < marked.sum() < len(rows), "a model that marks some elements, not all: the test measures something"
    tp, fp, fn = (true & marked).sum(), (~true & marked).sum(), (true & ~marked).sum()
    assert result["f1"] == pytest.approx(2 * tp / (2 * tp + fp + fn)) and result["recall"] == pytest.approx(tp / (tp + fn))
    assert result["block_sets"] == block_sets and result["iou"] == pytest.approx(np.mean(list(ious.values())))
    for label, found in result["by_block_size"].items():  # bins of the block's size: 4-7, 8-15, ...
        low, high = map(int, label.split("-"))
        in_bin = [index for index in ious if low <= int(sets[index][0]["block_size"]) <= high]
        assert found["sets"] == len(in_bin) and found["iou"] == pytest.approx(np.mean([ious[i] for i in in_bin]))
        assert high == 2 * low - 1 and low & (low - 1) == 0
    assert sum(found["sets"] for found in result["by_block_size"].values()) == block_sets
    for kind, found in result["per_kind"].items():
        of_kind = [row for row in rows if row["kind"] == kind]
        assert found["sets"] == len({row["set"] for row in of_kind})
        assert found["marked_share"] == pytest.approx(np.mean([row["predicted"] == "inserted_block" for row in of_kind]))
    predicted = run.predict(node_run / "config.yaml")
    assert [{key: as_cell(row.get(key)) for key in rows[0]} for row in predicted] == rows


# --------------------------------------------------------------------------- stores as QuantumGrav.jl writes them
def test_stores_without_labels_give_scores_only_and_every_metric_undefined_with_the_reason(
        cli_in_process, node_run, julia_stores, tmp_path):
    """QuantumGrav.jl records no block: training refuses such stores for this target (test_node_task), applying a
    trained run scores every element, measures nothing and says why."""
    out, stores = tmp_path / "out" / "predictions.csv", write_merged_stores(tmp_path / "output")
    done = cli_in_process("evaluate", "--run", str(node_run), "--data", str(stores), "--out", str(out),
                          "--store-option", "cache=false", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not list(stores.glob("*.qg_features")), "read as --store-option said: no feature cache written"
    assert "applied to output (6 causal sets, " in done.stdout
    assert f"undefined: loss, accuracy, precision, recall, f1, iou: {UNLABELLED}" in done.stdout
    assert ("note: QuantumGrav.jl data: the sets of merged_1.zarr, merged_ambiguous_1.zarr carry no 'node_labels' "
            "(QuantumGrav.jl's produce_data.jl records none), so their inserted_block truth is unknown") in done.stdout
    rows = read_csv(out)
    assert list(rows[0]) == [c for c in ELEMENT_COLUMNS if c != "truth"], "scores only"
    metrics = json.loads((out.parent / "metrics.json").read_text())
    assert all(metrics[metric] is None for metric in NODE_METRICS)
    assert metrics["undefined"] == {metric: UNLABELLED for metric in NODE_METRICS}
    assert (metrics["count"], metrics["scored_sets"], metrics["unlabelled_sets"], metrics["rows"]) == (0, 6, 6, len(rows))
    stored = zarr.open_group(str(stores / "merged_1.zarr"), mode="r")
    sets = by_set(rows)
    assert [(r[0]["store"], r[0]["group"]) for r in sets.values()] == [
        (f"{kind}_1.zarr", f"cset_{i}") for kind in ("merged", "merged_ambiguous") for i in range(1, 4)]
    assert len(sets[0]) == stored["cset_1"]["adj"].shape[0] and [int(r["element"]) for r in sets[0]] == list(
        range(len(sets[0])))
    assert all(0 <= float(row["score"]) <= 1 for row in rows)
    assert {kind: found["sets"] for kind, found in metrics["per_kind"].items()} == {"merged": 3, "merged_ambiguous": 3}


def test_a_config_that_reads_the_stores_gives_what_the_stores_give(node_run, julia_stores, tmp_path):
    """A config whose data.type is QuantumGrav.jl's reader (configs/train_quantumgrav_jl.yaml's) reads its stores
    as the run's target asks, their truth unknown as when the stores are given themselves."""
    config = tmp_path / "stores.yaml"
    config.write_text("data:\n  type: !pyobject QuantumGrav.data.zarr_store.QuantumGravJLDataset\n"
                      f"  kwargs: {{path: {julia_stores}}}\n")
    run = QG.load_run(node_run)
    through_config = run.evaluate(config, out=tmp_path / "config.csv")
    direct = run.evaluate(julia_stores, out=tmp_path / "direct.csv")
    assert through_config["unlabelled_sets"] == 6 and through_config["count"] == 0
    assert {k: v for k, v in numbers_of(through_config).items() if k != "notes"} == {
        k: v for k, v in numbers_of(direct).items() if k != "notes"}
    assert read_csv(tmp_path / "config.csv") == read_csv(tmp_path / "direct.csv")


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_beside_sets_without_a_block_the_stores_are_measured_on_those_only(node_run, tmp_path, zarr_format):
    """A polynomial set has no block: its elements' truth is known (none inside one) without any label; the merged
    sets' is not. The metrics are the polynomial sets' (the IoU undefined: no set with a block), the merged ones
    are scored only; in stores of either Zarr format."""
    folder = with_polynomial_sets(tmp_path, zarr_format)
    result = QG.load_run(node_run).evaluate(folder, out=tmp_path / "mixed.csv")
    assert (result["count"], result["scored_sets"], result["unlabelled_sets"]) == (2, 8, 6)
    assert result["block_sets"] == 0 and result["iou"] is None
    assert result["undefined"]["iou"] == "no set has a true block (the IoU is averaged over the sets that have one)"
    rows = read_csv(tmp_path / "mixed.csv")
    assert list(rows[0])[:len(ELEMENT_COLUMNS)] == ELEMENT_COLUMNS
    assert {row["truth"] for row in rows if row["kind"] == "polynomial"} == {"outside_block"}
    assert {row["truth"] for row in rows if row["kind"] != "polynomial"} == {""}
    polynomial = [row for row in rows if row["kind"] == "polynomial"]
    assert result["nodes"] == len(polynomial)
    assert result["accuracy"] == pytest.approx(np.mean([row["predicted"] == "outside_block" for row in polynomial]))
    assert result["per_kind"]["merged"]["f1"] is None and result["per_kind"]["polynomial"]["sets"] == 2


def test_two_processes_write_exactly_the_rows_and_metrics_of_one(node_run, tmp_path):
    """Each rank predicts its shard; rank 0 gathers them, puts every set's elements back in the data's order and
    computes every number once: labelled data, and stores whose truth is partly unknown."""
    run = QG.load_run(node_run)
    for name, data in (("config", node_run / "config.yaml"), ("stores", with_polynomial_sets(tmp_path))):
        one = run.evaluate(data, out=tmp_path / name / "one.csv")
        two = run.evaluate(data, out=tmp_path / name / "two.csv", nproc=2)
        assert numbers_of(two) == numbers_of(one), name
        rows_one, rows_two = read_csv(one["predictions_csv"]), read_csv(two["predictions_csv"])
        # Every column exactly, the score to float32 rounding: a set's score is a float32 computed in a batch of other
        # sets, and the dense products (inner dimensions of several hundred in the default attention layer) round
        # with the batch's size.
        assert [{**r, "score": None} for r in rows_two] == [{**r, "score": None} for r in rows_one], name
        assert [float(r["score"]) for r in rows_two] == pytest.approx([float(r["score"]) for r in rows_one],
                                                                      rel=1e-5, abs=1e-6), name
        assert len(by_set(rows_two)) == one["scored_sets"] > 2


def test_sets_outside_the_training_range_are_flagged_on_every_element_or_refused(cli_in_process, node_run, tmp_path):
    """A merged set of 90 elements after training on 24-40: every row of it says so; --out-of-range refuse refuses it."""
    rng = np.random.default_rng(10)
    store = write_julia_store(tmp_path / "large" / "merged_1.zarr", [generate_kind("merged", rng, n_range=(90, 90))
                                                                      .relation], [MERGED], [False])
    result = QG.load_run(node_run).evaluate(store, out=tmp_path / "flagged.csv")
    rows = read_csv(tmp_path / "flagged.csv")
    assert result["outside_training_range"] == 1 and len(rows) == 90
    # More processes than sets: rank 1 predicts nothing, and rank 0 writes what one process writes.
    two = QG.load_run(node_run).evaluate(store, out=tmp_path / "two.csv", nproc=2)
    assert numbers_of(two) == numbers_of(result) and read_csv(tmp_path / "two.csv") == rows
    assert all("num_elements" in row["outside_training_range"].split(";") for row in rows)
    out = tmp_path / "refused" / "predictions.csv"
    done = cli_in_process("evaluate", "--run", str(node_run), "--data", str(store), "--out", str(out),
                          "--out-of-range", "refuse", cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "1 of 1 sets lie outside the range" in lines[0], done.stderr
    assert not out.parent.exists()


# --------------------------------------------------------------------------- bad input: one line, exit 2, nothing written
def _generator_config(tmp: Path) -> list[str]:
    (tmp / "generator.yaml").write_text(f"data: {{root: {tmp / 'data'}, num_samples: 6, n_min: 8, n_max: 10}}\n")
    return [str(tmp / "generator.yaml")]


def _labels_of_another_length(tmp: Path) -> list[str]:
    chain = np.triu(np.ones((6, 6), dtype=bool), 1)
    store = write_julia_store(tmp / "bad" / "merged_1.zarr", [], [], [])
    write_julia_group(zarr.open_group(str(store), mode="a"), 1, chain, MERGED, False, node_labels=np.ones(4))
    return [str(store)]


NODE_BAD_INPUTS = {  # name -> (the data, the phrase of the one line)
    "the generator's sets": (_generator_config, "data: the run learned inserted_block, one label per element, which "
                                                "only stores record"),
    "labels of another length": (_labels_of_another_length, "'node_labels' has shape (4,); expected one label per "
                                                            "element, (6,)"),
    "no such store": (lambda tmp: [str(tmp / "missing.zarr")], "no such file or folder"),
}


@pytest.mark.parametrize("case", NODE_BAD_INPUTS)
def test_bad_input_is_one_line_and_exit_2_and_leaves_nothing(cli_in_process, node_run, tmp_path, case):
    make, phrase = NODE_BAD_INPUTS[case]
    out = tmp_path / "out" / "predictions.csv"
    done = cli_in_process("evaluate", "--run", str(node_run), "--data", *make(tmp_path), "--out", str(out),
                          cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert phrase in lines[0], lines[0]
    assert not out.parent.exists()


def test_predict_gives_the_rows_of_stores_without_labels_as_python_values(node_run, julia_stores):
    rows = QG.load_run(node_run).predict(julia_stores)
    assert "truth" not in rows[0] and isinstance(rows[0]["score"], float) and rows[0]["element"] == 0
    assert sum(1 for row in rows if row["element"] == 0) == 6
    assert torch.tensor([row["score"] for row in rows]).isfinite().all()
