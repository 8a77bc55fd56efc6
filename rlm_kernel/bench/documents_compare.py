"""``rlm-kernel bench documents --compare``: the candidate converters of each
format side by side on the benchmark's real files, for docs/documents.md.

For each format, the text each candidate gives is scored against the text
the file was written from: *recall* (the share of the source's words it
gives back, as a bag), *order* (difflib's ratio over the first 3,000 words:
1.0 is the source's reading order), *junk* (a web page's navigation and
footer words it kept), and the seconds per file. PDFs also get a page in two
columns (is the left column read before the right one?).

The candidates that are not our choice are not our dependencies: install
them to compare (``pip install pypdf pdfminer.six 'markitdown[docx,pptx,xlsx]'``).
"""

from __future__ import annotations

import importlib.util
import re
import time
from collections import Counter
from collections.abc import Callable
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any

from .common import BenchError, Progress, quiet

JUNK = ("Home", "About", "Subscribe", "newsletter", "Copyright")
NEEDED = {"pypdf": "pypdf", "pdfminer": "pdfminer.six", "markitdown": "markitdown[docx,pptx,xlsx]"}


def _words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z']+", text)


def score(source: str, text: str) -> dict[str, float]:
    want, got = _words(source), _words(text)
    bag_want, bag_got = Counter(want), Counter(got)
    recall = sum((bag_want & bag_got).values()) / max(1, len(want))
    order = SequenceMatcher(None, want[:3000], got[:3000], autojunk=False).ratio()
    junk = sum(text.count(word) for word in JUNK)
    return {"recall": recall, "order": order, "junk": junk}


# -- the candidates, each a function path -> text --------------------------------------------------
def _ours(kind: str) -> Callable[[Path], str]:
    def convert(path: Path) -> str:
        from ..context.convert import convert as ours

        value = ours(kind, str(path), path.name)
        return value if isinstance(value, str) else "\n".join(frame.to_csv() for frame in value.values())

    return convert


def _pypdf(path: Path) -> str:
    import pypdf

    return "\n".join(page.extract_text() for page in pypdf.PdfReader(str(path)).pages)


def _pdfminer(path: Path) -> str:
    from pdfminer.high_level import extract_text

    return extract_text(str(path))


def _markitdown(path: Path) -> str:
    from markitdown import MarkItDown

    return MarkItDown().convert(str(path)).text_content


CANDIDATES: dict[str, list[tuple[str, Callable[[Path], str]]]] = {
    "pdf": [("pypdfium2 (ours)", _ours("pdf")), ("pypdf", _pypdf), ("pdfminer.six", _pdfminer)],
    "docx": [("python-docx (ours)", _ours("docx")), ("markitdown", _markitdown)],
    "pptx": [("python-pptx (ours)", _ours("pptx")), ("markitdown", _markitdown)],
    "xlsx": [("pandas + openpyxl (ours)", _ours("xlsx")), ("markitdown", _markitdown)],
    "html": [("trafilatura (ours)", _ours("html")), ("markitdown", _markitdown)],
    "epub": [("ebooklib + trafilatura (ours)", _ours("epub")), ("markitdown", _markitdown)],
}


def two_columns(path: Path) -> tuple[str, str]:
    """A PDF page in two columns; the text of each column."""
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import BaseDocTemplate, Frame, FrameBreak, PageTemplate, Paragraph

    from .documents_corpus import bible_books

    verses = [text for _, text in bible_books()["Ruth"]]
    left, right = " ".join(verses[:8]), " ".join(verses[8:16])
    width, height = A4
    frames = [Frame(40, 60, width / 2 - 50, height - 120), Frame(width / 2 + 10, 60, width / 2 - 50, height - 120)]
    doc = BaseDocTemplate(str(path), pagesize=A4, pageTemplates=[PageTemplate(frames=frames)])
    style = getSampleStyleSheet()["BodyText"]
    doc.build([Paragraph(left, style), FrameBreak(), Paragraph(right, style)])
    return left, right


def _column_order(convert: Callable[[Path], str], folder: Path) -> str:
    path = folder / "two-columns.pdf"
    left, right = two_columns(path)
    text = " ".join(_words(convert(path)))
    start_left, start_right = text.find(" ".join(_words(left)[:6])), text.find(" ".join(_words(right)[:6]))
    end_left = text.find(" ".join(_words(left)[-6:]))
    if min(start_left, start_right, end_left) < 0:
        return "columns mixed"
    return "left, then right" if end_left < start_right else "interleaved"


def compare(folder: Path, sources: dict[str, str], progress: Progress = quiet, limit: int = 12) -> list[dict[str, Any]]:
    """Each candidate on up to ``limit`` files of each format under ``folder``;
    ``sources``: each file's name -> the text it was written from."""
    missing = [NEEDED[m] for m in NEEDED if importlib.util.find_spec(m) is None]
    if missing:
        raise BenchError(f"comparing needs the other candidates too: pip install {' '.join(missing)}")
    rows = []
    for kind, candidates in CANDIDATES.items():
        files = sorted(p for p in folder.rglob(f"*.{kind}") if p.name in sources)[:limit]
        for name, convert in candidates:
            progress(f"{kind}: {name} on {len(files)} files")
            convert(files[0])  # imports and first-use costs before the clock
            scores, started = [], time.perf_counter()
            texts = [convert(path) for path in files]
            seconds = (time.perf_counter() - started) / len(files)
            scores = [score(sources[p.name], t) for p, t in zip(files, texts, strict=True)]
            row = {"format": kind, "converter": name, "files": len(files), "ms_per_file": seconds * 1000,
                   "recall": sum(s["recall"] for s in scores) / len(scores),
                   "order": sum(s["order"] for s in scores) / len(scores),
                   "junk": sum(s["junk"] for s in scores)}
            if kind == "pdf":
                row["two_columns"] = _column_order(convert, folder)
            rows.append(row)
    return rows


def corpus_sources(count: int = 6) -> dict[str, str]:
    """The text each corpus file was written from, by file name."""
    from . import documents_corpus as corpus
    from .suites import texts

    sources: dict[str, str] = {}
    for number, (book, chapters) in enumerate(corpus.bible_books().items(), 1):
        sources[f"kjv-{number:02d}-{book.replace(' ', '_')}.pdf"] = " ".join(t for _, t in chapters)
    for name, text in texts.essays():
        sources[f"essay-{name}.pdf"] = text
    essays = list(texts.essays()[:count])
    for name, text in essays:
        for suffix in ("docx", "html"):
            sources[f"{name}.{suffix}"] = text
        sources[f"{name}.pptx"] = " ".join(p[:600] for p in corpus.essay_paragraphs(text)[:12])
    sources["essays.epub"] = " ".join(text for _, text in essays)
    sources["kjv-counts.xlsx"] = " ".join(corpus.bible_books())
    return sources


def format_markdown(rows: list[dict[str, Any]]) -> str:
    from .report import md_table

    body = [[r["format"], r["converter"], f"{r['ms_per_file']:.1f} ms", f"{r['recall']:.3f}", f"{r['order']:.3f}",
             str(r["junk"]), r.get("two_columns", "")] for r in rows]
    return md_table(body, ["format", "converter", "per file", "recall", "order", "junk words", "two columns"])


__all__ = ["compare", "corpus_sources", "format_markdown", "score"]
