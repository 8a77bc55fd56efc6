"""Real files written by the libraries people's files come from, for the
documents tests (tests/test_documents*.py): PDFs by reportlab (from the King
James Bible, with their page count known), Word, PowerPoint and Excel files
by python-docx, python-pptx and openpyxl, an EPUB by ebooklib, Parquet by
pyarrow, SQLite by sqlite3, images by Pillow, archives by zipfile and
tarfile; and the bad ones (encrypted, scanned, truncated, a zip bomb)."""

from __future__ import annotations

import io
import sqlite3
import tarfile
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from rlm_kernel.bench import documents_corpus as corpus

GENESIS_1_1 = "In the beginning God created the heaven and the earth."


def bible_pdf(path: Path, book: str = "Ruth") -> int:
    """A PDF of one book of the Bible, chapter headings and page numbers; its page count."""
    return corpus.write_pdf(path, book, corpus.bible_blocks(corpus.bible_books()[book]), "King James Version")


def essay(index: int = 0) -> tuple[str, list[str]]:
    from rlm_kernel.bench.suites import texts

    name, text = texts.essays()[index]
    return name, corpus.essay_paragraphs(text)


def encrypted_pdf(path: Path) -> None:
    from reportlab.lib import pdfencrypt
    from reportlab.pdfgen import canvas

    page = canvas.Canvas(str(path), encrypt=pdfencrypt.StandardEncryption("secret", ownerPassword="owner"))
    page.drawString(72, 720, "Nothing to see without the password.")
    page.save()


def scanned_pdf(path: Path, pages: int = 2) -> None:
    """A PDF of images only (a scan: no text layer)."""
    from PIL import Image, ImageDraw
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas

    image = Image.new("RGB", (400, 200), "white")
    ImageDraw.Draw(image).text((10, 90), "printed words, as pixels", fill="black")
    page = canvas.Canvas(str(path))
    for _ in range(pages):
        page.drawImage(ImageReader(image), 72, 500, 400, 200)
        page.showPage()
    page.save()


def truncated(source: Path, path: Path, keep: float = 0.4) -> None:
    data = source.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def png(path: Path | None = None, size: tuple[int, int] = (64, 32), color: str = "red") -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG")
    if path is not None:
        path.write_bytes(out.getvalue())
    return out.getvalue()


def sqlite_file(path: Path) -> None:
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE books (name TEXT, chapters INTEGER)")
    connection.executemany("INSERT INTO books VALUES (?, ?)", [("Genesis", 50), ("Ruth", 4), ("Jonah", 4)])
    connection.execute("CREATE TABLE notes (text TEXT)")
    connection.execute("INSERT INTO notes VALUES ('a note')")
    connection.commit()
    connection.close()


def xlsx_file(path: Path) -> None:
    import pandas as pd

    with pd.ExcelWriter(path, engine="openpyxl") as writer:
        pd.DataFrame({"book": ["Genesis", "Ruth"], "chapters": [50, 4]}).to_excel(writer, sheet_name="Books",
                                                                                  index=False)
        pd.DataFrame({"testament": ["Old", "New"], "books": [39, 27]}).to_excel(writer, sheet_name="Testaments",
                                                                                index=False)


def parquet_file(path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"verse": ["1:1", "1:2"], "words": [10, 27]}), path)


def zip_bomb(path: Path, megabytes: int = 64) -> None:
    """A zip whose one member expands to ``megabytes`` of zeros (a few dozen KB on disk)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        with archive.open("zeros.txt", "w", force_zip64=True) as member:
            block = b"0" * 2**20
            for _ in range(megabytes):
                member.write(block)


def zip_of(path: Path, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def tar_of(path: Path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


class Site:
    """A local web server on 127.0.0.1: ``pages`` by path (bytes, content
    type), ``/slow`` answers after ``slow_s``, anything else is a 404."""

    def __init__(self, pages: dict[str, tuple[bytes, str]], slow_s: float = 30.0) -> None:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path == "/slow":
                    site.released.wait(slow_s)
                    self._send(200, b"<html><body><p>late</p></body></html>", "text/html")
                elif self.path in site.pages:
                    self._send(200, *site.pages[self.path])
                else:
                    self._send(404, b"not here", "text/plain")

            def _send(self, status: int, body: bytes, content_type: str) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up (the slow page)

            def log_message(self, *args: Any) -> None:
                pass

        self.pages = pages
        self.released = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Site:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


def mixed_folder(folder: Path) -> dict[str, Any]:
    """One file of each kind the loader takes, in nested folders; what each holds."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "papers").mkdir()
    pages = bible_pdf(folder / "papers" / "ruth.pdf")
    name, paragraphs = essay(0)
    corpus.write_docx(folder / "papers" / "essay.docx", name, paragraphs, [["essay", "paragraphs"],
                                                                           [name, str(len(paragraphs))]])
    slides = corpus.write_pptx(folder / "deck.pptx", name, paragraphs)
    xlsx_file(folder / "books.xlsx")
    (folder / "page.html").write_text(corpus.page_html(name, paragraphs), encoding="utf-8")
    corpus.write_epub(folder / "book.epub", "Two essays", [(essay(i)[0], essay(i)[1]) for i in (1, 2)])
    (folder / "notes.md").write_text("# Notes\n\nRuth is short.\n", encoding="utf-8")
    (folder / "plain.txt").write_text(GENESIS_1_1, encoding="utf-8")
    (folder / "data.json").write_text('{"book": "Ruth"}', encoding="utf-8")
    (folder / "rows.jsonl").write_text('{"n": 1}\n{"n": 2}\n', encoding="utf-8")
    (folder / "table.csv").write_text("book,chapters\nGenesis,50\nRuth,4\n", encoding="utf-8")
    (folder / "table.tsv").write_text("book\tchapters\nJonah\t4\n", encoding="utf-8")
    parquet_file(folder / "verses.parquet")
    sqlite_file(folder / "bible.sqlite")
    png(folder / "red.png")
    return {"pdf_pages": pages, "slides": slides, "essay": name}


def wait_until(predicate: Any, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False
