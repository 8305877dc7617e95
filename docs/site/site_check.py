"""Checks of the built site, offline: every internal link and anchor resolves, every page is reachable from
the home page, and the links to the outside are listed (never fetched).

    python docs/site/site_check.py build/docs/html     # `make docs` runs it after the build

Prints the outside links, then one line per broken link; exits with 1 when a link is broken.
"""

from __future__ import annotations

import sys
from collections import deque
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

# Sphinx's own pages and folders: generated, and reached from every page's header or the API reference.
NOT_CONTENT = ("_sources/", "_static/", "_modules/", "_images/", "_downloads/")
GENERATED_PAGES = {"genindex.html", "search.html", "py-modindex.html", "index.html"}


@dataclass
class Page:
    ids: set[str] = field(default_factory=set)
    links: list[str] = field(default_factory=list)  # href of <a>, <link>; src of <img>, <script>


class _Collector(HTMLParser):
    def __init__(self, page: Page):
        super().__init__(convert_charrefs=True)
        self.page = page

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        for name in ("id", "name") if tag == "a" else ("id",):
            if attributes.get(name):
                self.page.ids.add(attributes[name])
        for name in ("href", "src"):
            if attributes.get(name) is not None:
                self.page.links.append(attributes[name])


def parse(path: Path) -> Page:
    page = Page()
    _Collector(page).feed(path.read_text(encoding="utf-8", errors="replace"))
    return page


def is_outside(link: str) -> bool:
    parts = urlsplit(link)
    return bool(parts.scheme or parts.netloc) or link.startswith("//")


@dataclass
class Report:
    broken: list[str] = field(default_factory=list)  # "page: link (why)"
    outside: dict[str, set[str]] = field(default_factory=dict)  # url -> pages linking it
    unreachable: list[str] = field(default_factory=list)


def check(site: Path, home: str) -> Report:
    """Every link of every HTML page of ``site``; the pages not reachable from ``home`` by links."""
    pages = {p.relative_to(site).as_posix(): parse(p) for p in sorted(site.rglob("*.html"))}
    report, edges = Report(), {name: set() for name in pages}
    for name, page in pages.items():
        for link in page.links:
            if is_outside(link):
                if urlsplit(link).scheme in ("http", "https"):
                    report.outside.setdefault(link, set()).add(name)
                continue
            parts = urlsplit(link)
            target = (site / name).parent / unquote(parts.path) if parts.path else site / name
            target_name = target.resolve().relative_to(site.resolve()).as_posix() if target.exists() else None
            if target_name is None:
                report.broken.append(f"{name}: {link} (no such file)")
                continue
            if target.is_dir():
                target_name = f"{target_name}/index.html".lstrip("./")
                if target_name not in pages:
                    report.broken.append(f"{name}: {link} (a folder without index.html)")
                    continue
            if target_name in pages:
                edges[name].add(target_name)
                if parts.fragment and unquote(parts.fragment) not in pages[target_name].ids:
                    report.broken.append(f"{name}: {link} (no anchor '{parts.fragment}' in {target_name})")
    report.unreachable = sorted(set(content_pages(pages)) - reachable(edges, home))
    return report


def content_pages(pages) -> list[str]:
    return [name for name in pages if not name.startswith(NOT_CONTENT) and name not in GENERATED_PAGES]


def reachable(edges: dict[str, set[str]], home: str) -> set[str]:
    seen, queue = {home}, deque([home])
    while queue:
        for target in edges.get(queue.popleft(), ()):
            if target not in seen:
                seen.add(target)
                queue.append(target)
    return seen


def main(argv: list[str]) -> int:
    site = Path(argv[0]) if argv else Path("build/docs/html")
    report = check(site, home="docs/site/index.html")
    print(f"links to the outside (listed, not fetched): {len(report.outside)}")
    for url in sorted(report.outside):
        print(f"  {url}")
    for line in report.broken:
        print(f"broken link: {line}")
    for name in report.unreachable:
        print(f"not reachable from the home page: {name}")
    return 1 if report.broken or report.unreachable else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
