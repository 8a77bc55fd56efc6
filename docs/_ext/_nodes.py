"""Small builders of docutils nodes for the generated references: a
section with an anchor, a table of rows, inline code, text parsed as MyST."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from docutils import nodes
from docutils.statemachine import StringList


def slug(text: str) -> str:
    """An anchor from a name (``--max-cost`` -> ``max-cost``, ``rlm-kernel run`` -> ``rlm-kernel-run``)."""
    return nodes.make_id(text)


def section(document: nodes.document, title: str | nodes.Node, anchor: str) -> nodes.section:
    """A section whose id is ``anchor`` (it shows in the page's table of contents)."""
    node = nodes.section(ids=[anchor], names=[anchor])
    node += nodes.title("", "", *([title] if isinstance(title, nodes.Node) else [nodes.Text(title)]))
    document.note_explicit_target(node)
    return node


def literal(text: str) -> nodes.literal:
    return nodes.literal(text, text)


def with_code(text: str) -> nodes.paragraph:
    """A help string as a paragraph, its `backticked` words as inline code (as --help's readers read them)."""
    out = nodes.paragraph()
    for index, piece in enumerate(re.split(r"`([^`]+)`", text)):
        if piece:
            out += literal(piece) if index % 2 else nodes.Text(piece)
    return out


def paragraph(*parts: nodes.Node | str) -> nodes.paragraph:
    return nodes.paragraph("", "", *(nodes.Text(p) if isinstance(p, str) else p for p in parts))


def cell_content(value: nodes.Node | str | Sequence[nodes.Node]) -> list[nodes.Node]:
    if isinstance(value, str):
        return [nodes.paragraph("", value)]
    if isinstance(value, nodes.paragraph):
        return [value]
    if isinstance(value, nodes.Node):
        return [nodes.paragraph("", "", value)]
    return [nodes.paragraph("", "", *value)]


def table(header: Sequence[str], rows: Iterable[Sequence[nodes.Node | str | Sequence[nodes.Node]]],
          widths: Sequence[int] | None = None, classes: Sequence[str] = ()) -> nodes.table:
    """A table with a header row; each cell a str, a node or a list of inline nodes."""
    widths = widths or [1] * len(header)
    group = nodes.tgroup(cols=len(header))
    for width in widths:
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    head += _row(header)
    group += head
    body = nodes.tbody()
    for row in rows:
        body += _row(row)
    group += body
    node = nodes.table(classes=["rlm-reference", "colwidths-given", *classes])
    node += group
    return node


def _row(cells: Sequence[nodes.Node | str | Sequence[nodes.Node]]) -> nodes.row:
    row = nodes.row()
    for value in cells:
        entry = nodes.entry()
        entry.extend(cell_content(value))
        row += entry
    return row


def parse_markdown(directive: object, text: str) -> list[nodes.Node]:
    """``text`` parsed as the page's own markup (MyST in a .md page): for
    help strings that hold `code` spans."""
    container = nodes.container()
    lines = StringList(text.splitlines(), source="generated")
    directive.state.nested_parse(lines, directive.content_offset, container)  # type: ignore[attr-defined]
    return list(container.children)
