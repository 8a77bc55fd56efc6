"""The reply protocol: a root reply read as thinking, prose and code, the
FINAL / FINAL_VAR calls its prose makes, and what the root model must be told
about it; and the truncated view of an output that the model gets back.

:func:`parse_reply` is a pure function of the whole reply. Parsing a prefix
of a reply (``partial=True``, as a stream arrives) finds the same closed code
blocks as parsing all of it, except where :attr:`ParsedReply.thinking_may_close`
says a later bare ``</think>`` may still turn them into thinking.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..._words import plural
from . import fences, thinking

_FINAL_LINE = re.compile(r"[ \t]*(FINAL_VAR|FINAL)\(")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_QUOTES = ('"""', "'''", '"', "'")


@dataclass(frozen=True)
class Segment:
    """A piece of a root reply, in order: "thinking", "prose" or "code"."""

    kind: str
    text: str
    closed: bool = True  # False for a code fence the reply never closed
    start: int | None = None  # offsets into ParsedReply.text, a thinking span's tags included
    # (None: thinking from a reasoning field)
    end: int | None = None
    how: str = ""  # thinking: "reasoning", "tag", "bare-close" or "unclosed"


@dataclass(frozen=True)
class FinalMarker:
    """A ``FINAL(...)`` / ``FINAL_VAR(...)`` call written in prose."""

    kind: str  # "text" | "var"
    value: str  # the argument, stripped, outer quotes removed
    call: str = ""  # the call exactly as written, FINAL( to its closing parenthesis
    start: int = 0  # offsets of the call in ParsedReply.text
    end: int = 0
    line: int = 0  # 1-based
    quoted: bool = False  # the argument was one quoted string

    def shown(self, limit: int = 80) -> str:
        call = self.call or f"{'FINAL_VAR' if self.kind == 'var' else 'FINAL'}({self.value})"
        call = " ".join(call.split())
        return call if len(call) <= limit else call[: limit - 4] + "...)"


@dataclass(frozen=True)
class ParsedReply:
    text: str  # the reply as parsed: newlines normalised, wrapper tokens removed
    segments: tuple[Segment, ...]
    markers: tuple[FinalMarker, ...]  # every closed FINAL / FINAL_VAR call in prose, in order
    final: FinalMarker | None  # the one the reply gives under the rules, if any
    notes: tuple[str, ...]  # what the root model is told about the reply (when the run goes on)
    thinking_may_close: bool = False  # partial replies only: see split_thinking

    @property
    def code_blocks(self) -> list[str]:
        """The closed code blocks, in order: what may run."""
        return [s.text for s in self.segments if s.kind == "code" and s.closed]

    @property
    def has_code(self) -> bool:
        return any(s.kind == "code" for s in self.segments)

    @property
    def thinking(self) -> str:
        return "\n\n".join(s.text for s in self.segments if s.kind == "thinking" and s.text)

    @property
    def visible(self) -> str:
        """The reply without its thinking: what goes back into the model's history."""
        spans = [(s.start, s.end) for s in self.segments if s.kind == "thinking" and s.start is not None]
        out, pos = [], 0
        for start, end in spans:
            out.append(self.text[pos:start])
            pos = end
        out.append(self.text[pos:])
        return "".join(out).strip()


def parse_reply(content: str | None, reasoning: str | None = None, thinking_blocks: Sequence[Any] | None = None,
                *, partial: bool = False) -> ParsedReply:
    """Read a root reply. ``reasoning`` / ``thinking_blocks``: the provider's
    reasoning fields; ``partial``: more of the reply may follow."""
    text = thinking.strip_wrappers((content or "").replace("\r\n", "\n").replace("\r", "\n"))
    field = thinking.field_thinking(reasoning, thinking_blocks)
    split = thinking.split_thinking(text, partial=partial, bare_close=not field)
    segments: list[Segment] = [Segment("thinking", field, how="reasoning")] if field else []
    markers: list[FinalMarker] = []
    unclosed: list[int] = []
    examples: list[str] = []
    for piece in split.pieces:
        if piece.kind == "thinking":
            segments.append(Segment("thinking", text[piece.start:piece.end].strip(), start=piece.outer_start,
                                    end=piece.outer_end, how=piece.how))
        else:
            _visible(text, piece.start, piece.end, partial, segments, markers, unclosed, examples)
    notes: list[str] = []
    final = _choose(markers, segments, notes)
    if unclosed and not partial:
        notes.append(f"The FINAL on line {unclosed[0]} has no closing parenthesis, so no answer was taken.")
    if examples and not markers:
        notes.append(f"FINAL inside a ```{examples[0]} block is an example, not an answer: to answer, write "
                     "FINAL(...) on a line of its own outside any code block.")
    notes.extend(_thinking_notes(segments, markers))
    return ParsedReply(text, tuple(segments), tuple(markers), final, tuple(notes), split.may_close)


def _visible(text: str, start: int, end: int, partial: bool, segments: list[Segment],
             markers: list[FinalMarker], unclosed: list[int], examples: list[str]) -> None:
    """The prose and code segments of a visible span, and the FINAL calls in its prose."""
    blocks = fences.fenced_blocks(text, start, end, partial=partial)
    pos = start
    for block in [b for b in blocks if b.fence.is_code] + [None]:
        stop = end if block is None else block.start
        others = [b for b in blocks if not b.fence.is_code and pos <= b.start < stop]
        _prose(text, pos, stop, segments)
        _find_finals(text, pos, stop, others, partial, markers, unclosed, examples)
        if block is None:
            break
        if block.body.strip():
            segments.append(Segment("code", block.body, block.closed, block.start, block.end))
        pos = block.end


def _prose(text: str, start: int, end: int, segments: list[Segment]) -> None:
    chunk = text[start:end].strip("\n")
    if chunk.strip():
        segments.append(Segment("prose", chunk, start=start, end=end))


def _find_finals(text: str, start: int, end: int, examples_in: list[fences.FencedBlock], partial: bool,
                 markers: list[FinalMarker], unclosed: list[int], examples: list[str]) -> None:
    """FINAL / FINAL_VAR calls that start a line of prose (not inside a fenced
    example); each ends at its own closing parenthesis."""
    pos = start
    for line_start, line_end, _ in fences.lines(text, start, end):
        if line_start < pos:
            continue  # inside the previous call
        match = _FINAL_LINE.match(text, line_start, line_end)
        if not match:
            continue
        inside = next((b for b in examples_in if b.start < line_start < b.end), None)
        if inside is not None:
            examples.append(inside.fence.lang or "")
            continue
        opener = match.end() - 1
        close = _call_end(text, opener, end)
        line = text.count("\n", 0, line_start) + 1
        if close is None:
            if not partial:
                unclosed.append(line)
            continue
        raw = text[opener + 1:close].strip()
        value, quoted = _unquote(raw)
        kind = "var" if match.group(1) == "FINAL_VAR" else "text"
        call_start = match.start(1)
        markers.append(FinalMarker(kind, value.strip() if kind == "var" else value, text[call_start:close + 1],
                                   call_start, close + 1, line, quoted))
        pos = close + 1


def _call_end(text: str, opener: int, limit: int) -> int | None:
    """The offset of the parenthesis that closes the one at ``opener``: quoted
    strings are skipped when they close; otherwise parentheses alone count."""
    for quotes in (True, False):
        depth, i = 0, opener
        while i < limit:
            char = text[i]
            if quotes and char in "\"'" and (char == '"' or not text[i - 1].isalnum()):
                after = _string_end(text, i, limit)
                if after is None:
                    break
                i = after
                continue
            if char == "(":
                depth += 1
            elif char == ")":
                depth -= 1
                if depth == 0:
                    return i
            i += 1
    return None


def _string_end(text: str, start: int, limit: int) -> int | None:
    """The offset just after the quoted string starting at ``start``."""
    quote = next(q for q in _QUOTES if text.startswith(q, start))
    i = start + len(quote)
    while i < limit:
        if text[i] == "\\":
            i += 2
            continue
        if text.startswith(quote, i):
            return i + len(quote)
        i += 1
    return None


def _unquote(raw: str) -> tuple[str, bool]:
    """The argument without its quotes when it is one quoted string."""
    if raw[:1] in ("'", '"') and _string_end(raw, 0, len(raw)) == len(raw):
        quote = next(q for q in _QUOTES if raw.startswith(q) and len(raw) >= 2 * len(q))
        return raw[len(quote):-len(quote)], True
    return raw, False


def _choose(markers: list[FinalMarker], segments: list[Segment], notes: list[str]) -> FinalMarker | None:
    """The answer the prose gives: one call, or several that agree; a FINAL
    with text is not taken in a reply with code (its output was not seen)."""
    if not markers:
        return None
    if len({(m.kind, m.value) for m in markers}) > 1:
        shown = ", ".join(m.shown(60) for m in markers[:3]) + (", ..." if len(markers) > 3 else "")
        notes.append(f"Your reply gave {len(markers)} different final answers ({shown}), so none was taken: "
                     "give exactly one.")
        return None
    marker = markers[0]
    if marker.kind == "text" and any(s.kind == "code" for s in segments):
        notes.append(f"{marker.shown()} was not taken: your reply also had code, and you had not seen its "
                     "output. Check the output, then answer in a reply of its own.")
        return None
    return marker


def _thinking_notes(segments: list[Segment], markers: list[FinalMarker]) -> list[str]:
    notes: list[str] = []
    if any(s.how == "unclosed" for s in segments):
        return ["Your reply opened <think> and never closed it, so everything after it was taken as "
                "thinking and none of it ran."]
    if markers or any(s.kind == "code" for s in segments):
        return notes
    for segment in segments:
        if segment.kind != "thinking":
            continue
        code = any(b.fence.is_code for b in fences.fenced_blocks(segment.text))
        if code or any(_FINAL_LINE.match(line) for line in segment.text.split("\n")):
            notes.append("Your code or FINAL was only in your thinking, which never runs: write it in the "
                         "reply itself.")
            break
    return notes


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


__all__ = ["FinalMarker", "ParsedReply", "Segment", "cell_feedback", "parse_reply", "strip_ansi", "truncate_middle"]
