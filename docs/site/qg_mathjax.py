"""Math on the site without a network: MathJax 3 from the ``django-static-mathjax`` package (MathJax's own
distribution, packaged on PyPI; no Django needed) is copied into ``_static/mathjax`` and Sphinx's MathJax
support points there instead of at a CDN. The notebooks' ``$...$`` becomes math through MyST's ``dollarmath``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

ENTRY = "tex-chtml.js"
# What tex-chtml.js loads: its fonts, the TeX extensions it autoloads, the menu and accessibility parts.
# The speech engine (sre, 4 MB) is left out: it loads only when a reader turns speech on in MathJax's menu.
PARTS = ["output/chtml", "input/tex/extensions", "ui", "a11y"]


def mathjax_files() -> Path:
    import mathjax

    return Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"


def copy_mathjax(app, exception) -> None:
    if exception is None and app.builder.format == "html":
        source, target = mathjax_files(), Path(app.outdir) / "_static" / "mathjax"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / ENTRY, target / ENTRY)
        for part in PARTS:
            shutil.copytree(source / part, target / part, dirs_exist_ok=True)


def setup(app):
    app.config.mathjax_path = f"mathjax/{ENTRY}"
    app.connect("build-finished", copy_mathjax)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
