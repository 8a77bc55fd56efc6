"""Thinking in a root reply, which is never run: the reasoning fields some
providers return beside the reply, ``<think>`` / ``<thinking>`` spans in the
reply itself, and the wrappers some models put around their answer.

The rules (docs/reference/reply-protocol.md has them for users):

- A ``<think>`` (or ``<thinking>``) tag at the start of a line outside a code
  fence opens thinking, up to its closing tag wherever it is; a tag never
  closed makes the rest of the reply thinking.
- A reply that starts inside thinking (the chat template opened it) closes
  it with a bare ``</think>``: when no tag came before it and the provider
  sent no reasoning field, everything before it is thinking. It counts
  outside a code fence anywhere on its line, inside one only at the start of
  a line (inside a fence it is more likely code that splits text on it).
- ``reasoning_content`` and ``thinking_blocks`` are thinking as a whole.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import fences

# Tokens some models wrap their answer in; removed before the reply is parsed.
WRAPPER_TOKENS = ("<|begin_of_box|>", "<|end_of_box|>")  # GLM-4.5V / GLM-4.1V-Thinking

_OPEN_TAG = re.compile(r"([ \t]*)<(think|thinking)>")
_BARE_CLOSE = re.compile(r"</(think|thinking)>")


@dataclass(frozen=True)
class Piece:
    """A span of the reply: ``kind`` "thinking" or "visible"; ``how`` says why
    a thinking span is one ("tag", "bare-close", "unclosed"). ``start`` and
    ``end`` hold its text; ``outer_start`` and ``outer_end`` its tags too."""

    kind: str
    start: int
    end: int
    how: str = ""
    outer_start: int = -1
    outer_end: int = -1


@dataclass(frozen=True)
class ThinkingSplit:
    pieces: list[Piece]
    # A later bare </think> may still turn the text so far into thinking
    # (only ever True for a ``partial`` reply).
    may_close: bool


def strip_wrappers(text: str) -> str:
    for token in WRAPPER_TOKENS:
        text = text.replace(token, "")
    return text


def field_thinking(reasoning: str | None, thinking_blocks: Sequence[Any] | None) -> str:
    """The thinking a provider returned beside the reply, as one text."""
    parts: list[str] = []
    if isinstance(reasoning, str) and reasoning.strip():
        parts.append(reasoning.strip())
    for block in thinking_blocks or ():
        get = block.get if isinstance(block, dict) else (lambda key, b=block: getattr(b, key, None))
        text = get("thinking")
        if isinstance(text, str) and text.strip():
            if text.strip() not in parts:  # litellm also joins them into reasoning_content
                parts.append(text.strip())
        elif get("type") == "redacted_thinking":
            parts.append("(redacted thinking)")
    return "\n\n".join(parts)


def split_thinking(text: str, *, partial: bool = False, bare_close: bool = True) -> ThinkingSplit:
    """Cut ``text`` into visible and thinking spans, in order.

    ``partial``: more text may follow (a streamed prefix). ``bare_close``:
    whether a bare ``</think>`` may close thinking that began at the start
    (not when the provider sent the thinking in a field of its own)."""
    pieces: list[Piece] = []
    visible_from = 0
    seen_tag = False
    fence: fences.Fence | None = None
    pos = 0
    while pos < len(text):
        newline = text.find("\n", pos)
        line_end = len(text) if newline < 0 else newline
        complete = newline >= 0 or not partial
        line = text[pos:line_end]
        opened = _OPEN_TAG.match(line) if fence is None else None
        if opened:
            tag = opened.group(2)
            seen_tag = True
            lt = pos + len(opened.group(1))
            _add(pieces, Piece("visible", visible_from, lt))
            body = pos + opened.end()
            close = text.find(f"</{tag}>", body)
            if close < 0:
                pieces.append(Piece("thinking", body, len(text), "tag" if partial else "unclosed", lt, len(text)))
                return ThinkingSplit(pieces, False)
            pos = visible_from = close + len(tag) + 3
            pieces.append(Piece("thinking", body, close, "tag", lt, pos))
            continue
        if not seen_tag and bare_close:
            bare = _BARE_CLOSE.search(line)
            if bare and (fence is None or not line[: bare.start()].strip()):
                seen_tag = True
                pieces = [Piece("thinking", 0, pos + bare.start(), "bare-close", 0, pos + bare.end())]
                pos = visible_from = pos + bare.end()
                fence = None
                continue
        if complete:
            if fence is None:
                fence = fences.opening(line)
            elif fences.closes(line, fence):
                fence = None
        pos = line_end + 1
    _add(pieces, Piece("visible", visible_from, len(text)))
    return ThinkingSplit(pieces, partial and bare_close and not seen_tag)


def _add(pieces: list[Piece], piece: Piece) -> None:
    if piece.end > piece.start:
        pieces.append(piece)


__all__ = ["Piece", "ThinkingSplit", "WRAPPER_TOKENS", "field_thinking", "split_thinking", "strip_wrappers"]
