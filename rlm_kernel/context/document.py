"""What a loaded file becomes: the entries of ``context``.

* A text document (PDF, DOCX, PPTX, HTML page, EPUB, Markdown, text, JSON)
  is a :class:`Document`: a ``str`` (so ``context[3][:2000]``, ``len``,
  ``.split`` and regexes work as on any text) that also knows its
  ``.source`` (a path, ``archive.zip/inner/file.pdf`` or a URL), its
  ``.kind``, its ``.pages`` and its ``.metadata`` (title, author, URL...).
  Each page starts with a marker line (``[page 12]``, ``[slide 3]``,
  ``[sheet Sales]``, ``[chapter 2]``), so a slice handed to a sub-call says
  where it comes from; ``doc.pages[11]`` is page 12's text without it and
  ``doc.page_at(offset)`` the page holding a character offset.
* A table (CSV, TSV, Parquet) is a pandas ``DataFrame`` whose ``attrs`` say
  its ``source`` and ``kind``; a workbook (XLSX) or a SQLite file is a
  :class:`Tables`, a dict of DataFrames by sheet or table name.
* An image (PNG, JPEG, WebP) is an :class:`ImageFile`, its bytes, which
  ``llm_query(images=[...])`` takes and a cell displays (so a root model
  that takes images sees it).
* Several entries make a :class:`Documents` list, which also says what was
  skipped and why (``.skipped``).
"""

from __future__ import annotations

import base64
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

# A page's marker line names the unit: a PDF's page, a deck's slide, a workbook's
# sheet, an e-book's chapter.
UNITS = ("page", "slide", "sheet", "chapter", "section")


def marker(unit: str, number: int, title: str | None = None) -> str:
    """The line that opens a page in a document's text."""
    if unit == "sheet" and title:
        return f"[sheet {title}]"
    return f"[{unit} {number}" + (f": {title}]" if title else "]")


class Document(str):
    """A text document: the text itself (a ``str``) with its source and structure."""

    source: str
    kind: str
    unit: str
    metadata: dict[str, Any]
    _spans: tuple[tuple[int, int, str | None], ...]

    def __new__(cls, text: str = "", source: str = "", kind: str = "text", *, unit: str = "page",
                spans: Sequence[tuple[int, int, str | None]] = (),
                metadata: dict[str, Any] | None = None) -> Document:
        self = super().__new__(cls, text)
        self.source, self.kind, self.unit = source, kind, unit
        self._spans = tuple(spans)
        self.metadata = dict(metadata or {})
        return self

    @classmethod
    def from_pages(cls, pages: Sequence[str | tuple[str, str | None]], source: str, kind: str, *,
                   unit: str = "page", metadata: dict[str, Any] | None = None) -> Document:
        """A document from its pages' texts (or ``(text, title)`` pairs), each
        opened by its marker line; the pages' spans are kept."""
        parts: list[str] = []
        spans: list[tuple[int, int, str | None]] = []
        at = 0
        for number, page in enumerate(pages, 1):
            text, title = (page, None) if isinstance(page, str) else page
            head = ("\n\n" if parts else "") + marker(unit, number, title) + "\n"
            parts.append(head)
            at += len(head)
            parts.append(text)
            spans.append((at, at + len(text), title))
            at += len(text)
        return cls("".join(parts), source, kind, unit=unit, spans=spans, metadata=metadata)

    @property
    def pages(self) -> Pages:
        """The document's pages (slides, sheets, chapters); one page for a text without them."""
        return Pages(self)

    def page_at(self, offset: int) -> Page:
        """The page holding character ``offset`` (a regex match's ``start()``)."""
        spans = self._spans
        if not spans:
            return Pages(self)[0]
        starts = [start for start, _, _ in spans]
        index = max(0, bisect_right(starts, offset) - 1)
        return Pages(self)[index]

    def __reduce_ex__(self, protocol: Any) -> Any:  # a Document pickles as itself (a sandbox, the cache)
        return (_rebuild, (str(self), self.source, self.kind, self.unit, self._spans, self.metadata))


def _rebuild(text: str, source: str, kind: str, unit: str, spans: Any, metadata: dict[str, Any]) -> Document:
    return Document(text, source, kind, unit=unit, spans=spans, metadata=metadata)


class Page(str):
    """One page's text (no marker line), with where it comes from."""

    number: int
    title: str | None
    unit: str
    source: str

    def __new__(cls, text: str, number: int, unit: str, source: str, title: str | None = None) -> Page:
        self = super().__new__(cls, text)
        self.number, self.unit, self.source, self.title = number, unit, source, title
        return self

    @property
    def label(self) -> str:
        return marker(self.unit, self.number, self.title)[1:-1]

    @property
    def citation(self) -> str:
        """How an answer cites it: ``report.pdf, page 12``."""
        return f"{self.source}, {self.label}"

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (Page, (str(self), self.number, self.unit, self.source, self.title))


class Pages(Sequence[Page]):
    """A document's pages, sliced from its text when asked for (no second copy kept)."""

    def __init__(self, document: Document) -> None:
        self._doc = document

    def __len__(self) -> int:
        return max(1, len(self._doc._spans))

    @overload
    def __getitem__(self, index: int) -> Page: ...
    @overload
    def __getitem__(self, index: slice) -> list[Page]: ...

    def __getitem__(self, index: int | slice) -> Page | list[Page]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        doc = self._doc
        if not doc._spans:
            if index not in (0, -1):
                raise IndexError(f"{doc.source or 'this document'} has one page")
            return Page(str(doc), 1, doc.unit, doc.source)
        start, end, title = doc._spans[index]
        number = index + 1 if index >= 0 else len(doc._spans) + index + 1
        return Page(doc[start:end], number, doc.unit, doc.source, title)

    def __iter__(self) -> Iterator[Page]:
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        return f"<{len(self)} {self._doc.unit}s of {self._doc.source or 'a document'}>"


class Tables(dict):  # type: ignore[type-arg]
    """A workbook's sheets or a SQLite file's tables: pandas DataFrames by name."""

    def __init__(self, tables: dict[str, Any], source: str = "", kind: str = "sqlite",
                 metadata: dict[str, Any] | None = None) -> None:
        super().__init__(tables)
        self.source, self.kind, self.metadata = source, kind, dict(metadata or {})

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (Tables, (dict(self), self.source, self.kind, self.metadata))


class ImageFile(bytes):
    """An image file's bytes, with its source and size; a cell displays it and
    ``llm_query(images=[...])`` takes it."""

    source: str
    kind: str
    mime: str
    width: int | None
    height: int | None

    def __new__(cls, data: bytes, source: str = "", mime: str = "image/png", width: int | None = None,
                height: int | None = None) -> ImageFile:
        self = super().__new__(cls, data)
        self.source, self.kind, self.mime, self.width, self.height = source, "image", mime, width, height
        return self

    @property
    def metadata(self) -> dict[str, Any]:
        return {"mime": self.mime, "width": self.width, "height": self.height}

    def __repr__(self) -> str:
        size = f"{self.width}x{self.height} " if self.width else ""
        return f"<image {self.source} {size}{self.mime}, {len(self):,} bytes>"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return {self.mime: base64.b64encode(bytes(self)).decode("ascii"), "text/plain": repr(self)}

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (ImageFile, (bytes(self), self.source, self.mime, self.width, self.height))


@dataclass(frozen=True)
class Skipped:
    """An input that was not loaded, and the sentence that says why."""

    source: str
    reason: str

    def __str__(self) -> str:  # the reason is a sentence that names the source, or is said after it
        return self.reason if self.source in self.reason else f"{self.source}: {self.reason}"


class Documents(list):  # type: ignore[type-arg]
    """The loaded entries in order, and what was skipped (``.skipped``)."""

    def __init__(self, entries: Sequence[Any] = (), skipped: Sequence[Skipped] = (),
                 inputs: Sequence[str] = ()) -> None:
        super().__init__(entries)
        self.skipped = list(skipped)
        self.inputs = list(inputs)  # the files and URLs loaded (to load them again)

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (Documents, (list(self), self.skipped, self.inputs))


def retag(entry: Any, source: str) -> Any:
    """``entry`` (maybe from the cache, converted from a file of the same
    content elsewhere) with ``source`` as its source."""
    if isinstance(entry, (Document, ImageFile, Tables)):
        entry.source = source
        if isinstance(entry, Tables):
            for name, frame in entry.items():
                frame.attrs["source"] = f"{source}#{name}"
    elif isinstance(getattr(entry, "attrs", None), dict):
        entry.attrs["source"] = source
    return entry


def source_of(entry: Any) -> str | None:
    """An entry's source: a document's, an image's, a table's (``attrs``)."""
    source = getattr(entry, "source", None)
    if isinstance(source, str):
        return source
    attrs = getattr(entry, "attrs", None)
    return attrs.get("source") if isinstance(attrs, dict) else None


def kind_of(entry: Any) -> str | None:
    kind = getattr(entry, "kind", None)
    if isinstance(kind, str):
        return kind
    attrs = getattr(entry, "attrs", None)
    return attrs.get("kind") if isinstance(attrs, dict) else None


__all__ = ["Document", "Documents", "ImageFile", "Page", "Pages", "Skipped", "Tables", "kind_of", "marker",
           "retag", "source_of"]
