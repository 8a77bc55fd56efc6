"""Every kind of file the loader takes, written by its own library, loads
with its structure: a PDF's pages (numbers checked against what reportlab
wrote), a Word document's sections, a deck's slides, a workbook's sheets, an
e-book's chapters, a web page's main text and title; tables as DataFrames,
SQLite as its tables, images as bytes a sub-call takes; archives expanded
with their folders kept; and old code on a plain list of text still works."""

from __future__ import annotations

import pickle
import re

import pytest
from _documents import (
    GENESIS_1_1,
    bible_pdf,
    essay,
    mixed_folder,
    png,
    sqlite_file,
    tar_of,
    xlsx_file,
    zip_of,
)

from rlm_kernel.bench import documents_corpus as corpus
from rlm_kernel.context.document import Document, Documents, ImageFile, Tables
from rlm_kernel.context.files import load_context


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLM_CACHE_DIR", str(tmp_path / "cache"))


def test_a_pdf_keeps_its_pages_with_their_numbers(tmp_path):
    path = tmp_path / "ruth.pdf"
    pages = bible_pdf(path, "Ruth")
    doc = load_context([str(path)]).value
    assert isinstance(doc, Document) and doc.kind == "pdf" and doc.source == str(path)
    assert pages >= 3 and len(doc.pages) == pages == doc.metadata["pages"]
    assert doc.metadata["title"] == "Ruth"
    for number, page in enumerate(doc.pages, 1):
        assert page.number == number and f"Ruth - page {number}" in page  # reportlab's footer on that page
        assert page.citation == f"{path}, page {number}"
        assert f"[page {number}]\n{page}" in doc  # its marker line opens it in the text
    # the last chapter is on the last page, and a match finds its page
    at = doc.index("Chapter 4")
    assert doc.page_at(at).number == pages or "Chapter 4" in doc.pages[doc.page_at(at).number - 1]
    assert "Chapter 4" in doc.page_at(at)
    assert doc.pages[-1].number == pages


def test_a_document_is_a_str_for_old_code(tmp_path):
    path = tmp_path / "ruth.pdf"
    bible_pdf(path, "Ruth")
    doc = load_context([str(path)]).value
    assert isinstance(doc, str) and len(doc) > 10_000
    assert doc[:2000] == str(doc)[:2000] and doc.split()[:2] == ["[page", "1]"]
    assert re.search(r"Naomi", doc) and doc.count("Boaz") > 5
    again = pickle.loads(pickle.dumps(doc))
    assert type(again) is Document and again == doc and again.source == doc.source
    assert [p.number for p in again.pages] == [p.number for p in doc.pages]


def test_word_deck_workbook_and_ebook_keep_their_structure(tmp_path):
    name, paragraphs = essay(0)
    corpus.write_docx(tmp_path / "essay.docx", name, paragraphs, [["essay", "paragraphs"], [name, "9"]])
    slides = corpus.write_pptx(tmp_path / "deck.pptx", name, paragraphs)
    xlsx_file(tmp_path / "books.xlsx")
    corpus.write_epub(tmp_path / "book.epub", "Two essays", [essay(1), essay(2)])
    docx, pptx, xlsx, epub = load_context([str(tmp_path / n) for n in ("essay.docx", "deck.pptx", "books.xlsx",
                                                                           "book.epub")]).value
    assert docx.kind == "docx" and docx.unit == "section" and len(docx.pages) == 2
    assert docx.pages[0].title == name and docx.pages[1].title == "Second half"
    assert paragraphs[0][:60] in docx.pages[0] and paragraphs[-1][:60] in docx.pages[1]
    assert f"| {name} | 9 |" in docx  # the table, row by row
    assert docx.metadata["title"] == name
    assert pptx.kind == "pptx" and len(pptx.pages) == slides > 1
    assert [s.title for s in pptx.pages] == [f"{name} ({n})" for n in range(1, slides + 1)]
    assert "Speaker notes for slide 2." in pptx.pages[1] and pptx.pages[1].label == f"slide 2: {name} (2)"
    assert isinstance(xlsx, Tables) and list(xlsx) == ["Books", "Testaments"]
    assert xlsx["Books"]["chapters"].tolist() == [50, 4] and xlsx["Books"].attrs["source"].endswith("#Books")
    assert epub.kind == "epub" and epub.unit == "chapter" and len(epub.pages) == 2
    assert essay(1)[1][0][:50] in epub.pages[0] and essay(2)[1][-1][:50] in epub.pages[1]
    assert epub.metadata["title"] == "Two essays"


def test_a_web_page_is_reduced_to_its_main_text(tmp_path):
    name, paragraphs = essay(3)
    (tmp_path / "page.html").write_text(corpus.page_html(name, paragraphs), encoding="utf-8")
    page = load_context([str(tmp_path / "page.html")]).value
    assert page.kind == "html" and page.metadata["title"] == name
    assert paragraphs[0][:80] in page and paragraphs[-1][:80] in page
    assert "Subscribe to the newsletter" not in page and "About" not in page.split("\n")[0]


def test_tables_are_dataframes_and_sqlite_its_tables(tmp_path):
    import pandas as pd

    (tmp_path / "a.csv").write_text("book,chapters\nGenesis,50\nRuth,4\n")
    (tmp_path / "b.tsv").write_text("book\tchapters\nJonah\t4\n")
    sqlite_file(tmp_path / "c.sqlite")
    csv, tsv, db = load_context([str(tmp_path)]).value
    assert isinstance(csv, pd.DataFrame) and csv["chapters"].sum() == 54 and csv.attrs["kind"] == "csv"
    assert tsv.loc[0, "book"] == "Jonah" and tsv.attrs["source"] == str(tmp_path / "b.tsv")
    assert isinstance(db, Tables) and sorted(db) == ["books", "notes"] and len(db["books"]) == 3


def test_an_image_is_bytes_a_sub_call_takes(tmp_path):
    from rlm_kernel.engine.protocol import images

    png(tmp_path / "red.png", (64, 32))
    image = load_context([str(tmp_path / "red.png")]).value
    assert isinstance(image, ImageFile) and (image.width, image.height, image.mime) == (64, 32, "image/png")
    sent = images.load(image)
    assert (sent.width, sent.height) == (64, 32)
    bundle = image._repr_mimebundle_()
    assert "image/png" in bundle and "red.png" in bundle["text/plain"]


def test_a_mixed_folder_loads_every_kind_in_path_order(tmp_path):
    made = mixed_folder(tmp_path / "in")
    loaded = load_context([str(tmp_path / "in")])
    value = loaded.value
    assert isinstance(value, Documents) and value.skipped == []
    kinds = {str(e.source if hasattr(e, "source") else e.attrs["source"]).rsplit("/", 1)[-1]:
             getattr(e, "kind", None) or e.attrs["kind"] for e in value}
    assert kinds == {"bible.sqlite": "sqlite", "book.epub": "epub", "books.xlsx": "xlsx", "data.json": "json",
                     "deck.pptx": "pptx", "notes.md": "markdown", "page.html": "html", "plain.txt": "text",
                     "red.png": "image", "rows.jsonl": "jsonl", "table.csv": "csv", "table.tsv": "tsv",
                     "verses.parquet": "parquet", "essay.docx": "docx", "ruth.pdf": "pdf"}
    assert len(next(e for e in value if getattr(e, "kind", "") == "pdf").pages) == made["pdf_pages"]
    assert loaded.sources[0].endswith("bible.sqlite") and loaded.sources[-1].endswith("verses.parquet")
    assert loaded.sources.index(str(tmp_path / "in" / "papers" / "ruth.pdf")) < loaded.sources.index(
        str(tmp_path / "in" / "plain.txt"))  # path order, nested folders among the rest
    texts = [e for e in value if isinstance(e, str)]
    assert GENESIS_1_1 in texts and loaded.chars == sum(len(t) for t in texts)


def test_archives_are_expanded_with_their_folders_kept(tmp_path):
    bible_pdf(tmp_path / "ruth.pdf")
    inner = tmp_path / "inner.tar.gz"
    tar_of(inner, {"deep/er/genesis.txt": GENESIS_1_1.encode()})
    zip_of(tmp_path / "all.zip", {"2024/q1/ruth.pdf": (tmp_path / "ruth.pdf").read_bytes(),
                                  "2024/readme.md": b"# About", "nested/inner.tar.gz": inner.read_bytes(),
                                  "__MACOSX/._ruth.pdf": b"\x00junk"})
    loaded = load_context([str(tmp_path / "all.zip")])
    base = str(tmp_path / "all.zip")
    assert [d.source for d in loaded.value] == [f"{base}/2024/q1/ruth.pdf", f"{base}/2024/readme.md",
                                                f"{base}/nested/inner.tar.gz/deep/er/genesis.txt"]
    assert loaded.value[0].kind == "pdf" and len(loaded.value[0].pages) > 1
    assert loaded.value[2] == GENESIS_1_1 and loaded.sources == [base]  # what loads it again


def test_plain_text_files_load_as_before(tmp_path):
    for i, text in enumerate(["one", "two two", "three three three"]):
        (tmp_path / f"{i}.txt").write_text(text)
    value = load_context([str(tmp_path)]).value
    assert value == ["one", "two two", "three three three"]
    assert value[2][:5] == "three" and len(value) == 3 and value[1].split() == ["two", "two"]
    assert repr(value) == repr(["one", "two two", "three three three"])
