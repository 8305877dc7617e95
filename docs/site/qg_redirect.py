"""``index.html`` at the top of the output folder opens the home page (docs/site/index.html), so the site is
opened as ``build/docs/html/index.html``."""

from __future__ import annotations

from pathlib import Path

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>QuantumGrav</title>
<meta http-equiv="refresh" content="0; url={target}"><link rel="canonical" href="{target}">{icon}</head>
<body><p><a href="{target}">QuantumGrav documentation</a></p></body></html>
"""


def write_redirect(app, exception) -> None:
    if exception is None and app.builder.format == "html":
        target = app.builder.get_target_uri(app.config.root_doc)
        # Without an icon of its own, a browser asks the server for /favicon.ico (a 404 in its console).
        favicon = app.config.html_favicon
        icon = f'<link rel="icon" href="_static/{Path(favicon).name}">' if favicon else ""
        (Path(app.outdir) / "index.html").write_text(PAGE.format(target=target, icon=icon), encoding="utf-8")


def setup(app):
    app.connect("build-finished", write_redirect)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
