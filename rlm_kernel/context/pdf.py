"""PDF to a :class:`Document` of pages, with pypdfium2 (PDFium's text layer,
page by page; docs/documents.md says why it over pypdf and pdfminer.six)."""

from __future__ import annotations

from typing import Any

from ..errors import ContextError
from .document import Document

OCR_HINT = "run OCR on it first (e.g. `ocrmypdf in.pdf out.pdf`) and load the result"


def convert_pdf(data: Any, source: str) -> Document:
    import pypdfium2 as pdfium

    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as error:
        text = str(error).lower()
        if "password" in text:
            raise ContextError(f"{source!r} is an encrypted PDF (it needs a password); decrypt it first (e.g. "
                               "`qpdf --decrypt --password=PASSWORD in.pdf out.pdf`) and load that.") from None
        raise ContextError(f"{source!r} is not a readable PDF (corrupt or truncated: {_said(error)}).") from None
    try:
        pages: list[str] = []
        for index in range(len(pdf)):
            page = pdf[index]
            try:
                textpage = page.get_textpage()
                try:
                    text = textpage.get_text_bounded()
                finally:
                    textpage.close()
            finally:
                page.close()
            pages.append(text.replace("\r\n", "\n").replace("\r", "\n").strip("\n"))
        metadata = {k.lower(): v for k, v in (pdf.get_metadata_dict(skip_empty=True) or {}).items()
                    if v != "(unspecified)"}
    except pdfium.PdfiumError as error:
        raise ContextError(f"{source!r} could not be read to its end (corrupt or truncated: {_said(error)}).") \
            from None
    finally:
        pdf.close()
    if not pages:
        raise ContextError(f"{source!r} is a PDF with no pages.")
    empty = [number for number, text in enumerate(pages, 1) if not text.strip()]
    if len(empty) == len(pages):
        raise ContextError(f"{source!r} has {len(pages):,} page{'s' if len(pages) != 1 else ''} but no text layer "
                           f"(a scan?); {OCR_HINT}.")
    if empty:
        metadata["pages_without_text"] = empty
    metadata["pages"] = len(pages)
    return Document.from_pages(pages, source, "pdf", unit="page", metadata=metadata)


def _said(error: Exception) -> str:
    """PDFium's own words for a failure: "data format error"."""
    text = str(error)
    return text.split("PDFium: ", 1)[-1].rstrip(").").lower() if "PDFium: " in text else text.rstrip(".")


__all__ = ["OCR_HINT", "convert_pdf"]
