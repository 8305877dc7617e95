"""Each tutorial page (a notebook) gets a link to download its ``.ipynb``, under its title."""

from __future__ import annotations

from pathlib import Path

from docutils import nodes
from sphinx import addnodes


def add_download_link(app, doctree) -> None:
    docname = app.env.docname
    source = Path(app.env.doc2path(docname))
    if source.suffix != ".ipynb":
        return
    link = addnodes.download_reference("", "", refdoc=docname, refdomain="", reftype="download",
                                       refexplicit=True, reftarget="/" + source.relative_to(app.srcdir).as_posix())
    link += nodes.literal(text=source.name)
    paragraph = nodes.paragraph("", "", nodes.Text("Download the notebook: "), link, classes=["notebook-download"])
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is None:
        doctree.insert(0, paragraph)
    else:
        section.insert(section.first_child_matching_class(nodes.title) + 1, paragraph)


def setup(app):
    # Before Sphinx's download collector (priority 500), which copies the file the link names.
    app.connect("doctree-read", add_download_link, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
