"""Fenced blocks in a root reply: which lines open and close a fence, which
fenced blocks are code that runs (```repl, ```python), and the code's text.

Only a fence's own line counts: ```` ```repl ```` opens a block when it stands
on a line of its own (indented by any amount, as inside list items), and a
line of only backticks (or tildes), at least as many as opened it, closes it.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

CODE_LANGS = frozenset({"repl", "python", "py", "python3", "ipython"})

_OPEN = re.compile(r"[ \t]*(`{3,}|~{3,})(.*)")
_CLOSE = re.compile(r"[ \t]*(`{3,}|~{3,})[ \t]*")


@dataclass(frozen=True)
class Fence:
    """An opening fence line."""

    char: str  # "`" or "~"
    length: int
    indent: str  # the whitespace before it
    lang: str  # the first word of its info string, lower-case ("" when none)

    @property
    def is_code(self) -> bool:
        return self.lang in CODE_LANGS


@dataclass(frozen=True)
class FencedBlock:
    """A fenced block: offsets into the text it was found in."""

    fence: Fence
    start: int  # the opening fence line
    end: int  # after the closing fence line and its newline (the scanned span's end when unclosed)
    body: str  # the lines between the fences, dedented
    closed: bool


def opening(line: str) -> Fence | None:
    """The fence ``line`` opens, if it is an opening fence line."""
    match = _OPEN.fullmatch(line)
    if not match:
        return None
    marks, info = match.group(1), match.group(2)
    if marks[0] == "`" and "`" in info:  # CommonMark: a backtick fence's info string has no backtick
        return None
    words = info.split()
    indent = line[: len(line) - len(line.lstrip(" \t"))]
    return Fence(marks[0], len(marks), indent, words[0].lower() if words else "")


def closes(line: str, fence: Fence) -> bool:
    """Whether ``line`` closes ``fence``."""
    match = _CLOSE.fullmatch(line)
    return bool(match) and match.group(1)[0] == fence.char and len(match.group(1)) >= fence.length


def lines(text: str, start: int, end: int, *, partial: bool = False) -> list[tuple[int, int, bool]]:
    """The lines of ``text[start:end]`` as (start, end without the newline,
    complete). With ``partial`` (more text may follow) a last line without
    its newline at the end of ``text`` is not complete yet."""
    found = []
    pos = start
    while pos < end:
        newline = text.find("\n", pos, end)
        if newline < 0:
            found.append((pos, end, not (partial and end == len(text))))
            break
        found.append((pos, newline, True))
        pos = newline + 1
    return found


def fenced_blocks(text: str, start: int = 0, end: int | None = None, *, partial: bool = False) -> list[FencedBlock]:
    """Every fenced block of ``text[start:end]``, of any language, in order.
    A block never closed runs to ``end`` (``closed`` False)."""
    end = len(text) if end is None else end
    blocks: list[FencedBlock] = []
    fence: Fence | None = None
    opened_at = body_from = 0
    for line_start, line_end, complete in lines(text, start, end, partial=partial):
        line = text[line_start:line_end]
        if fence is None:
            fence = opening(line) if complete else None
            opened_at, body_from = line_start, line_end + 1
        elif complete and closes(line, fence):
            after = min(line_end + 1, end)
            blocks.append(FencedBlock(fence, opened_at, after, _body(text[body_from:line_start], fence), True))
            fence = None
    if fence is not None:
        blocks.append(FencedBlock(fence, opened_at, end, _body(text[body_from:end], fence), False))
    return blocks


def _body(raw: str, fence: Fence) -> str:
    """A block's code: each line loses the opening fence's indentation (as a
    Markdown renderer does), then the whole is dedented; blank lines at either
    end are dropped."""
    width = len(fence.indent)
    kept = []
    for line in raw.split("\n"):
        lead = len(line) - len(line.lstrip(" \t"))
        kept.append(line[min(width, lead):])
    body = textwrap.dedent("\n".join(kept))
    return re.sub(r"\A(?:[ \t]*\n)+", "", body).rstrip(" \t\n")


__all__ = ["CODE_LANGS", "Fence", "FencedBlock", "closes", "fenced_blocks", "lines", "opening"]
