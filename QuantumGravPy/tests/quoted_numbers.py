r"""Quoted numbers: every measurement that the prose quotes is tied to the stored result it comes from.

The convention (for writers and reviewers; test_quoted_numbers.py runs it, and
``python QuantumGravPy/tests/quoted_numbers.py [DOCUMENT ...]`` lists the problems of some documents, one a line):

* The prose stays as a reader sees it. Each document that quotes measurements has a registry,
  ``docs/quotes/<name>.yaml``, naming the document, its sources and, for each quoted passage, how every
  number in it is computed from a source::

      document: README.md
      sources:                      # short names for stored files (.json, .yaml, .ipynb, any text)
        recheck: benchmarks/default_model/results_study_tune_recheck.json
      define:                       # optional named intermediate values, in order
        acc: pick(recheck["runs"], "gnn", label="default")
      quotes:
        - text: "0.984 ± 0.002"     # text of the document, any line break a space (every occurrence checked)
          values: [mean(acc), stdev(acc)]   # one expression per number in `text`, in order; ~ skips one
      tables:                       # a whole markdown table: per body row, one value per number in it
        - table: "| storage | sets |"   # text of the table's header line
          rows: "[[r['sets'], r['rss_mb']] for r in runs['rows']]"   # ~ (None) skips a number
      not_measured:                 # numbers that look measured but are not; each with its reason
        - text: "default 120 s"
          why: SLURM's documented default (cred_expire)

* A number matches its value when the value rounds to it at the precision written: ``0.980`` claims
  0.9795 <= value <= 0.9805, ``3`` (as in "about 3 minutes") claims 2.5 <= value <= 3.5, ``4.46e-3`` claims
  its three significant digits. Rounding coarser than the digits (to tens, say) is written in the
  expression: ``round(seconds, -1)``.
* Expressions are Python over the loaded sources, with ``pick(records, key, **match)`` (the ``key`` of each
  record whose fields equal ``match``; ``field=None`` also matches a record without that field), ``mean``, ``stdev``
  (sample), ``median``, ``ratio(a, b)``, ``minutes(s)``, ``pts(fraction)`` (x 100), ``find(text, regex)`` (the
  number of the regex's group), ``paired_t_p(a, b)`` and ``wilcoxon_p(differences)`` (the two-sided p of a paired
  comparison, ``scipy.stats``), ``constant("EXIT_GRACE_S")`` (a module-level constant of the library, found by
  name wherever its module lives), ``min``, ``max``, ``sum``, ``len``, ``abs``, ``round``, ``zip``, ``sorted``.
  A ``.json`` or ``.yaml`` source is its data (a YAML ``!tag`` kept as text). Any other source is text:
  ``src.find(r"USR1@(\d+)")``; an ``.ipynb`` source is the text of its stored outputs (``nb.find(regex)``) with
  ``nb.parameters`` (its papermill parameters cell's literal values); in a notebook ``output(r"test accuracy
  (\S+)")`` searches its own outputs and ``parameters`` are its own.
  In YAML, quote an expression that holds ``[`` and a text that holds ``: ``.
* Measured-looking numbers in prose (not in code blocks, inline code, HTML comments or link targets) must be
  tied or listed under ``not_measured``: decimals (``0.980``, ``4.53``, ``1.4e-3``; versions such as
  ``2.13.0`` or ``3.10+`` excepted), numbers with a unit of time, memory, rate, share or speed-up (``s``,
  ``min``, ``MB``, ``GiB``, ``graphs/s``, ``%``, ``1.5x``, ``points``) or after ``±``, and a number that is a
  whole table cell in a column whose header names a measure (``| s per run |``, ``| accuracy |``).
  Integers without a unit (seeds, processes, epochs, exit codes) are not flagged, but may be tied.
* ``not_measured`` is for numbers that only look measured: other projects' documented defaults, a config
  value shown as an example. Prefer a tie wherever the number has a file of this repository behind it.
"""

from __future__ import annotations

import ast
import json
import re
import statistics
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import yaml

REGISTRY_DIR = Path("docs") / "quotes"
# What the detector reads. docs/configuration.md is generated from the schema: its numbers are defaults
# (inputs), never measurements, and a test keeps it equal to the schema.
DOCUMENT_PATTERNS = ("README.md", "QUICK_REFERENCE_DDP.md", "notebooks/README.md", "docs/*.md",
                     "docs/site/*.md", "notebooks/[0-9]*.ipynb")
NOT_SCANNED = {"docs/configuration.md"}

# A number as prose writes it: 2,000  0.980  −2.3  4.46e-3  1.49 (in 1.49x). Not inside a word (H100, v4).
NUMBER = re.compile(r"(?<![\w.])[-+−]?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+−]?\d+)?(?![\w.]*\d)")
UNIT = re.compile(
    r"\s?(?:%|x(?![\w])(?!\s*\d)|×(?!\s*\d)|[kKMGT]i?B\b|(?:graphs|sets|steps|samples|epochs|it)/s\b"
    r"|ms\b|s\b|sec\b|seconds?\b|min\b|minutes?\b|h\b|hours?\b|points?\b)")
# A table column of measurements (its numbers need no unit of their own): `| s per run |`, `| accuracy |`.
MEASURE_HEADER = re.compile(r"\b(?:s|ms|min|minutes|seconds|hours|[kMG]i?B|%|accuracy|loss|F1|MAE|RMSE|R²|speed-?up"
                            r"|ratio|graphs/s|throughput|time)\b", re.I)
VERSION_AFTER = re.compile(r"(?:\.\d|\+)")
MASKED = [
    re.compile(r"<!--.*?-->", re.S),                 # HTML comments
    re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S),  # inline code
    re.compile(r"\]\([^)]*\)"),                     # link targets
    re.compile(r"https?://\S+"),                     # bare URLs
    re.compile(r"\$[^$\n]+\$"),                      # inline math
]
FENCE = re.compile(r"^\s*(```|~~~)")


class YamlKeepingTags(yaml.SafeLoader):
    """Loads a config such as configs/train.yaml: a ``!pyobject x.y`` value becomes the text ``!pyobject x.y``."""


YamlKeepingTags.add_multi_constructor("!", lambda loader, tag, node: f"{tag} {loader.construct_scalar(node)}")


@dataclass
class Text:
    """One stretch of a document: a markdown file, or one markdown cell of a notebook."""

    where: str           # "README.md" or "notebooks/02_x.ipynb cell 4"
    text: str
    prose: str = ""      # text with code, comments and link targets blanked out (same offsets)

    def line_of(self, offset: int) -> int:
        return self.text.count("\n", 0, offset) + 1


@dataclass
class Problems:
    items: list[str] = field(default_factory=list)

    def add(self, message: str) -> None:
        self.items.append(message)


def blank(text: str, start: int, end: int) -> str:
    return text[:start] + re.sub(r"[^\n]", " ", text[start:end]) + text[end:]


def prose_of(text: str) -> str:
    lines, inside = text.split("\n"), False
    for i, line in enumerate(lines):
        fence = bool(FENCE.match(line))
        if fence or inside:
            lines[i] = " " * len(line)
        if fence:
            inside = not inside
    prose = "\n".join(lines)
    for pattern in MASKED:
        for match in pattern.finditer(prose):
            prose = blank(prose, match.start(), match.end())
    return prose


def numbers_in(text: str) -> list[re.Match]:
    return list(NUMBER.finditer(text))


def claimed_interval(token: str) -> tuple[Decimal, Decimal]:
    """The values that round to ``token`` at the precision it is written with."""
    plain = token.replace("−", "-").replace(",", "")
    number = Decimal(plain)
    half_ulp = Decimal(1).scaleb(number.as_tuple().exponent) / 2
    return number - half_ulp, number + half_ulp


def matches(token: str, value: float) -> bool:
    low, high = claimed_interval(token)
    slack = (high - low) * Decimal("1e-9")  # a value exactly at a half rounds either way
    return low - slack <= Decimal(repr(float(value))) <= high + slack


def is_measured_looking(prose: str, match: re.Match) -> bool:
    token, end = match.group(), match.end()
    if VERSION_AFTER.match(prose, end):
        return False
    if "." in token or "e" in token.lower():
        return True
    if UNIT.match(prose, end) or prose[max(0, match.start() - 2):match.start()].strip() == "±":
        return True
    return in_measured_column(prose, match)


def in_measured_column(prose: str, match: re.Match) -> bool:
    """A number that is a whole cell (``| 176 |``) of a table column whose header names a measure."""
    line_start = prose.rfind("\n", 0, match.start()) + 1
    line_end = prose.find("\n", match.end())
    line = prose[line_start:line_end if line_end >= 0 else len(prose)]
    if not line.lstrip().startswith("|"):
        return False
    column = prose[line_start:match.start()].count("|") - 1
    cell = line.split("|")[column + 1]
    if cell.strip(" *") != match.group():
        return False
    header_start = line_start
    while header_start > 0:  # the first line of the table: its header
        previous = prose.rfind("\n", 0, header_start - 1) + 1
        if not prose[previous:header_start].lstrip().startswith("|"):
            break
        header_start = previous
    header = prose[header_start:prose.find("\n", header_start)].split("|")
    return column + 1 < len(header) and bool(MEASURE_HEADER.search(header[column + 1]))


class TextSource:
    """A file read as text (a module, a batch script), searched by regular expression."""

    def __init__(self, name: str, text: str):
        self.name, self.text = name, text

    def find(self, pattern: str) -> float:
        """The number that ``pattern``'s first group matches; every match must give the same one."""
        found = {m.group(1) for m in re.finditer(pattern, self.text)}
        if len(found) != 1:
            raise LookupError(f"{self.name} has {len(found)} different values for {pattern!r} "
                              f"({sorted(found)[:5]}); the pattern must find one")
        return float(found.pop().replace(",", "").replace("−", "-"))


def notebook_outputs(path: Path) -> TextSource:
    """The text of a notebook's stored outputs (streams, plain text, markdown and HTML), and its ``parameters``:
    the literal assignments of the cell tagged ``parameters`` (papermill's), e.g. ``nb.parameters["num_epochs"]``."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    texts = []
    for output in (output for cell in cells if cell["cell_type"] == "code" for output in cell.get("outputs", [])):
        data = output.get("data", {})
        texts.append("".join(output.get("text", "")))
        texts.extend("".join(data[kind]) for kind in ("text/plain", "text/markdown", "text/html") if kind in data)
    source = TextSource(f"{path.name}'s stored outputs", "\n".join(texts))
    source.parameters = {}
    for cell in (c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])):
        for statement in ast.parse("".join(cell["source"])).body:
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                try:
                    source.parameters[ast.unparse(statement.targets[0])] = ast.literal_eval(statement.value)
                except ValueError:  # not a literal (a computed default): not a number to quote
                    pass
    return source


def load_source(path: Path):
    if path.suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    if path.suffix in (".yaml", ".yml"):
        return yaml.load(path.read_text(encoding="utf-8"), Loader=YamlKeepingTags)  # noqa: S506 (SafeLoader)
    if path.suffix == ".ipynb":
        return notebook_outputs(path)
    return TextSource(path.name, path.read_text(encoding="utf-8"))


def pick(records: list[dict], key: str, **match) -> list:
    chosen = [record[key] for record in records if all(record.get(k) == v for k, v in match.items())]
    if not chosen:
        raise LookupError(f"no record with {match} has {key!r}")
    return chosen


def paired_t_p(a: list[float], b: list[float]) -> float:
    """The two-sided p of the paired t-test of ``a`` against ``b`` (``scipy.stats.ttest_rel``)."""
    from scipy import stats

    return float(stats.ttest_rel(a, b).pvalue)


def wilcoxon_p(differences: list[float]) -> float:
    """The two-sided p of the Wilcoxon signed-rank test of paired ``differences`` (``scipy.stats.wilcoxon``)."""
    from scipy import stats

    return float(stats.wilcoxon(differences).pvalue)


HELPERS = {
    "pick": pick, "mean": statistics.fmean, "stdev": statistics.stdev, "median": statistics.median,
    "ratio": lambda a, b: a / b, "minutes": lambda seconds: seconds / 60, "pts": lambda share: 100 * share,
    "min": min, "max": max, "sum": sum, "len": len, "abs": abs, "round": round, "zip": zip, "sorted": sorted,
    "list": list, "range": range, "float": float, "int": int,
    "find": lambda text, pattern: TextSource("the text", text).find(pattern),
    "paired_t_p": paired_t_p, "wilcoxon_p": wilcoxon_p,
}


def documents(root: Path) -> list[str]:
    found = {str(p.relative_to(root)) for pattern in DOCUMENT_PATTERNS for p in root.glob(pattern)}
    return sorted(found - NOT_SCANNED)


def texts_of(root: Path, document: str) -> list[Text]:
    path = root / document
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        texts = [Text(f"{document} cell {i}", "".join(cell["source"])) for i, cell in enumerate(cells)
                 if cell["cell_type"] == "markdown"]
    else:
        texts = [Text(document, path.read_text(encoding="utf-8"))]
    for text in texts:
        text.prose = prose_of(text.text)
    return texts


def registries(root: Path) -> dict[str, tuple[Path, dict]]:
    """Each registry by the document it names."""
    found = {}
    for path in sorted((root / REGISTRY_DIR).glob("*.yaml")):
        try:
            registry = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as error:  # one line naming the file, not the parser's stack
            raise ValueError(f"{path}: not valid YAML (quote a text that holds ': '): {error}") from None
        document = registry.get("document")
        if document in found:
            raise ValueError(f"{path} and {found[document][0]} both name {document}")
        found[document] = (path, registry)
    return found


LIBRARY = Path("QuantumGravPy") / "src" / "QuantumGrav"


def library_constant(root: Path, name: str) -> float:
    """The value of a module-level ``NAME = <arithmetic on numbers>`` of the library (``EXIT_GRACE_S = 30.0``,
    ``_WORK_BYTES = 1 << 30``), wherever its module lives: a quote stays tied when modules move."""
    pattern = re.compile(rf"^{re.escape(name)}\s*(?::[^=]+)?=\s*([0-9][0-9_.eE+\-*/<> ()]*?)\s*(?:#.*)?$", re.M)
    found = {(path, m.group(1)) for path in (root / LIBRARY).rglob("*.py")
             for m in pattern.finditer(path.read_text(encoding="utf-8"))}
    if len(found) != 1:
        raise LookupError(f"{len(found)} definitions of {name} = <number> in {LIBRARY}: "
                          f"{sorted(str(path.relative_to(root)) for path, _ in found)}")
    return float(eval(found.pop()[1], {"__builtins__": {}}))  # noqa: S307 (digits and operators only)


def namespace(root: Path, document: str, registry_path: Path, registry: dict, problems: Problems) -> dict:
    names = dict(HELPERS, constant=lambda name: library_constant(root, name))
    if document.endswith(".ipynb"):
        own = notebook_outputs(root / document)
        names.update(output=own.find, parameters=own.parameters)
    for alias, source in (registry.get("sources") or {}).items():
        if not (root / source).is_file():
            problems.add(f"{registry_path.name}: source {alias}: {source} does not exist")
            continue
        names[alias] = load_source(root / source)
    for name, expression in (registry.get("define") or {}).items():
        try:
            names[name] = eval(expression, names)  # noqa: S307 (the registry is the project's own file)
        except Exception as error:  # noqa: BLE001 (any failure is the registry's problem, reported)
            problems.add(f"{registry_path.name}: define {name}: {expression!r} fails: {error!r}")
    return names


def quote_pattern(quoted: str) -> re.Pattern:
    """``quoted`` as it may stand in the document: any run of whitespace (a line break) for a space, and each
    number a group, so that its place in the document is known."""
    def literal(text: str) -> str:
        return r"\s+".join(re.escape(word) for word in re.split(r"\s+", text))
    pattern, end = "", 0
    for token in numbers_in(quoted):
        pattern += literal(quoted[end:token.start()]) + f"({re.escape(token.group())})"
        end = token.end()
    return re.compile(pattern + literal(quoted[end:]))


def occurrences(texts: list[Text], quoted: str) -> list[tuple[Text, list[int]]]:
    """Each place of ``quoted`` in the texts, with the offsets of its numbers there."""
    pattern = quote_pattern(quoted.strip())
    return [(text, [m.start(i + 1) for i in range(pattern.groups)]) for text in texts
            for m in pattern.finditer(text.text)]


def check_quote(entry: dict, texts: list[Text], names: dict, registry_name: str, problems: Problems,
                covered: set) -> None:
    quoted, expressions = entry.get("text", ""), entry.get("values") or []
    tokens = numbers_in(quoted)
    label = f"{registry_name}: quote {quoted!r}"
    if len(tokens) != len(expressions):
        problems.add(f"{label}: it has {len(tokens)} numbers {[t.group() for t in tokens]} and "
                     f"{len(expressions)} values; give one expression per number (~ for one that is not measured)")
        return
    found = occurrences(texts, quoted)
    if not found:
        problems.add(f"{label}: not in the document (the prose changed? update the quote and its values)")
        return
    for index, (token, expression) in enumerate(zip(tokens, expressions)):
        if expression is None:
            continue
        try:
            value = eval(str(expression), names)  # noqa: S307 (the registry is the project's own file)
        except Exception as error:  # noqa: BLE001 (any failure is the registry's problem, reported)
            problems.add(f"{label}: {expression!r} fails: {error!r}")
            continue
        if not matches(token.group(), value):
            problems.add(f"{label}: the prose says {token.group()}, the source gives {value!r} "
                         f"({expression}); update the prose or the stored result")
        for text, offsets in found:
            covered.add((text.where, offsets[index]))


def table_rows(text: Text, header: str) -> list[tuple[int, str]] | None:
    """The body rows of the markdown table whose header line contains ``header``: (offset, prose of the line)."""
    lines, offset, rows, found = text.text.split("\n"), 0, [], False
    for line in lines:
        inside = line.lstrip().startswith("|")
        if found and not inside:
            break
        if found and not re.fullmatch(r"[\s|:\-]*", line):
            rows.append((offset, text.prose[offset:offset + len(line)]))
        found = found or (inside and header in line)
        offset += len(line) + 1
    return rows if found else None


def check_table(entry: dict, texts: list[Text], names: dict, registry_name: str, problems: Problems,
                covered: set) -> None:
    """A whole table against one expression: a list with, per body row, one value per number of the row."""
    header, label = entry.get("table", ""), f"{registry_name}: table {entry.get('table', '')!r}"
    tables = [(text, rows) for text in texts if (rows := table_rows(text, header)) is not None]
    if len(tables) != 1:
        problems.add(f"{label}: {len(tables)} tables have this in their header line; name exactly one")
        return
    (text, rows), expression = tables[0], entry.get("rows", "")
    try:
        expected = list(eval(expression, names))  # noqa: S307 (the registry is the project's own file)
    except Exception as error:  # noqa: BLE001 (any failure is the registry's problem, reported)
        problems.add(f"{label}: {expression!r} fails: {error!r}")
        return
    if len(expected) != len(rows):
        problems.add(f"{label}: the document's table has {len(rows)} rows, the source {len(expected)}")
        return
    for (offset, line), values in zip(rows, expected):
        tokens = numbers_in(line)
        if len(tokens) != len(values):
            problems.add(f"{label}: row {line.strip()!r} has {len(tokens)} numbers, the source row {len(values)}")
            continue
        for token, value in zip(tokens, values):
            if value is None:
                continue
            if not matches(token.group(), value):
                problems.add(f"{label}: row {line.strip()!r} says {token.group()}, the source gives {value!r}")
            covered.add((text.where, offset + token.start()))


def check_not_measured(entry: dict, texts: list[Text], registry_name: str, problems: Problems,
                       covered: set) -> None:
    quoted = entry.get("text", "")
    if not entry.get("why"):
        problems.add(f"{registry_name}: not_measured {quoted!r} needs a `why`")
    found = occurrences(texts, quoted)
    if not found:
        problems.add(f"{registry_name}: not_measured {quoted!r} is not in the document; remove it")
    for text, offsets in found:
        covered.update((text.where, offset) for offset in offsets)


def untied_numbers(texts: list[Text], covered: set, registry_hint: str) -> list[str]:
    untied = []
    for text in texts:
        for match in numbers_in(text.prose):
            if (text.where, match.start()) in covered or not is_measured_looking(text.prose, match):
                continue
            line_start = text.text.rfind("\n", 0, match.start()) + 1
            context = text.text[max(line_start, match.start() - 40):match.end() + 25].replace("\n", " ")
            untied.append(f"{text.where}:{text.line_of(match.start())}: {match.group()!r} in '...{context}...' "
                          f"has no source; tie it in {registry_hint} (or list it under not_measured with why)")
    return untied


def check_document(root: Path, document: str) -> list[str]:
    """Every problem of one document's quoted numbers, one line each; [] when it passes."""
    problems = Problems()
    texts = texts_of(root, document)
    registry_path, registry = registries(root).get(document, (None, {}))
    hint = str(registry_path.relative_to(root)) if registry_path else f"a new {REGISTRY_DIR}/<name>.yaml"
    covered: set = set()
    if registry_path is not None:
        names = namespace(root, document, registry_path, registry, problems)
        for entry in registry.get("quotes") or []:
            check_quote(entry, texts, names, registry_path.name, problems, covered)
        for entry in registry.get("tables") or []:
            check_table(entry, texts, names, registry_path.name, problems, covered)
        for entry in registry.get("not_measured") or []:
            check_not_measured(entry, texts, registry_path.name, problems, covered)
    return problems.items + untied_numbers(texts, covered, hint)


def main(argv: list[str]) -> int:
    """``python QuantumGravPy/tests/quoted_numbers.py [DOCUMENT ...]``: each problem, one line (all documents by
    default); exit 1 when there is one."""
    root = Path(__file__).resolve().parents[2]
    unknown = sorted(set(argv) - set(documents(root)))
    if unknown:
        print(f"error: not a checked document: {', '.join(unknown)} (one of: {', '.join(documents(root))})")
        return 2
    problems = [problem for document in (argv or documents(root)) for problem in check_document(root, document)]
    print("\n".join(problems) or "every quoted number agrees with its source")
    return 1 if problems else 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
