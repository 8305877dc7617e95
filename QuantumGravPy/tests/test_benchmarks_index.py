"""benchmarks/ says what backs what: every results file is named in benchmarks/README.md (the index, by its path
under benchmarks/) and has a line in its own folder's README (``| `name` | the claim it backs | the command |``),
and no README under benchmarks/ names a results file that does not exist.

A results file is any file under benchmarks/ but a script (``*.py``) or a README: a stored JSON, a log kept as
printed, a figure. A name in a README is resolved from the README's folder, or from the repository root when it
starts with ``benchmarks/``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import REPO

BENCHMARKS = REPO / "benchmarks"
# A results file's name as READMEs write it: results_*.json or *.log, with the folders before it, if any.
NAMED = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*(?:results_[\w.-]+\.json|[\w.-]+\.log))(?![\w/-])")


def results_files(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*") if path.is_file() and path.suffix != ".py"
                  and path.name != "README.md" and "__pycache__" not in path.parts)


def backticked(text: str) -> set[str]:
    return set(re.findall(r"`([^`\n]+)`", text))


def unindexed(root: Path) -> list[str]:
    """The results files that the index or their folder's README leaves out, one line each, saying what to add."""
    index = root / "README.md"
    if not index.is_file():
        return [f"{index.relative_to(root.parent)} is missing: the index of every results file"]
    in_index = backticked(index.read_text(encoding="utf-8"))
    problems = []
    for path in results_files(root):
        name = path.relative_to(root).as_posix()
        if name not in in_index:
            problems.append(f"benchmarks/README.md does not name `{name}`: add it to its study's row")
        readme = path.parent / "README.md"
        rows = readme.read_text(encoding="utf-8") if readme.is_file() else ""
        if not re.search(rf"^\| `{re.escape(path.name)}` \|", rows, re.MULTILINE):
            problems.append(f"{readme.relative_to(root.parent).as_posix()} has no line for `{path.name}`: add "
                            "| `name` | the claim it backs | the command that made it |")
    return problems


def dangling(root: Path) -> list[str]:
    """The results files that a README under ``root`` names and that do not exist, one line each."""
    problems = []
    for readme in sorted(root.rglob("README.md")):
        for name in sorted(set(NAMED.findall(readme.read_text(encoding="utf-8")))):
            path = (root.parent / name) if name.startswith(f"{root.name}/") else (readme.parent / name)
            if not path.is_file():
                problems.append(f"{readme.relative_to(root.parent).as_posix()} names {name}, which does not exist")
    return problems


def test_every_results_file_is_indexed_and_has_its_claim_line():
    assert results_files(BENCHMARKS)
    assert not unindexed(BENCHMARKS), "\n".join(unindexed(BENCHMARKS))


def test_no_readme_names_a_results_file_that_does_not_exist():
    assert not dangling(BENCHMARKS), "\n".join(dangling(BENCHMARKS))


def test_every_study_folder_has_a_readme():
    folders = {path.parent for path in BENCHMARKS.rglob("*") if path.is_file() and "__pycache__" not in path.parts}
    assert not [f for f in sorted(folders) if not (f / "README.md").is_file()]


@pytest.fixture
def drawer(tmp_path):
    """A tiny benchmarks/ folder: one study, indexed and with its claim line."""
    root = tmp_path / "benchmarks"
    (root / "study").mkdir(parents=True)
    (root / "study" / "results_a.json").write_text("{}")
    (root / "study" / "run.log").write_text("printed\n")
    (root / "study" / "bench_a.py").write_text("")
    (root / "README.md").write_text("| `study/` | a question | `study/results_a.json`, `study/run.log` |\n")
    (root / "study" / "README.md").write_text(
        "| `results_a.json` | a claim | `python benchmarks/study/bench_a.py --json benchmarks/study/results_a.json` |\n"
        "| `run.log` | what it printed | `python benchmarks/study/bench_a.py` |\n")
    return root


def test_the_checks_pass_a_complete_drawer(drawer):
    assert unindexed(drawer) == [] and dangling(drawer) == []


def test_a_results_file_missing_from_the_index_or_its_readme_is_named(drawer):
    (drawer / "study" / "results_b.json").write_text("{}")
    assert unindexed(drawer) == [
        "benchmarks/README.md does not name `study/results_b.json`: add it to its study's row",
        "benchmarks/study/README.md has no line for `results_b.json`: add | `name` | the claim it backs | the command "
        "that made it |"]
    (drawer / "README.md").unlink()
    assert unindexed(drawer) == ["benchmarks/README.md is missing: the index of every results file"]


def test_a_readme_naming_a_gone_file_is_named(drawer):
    (drawer / "study" / "run.log").unlink()
    (drawer / "study" / "README.md").write_text((drawer / "study" / "README.md").read_text()
                                                + "Superseded: `../results_old.json`.\n")
    assert dangling(drawer) == ["benchmarks/README.md names study/run.log, which does not exist",
                                "benchmarks/study/README.md names ../results_old.json, which does not exist",
                                "benchmarks/study/README.md names run.log, which does not exist"]
