"""Internal links and anchors of the built site, checked with no network.

Sphinx (``-n``) and MyST already warn about references they cannot
resolve; this looks at what the HTML builder wrote: every relative
``href`` must name a page that exists and, with ``#anchor``, an ``id`` on
that page. External links are not visited. A break is a build warning (an
error in CI, which builds with ``-W``)."""

from __future__ import annotations

import posixpath
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)
SKIPPED = ("_static/", "_sources/", "_images/", "_downloads/")


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.files: list[str] = []  # stylesheets, scripts and images the page loads

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name in ("id", "name"):
                self.ids.add(value)
            elif name == "href" and tag == "a":
                self.links.append(value)
            elif (name, tag) in (("href", "link"), ("src", "script"), ("src", "img")):
                self.files.append(value)


def broken_links(outdir: Path) -> list[str]:
    """Each internal link of the HTML under ``outdir`` that points nowhere, as ``page: href``."""
    pages: dict[str, _Page] = {}
    for path in sorted(outdir.rglob("*.html")):
        relative = path.relative_to(outdir).as_posix()
        if relative.startswith(SKIPPED):
            continue
        page = _Page()
        page.feed(path.read_text(encoding="utf-8"))
        pages[relative] = page
    broken = []
    for name, page in pages.items():
        for src in page.files:
            parts = urlsplit(src)
            if parts.scheme or parts.netloc or not parts.path:
                continue
            target = posixpath.normpath(posixpath.join(posixpath.dirname(name), unquote(parts.path)))
            if not (outdir / target).is_file():
                broken.append(f"{name}: {src} (no such file)")
        for href in page.links:
            parts = urlsplit(href)
            if parts.scheme or parts.netloc or href.startswith(("mailto:", "javascript:")):
                continue  # external: not visited
            target = posixpath.normpath(posixpath.join(posixpath.dirname(name), unquote(parts.path))) \
                if parts.path else name
            if target.startswith(SKIPPED) or target.endswith((".png", ".svg", ".ipynb", ".txt", ".js", ".css")):
                if not (outdir / target).exists():
                    broken.append(f"{name}: {href} (no such file)")
                continue
            if target.endswith("/"):
                target += "index.html"
            if target not in pages:
                if not (outdir / target).exists():
                    broken.append(f"{name}: {href} (no such page)")
                continue
            if parts.fragment and unquote(parts.fragment) not in pages[target].ids:
                broken.append(f"{name}: {href} (no such anchor on {target})")
    return broken


def check(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    broken = broken_links(Path(app.outdir))
    for problem in broken:
        logger.warning(f"internal link points nowhere: {problem}")
    logger.info(f"[rlm] internal links checked: {'none broken' if not broken else f'{len(broken)} broken'}")


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("build-finished", check)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
