"""The package's import graph, one node per file, and its sizes: what tests/test_package_layout.py holds to.

    python scripts/import_graph.py            # layers, imports, upward ones, cycles, long modules, classes and functions
    python scripts/import_graph.py --edges    # and every import, file -> file

Every import counts: at the top of a file, inside a function, under ``if TYPE_CHECKING:``. A file's layer is the
longest chain of top-of-file imports below it (files that import nothing of the package are layer 0), so an
import that points up a layer is one made inside a function or for type checking only. A cycle is a set of files
that reach each other by any import. Only imports of optional dependencies may be lazy; these do not appear
here (they are not files of the package).
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "QuantumGravPy" / "src" / "QuantumGrav"


@dataclass(frozen=True)
class Import:
    source: str  # module names relative to the package: 'training/trainer'
    target: str
    line: int
    top_level: bool  # at the top of the file, not in a function or under TYPE_CHECKING


@dataclass
class Graph:
    files: dict[str, Path]
    imports: list[Import] = field(default_factory=list)

    def layers(self) -> dict[str, int]:
        below: dict[str, set[str]] = {name: set() for name in self.files}
        for imp in self.imports:
            if imp.top_level and imp.target != imp.source:
                below[imp.source].add(imp.target)
        layer: dict[str, int] = {}

        def depth(name: str, visiting: frozenset = frozenset()) -> int:
            if name not in layer:
                if name in visiting:  # a cycle of top-of-file imports: Python could not import it either
                    return 0
                layer[name] = 1 + max((depth(t, visiting | {name}) for t in below[name]), default=-1)
            return layer[name]

        for name in self.files:
            depth(name)
        return layer

    def upward(self) -> list[Import]:
        layer = self.layers()
        return [imp for imp in self.imports if layer[imp.target] > layer[imp.source]]

    def cycles(self) -> list[list[str]]:
        """Strongly connected components of more than one file (Tarjan), over every import."""
        edges: dict[str, set[str]] = {name: set() for name in self.files}
        for imp in self.imports:
            if imp.target != imp.source:
                edges[imp.source].add(imp.target)
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        found: list[list[str]] = []

        def visit(v: str) -> None:
            index[v] = low[v] = len(index)
            stack.append(v)
            for w in sorted(edges[v]):
                if w not in index:
                    visit(w)
                    low[v] = min(low[v], low[w])
                elif w in stack:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

        sys.setrecursionlimit(10_000)
        for v in sorted(self.files):
            if v not in index:
                visit(v)
        return found


def module_name(path: Path, package: Path = PACKAGE) -> str:
    relative = path.relative_to(package).with_suffix("")
    return str(relative).replace("\\", "/")


def _resolve(source: str, node: ast.ImportFrom | ast.Import, files: dict[str, Path]) -> list[str]:
    """The package files that one import statement loads (a package's __init__ counts as its file)."""
    def existing(dotted: list[str]) -> str | None:
        for candidate in ("/".join(dotted), "/".join(dotted + ["__init__"])):
            if candidate in files:
                return candidate
        return None

    targets = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            parts = alias.name.split(".")
            if parts[0] == "QuantumGrav" and (found := existing(parts[1:] or ["__init__"])):
                targets.append(found)
        return targets
    if node.level:
        base = source.split("/")[:-1]
        base = base[: len(base) - (node.level - 1)]
    elif node.module and node.module.split(".")[0] == "QuantumGrav":
        base = []
    else:
        return []
    module = [p for p in (node.module or "").split(".") if p]
    if module and module[0] == "QuantumGrav" and not node.level:
        module = module[1:]
    for alias in node.names:
        found = existing(base + module + [alias.name]) if alias.name != "*" else None
        found = found or existing(base + module)
        if found:
            targets.append(found)
    return targets


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports_of(source: str, tree: ast.Module, files: dict[str, Path]) -> list[Import]:
    found: list[Import] = []

    def walk(node: ast.AST, top_level: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in dict.fromkeys(_resolve(source, child, files)):
                    found.append(Import(source, target, child.lineno, top_level))
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                walk(child, False)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                walk(child, False)
            else:
                walk(child, top_level)

    walk(tree, True)
    return found


def read_graph(package: Path = PACKAGE) -> Graph:
    files = {module_name(p, package): p for p in sorted(package.rglob("*.py")) if "__pycache__" not in p.parts}
    graph = Graph(files)
    for name, path in files.items():
        graph.imports += _imports_of(name, ast.parse(path.read_text(encoding="utf-8")), files)
    return graph


def long_functions(path: Path, limit: int) -> list[tuple[str, int]]:
    """(qualified name, lines) of every function longer than ``limit`` lines, its docstring included."""
    return long_definitions(path, limit, (ast.FunctionDef, ast.AsyncFunctionDef))


def long_classes(path: Path, limit: int) -> list[tuple[str, int]]:
    """(qualified name, lines) of every class longer than ``limit`` lines, its docstring included."""
    return long_definitions(path, limit, (ast.ClassDef,))


def long_definitions(path: Path, limit: int, kinds: tuple[type, ...]) -> list[tuple[str, int]]:
    found = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if isinstance(child, kinds):
                    start = min([child.lineno] + [d.lineno for d in child.decorator_list])
                    length = child.end_lineno - start + 1
                    if length > limit:
                        found.append((name, length))
                walk(child, name + ".")

    walk(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", action="store_true", help="list every import")
    parser.add_argument("--max-module-lines", type=int, default=500)
    parser.add_argument("--max-function-lines", type=int, default=60)
    parser.add_argument("--max-class-lines", type=int, default=300)
    args = parser.parse_args(argv)
    graph = read_graph()
    layers = graph.layers()
    upward = graph.upward()
    cycles = graph.cycles()
    print(f"{len(graph.files)} files, {len(set(layers.values()))} layers, {len(graph.imports)} imports, "
          f"{len(upward)} pointing up a layer, {len(cycles)} cycles")
    for imp in upward:
        print(f"  up: {imp.source}:{imp.line} -> {imp.target} (layer {layers[imp.source]} -> {layers[imp.target]})")
    for cycle in cycles:
        print(f"  cycle of {len(cycle)}: {', '.join(cycle)}")
    for name, path in graph.files.items():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > args.max_module_lines:
            print(f"  module over {args.max_module_lines} lines: {name} ({lines})")
        for function, length in long_functions(path, args.max_function_lines):
            print(f"  function over {args.max_function_lines} lines: {name}.{function} ({length})")
        for cls, length in long_classes(path, args.max_class_lines):
            print(f"  class over {args.max_class_lines} lines: {name}.{cls} ({length})")
    if args.edges:
        for imp in graph.imports:
            kind = "top" if imp.top_level else "inner"
            print(f"{imp.source}:{imp.line} -> {imp.target} [{kind}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
