"""Web pages and e-books to :class:`Document` s, with trafilatura: a page
reduced to its main text (title, date, author and URL kept), an EPUB's
chapters (ebooklib, in reading order) each reduced the same way."""

from __future__ import annotations

import zipfile
from typing import Any

from ..errors import ContextError
from .document import Document


def html_text(html: str | bytes, *, main_only: bool = True) -> tuple[str, dict[str, Any]]:
    """The text of an HTML page (its main text with ``main_only``) and its metadata."""
    import trafilatura

    found = trafilatura.bare_extraction(html, include_tables=True, include_links=False, with_metadata=True,
                                        favor_recall=not main_only, output_format="python")
    text = getattr(found, "text", None) if found is not None else None
    metadata: dict[str, Any] = {}
    if found is not None:
        for key in ("title", "author", "date", "url", "sitename", "description"):
            value = getattr(found, key, None)
            if value:
                metadata[key] = value
    if not text:  # too little for trafilatura's main-text rules (a short page, a chapter of a few lines)
        text = trafilatura.html2txt(html)
    return (text or "").strip(), metadata


def convert_html(data: bytes, source: str, url: str | None = None) -> Document:
    text, metadata = html_text(data)
    if url:
        metadata["url"] = url
    if not text:
        raise ContextError(f"{source!r} is a web page with no text in it.")
    title = metadata.get("title")
    body = f"# {title}\n\n{text}" if title and not text.startswith(title) else text
    return Document(body, source, "html", unit="page", metadata=metadata)


def convert_epub(data: Any, source: str) -> Document:
    import ebooklib
    from ebooklib import epub

    try:
        book = epub.read_epub(data, options={"ignore_ncx": True})
    except (zipfile.BadZipFile, KeyError, ValueError, OSError, epub.EpubException) as error:
        raise ContextError(f"{source!r} is not a readable e-book (.epub) (corrupt or truncated: "
                           f"{type(error).__name__}).") from None
    chapters: list[tuple[str, str | None]] = []
    for item_id, _ in book.spine:
        item = book.get_item_with_id(item_id)
        if item is None or item.get_type() != ebooklib.ITEM_DOCUMENT:
            continue
        text, meta = html_text(item.get_content(), main_only=False)
        if text:
            chapters.append((text, meta.get("title") or None))
    metadata: dict[str, Any] = {}
    for key in ("title", "creator", "language"):
        values = book.get_metadata("DC", key)
        if values:
            metadata["author" if key == "creator" else key] = values[0][0]
    if not chapters:
        raise ContextError(f"{source!r} is an e-book with no text in it.")
    metadata["chapters"] = len(chapters)
    return Document.from_pages(chapters, source, "epub", unit="chapter", metadata=metadata)


__all__ = ["convert_epub", "convert_html", "html_text"]
