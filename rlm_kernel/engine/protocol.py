"""The paper's protocol as text: code fences, FINAL / FINAL_VAR lines and
the truncated view of an output that the root model gets back."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .._words import plural

CODE_LANGS = frozenset({"repl", "python", "py", "python3", "ipython"})

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+-]*)[^\n]*$")
_FINAL = re.compile(r"^\s*(FINAL_VAR|FINAL)\(", re.M)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass(frozen=True)
class Segment:
    """A piece of a root reply, in order: prose or a code block."""

    kind: str  # "prose" | "code"
    text: str
    closed: bool = True  # False for a code fence the reply never closed


@dataclass(frozen=True)
class FinalMarker:
    kind: str  # "text" | "var"
    value: str


def split_reply(reply: str) -> list[Segment]:
    """Split a reply into prose and ```repl / ```python code blocks.

    Fences with other languages stay in the prose. A code fence that is never
    closed (a reply cut off by the output limit) becomes an unclosed segment,
    which the loop shows but does not run.
    """
    segments: list[Segment] = []
    prose: list[str] = []
    lines = reply.splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            prose.append(lines[i])
            i += 1
            continue
        fence, lang = match.group(1), match.group(2).lower()
        end = _closing_fence(lines, i + 1, fence)
        if lang not in CODE_LANGS:
            stop = len(lines) if end is None else end + 1
            prose.extend(lines[i:stop])
            i = stop
            continue
        _flush(prose, segments)
        if end is None:
            segments.append(Segment("code", "\n".join(lines[i + 1 :]), closed=False))
            break
        segments.append(Segment("code", "\n".join(lines[i + 1 : end])))
        i = end + 1
    _flush(prose, segments)
    return segments


def _closing_fence(lines: list[str], start: int, fence: str) -> int | None:
    for j in range(start, len(lines)):
        stripped = lines[j].strip()
        if stripped and stripped[0] == fence[0] and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
            return j
    return None


def _flush(prose: list[str], segments: list[Segment]) -> None:
    text = "\n".join(prose).strip("\n")
    if text.strip():
        segments.append(Segment("prose", text))
    prose.clear()


def find_final(prose: str) -> FinalMarker | None:
    """Find a ``FINAL(answer)`` or ``FINAL_VAR(name)`` line in prose.

    The answer runs from the opening parenthesis to the last closing one in
    the rest of the prose, so it may span lines and contain parentheses.
    """
    match = _FINAL.search(prose)
    if not match:
        return None
    rest = prose[match.end() :]
    close = rest.rfind(")")
    inner = (rest[:close] if close >= 0 else rest).strip()
    inner = _unquote(inner)
    kind = "var" if match.group(1) == "FINAL_VAR" else "text"
    return FinalMarker(kind, inner)


def _unquote(text: str) -> str:
    for quote in ('"""', "'''", '"', "'"):
        if len(text) >= 2 * len(quote) and text.startswith(quote) and text.endswith(quote):
            return text[len(quote) : -len(quote)]
    return text


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def truncate_middle(text: str, limit: int, total: int | None = None) -> str:
    """Head and tail of ``text`` within ``limit`` characters, saying how much
    was left out. ``total`` is the true length when ``text`` is itself a
    bounded copy."""
    total = len(text) if total is None else total
    if len(text) <= limit:
        if total > len(text):  # a bounded copy: say how much it left out
            return f"{text}\n[... {total - len(text):,} characters omitted ...]"
        return text
    head = text[: limit // 2]
    tail = text[len(text) - (limit - len(head)) :] if limit > len(head) else ""
    omitted = total - len(head) - len(tail)
    return f"{head}\n[... {omitted:,} characters omitted ...]\n{tail}"


def cell_feedback(execution_count: int | None, status: str, view: str, chars: int) -> str:
    """What the root model is told about one code cell it wrote."""
    label = f"Cell [{execution_count}]" if execution_count is not None else "Cell"
    if not view.strip():
        return f"{label} ran with no output." if status == "ok" else f"{label} failed with no output."
    state = "raised an error" if status == "error" else "output"
    return f"{label} {state} ({plural(chars, 'character')}):\n{view.rstrip()}"
