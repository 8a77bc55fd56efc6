"""Word documents and PowerPoint decks to :class:`Document` s, with
python-docx (sections by top-level heading, tables as rows of cells) and
python-pptx (one page per slide: its title, text, tables and notes)."""

from __future__ import annotations

from typing import Any

from ..errors import ContextError
from .document import Document


def _unreadable(source: str, what: str, error: Exception) -> ContextError:
    return ContextError(f"{source!r} is not a readable {what} (corrupt or truncated: {type(error).__name__}).")


def _table_rows(table: Any) -> list[str]:
    rows = []
    for row in table.rows:
        cells = [" ".join(cell.text.split()) for cell in row.cells]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def convert_docx(data: Any, source: str) -> Document:
    import docx
    from docx.enum.style import WD_STYLE_TYPE
    from docx.table import Table

    try:
        document = docx.Document(data)
    except Exception as error:  # noqa: BLE001 - python-docx raises several kinds for a file it cannot open
        raise _unreadable(source, "Word document (.docx)", error) from None
    sections: list[tuple[list[str], str | None]] = [([], None)]
    # a paragraph's style by its id, looked up once (python-docx's .style searches the styles part each time)
    names = {style.style_id: style.name for style in document.styles}
    default = document.styles.default(WD_STYLE_TYPE.PARAGRAPH)
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            sections[-1][0].extend(_table_rows(block))
            continue
        text = block.text.strip()
        style_id = block._p.style
        style = (names.get(style_id) if style_id else default.name if default is not None else "") or ""
        if style in ("Title", "Heading 1") and text:
            if sections[-1][0] or sections[-1][1]:
                sections.append(([], text))
            else:
                sections[-1] = ([], text)
            sections[-1][0].append(f"# {text}")
        elif text:
            level = style.removeprefix("Heading ") if style.startswith("Heading ") else ""
            sections[-1][0].append(f"{'#' * int(level)} {text}" if level.isdigit() else text)
    props = document.core_properties
    metadata = {k: v for k, v in (("title", props.title), ("author", props.author)) if v}
    pages = [("\n\n".join(lines), title) for lines, title in sections if lines or title]
    return Document.from_pages(pages or [""], source, "docx", unit="section", metadata=metadata)


def convert_pptx(data: Any, source: str) -> Document:
    import pptx

    try:
        deck = pptx.Presentation(data)
    except Exception as error:  # noqa: BLE001 - python-pptx raises several kinds for a file it cannot open
        raise _unreadable(source, "PowerPoint deck (.pptx)", error) from None
    slides: list[tuple[str, str | None]] = []
    for slide in deck.slides:
        title_shape = slide.shapes.title
        title = title_shape.text_frame.text.strip() if title_shape is not None and title_shape.has_text_frame else None
        lines: list[str] = []
        for shape in slide.shapes:
            if shape.has_text_frame and shape is not title_shape:
                text = shape.text_frame.text.strip()
                if text:
                    lines.append(text)
            elif getattr(shape, "has_table", False) and shape.has_table:
                lines.extend(_table_rows(shape.table))
        if slide.has_notes_slide:
            notes = slide.notes_slide.notes_text_frame.text.strip() if slide.notes_slide.notes_text_frame else ""
            if notes:
                lines.append(f"Notes: {notes}")
        slides.append(("\n".join(lines), title or None))
    props = deck.core_properties
    metadata = {k: v for k, v in (("title", props.title), ("author", props.author)) if v}
    metadata["slides"] = len(slides)
    return Document.from_pages(slides or [""], source, "pptx", unit="slide", metadata=metadata)


__all__ = ["convert_docx", "convert_pptx"]
