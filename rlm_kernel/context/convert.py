"""One input to one entry of the context: the converter for each kind
(run in a worker process, or here for a few small files), and plain text
decoded as it always was."""

from __future__ import annotations

import io
import os
from typing import Any

from ..errors import ContextError
from .document import Document, ImageFile
from .kinds import check_installed

# Bumped when a converter's output changes, so cached conversions are made again.
CONVERTER_VERSION = 1
IMAGE_MIMES = {b"\x89PNG": "image/png", b"\xff\xd8\xff": "image/jpeg"}


def convert(kind: str, data: str | bytes, source: str, encoding: str = "utf-8", url: str | None = None) -> Any:
    """Convert ``data`` (a path, or the bytes of an archive's member or a
    fetched URL) of ``kind``; a bad input raises one-sentence ContextError."""
    check_installed(kind, source)
    if kind == "pdf":
        from .pdf import convert_pdf

        return convert_pdf(data, source)
    if kind in ("docx", "pptx"):
        from . import office

        return office.convert_docx(_file(data), source) if kind == "docx" else office.convert_pptx(_file(data), source)
    if kind == "html":
        from .web import convert_html

        return convert_html(_bytes(data), source, url)
    if kind == "epub":
        from .web import convert_epub

        return convert_epub(_file(data), source)
    if kind in ("csv", "tsv", "parquet"):
        from .tables import convert_table

        return convert_table(data, source, kind, encoding)
    if kind == "xlsx":
        from .tables import convert_xlsx

        return convert_xlsx(data, source)
    if kind == "sqlite":
        from .tables import convert_sqlite

        return convert_sqlite(data, source)
    if kind == "image":
        return convert_image(_bytes(data), source)
    raise ContextError(f"{source!r} is of a kind we do not convert ({kind}).")


def _file(data: str | bytes) -> Any:
    return io.BytesIO(data) if isinstance(data, bytes) else data


def _bytes(data: str | bytes) -> bytes:
    if isinstance(data, bytes):
        return data
    with open(data, "rb") as handle:
        return handle.read()


def convert_image(raw: bytes, source: str) -> ImageFile:
    mime = next((m for magic, m in IMAGE_MIMES.items() if raw.startswith(magic)), None)
    if mime is None and raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
        mime = "image/webp"
    if mime is None:
        raise ContextError(f"{source!r} is not a PNG, JPEG or WebP image (corrupt, or another format).")
    width = height = None
    try:
        from PIL import Image
    except ImportError:
        return ImageFile(raw, source, mime)
    try:
        with Image.open(io.BytesIO(raw)) as img:
            width, height = img.size
            img.verify()
    except Exception as error:  # noqa: BLE001 - Pillow raises many kinds for a broken image
        raise ContextError(f"{source!r} is not a readable image (corrupt or truncated: {type(error).__name__}).") \
            from None
    return ImageFile(raw, source, mime, width, height)


def decode_text(raw: bytes, source: str, kind: str, encoding: str = "utf-8") -> Document:
    """Text bytes as a :class:`Document`: NUL bytes mean binary, bytes that
    are not ``encoding`` are said with the byte and offset."""
    return Document(_decode(raw, source, encoding), source, kind)


def read_text(path: str, source: str, kind: str, encoding: str = "utf-8") -> Document:
    """A text file as a :class:`Document`, at most twice its size in memory
    at any moment: its bytes go before the document's own copy is made."""
    raw = read_file(path, source)
    text = _decode(raw, source, encoding)
    del raw
    return Document(text, source, kind)


def _decode(raw: bytes, source: str, encoding: str) -> str:
    if b"\x00" in raw[:8192] and encoding.lower().replace("-", "") not in ("utf16", "utf32"):
        raise ContextError(f"{source!r} looks binary (it contains NUL bytes) and is no format we convert; give a "
                           "text file or a document (PDF, DOCX, PPTX, XLSX, HTML, EPUB, CSV, Parquet, SQLite, image).")
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as error:
        raise ContextError(
            f"{source!r} is not valid {encoding} (byte 0x{raw[error.start]:02x} at offset {error.start:,}); "
            "pass --encoding with the file's encoding, e.g. --encoding latin-1."
        ) from None
    except LookupError:
        raise ContextError(f"Unknown encoding {encoding!r}; use a Python codec name such as utf-8 or latin-1.") \
            from None


def read_file(path: str, source: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except PermissionError:
        raise ContextError(f"Permission denied reading {source!r}.") from None
    except OSError as error:
        raise ContextError(f"Cannot read {source!r}: {error.strerror or error}.") from None


def file_size(path: str) -> int:
    return os.stat(path).st_size


__all__ = ["CONVERTER_VERSION", "convert", "convert_image", "decode_text", "read_file", "read_text"]
