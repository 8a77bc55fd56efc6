"""Reading notebook cells: their source, their ``metadata.rlm`` and what role
they play in a run. Cells may be nbformat nodes or plain dicts (from the page)."""

from __future__ import annotations

import re
from typing import Any

AGENT_ROLES = ("thought", "code", "answer")  # cells the root model wrote
QUERY_MAGIC = "%%rlm"
THINKING_OPEN = "<details><summary>Thinking</summary>"
_THINKING_BLOCK = re.compile(re.escape(THINKING_OPEN) + r"\n.*?\n</details>[ \t]*(?:\n+|$)", re.S)


def source(cell: Any) -> str:
    """A cell's source as one string (nbformat allows a list of lines)."""
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else text


def reply_text(cell: Any) -> str:
    """What the root model wrote in a thought cell: its source without the
    folded thinking block (thinking never goes back to the model)."""
    text = source(cell)
    if text.startswith(THINKING_OPEN):
        text = _THINKING_BLOCK.sub("", text, count=1)
    return text


def rlm_meta(cell: Any) -> dict[str, Any]:
    """A cell's ``metadata.rlm`` ({} when it has none)."""
    return (cell.get("metadata") or {}).get("rlm") or {}


def is_agent_cell(cell: Any, run_id: str | None = None) -> bool:
    """Whether the root model wrote this cell (of run ``run_id``, when given)."""
    meta = rlm_meta(cell)
    return meta.get("role") in AGENT_ROLES and (run_id is None or meta.get("run_id") == run_id)


def is_query_cell(cell: Any) -> bool:
    """A ``%%rlm`` cell: recorded as a run's query, or any code cell starting with the magic."""
    return rlm_meta(cell).get("role") == "query" or (
        cell.get("cell_type") == "code" and source(cell).startswith(QUERY_MAGIC))


def find_cell(cells: list[Any], cell_id: str | None, text: str = "") -> int | None:
    """The index of the cell with id ``cell_id``, else of the first cell whose
    source is ``text`` (clients such as nbclient don't say which cell they run)."""
    if cell_id:
        for index, cell in enumerate(cells):
            if cell.get("id") == cell_id:
                return index
    wanted = text.strip()
    if not wanted:
        return None
    for index, cell in enumerate(cells):
        if source(cell).strip() == wanted:
            return index
    return None


def cell_with_source(cells: list[Any], text: str) -> str | None:
    """The id of the one cell with this source; None when there are none or several."""
    wanted = text.strip()
    found = [c.get("id") for c in cells if source(c).strip() == wanted]
    return found[0] if len(found) == 1 else None


__all__ = ["AGENT_ROLES", "QUERY_MAGIC", "THINKING_OPEN", "cell_with_source", "find_cell", "is_agent_cell", "is_query_cell",
           "reply_text", "rlm_meta", "source"]
