"""The package shows its architecture (issue 23): a few modules at the top, subpackages by purpose whose
modules need no prefix, and every subpackage in the wheel."""

import ast
import sys
from pathlib import Path

import setuptools

import QuantumGrav
from conftest import REPO

PACKAGE = Path(QuantumGrav.__file__).resolve().parent
MAX_TOP_LEVEL_MODULES = 15


def subpackages() -> list[Path]:
    return sorted(p for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__")


def test_the_top_level_holds_few_modules():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, f"{len(top)} modules at the top of QuantumGrav/: {top}; put a new " \
                                              "module in the subpackage of its purpose"


def test_every_folder_is_a_package_that_the_wheel_takes():
    folders = [p for p in subpackages() if any(p.glob("*.py"))]
    missing = [p.name for p in folders if not (p / "__init__.py").is_file()]
    assert not missing, f"folders without __init__.py (left out of the wheel by setuptools): {missing}"
    found = set(setuptools.find_packages(where=str(PACKAGE.parent)))
    assert {f"QuantumGrav.{p.name}" for p in folders} <= found


def test_no_module_repeats_its_folders_name_as_a_prefix():
    repeated = []
    for folder in subpackages():
        prefixes = {folder.name + "_", folder.name.rstrip("s") + "_", folder.name.removesuffix("ies") + "y_"}
        repeated += [f"{folder.name}/{p.name}" for p in folder.glob("*.py") if p.name.startswith(tuple(prefixes))]
    assert not repeated, f"modules whose prefix repeats their folder's name: {repeated}"


def test_no_word_that_a_folder_should_carry_tells_modules_apart():
    """Three modules of a folder that share the word their names start or end with (``store_cache``, ``store_graphs``,
    ``store_limits``; ``data_section``, ``learning_sections``, ``training_sections``) are told apart by the rest:
    the shared word is a folder's name (``stores/cache``, ``sections/data``)."""
    crowded = []
    for folder in [PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
        edges: dict[tuple[str, str], list[str]] = {}
        for module in folder.glob("*.py"):
            words = module.stem.strip("_").split("_")
            for edge, word in (("first", words[0]), ("last", words[-1])):
                edges.setdefault((edge, word.removesuffix("s")), []).append(module.stem)
        crowded += [f"{folder.relative_to(PACKAGE.parent)}: {sorted(names)}" for names in edges.values()
                    if len(names) >= 3]
    assert not crowded, f"modules told apart by what follows or precedes a shared word: {crowded}"


def test_a_subpackage_describes_itself_and_hands_nothing_on():
    """A subpackage's __init__.py is its docstring alone: re-exporting its modules' names there would make a
    second path to each of them (the public names are QG.*) and import every module of the folder at once."""
    for folder in subpackages():
        tree = ast.parse((folder / "__init__.py").read_text())
        assert ast.get_docstring(tree), f"{folder.name}/__init__.py: say what the subpackage holds in a docstring"
        code = [node for node in tree.body[1:]]
        assert not code, f"{folder.name}/__init__.py holds code besides its docstring (line {code[0].lineno})"


# ---------------------------------------------------------------------------------------------- imports point down
# scripts/import_graph.py reads every import (top of file, inside functions, under TYPE_CHECKING) as a file graph.
sys.path.insert(0, str(REPO / "scripts"))
import import_graph  # noqa: E402

MAX_UPWARD_IMPORTS = 3
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
MAX_CLASS_LINES = 300
GRAPH = import_graph.read_graph()


def imports_of(folder: str) -> set[str]:
    return {imp.target for imp in GRAPH.imports if imp.source.startswith(folder + "/")}


def test_no_files_import_each_other_in_a_cycle():
    cycles = GRAPH.cycles()
    assert not cycles, "files that import each other (python scripts/import_graph.py --edges shows how): " + \
        "; ".join(", ".join(cycle) for cycle in cycles)


def test_at_most_a_few_imports_point_up_a_layer():
    upward = [f"{imp.source}:{imp.line} -> {imp.target}" for imp in GRAPH.upward()]
    assert len(upward) <= MAX_UPWARD_IMPORTS, f"imports made inside a function or for type checking only that " \
                                              f"point up a layer: {upward}"


def test_config_is_the_ground_floor_and_models_know_no_config():
    """config/ reads the task registry (the tasks and their metrics are validated where a config enters), which
    stands below it and knows no config."""
    tasks = {f for f in GRAPH.files if f.startswith("tasks/")}
    assert imports_of("config") <= {"common/errors"} | tasks | {f for f in GRAPH.files if f.startswith("config/")}
    assert imports_of("tasks") <= {"common/errors"} | tasks, "tasks/ imports only torch and common/errors"
    assert not {f for f in imports_of("models") if not f.startswith("models/")}, "models/ imports only torch and PyG"


def test_the_analyses_stand_above_the_training_path():
    """What a study asks of a run (QuantumGrav.analyses) is imported by no layer below the jobs: a run names the
    analyses it switches on (a task's rivals, a config's callbacks) and loads them by that name (issue 62)."""
    below = [f"{imp.source}:{imp.line} -> {imp.target}" for imp in GRAPH.imports if imp.target.startswith("analyses/")
             and "/" in imp.source and imp.source.split("/")[0] not in ("analyses", "jobs", "studies")]
    assert not below, f"imports of the analyses from below them: {below}"


def test_the_data_layer_knows_no_processes_runs_or_models():
    above = {f for f in imports_of("data") if f.split("/")[0] in ("distributed", "runs", "models", "training")}
    assert not above, f"data/ imports {sorted(above)}: hand it what it needs (rank, world size, settings)"


def test_modules_and_functions_fit_on_a_few_screens():
    long_modules = {name: lines for name, path in GRAPH.files.items()
                    if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    long_functions = {f"{name}.{function}": length for name, path in GRAPH.files.items()
                      for function, length in import_graph.long_functions(path, MAX_FUNCTION_LINES)}
    assert not long_modules, f"modules over {MAX_MODULE_LINES} lines: {long_modules}"
    assert not long_functions, f"functions over {MAX_FUNCTION_LINES} lines: {long_functions}"


def test_classes_fit_on_a_few_screens():
    """A class past 300 lines does more than one thing: ``Trainer`` builds its parts in ``training/components``."""
    long_classes = {f"{name}.{cls}": length for name, path in GRAPH.files.items()
                    for cls, length in import_graph.long_classes(path, MAX_CLASS_LINES)}
    assert not long_classes, f"classes over {MAX_CLASS_LINES} lines: {long_classes}"


def test_no_module_docstring_outweighs_its_code():
    """A module's docstring says what it holds and why in fewer lines than the code it opens (a subpackage's
    __init__.py, a docstring alone, excepted)."""
    wordy = {}
    for name, path in GRAPH.files.items():
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        if path.name == "__init__.py" and len(tree.body) == 1 or not ast.get_docstring(tree):
            continue
        docstring = tree.body[0]
        code = [line for line in text.splitlines()[docstring.end_lineno:] if line.strip()]
        if docstring.end_lineno - docstring.lineno + 1 > len(code):
            wordy[name] = (docstring.end_lineno - docstring.lineno + 1, len(code))
    assert not wordy, f"modules whose docstring is longer than their code (docstring lines, code lines): {wordy}"


def test_the_graph_reader_sees_inner_and_type_only_imports(tmp_path):
    """The checks above cannot pass for want of seeing an import: a cycle closed inside a function or under
    TYPE_CHECKING is found."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .high import H\n")
    (package / "high.py").write_text("from . import low\n\n\ndef f():\n    from .mid import g\n")
    (package / "mid.py").write_text("from .high import f\n")
    graph = import_graph.read_graph(package)
    assert graph.cycles() == [["high", "low", "mid"]]
    assert {(imp.source, imp.target) for imp in graph.upward()} == {("low", "high"), ("high", "mid")}


def test_the_version_is_pyprojects():
    """Run directories record QuantumGrav.common.version's number: it must be the one the package is released as."""
    import tomllib

    from QuantumGrav.common.version import __version__

    assert __version__ == tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
