"""What kind of input a file is, and what converting it needs.

The kind comes from the name's suffix; a name without a known suffix is
sniffed (a PDF, a SQLite file, a zip or tar archive), else read as text
when it has no NUL bytes. Converting most kinds needs the ``documents``
extra; without it such a file is refused in one sentence naming it (HTML
and CSV then load as plain text, as they always did).
"""

from __future__ import annotations

import importlib.util

from ..errors import ContextError

EXTRA = "pip install 'rlm-kernel[documents]'"

SUFFIXES = {
    ".pdf": "pdf", ".docx": "docx", ".pptx": "pptx", ".xlsx": "xlsx", ".xlsm": "xlsx",
    ".html": "html", ".htm": "html", ".xhtml": "html", ".epub": "epub",
    ".md": "markdown", ".markdown": "markdown", ".txt": "text", ".text": "text", ".rst": "text",
    ".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl",
    ".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".parquet": "parquet",
    ".sqlite": "sqlite", ".sqlite3": "sqlite", ".db": "sqlite",
    ".png": "image", ".jpg": "image", ".jpeg": "image", ".webp": "image",
    ".zip": "zip", ".tar": "tar", ".tgz": "tar", ".tar.gz": "tar", ".tar.bz2": "tar", ".tar.xz": "tar",
    ".tbz2": "tar", ".txz": "tar",
}
# Kinds read as text by the loader itself (no converter, no cache).
TEXT = {"text", "markdown", "json", "jsonl"}
ARCHIVES = {"zip", "tar"}
# The modules a converted kind needs (all in the documents extra).
NEEDS = {
    "pdf": ("pypdfium2",), "docx": ("docx",), "pptx": ("pptx",), "xlsx": ("pandas", "openpyxl"),
    "epub": ("ebooklib", "trafilatura"), "html": ("trafilatura",), "csv": ("pandas",), "tsv": ("pandas",),
    "parquet": ("pandas", "pyarrow"), "sqlite": ("pandas",), "image": (),
}
NAMES = {"pdf": "a PDF", "docx": "a Word document", "pptx": "a PowerPoint deck", "xlsx": "an Excel workbook",
         "epub": "an e-book", "html": "a web page", "csv": "a CSV table", "tsv": "a TSV table",
         "parquet": "a Parquet table", "sqlite": "a SQLite database"}
# Without the extra these still load, as text (what they always did).
TEXT_WITHOUT_EXTRA = {"html", "csv", "tsv"}


def kind_of_name(name: str) -> str | None:
    lower = name.lower()
    for suffix in (".tar.gz", ".tar.bz2", ".tar.xz"):
        if lower.endswith(suffix):
            return SUFFIXES[suffix]
    dot = lower.rfind(".")
    return SUFFIXES.get(lower[dot:]) if dot > lower.rfind("/") else None


def sniff(head: bytes) -> str | None:
    """A kind from a file's first bytes, for names without a known suffix."""
    if head.startswith(b"%PDF-"):
        return "pdf"
    if head.startswith(b"SQLite format 3\x00"):
        return "sqlite"
    if head.startswith(b"PK\x03\x04"):
        return "zip"
    if head[257:262] == b"ustar" or head.startswith((b"\x1f\x8b", b"BZh", b"\xfd7zXZ")):
        return "tar"
    return None


def installed(kind: str) -> bool:
    return all(importlib.util.find_spec(module) is not None for module in NEEDS.get(kind, ()))


def check_installed(kind: str, source: str) -> None:
    """Refuse a kind whose converter is not installed, in one sentence."""
    if not installed(kind):
        raise ContextError(f"{source!r} is {NAMES.get(kind, kind)}, and converting it needs the documents "
                           f"extra: {EXTRA}.")


__all__ = ["ARCHIVES", "EXTRA", "NEEDS", "SUFFIXES", "TEXT", "TEXT_WITHOUT_EXTRA", "check_installed", "installed",
           "kind_of_name", "sniff"]
