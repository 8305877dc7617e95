"""The ``benchmark-results`` directive: every ``benchmarks/**/results_*.json`` (the study folders' and the top
level's) rendered as tables, one section per file headed by its path under benchmarks/, with the scripts of its
folder that write it. New result files appear without an edit of the page.

A list of records becomes one table (a column whose value is the same in every record is said once above
it); a mapping becomes a key/value table, its nested lists and mappings sections of their own.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

MAX_DEPTH = 4


def cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return ", ".join(cell(item) for item in value)
    return str(value).replace("|", "\\|").replace("\n", " ")


def flatten(record: dict, prefix: str = "") -> dict:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists are kept as values."""
    flat = {}
    for key, value in record.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows] + [""]


def records_table(records: list[dict]) -> list[str]:
    flat = [flatten(record) for record in records]
    columns = list(dict.fromkeys(key for record in flat for key in record))
    constant = [c for c in columns if len(records) > 1 and len({json.dumps(r.get(c)) for r in flat}) == 1]
    varying = [c for c in columns if c not in constant]
    lines = [f"{len(records)} records."]
    if constant:
        lines += ["In every record:", ""] + [f"- `{c}`: {cell(flat[0].get(c))}" for c in constant]  # absent = null
    return lines + [""] + table(varying, [[cell(r.get(c, "")) for c in varying] for r in flat])


def render(value, depth: int) -> list[str]:
    heading = "#" * min(depth + 1, 6)
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        return records_table(value)
    if isinstance(value, dict):
        scalars = {k: v for k, v in value.items() if not isinstance(v, (dict, list)) or
                   (isinstance(v, list) and not any(isinstance(i, (dict, list)) for i in v))}
        lines = table(["key", "value"], [[f"`{k}`", cell(v)] for k, v in scalars.items()]) if scalars else []
        for key, nested in value.items():
            if key not in scalars:
                lines += [f"{heading} {key}", ""] + (render(nested, depth + 1) if depth < MAX_DEPTH else
                                                     ["```json", json.dumps(nested, indent=1), "```", ""])
        return lines
    return ["```json", json.dumps(value, indent=1), "```", ""]


def writers(result: Path) -> list[Path]:
    """The benchmark scripts beside this result file (its study's folder) that name it."""
    return [script for script in sorted(result.parent.glob("*.py")) if result.name in script.read_text()]


def summary(script: Path) -> str:
    docstring = ast.get_docstring(ast.parse(script.read_text())) or ""
    return docstring.split("\n\n")[0].replace("\n", " ")


class BenchmarkResults(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        results = result_files(self.env)
        self.env.qg_benchmark_results = [result_name(self.env, result) for result in results]
        lines: list[str] = []
        for result in results:
            self.env.note_dependency(str(result))
            lines += [f"## {result_name(self.env, result)}", ""]
            for script in writers(result):
                self.env.note_dependency(str(script))
                lines += [f"Written by `{script.relative_to(self.env.srcdir).as_posix()}`: {summary(script)}", ""]
            lines += render(json.loads(result.read_text()), depth=2)
        container = nodes.container()
        self.state.nested_parse(StringList(lines, source="benchmarks/**/results_*.json"), 0, container, match_titles=True)
        return container.children


def result_files(env) -> list[Path]:
    return sorted((Path(env.srcdir) / "benchmarks").rglob("results_*.json"))


def result_name(env, result: Path) -> str:
    """The file's path under benchmarks/: two studies may each keep a file of the same name."""
    return result.relative_to(Path(env.srcdir) / "benchmarks").as_posix()


def pages_of_new_results(app, env, added, changed, removed) -> list[str]:
    """A results file added or removed since the last build changes the page, though no file that the page
    read has changed (Sphinx rebuilds a page for its dependencies' changes only): read the page again then."""
    if getattr(env, "qg_benchmark_results", None) == [result_name(env, result) for result in result_files(env)]:
        return []
    return sorted(page for page in env.found_docs if "{benchmark-results}" in Path(env.doc2path(page)).read_text())


def setup(app):
    app.add_directive("benchmark-results", BenchmarkResults)
    app.connect("env-get-outdated", pages_of_new_results)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
