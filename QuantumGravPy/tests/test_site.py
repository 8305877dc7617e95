"""The documentation site (``make docs``, docs/site/): built once per run in strict mode (every warning an error),
then checked: every notebook has its page with its figures and a download link, every public name of QuantumGrav
has an entry in the API reference, every config key is in the configuration reference, every option of the
command line is on its page, every benchmark result file has its section, no internal link or anchor is broken
and every page is reachable from the home page (links to the outside are listed, never fetched). The checks'
own tests build tiny sites that break each rule once. Last, a real browser (the distribution's headless
Chromium) opens the site from a local HTTP server: the home page, a notebook page whose figures load, and
the search for TrainerDDP; no error in the console. The notebooks keep testing apart from teaching: their
test-only cells (the JSON summary, the asserts, the test-mode call) are tagged so that the site leaves them out and
Jupyter folds them, and every exercise has a reference solution in a folded cell; checked in the .ipynb files,
in the built HTML and in the browser. Its screenshots go next to the built site (and, with
QUANTUMGRAV_SCREENSHOTS=DIR, to DIR: docs/site/screenshots/ holds the committed ones).
"""

from __future__ import annotations

import ast
import functools
import html as html_text
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import zlib
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SITE_SOURCES = REPO / "docs" / "site"
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9]*.ipynb"))
BUILD_TIMEOUT_S = 600
sys.path.insert(0, str(SITE_SOURCES))
import site_check  # noqa: E402

IN_CI = os.environ.get("CI") == "true"


def _need(module: str, why: str) -> None:
    """Skip without ``module`` (the docs extra, installed by scripts/setup_venv.sh); under CI=true, fail."""
    try:
        __import__(module)
    except ImportError:
        message = f"{why} needs {module}: pip install -e '.[docs]' (scripts/setup_venv.sh installs it)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


def sphinx_build(source: Path, conf_dir: Path, out: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "-d", str(out / ".doctrees"),
               "-c", str(conf_dir), str(source), str(out / "html")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "QuantumGravPy" / "src"), str(SITE_SOURCES)])}
    return subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, env=env, cwd=source)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site built from this checkout, as `make docs` builds it; its HTML folder."""
    _need("sphinx", "building the documentation site")
    out = tmp_path_factory.mktemp("site")
    built = sphinx_build(REPO, SITE_SOURCES, out)
    assert built.returncode == 0, f"the site does not build in strict mode:\n{built.stderr[-6000:]}"
    return out / "html"


def html(site: Path, page: str) -> str:
    return (site / page).read_text(encoding="utf-8")


def image_outputs(notebook: Path) -> int:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return sum(1 for cell in cells for output in cell.get("outputs", [])
               if {"image/png", "image/jpeg", "image/svg+xml"} & set(output.get("data", {})))


def inventory(site: Path) -> dict[str, str]:
    """objects.inv: object name -> its URI (Sphinx's inventory, format 2: four header lines, then zlib)."""
    raw = (site / "objects.inv").read_bytes()
    body = zlib.decompress(raw.split(b"\n", 4)[4]).decode()
    entries = {}
    for line in body.splitlines():
        match = re.match(r"(.+?)\s+(\S+):(\S+)\s+(-?\d+)\s+(\S+)\s+(.*)", line)
        if match and match.group(2) == "py":
            uri = match.group(5)
            entries[match.group(1)] = uri[:-1] + match.group(1) if uri.endswith("$") else uri
    return entries


# --- the site of this checkout ----------------------------------------------------------------------------------

def test_every_notebook_has_its_page_in_reading_order_with_figures_and_download(site):
    assert NOTEBOOKS, "no notebooks/[0-9]*.ipynb found"
    tutorials = html(site, "docs/site/tutorials.html")
    listed = re.findall(r'href="\.\./\.\./notebooks/([0-9][^"#]*)\.html"', tutorials)
    assert list(dict.fromkeys(listed)) == [nb.stem for nb in NOTEBOOKS], "the tutorials page lists them out of order"
    for notebook in NOTEBOOKS:
        page = html(site, f"notebooks/{notebook.stem}.html")
        images = re.findall(r'<img[^>]+src="([^"]+)"', page)
        assert len(images) >= image_outputs(notebook), f"{notebook.name}: figures missing from its page"
        for src in images:
            assert (site / "notebooks" / src).resolve().is_file(), f"{notebook.name}: {src} is not in the site"
        download = re.search(rf'href="([^"]*_downloads/[^"]*/{re.escape(notebook.name)})"', page)
        assert download, f"{notebook.name}: no download link on its page"
        assert (site / "notebooks" / download.group(1)).read_bytes() == notebook.read_bytes()


def test_every_public_name_has_an_entry_in_the_api_reference(site):
    import QuantumGrav

    entries = inventory(site)
    missing = [name for name in QuantumGrav.__all__ if f"QuantumGrav.{name}" not in entries]
    assert not missing, f"public names without an entry in docs/site/api.md: {missing}"
    api = html(site, "docs/site/api.html")
    for name in QuantumGrav.__all__:
        assert entries[f"QuantumGrav.{name}"] == f"docs/site/api.html#QuantumGrav.{name}"
        assert f'id="QuantumGrav.{name}"' in api


def test_every_config_key_is_in_the_configuration_reference(site):
    from QuantumGrav.config.layout import schema
    from QuantumGrav.config.reference import leaf_keys

    keys = [key for key, _ in leaf_keys(schema())]
    page = html(site, "docs/configuration.html")
    assert len(keys) > 20
    missing = [key for key in keys if f"<code class=\"docutils literal notranslate\"><span class=\"pre\">{key}</span>"
               not in page]
    assert not missing, f"config keys missing from the configuration reference page: {missing}"


def test_every_command_line_option_is_on_the_command_line_page(site):
    import argparse

    from QuantumGrav.cli import build_parser

    page = html(site, "docs/site/cli.html")
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command, parser in commands.choices.items():
        assert f'id="{command}"' in page or f">{command}<" in page, f"no section for '{command}'"
        for action in parser._actions:
            if action.help != argparse.SUPPRESS and not isinstance(action, argparse._HelpAction):
                for option in action.option_strings:
                    assert option in page, f"{command} {option} is not on the command line page"


def test_every_benchmark_result_file_has_its_section(site):
    page = html(site, "docs/site/benchmarks.html")
    results = sorted((REPO / "benchmarks").rglob("results_*.json"))
    assert len({result.parent for result in results}) > 1  # the study folders' files too, not the top level's only
    for result in results:
        name = result.relative_to(REPO / "benchmarks").as_posix()
        assert f">{name}<" in page, f"benchmarks/{name} has no section on the benchmarks page"


def test_no_internal_link_or_anchor_is_broken_and_every_page_is_reachable(site):
    report = site_check.check(site, home="docs/site/index.html")
    assert not report.broken, "broken links:\n" + "\n".join(report.broken)
    assert not report.unreachable, f"pages not reachable from the home page: {report.unreachable}"
    # The outside links are listed (make docs prints them), never fetched.
    assert all(url.startswith(("http://", "https://")) for url in report.outside)
    assert (site / "index.html").read_text().count("docs/site/index.html") >= 1  # the top index opens the home


def test_the_docstring_examples_of_the_public_names_run(monkeypatch):
    """The reference's examples are run as doctests (those that train or need torchrun are marked +SKIP)."""
    import doctest

    import QuantumGrav

    monkeypatch.chdir(REPO)  # the examples name configs/ as a user in the repository does
    modules = {QuantumGrav} | {sys.modules[getattr(QuantumGrav, name).__module__] for name in QuantumGrav.__all__}
    for module in sorted(modules, key=lambda m: m.__name__):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, report=False)
        assert result.failed == 0, f"{module.__name__}: {result.failed} of {result.attempted} examples fail"


# --- teaching kept apart from testing ------------------------------------------------------------------------

TEST_ONLY_TAG = "remove-cell"   # myst-nb leaves the cell out of the page; the .ipynb keeps it, folded
SOLUTION_TAGS = {"hide-cell", "nbval-ignore-output"}  # folded on the page; nbval runs it, output not compared


def _cells(notebook: Path) -> list[dict]:
    return json.loads(notebook.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _statements(cell: dict) -> list[ast.stmt]:
    """The cell's top-level statements (IPython's %magics, !commands and `name = !command` captures read as
    comments)."""
    code = "\n".join("#" + line if line.lstrip().startswith(("%", "!")) or re.match(r"\s*[\w.]+\s*=\s*!", line)
                      else line for line in _source(cell).splitlines())
    return ast.parse(code).body


def is_test_only(cell: dict) -> bool:
    """A cell that serves only the tests: the JSON summary, the test-mode call, or nothing but asserts."""
    if cell["cell_type"] != "code":
        return False
    source, statements = _source(cell), _statements(cell)
    return ("json.dumps(notebook_summary" in source or "QG.shrink_for_smoke_test(" in source
            or bool(statements) and all(isinstance(s, ast.Assert) for s in statements))


def _page_text(page: str) -> str:
    """The visible text of a page's article, without tags (pygments splits code into one span per token)."""
    article = re.search(r"<article.*?</article>", page, re.S).group(0)
    return html_text.unescape(re.sub(r"<[^>]+>", "", article))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[nb.stem for nb in NOTEBOOKS])
def test_test_only_cells_are_tagged_for_the_site_and_folded_in_jupyter(notebook):
    cells = _cells(notebook)
    code = [cell for cell in cells if cell["cell_type"] == "code"]
    for cell in code:
        tags, metadata = cell["metadata"].get("tags", []), cell["metadata"]
        first_line = _source(cell).splitlines()[0] if _source(cell) else ""
        if is_test_only(cell):
            assert TEST_ONLY_TAG in tags, f"{notebook.name}: a test-only cell is not tagged {TEST_ONLY_TAG}: {first_line}"
        if TEST_ONLY_TAG in tags:
            assert metadata.get("jupyter", {}).get("source_hidden") is True and metadata.get("collapsed") is True, \
                f"{notebook.name}: a {TEST_ONLY_TAG} cell is not folded in Jupyter: {first_line}"
        else:  # a teaching cell: no checks at its top level, no marker comment for nbval
            assert not any(isinstance(s, ast.Assert) for s in _statements(cell)), \
                f"{notebook.name}: asserts in a teaching cell (move them to a test-only cell after it): {first_line}"
            assert "NBVAL_IGNORE_OUTPUT" not in _source(cell), f"{notebook.name}: use the cell tag: {first_line}"
    if any("json.dumps(notebook_summary" in _source(cell) for cell in code):  # the papermill tests read the last one
        assert "json.dumps(notebook_summary" in _source(code[-1]), f"{notebook.name}: the summary is not the last code cell"
    prose = "\n".join(_source(cell) for cell in cells if cell["cell_type"] == "markdown")
    for phrase in ("For the tests", "the tests do not compare", "nbval", "the test suite", "test mode"):
        assert phrase not in prose, f"{notebook.name}: the prose talks about the tests: {phrase!r}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[nb.stem for nb in NOTEBOOKS])
def test_every_exercise_has_a_folded_reference_solution_that_nbval_runs(notebook):
    cells = _cells(notebook)
    start = next((k for k, cell in enumerate(cells) if cell["cell_type"] == "markdown"
                  and "## Exercises" in _source(cell)), None)
    assert start is not None, f"{notebook.name} has no exercises"
    solutions = [cell for cell in cells[start:] if cell["cell_type"] == "code" and "hide-cell" in cell["metadata"].get("tags", [])]
    for cell in solutions:
        assert SOLUTION_TAGS <= set(cell["metadata"]["tags"]), f"{notebook.name}: a solution lacks {SOLUTION_TAGS}"
        assert cell["metadata"].get("jupyter", {}).get("source_hidden") is True, f"{notebook.name}: a solution is not folded"
    prose = "\n".join(_source(cell) for cell in cells[start:] if cell["cell_type"] == "markdown")
    exercises = len(re.findall(r"^\s*\d\. \*\*", prose, re.M))  # "1. **The title.** ..."
    assert exercises >= 1 and len(solutions) >= exercises, \
        f"{notebook.name}: {exercises} exercises, {len(solutions)} reference solutions in code cells"
    assert "<details" not in prose, f"{notebook.name}: a markdown-only solution (it never runs)"


def test_a_notebook_page_leaves_out_test_only_cells_and_folds_solutions(site):
    """Notebook 02 on the site: its teaching cells are there, its asserts and summary are not, its solutions are folded."""
    notebook = REPO / "notebooks" / "02_train_single_process.ipynb"
    page = html(site, f"notebooks/{notebook.stem}.html")
    text = _page_text(page)
    cells = _cells(notebook)
    test_only = [_source(cell) for cell in cells if TEST_ONLY_TAG in cell["metadata"].get("tags", [])]
    assert len(test_only) >= 5
    assert "trainer = QG.Trainer(config)" in text and "prepare_dataloaders()" in text  # teaching cells
    assert "json.dumps(notebook_summary)" not in text and "shrink_for_smoke_test(globals()" not in text
    for source in test_only:
        for line in source.splitlines():
            if line.startswith("assert "):
                assert line not in text, f"a test-only line is on the page: {line}"
    folded = re.findall(r'<details class="admonition hide[^"]*">(.*?)</details>', page, re.S)
    solutions = [_source(cell) for cell in cells if "hide-cell" in cell["metadata"].get("tags", [])]
    assert folded and len(folded) >= len(solutions)
    assert "def confusion(model, loader, num_classes):" in html_text.unescape(re.sub(r"<[^>]+>", "", "".join(folded)))


# --- the checks themselves, each shown failing once --------------------------------------------------------------

def write_site(root: Path, pages: dict[str, str]) -> Path:
    for name, body in pages.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"<html><body>{body}</body></html>", encoding="utf-8")
    return root


def test_the_link_check_reports_a_missing_page_a_missing_anchor_and_an_unreachable_page(tmp_path):
    site = write_site(tmp_path, {
        "home.html": '<a href="guide.html#setup">ok</a> <a href="gone.html">x</a> <a href="guide.html#nowhere">y</a>'
                     ' <a href="https://example.org/x">outside</a> <img src="_images/missing.png">',
        "guide.html": '<h2 id="setup">Setup</h2><a href="#setup">self</a>',
        "orphan.html": "<p>no link leads here</p>",
    })
    report = site_check.check(site, home="home.html")
    assert sorted(report.broken) == ["home.html: _images/missing.png (no such file)", "home.html: gone.html (no such file)",
                                     "home.html: guide.html#nowhere (no anchor 'nowhere' in guide.html)"]
    assert report.unreachable == ["orphan.html"]
    assert report.outside == {"https://example.org/x": {"home.html"}}


def tiny_sphinx_project(root: Path, module: str, page: str, extension: str, **config) -> Path:
    """A Sphinx project of one page documenting ``tinypkg`` (``module``'s text), with one of the site's checks."""
    (root / "tinypkg").mkdir(parents=True)
    (root / "tinypkg" / "__init__.py").write_text(textwrap.dedent(module))
    (root / "index.rst").write_text(textwrap.dedent(page))
    settings = "".join(f"{key} = {value!r}\n" for key, value in config.items())
    (root / "conf.py").write_text(f"import sys\nsys.path.insert(0, {str(root)!r})\n"
                                  f"extensions = ['sphinx.ext.autodoc', {extension!r}]\n{settings}")
    return root


DOCUMENTED = '''
    """A tiny package."""
    __all__ = ["scale", "shift"]


    def scale(values, factor=2):
        """Multiply every value.

        Args:
            values: the numbers.
            {second}: how much.

        Returns:
            The scaled numbers.
        """
        return [v * factor for v in values]


    def shift(values, by):
        """Add ``by`` to every value.

        Args:
            values: the numbers.
            by: the amount.
        """
        return [v + by for v in values]
'''


@pytest.mark.parametrize("second, error", [("factor", None), ("fatcor", "documents 'fatcor'")])
def test_a_docstring_documenting_a_parameter_the_signature_lacks_fails_the_build(tmp_path, second, error):
    _need("sphinx", "the docstring check")
    project = tiny_sphinx_project(tmp_path / "src", DOCUMENTED.replace("{second}", second),
                                  "Tiny\n====\n\n.. autofunction:: tinypkg.scale\n.. autofunction:: tinypkg.shift\n",
                                  "qg_docstrings")
    built = sphinx_build(project, project, tmp_path / "out")
    if error is None:
        assert built.returncode == 0, built.stderr
    else:
        assert built.returncode != 0 and error in built.stderr and "tinypkg.scale" in built.stderr, built.stderr


@pytest.mark.parametrize("entries, error", [
    (["scale", "shift"], None),
    (["scale"], "tinypkg.shift is public (tinypkg.__all__) but has no entry in the API reference"),
])
def test_a_public_name_without_an_entry_in_the_reference_fails_the_build(tmp_path, entries, error):
    _need("sphinx", "the public-names check")
    page = "Tiny\n====\n\n" + "".join(f".. autofunction:: tinypkg.{name}\n" for name in entries)
    project = tiny_sphinx_project(tmp_path / "src", DOCUMENTED.replace("{second}", "factor"), page,
                                  "qg_public_names", qg_public_package="tinypkg", qg_api_page="index.rst")
    built = sphinx_build(project, project, tmp_path / "out")
    if error is None:
        assert built.returncode == 0, built.stderr
    else:
        assert built.returncode != 0 and error in built.stderr, built.stderr


# --- a real browser ----------------------------------------------------------------------------------------------

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1280,900"]


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass


@pytest.fixture(scope="module")
def served_site(site):
    """The built site over HTTP on 127.0.0.1, on a port the OS picks."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Headless Chromium from the distribution's packages (scripts/install_browser.sh), driven by Selenium."""
    _need("selenium", "the browser test")
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_path):
        message = "needs chromium and chromium-driver: run scripts/install_browser.sh as root (.ci/run does)"
        pytest.fail(message) if IN_CI else pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in CHROMIUM_ARGS + [f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"]:
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def screenshot(driver, site: Path, name: str) -> None:
    folders = [site.parent / "screenshots"]
    if os.environ.get("QUANTUMGRAV_SCREENSHOTS"):
        folders.append(Path(os.environ["QUANTUMGRAV_SCREENSHOTS"]))
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(folder / f"{name}.png"))


def console_errors(driver) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def wait_for(driver, script: str, timeout_s: float = 30):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout_s).until(lambda d: d.execute_script(script))


def test_the_home_page_opens_in_a_browser(browser, served_site, site):
    browser.get(f"{served_site}/index.html")  # the top index redirects to the home page
    wait_for(browser, "return location.pathname.endsWith('/docs/site/index.html') && document.readyState == 'complete'")
    assert browser.find_element("css selector", "h1").text.startswith("QuantumGrav")
    sidebar = browser.find_element("css selector", ".sidebar-tree").text
    for caption in ("Tutorials", "API reference", "Command line", "Benchmarks"):
        assert caption in sidebar
    screenshot(browser, site, "home")
    assert console_errors(browser) == []


def test_a_notebook_page_shows_its_figures_in_a_browser(browser, served_site, site):
    notebook = next(nb for nb in NOTEBOOKS if image_outputs(nb))
    browser.get(f"{served_site}/notebooks/{notebook.stem}.html")
    wait_for(browser, "return document.readyState == 'complete'")
    images = wait_for(browser, "const i = Array.from(document.querySelectorAll('article img'));"
                               "return i.every(x => x.complete) && i.map(x => [x.src, x.naturalWidth]);")
    assert len(images) >= image_outputs(notebook)
    assert all(width > 0 for _, width in images), f"figures that did not load: {images}"
    # The stored math is typeset by the site's own MathJax (no CDN): rendered formulas appear.
    wait_for(browser, "return document.querySelectorAll('span.math').length == 0 ||"
                      " document.querySelectorAll('mjx-container').length > 0")
    browser.execute_script("document.querySelector('article img').scrollIntoView({block: 'center', behavior: 'instant'})")
    screenshot(browser, site, "notebook")
    assert console_errors(browser) == []


def test_the_search_finds_trainerddp_in_the_api_reference(browser, served_site, site):
    browser.get(f"{served_site}/search.html?q=TrainerDDP")
    hrefs = wait_for(browser, "const a = Array.from(document.querySelectorAll('#search-results li a'));"
                              "return a.length > 0 && a.map(x => x.getAttribute('href'));")
    assert any(href.endswith("docs/site/api.html#QuantumGrav.TrainerDDP") for href in hrefs), hrefs
    screenshot(browser, site, "search")
    assert console_errors(browser) == []


def test_a_notebook_page_in_a_browser_shows_the_lesson_without_its_tests(browser, served_site, site):
    browser.get(f"{served_site}/notebooks/02_train_single_process.html")
    wait_for(browser, "return document.readyState == 'complete'")
    text = browser.find_element("css selector", "article").text
    assert "trainer = QG.Trainer(config)" in text                       # a teaching cell, visible
    assert "json.dumps(notebook_summary)" not in text                   # the summary cell: not on the page
    assert "assert QG.count_parameters(trainer.model)" not in text      # an assert cell: not on the page
    # A solution is in the page, folded: a closed <details> whose code is not rendered until it is opened.
    state = browser.execute_script(
        "const d = Array.from(document.querySelectorAll('article details.hide'))"
        "  .find(x => x.textContent.includes('def confusion(model, loader, num_classes)'));"
        "if (d) d.scrollIntoView({block: 'center', behavior: 'instant'});"
        "return d ? [d.open, d.querySelector('pre').getClientRects().length] : null;")
    assert state == [False, 0], state
    assert "def confusion(model, loader, num_classes):\n    matrix" not in text
    # Code and outputs wrap at the page's width: no block of the page scrolls sideways.
    scrolling = browser.execute_script(
        "return Array.from(document.querySelectorAll('article pre')).filter(p => p.getClientRects().length > 0"
        "  && p.scrollWidth > p.clientWidth + 1).map(p => p.textContent.slice(0, 60));")
    assert scrolling == [], f"blocks that scroll sideways: {scrolling}"
    screenshot(browser, site, "notebook_folded_solution")
    assert console_errors(browser) == []
