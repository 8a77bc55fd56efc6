"""Real documents made from the real texts the suites use (the King James
Bible, Paul Graham's essays) by the libraries people's files come from:
PDFs by reportlab (a title, chapter headings, a page number at the foot of
each page), Word documents by python-docx, decks by python-pptx, a workbook
by openpyxl (through pandas), web pages as a site would serve them (a
navigation bar and a footer around the article), an e-book by ebooklib.

Used by ``rlm-kernel bench documents``, the documents tests and
``examples/documents_as_context.ipynb``. Needs the ``bench`` and
``documents`` extras.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

from .suites import texts


@dataclass
class Corpus:
    folder: Path
    pdf_pages: dict[str, int] = field(default_factory=dict)  # file name -> pages written
    files: list[Path] = field(default_factory=list)

    @property
    def pages(self) -> int:
        return sum(self.pdf_pages.values())


def bible_books() -> dict[str, list[tuple[int, str]]]:
    """Each book's (chapter, verse text), in canonical order."""
    books: dict[str, list[tuple[int, str]]] = {}
    for verse in texts.kjv_verses():
        books.setdefault(verse.book, []).append((verse.chapter, verse.text))
    return books


def write_pdf(path: Path, title: str, blocks: Iterable[tuple[str, str]], author: str = "") -> int:
    """A PDF of ``blocks`` (("h", heading) or ("p", paragraph)); its page count."""
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate

    styles = getSampleStyleSheet()
    pages = [0]

    def foot(canvas: object, doc: object) -> None:
        pages[0] = doc.page  # type: ignore[attr-defined]
        canvas.saveState()  # type: ignore[attr-defined]
        canvas.setFont("Helvetica", 8)  # type: ignore[attr-defined]
        canvas.drawCentredString(A4[0] / 2, 20, f"{title} - page {doc.page}")  # type: ignore[attr-defined]
        canvas.restoreState()  # type: ignore[attr-defined]

    doc = SimpleDocTemplate(str(path), pagesize=A4, title=title, author=author)
    story = [Paragraph(escape(title), styles["Title"])]
    story += [Paragraph(escape(text), styles["Heading2" if kind == "h" else "BodyText"]) for kind, text in blocks]
    doc.build(story, onFirstPage=foot, onLaterPages=foot)
    return pages[0]


def bible_blocks(chapters: list[tuple[int, str]]) -> list[tuple[str, str]]:
    blocks: list[tuple[str, str]] = []
    current = None
    for chapter, text in chapters:
        if chapter != current:
            current = chapter
            blocks.append(("h", f"Chapter {chapter}"))
        blocks.append(("p", text))
    return blocks


def essay_paragraphs(text: str) -> list[str]:
    return [" ".join(p.split()) for p in re.split(r"\n+", text) if p.strip()]


def write_pdfs(folder: Path, books: int | None = None, essays: int | None = None) -> Corpus:
    """One PDF per Bible book (the first ``books``) and per essay."""
    folder.mkdir(parents=True, exist_ok=True)
    corpus = Corpus(folder)
    for number, (book, chapters) in enumerate(list(bible_books().items())[:books], 1):
        path = folder / f"kjv-{number:02d}-{book.replace(' ', '_')}.pdf"
        corpus.pdf_pages[path.name] = write_pdf(path, book, bible_blocks(chapters), "King James Version")
        corpus.files.append(path)
    for name, text in texts.essays()[:essays]:
        path = folder / f"essay-{name}.pdf"
        corpus.pdf_pages[path.name] = write_pdf(path, name, [("p", p) for p in essay_paragraphs(text)],
                                                "Paul Graham")
        corpus.files.append(path)
    return corpus


def write_docx(path: Path, title: str, paragraphs: list[str], table: list[list[str]] | None = None) -> None:
    import docx

    document = docx.Document()
    document.core_properties.title, document.core_properties.author = title, "Paul Graham"
    document.add_heading(title, level=1)
    half = len(paragraphs) // 2
    for paragraph in paragraphs[:half]:
        document.add_paragraph(paragraph)
    document.add_heading("Second half", level=1)
    for paragraph in paragraphs[half:]:
        document.add_paragraph(paragraph)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                grid.cell(r, c).text = value
    document.save(str(path))


def write_pptx(path: Path, title: str, paragraphs: list[str]) -> int:
    import pptx

    deck = pptx.Presentation()
    for number, paragraph in enumerate(paragraphs[:12], 1):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = f"{title} ({number})"
        slide.placeholders[1].text_frame.text = paragraph[:600]
        slide.notes_slide.notes_text_frame.text = f"Speaker notes for slide {number}."
    deck.save(str(path))
    return min(12, len(paragraphs))


def page_html(title: str, paragraphs: list[str]) -> str:
    body = "".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head><body>"
            "<nav><a href='/'>Home</a> | <a href='/essays'>Essays</a> | <a href='/about'>About</a></nav>"
            f"<article><h1>{html.escape(title)}</h1>{body}</article>"
            "<footer>Copyright the author. All rights reserved. Subscribe to the newsletter.</footer></body></html>")


def write_epub(path: Path, title: str, chapters: list[tuple[str, list[str]]]) -> None:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier(f"rlm-kernel-{abs(hash(title)) % 10**8}")
    book.set_title(title)
    book.set_language("en")
    book.add_author("Paul Graham")
    items = []
    for number, (name, paragraphs) in enumerate(chapters, 1):
        item = epub.EpubHtml(title=name, file_name=f"chapter{number}.xhtml", lang="en")
        item.content = f"<h1>{html.escape(name)}</h1>" + "".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)
        book.add_item(item)
        items.append(item)
    book.toc = items
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = items
    epub.write_epub(str(path), book)


def write_office(folder: Path, count: int = 6) -> list[Path]:
    """Word documents, decks and web pages of the first ``count`` essays, an
    e-book of them, and a workbook of the Bible's verse counts."""
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    essays = list(texts.essays()[:count])
    for name, text in essays:
        paragraphs = essay_paragraphs(text)
        write_docx(folder / f"{name}.docx", name, paragraphs, [["essay", "paragraphs"], [name, str(len(paragraphs))]])
        write_pptx(folder / f"{name}.pptx", name, paragraphs)
        (folder / f"{name}.html").write_text(page_html(name, paragraphs), encoding="utf-8")
        written += [folder / f"{name}.docx", folder / f"{name}.pptx", folder / f"{name}.html"]
    write_epub(folder / "essays.epub", "Essays", [(name, essay_paragraphs(text)) for name, text in essays])
    counts = [{"book": book, "chapters": len({c for c, _ in verses}), "verses": len(verses)}
              for book, verses in bible_books().items()]
    with pd.ExcelWriter(folder / "kjv-counts.xlsx", engine="openpyxl") as writer:
        pd.DataFrame(counts).to_excel(writer, sheet_name="Books", index=False)
        pd.DataFrame([{"testament": "Old", "books": 39}, {"testament": "New", "books": 27}]).to_excel(
            writer, sheet_name="Testaments", index=False)
    written += [folder / "essays.epub", folder / "kjv-counts.xlsx"]
    return written


__all__ = ["Corpus", "bible_books", "essay_paragraphs", "page_html", "write_docx", "write_epub", "write_office",
           "write_pdf", "write_pdfs", "write_pptx"]
