"""Sphinx configuration of the documentation site (``make docs``; checked by tests/test_site.py).

The source directory is the repository root, so that README.md, QUICK_REFERENCE_DDP.md, docs/*.md and the
notebooks are pages where they are: their relative links work on GitHub and on the site alike. Only the
files of ``include_patterns`` are read. Offline: no intersphinx inventory is fetched and the theme (Furo)
uses the system's fonts.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

SITE = Path(__file__).resolve().parent
REPO = SITE.parents[1]
sys.path.insert(0, str(SITE))  # this folder's Sphinx extensions
sys.path.insert(0, str(REPO / "QuantumGravPy" / "src"))  # autodoc documents this checkout, not an installed copy

# nbformat (under myst-nb) imports jsonschema, whose format checks import rfc3987_syntax when it is installed
# (Jupyter brings it), and that compiles some 40 lark grammars at import: most of the build's start-up, for
# checks the notebooks' schema never uses. Blocked here, so jsonschema goes without them.
sys.modules.setdefault("rfc3987_syntax", None)

project = "QuantumGrav"
author = "the QuantumGrav developers"
copyright = "2026, the QuantumGrav developers"  # (unset, the footer shows an empty "Copyright ©")
# Read, not imported: importing the package (and torch) is autodoc's job, only when a page needs it.
release = version = re.search(r'__version__ = "([^"]+)"',
                              (REPO / "QuantumGravPy" / "src" / "QuantumGrav" / "common" / "version.py").read_text()).group(1)
root_doc = "docs/site/index"

extensions = [
    "myst_nb",  # MyST markdown and the notebooks, rendered from their stored outputs
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",  # the docstrings are Google style
    "sphinxarg.ext",  # the command line, from cli.build_parser
    "qg_docstrings",  # a documented parameter the signature lacks fails the build
    "qg_public_names",  # every name of QuantumGrav.__all__ has an entry in the API reference
    "qg_notebooks",  # each tutorial page links its .ipynb for download
    "qg_benchmarks",  # the benchmark-results directive
    "qg_redirect",  # index.html at the top of the output opens the home page
    "qg_mathjax",  # math rendered by a local copy of MathJax, never a CDN
]

include_patterns = [
    "README.md", "QUICK_REFERENCE_DDP.md", "docs/*.md", "docs/site/*.md",
    "notebooks/README.md", "notebooks/[0-9]*.ipynb",
]
# Pruned before the include patterns are matched, so that Sphinx does not walk environments and data.
exclude_patterns = [".venv", ".git", "build", "data", "runs", "studies", "wandb", "benchmark_runs",
                    "notebooks/_runs", "notebooks/_data", "**/.ipynb_checkpoints", "**/__pycache__"]

# Notebooks: shown as stored (the suite executes them with nbval); their stderr is part of the lesson.
nb_execution_mode = "off"
nb_output_stderr = "show"
myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 4  # GitHub's heading anchors (README.md#quick-start) resolve, and are checked

napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
nitpicky = False

html_theme = "furo"
html_title = f"QuantumGrav {release}"
html_static_path = ["_static"]
html_css_files = ["code_wraps.css"]  # long code lines and outputs wrap (no horizontal scroll bars)
html_show_sourcelink = False
autodoc_inherit_docstrings = False  # torch's generic Module.forward text is no documentation of ours
html_favicon = "_static/favicon.svg"  # without one, every page asks the server for /favicon.ico
