"""The package shows its architecture (issue 23): a few modules at the top, subpackages by purpose whose
modules need no prefix, and every subpackage in the wheel."""

import ast
from pathlib import Path

import setuptools

import QuantumGrav

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


def test_a_subpackage_describes_itself_and_hands_nothing_on():
    """A subpackage's __init__.py is its docstring alone: re-exporting its modules' names there would make a
    second path to each of them (the public names are QG.*) and import every module of the folder at once."""
    for folder in subpackages():
        tree = ast.parse((folder / "__init__.py").read_text())
        assert ast.get_docstring(tree), f"{folder.name}/__init__.py: say what the subpackage holds in a docstring"
        code = [node for node in tree.body[1:]]
        assert not code, f"{folder.name}/__init__.py holds code besides its docstring (line {code[0].lineno})"
