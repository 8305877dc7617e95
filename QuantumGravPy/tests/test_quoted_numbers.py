"""Every measurement quoted in the documents and the notebooks' prose agrees with the stored result it comes from.

A writer who quotes a number (an accuracy, graphs/s, MB, minutes, a speed-up) ties it in the document's registry,
``docs/quotes/<name>.yaml``: the quoted text, the source file (a ``benchmarks/<study>/results_*.json``, a config, a
notebook's stored outputs) and one expression per number; the number must be the value rounded at the precision
written. A measured-looking number in prose that no registry ties (or lists under ``not_measured`` with its
reason) fails, and so does a quote whose value changed in the source, or whose text changed in the document.
The convention in full: the docstring of ``quoted_numbers.py`` (next to this file).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

import quoted_numbers as qn

REPO = Path(__file__).resolve().parents[2]
# Documents whose prose is not tied yet, each with who ties it. Strict: a document that passes must leave the list.
NOT_TIED_YET: dict[str, str] = {}


def _document_params():
    for document in qn.documents(REPO):
        marks = ([pytest.mark.xfail(strict=True, reason=f"not tied yet ({NOT_TIED_YET[document]})")]
                 if document in NOT_TIED_YET else [])
        yield pytest.param(document, marks=marks, id=document)


@pytest.mark.parametrize("document", list(_document_params()))
def test_quoted_numbers_agree_with_their_sources(document):
    problems = qn.check_document(REPO, document)
    assert not problems, f"{len(problems)} problem(s) with the numbers of {document}:\n" + "\n".join(problems)


def test_every_registry_names_a_checked_document():
    checked = set(qn.documents(REPO))
    for document, (path, _) in qn.registries(REPO).items():
        assert document in checked, f"{path.relative_to(REPO)} names {document!r}, which is not a checked document"
    assert set(NOT_TIED_YET) <= checked, f"NOT_TIED_YET names unknown documents: {set(NOT_TIED_YET) - checked}"


# The mechanism, on a small tree of its own.

RESULTS = {"runs": [{"model": "gnn", "seed": 1, "accuracy": 0.97, "seconds": 1990.0},
                    {"model": "gnn", "seed": 2, "accuracy": 0.99, "seconds": 2090.0},
                    {"model": "baseline", "seed": 1, "accuracy": 0.95, "seconds": 5.0}]}
DOCUMENT = """# Results

Install Python 3.10+ and torch 2.13.0, then run `train --lr 0.5` (see [the guide](docs/v1.5.md)).

The GNN scored 0.980 ± 0.014 against 0.950 for the baseline, about 34 minutes per run.

| model | s per run | seeds |
|---|---:|---:|
| gnn | 2040 | 2 |

```bash
python train.py --threshold 0.25   # code is not prose
```
<!-- a comment: 0.123 -->
"""
REGISTRY = {
    "document": "RESULTS.md",
    "sources": {"results": "results.json"},
    "define": {"gnn": "pick(results['runs'], 'accuracy', model='gnn')"},
    "quotes": [
        {"text": "0.980 ± 0.014", "values": ["mean(gnn)", "stdev(gnn)"]},
        {"text": "0.950 for the baseline", "values": ["pick(results['runs'], 'accuracy', model='baseline')[0]"]},
        {"text": "about 34 minutes", "values": ["minutes(mean(pick(results['runs'], 'seconds', model='gnn')))"]},
        {"text": "| 2040 |", "values": ["mean(pick(results['runs'], 'seconds', model='gnn'))"]},
    ],
}


def _tree(tmp_path: Path, document: str = DOCUMENT, registry: dict | None = None, results: dict | None = None):
    (tmp_path / "RESULTS.md").write_text(document, encoding="utf-8")
    (tmp_path / "results.json").write_text(json.dumps(results or RESULTS), encoding="utf-8")
    (tmp_path / qn.REGISTRY_DIR).mkdir(parents=True, exist_ok=True)
    (tmp_path / qn.REGISTRY_DIR / "results.yaml").write_text(yaml.safe_dump(registry or REGISTRY), encoding="utf-8")
    return tmp_path


def test_tied_numbers_pass_and_code_versions_and_comments_are_not_measurements(tmp_path):
    assert qn.check_document(_tree(tmp_path), "RESULTS.md") == []


def test_a_paired_comparison_is_quoted_by_its_p_values(tmp_path):
    """Differences 1, 2, 3: t = 2 sqrt(3) on 2 degrees of freedom, two-sided p = 1 - t / sqrt(t² + 2) = 0.0742;
    five differences of one sign: the exact Wilcoxon p is 2 / 2⁵ = 0.0625."""
    results = {"runs": [{"model": m, "seed": s, "accuracy": a} for m, s, a in (
        ("gnn", 1, 0.5), ("gnn", 2, 0.6), ("gnn", 3, 0.7), ("baseline", 1, 0.49), ("baseline", 2, 0.58),
        ("baseline", 3, 0.67))]}
    registry = {"document": "RESULTS.md", "sources": {"results": "results.json"},
                "define": {"gnn": "pick(results['runs'], 'accuracy', model='gnn')",
                           "base": "pick(results['runs'], 'accuracy', model='baseline')"},
                "quotes": [{"text": "paired t-test p = 0.0742", "values": ["paired_t_p(gnn, base)"]},
                           {"text": "Wilcoxon p = 0.0625", "values": ["wilcoxon_p([0.1, 0.2, 0.3, 0.4, 0.5])"]}]}
    document = "# Paired\n\nThe gain: paired t-test p = 0.0742, and over five seeds Wilcoxon p = 0.0625.\n"
    assert qn.check_document(_tree(tmp_path, document=document, registry=registry, results=results), "RESULTS.md") == []
    wrong = document.replace("0.0742", "0.0500")
    problems = qn.check_document(_tree(tmp_path, document=wrong, registry=registry, results=results), "RESULTS.md")
    assert any("0.0742" in p for p in problems), problems


def test_a_result_changed_without_the_prose_fails(tmp_path):
    results = json.loads(json.dumps(RESULTS))
    results["runs"][0]["accuracy"] = 0.976  # the mean moves to 0.983, which 0.980 does not round
    problems = qn.check_document(_tree(tmp_path, results=results), "RESULTS.md")
    assert len(problems) == 2, problems  # the mean and the spread both moved
    assert "the prose says 0.980, the source gives 0.983" in problems[0]


def test_prose_changed_without_the_result_fails(tmp_path):
    problems = qn.check_document(_tree(tmp_path, document=DOCUMENT.replace("0.980", "0.985")), "RESULTS.md")
    assert any("quote '0.980 ± 0.014': not in the document" in p for p in problems), problems
    assert any("RESULTS.md:5: '0.985'" in p and "has no source" in p for p in problems), problems


def test_a_new_unsourced_number_fails_with_its_line(tmp_path):
    document = DOCUMENT + "\nOn 2 GPUs it runs at 412 graphs/s and uses 1.5 GiB, a 1.8x speed-up.\n"
    problems = qn.check_document(_tree(tmp_path, document=document), "RESULTS.md")
    assert [p.split(" in ")[0] for p in problems] == ["RESULTS.md:16: '412'", "RESULTS.md:16: '1.5'",
                                                      "RESULTS.md:16: '1.8'"]


def test_the_rounding_is_the_precision_written():
    assert qn.matches("0.980", 0.9795) and qn.matches("0.980", 0.98049) and not qn.matches("0.980", 0.9806)
    assert qn.matches("3", 2.93) and not qn.matches("3", 3.6)
    assert qn.matches("4.46e-3", 0.004464) and not qn.matches("4.46e-3", 0.00447)
    assert qn.matches("+2.3", 0.023 * 100) and qn.matches("−2.3", -2.3) and qn.matches("2,000", 2000)


def test_not_measured_needs_a_reason_and_must_still_be_in_the_document(tmp_path):
    registry = {**REGISTRY, "not_measured": [{"text": "0.950 for"}, {"text": "gone 1.5 GiB", "why": "input"}]}
    problems = qn.check_document(_tree(tmp_path, registry=registry), "RESULTS.md")
    assert any("not_measured '0.950 for' needs a `why`" in p for p in problems), problems
    assert any("not_measured 'gone 1.5 GiB' is not in the document" in p for p in problems), problems


def test_a_quote_needs_one_value_per_number(tmp_path):
    registry = {**REGISTRY, "quotes": [{"text": "0.980 ± 0.014", "values": ["mean(gnn)"]}, *REGISTRY["quotes"][1:]]}
    problems = qn.check_document(_tree(tmp_path, registry=registry), "RESULTS.md")
    assert any("it has 2 numbers ['0.980', '0.014'] and 1 values" in p for p in problems), problems


def test_a_table_is_checked_row_by_row_against_one_expression(tmp_path):
    registry = {**REGISTRY, "quotes": REGISTRY["quotes"][:3],
                "tables": [{"table": "| s per run |", "rows": "[[mean(pick(results['runs'], 'seconds', model='gnn')), "
                                                                 "len(gnn)]]"}]}
    assert qn.check_document(_tree(tmp_path, registry=registry), "RESULTS.md") == []
    results = json.loads(json.dumps(RESULTS))
    results["runs"][1]["seconds"] = 2190.0
    problems = qn.check_document(_tree(tmp_path, registry=registry, results=results), "RESULTS.md")
    assert "row '| gnn | 2040 | 2 |' says 2040, the source gives 2090.0" in problems[-1], problems
    registry["tables"][0]["rows"] = "[]"
    problems = qn.check_document(_tree(tmp_path, registry=registry), "RESULTS.md")
    assert any("the document's table has 1 rows, the source 0" in p for p in problems), problems
    assert any("'2040'" in p and "has no source" in p for p in problems), problems


def test_a_notebook_quotes_its_own_stored_outputs(tmp_path):
    def cell(kind, source, outputs=()):
        return {"cell_type": kind, "source": source, "metadata": {},
                **({"outputs": list(outputs), "execution_count": 1} if kind == "code" else {})}
    parameters = {**cell("code", "num_epochs = 40\nloss_seconds = 0.05\nlr = 2 * 1e-3\n"),
                  "metadata": {"tags": ["parameters"]}}
    notebook = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        parameters,
        cell("code", "train()", [{"output_type": "stream", "name": "stdout", "text": ["test accuracy 0.9833\n"]}]),
        cell("markdown", "The GNN reached 0.983 on the test set, with a loss that sleeps 0.05 s."),
    ]}
    (tmp_path / "notebooks").mkdir()
    path = tmp_path / "notebooks" / "01_x.ipynb"
    path.write_text(json.dumps(notebook), encoding="utf-8")
    registry = {"document": "notebooks/01_x.ipynb",
                "quotes": [{"text": "reached 0.983", "values": [r"output(r'test accuracy (\S+)')"]},
                           {"text": "sleeps 0.05 s", "values": ["parameters['loss_seconds']"]}]}
    (tmp_path / qn.REGISTRY_DIR).mkdir(parents=True)
    (tmp_path / qn.REGISTRY_DIR / "nb01.yaml").write_text(yaml.safe_dump(registry), encoding="utf-8")
    assert qn.check_document(tmp_path, "notebooks/01_x.ipynb") == []
    notebook["cells"][1]["outputs"][0]["text"] = ["test accuracy 0.9633\n"]
    path.write_text(json.dumps(notebook), encoding="utf-8")
    assert qn.check_document(tmp_path, "notebooks/01_x.ipynb") == [
        "nb01.yaml: quote 'reached 0.983': the prose says 0.983, the source gives 0.9633 "
        "(output(r'test accuracy (\\S+)')); update the prose or the stored result"]


def test_the_real_tree_fails_when_a_tied_number_changes(tmp_path):
    """On a copy of the repository's own documents: change each tied document's first quoted number, then each
    source, and the check that passed must fail."""
    tied = [document for document in qn.registries(REPO) if document not in NOT_TIED_YET]
    assert len(tied) >= 10, f"only {tied} are tied: the registries in docs/quotes/ went missing"
    # The checked files and their sources, without environments, data and runs (a few MB).
    # Run outputs are skipped only outside the package: its data/, runs/ and studies/ subpackages are sources.
    package = REPO / "QuantumGravPy" / "src"
    skipped = shutil.ignore_patterns(".git", ".venv", ".ruff_cache", "__pycache__", "build", "wandb", "benchmark_runs",
                                     "_runs", "_data", "*.png")
    outputs = shutil.ignore_patterns("data", "runs", "studies")

    def ignore(folder, names):
        inside_package = Path(folder).is_relative_to(package)
        return set(skipped(folder, names)) | (set() if inside_package else set(outputs(folder, names)))

    shutil.copytree(REPO, tmp_path, dirs_exist_ok=True, ignore=ignore)
    for document in tied:
        path, registry = qn.registries(tmp_path)[document]
        quote = next((entry for entry in registry.get("quotes") or [] if any(v is not None for v in entry["values"])),
                     None)
        if quote is None:  # a registry of numbers that are not measured (not_measured only): nothing to change
            continue
        index, token = next((i, t) for i, (t, v) in enumerate(zip(qn.numbers_in(quote["text"]), quote["values"]))
                            if v is not None)
        original = (tmp_path / document).read_text(encoding="utf-8")
        assert qn.check_document(tmp_path, document) == []
        at = qn.quote_pattern(quote["text"].strip()).search(original).start(index + 1)  # the quote may wrap lines
        changed = original[:at] + _nudged(token.group()) + original[at + len(token.group()):]
        (tmp_path / document).write_text(changed, encoding="utf-8")
        assert qn.check_document(tmp_path, document), f"{document}: changing {token.group()} in {quote['text']!r} " \
                                                      "went unnoticed"
        (tmp_path / document).write_text(original, encoding="utf-8")
        for source in (s for s in (registry.get("sources") or {}).values() if s.endswith(".json")):
            stored = (tmp_path / source).read_text(encoding="utf-8")
            noticed = []
            for in_text in (False, True):  # the floats first; a source whose quoted numbers are in its text second
                (tmp_path / source).write_text(json.dumps(_scaled(json.loads(stored), in_text)), encoding="utf-8")
                noticed = noticed or qn.check_document(tmp_path, document)
            assert noticed, f"{document}: the numbers of {source} changed and the check did not notice"
            (tmp_path / source).write_text(stored, encoding="utf-8")


def _scaled(data, in_text: bool, counter=None):
    """Every float of a JSON document scaled by 1.1, 1.2 or 1.3 in turn, so that sums, differences and ratios move
    too (integers such as seeds and counts kept, so that records still match); with ``in_text``, also every number
    written in a string (a stored message such as "ended 24 s after the start")."""
    counter = counter if counter is not None else [0]
    if isinstance(data, dict):
        return {key: _scaled(value, in_text, counter) for key, value in data.items()}
    if isinstance(data, list):
        return [_scaled(value, in_text, counter) for value in data]
    if isinstance(data, float):
        counter[0] += 1
        return data * (1 + 0.1 * (1 + counter[0] % 3))
    if isinstance(data, str) and in_text:
        return re.sub(r"\d+", lambda digits: str(2 * int(digits.group()) + 1), data)
    return data


def _nudged(token: str) -> str:
    """The same number written with its last digit changed."""
    last = max(i for i, c in enumerate(token) if c.isdigit())
    return token[:last] + str((int(token[last]) + 5) % 10) + token[last + 1:]


def test_the_command_lists_a_documents_problems_and_refuses_an_unknown_one(capsys):
    assert qn.main(["README.md"]) == 0
    assert capsys.readouterr().out == "every quoted number agrees with its source\n"
    assert qn.main(["README.txt"]) == 2
    assert capsys.readouterr().out.startswith("error: not a checked document: README.txt (one of: ")
