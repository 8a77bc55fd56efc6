"""Long prompts shown folded.

A batch's prompts are usually the same instructions around a different
slice of the context. What every prompt of the batch shares (its head and
its tail) folds away; the call's own part stays in view with a little of the
shared text on each side, and a long own part shows its two ends. A prompt
with nothing shared (a single call) shows its two ends.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

FOLD_FROM = 2_000  # prompts up to this long are shown whole
AROUND = 160  # shared characters kept in view on each side of a call's own part
EDGE = 400  # characters kept in view at each end of a long own part
OPEN_CHARS = 20_000  # characters an opened fold shows


@dataclass(frozen=True)
class Shared:
    """What the prompts of a batch have in common: the lengths of the prefix
    and suffix they all share, and how many prompts share them."""

    head: int = 0
    tail: int = 0
    prompts: int = 1

    def bounds(self, text: str, original: str | None = None) -> tuple[int, int]:
        """The head and tail ``text`` shares with its batch; ``original`` is the
        code's prompt when ``text`` is a person's rewrite of it (which may have
        kept the shared parts or not)."""
        original = text if original is None else original
        head = self.head if text.startswith(original[:self.head]) else 0
        tail = self.tail if self.tail and text.endswith(original[len(original) - self.tail:]) else 0
        return (head, tail) if head + tail <= len(text) else (0, 0)


def shared_parts(prompts: list[str]) -> Shared:
    if len(prompts) < 2:
        return Shared()
    shortest = min(prompts, key=len)
    head = _longest(len(shortest), lambda n: all(p.startswith(shortest[:n]) for p in prompts))
    rest = len(shortest) - head
    tail = _longest(rest, lambda n: all(p.endswith(shortest[len(shortest) - n:]) for p in prompts))
    return Shared(head, tail, len(prompts))


def _longest(limit: int, ok) -> int:
    """The largest n <= limit with ok(n) (ok is monotone: true up to some n)."""
    low, high = 0, limit
    while low < high:
        mid = (low + high + 1) // 2
        if ok(mid):
            low = mid
        else:
            high = mid - 1
    return low


@dataclass(frozen=True)
class Part:
    start: int
    end: int
    kind: str  # shown | head | tail (shared with the batch) | own (the call's own part) | middle

    @property
    def folded(self) -> bool:
        return self.kind != "shown"


def fold(text: str, head: int = 0, tail: int = 0, edge: int = EDGE, around: int = AROUND,
         fold_from: int = FOLD_FROM) -> list[Part]:
    """``text`` cut into shown and folded stretches; ``head`` and ``tail`` are
    the lengths it shares with its batch."""
    n = len(text)
    if n <= fold_from:
        return [Part(0, n, "shown")]
    own_start, own_end = head, n - tail
    if head == 0 and tail == 0:
        keep = [(0, edge), (n - edge, n)]
    else:
        keep = [(max(0, own_start - around), min(own_end, own_start + edge)),
                (max(own_start, own_end - edge), min(n, own_end + around))]
    merged: list[list[int]] = []
    for start, end in keep:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        elif end > start:
            merged.append([start, end])
    parts, at = [], 0
    for start, end in merged:
        if start > at:
            parts.append(Part(at, start, _kind(at, start, own_start, own_end, head, tail)))
        parts.append(Part(start, end, "shown"))
        at = end
    if at < n:
        parts.append(Part(at, n, _kind(at, n, own_start, own_end, head, tail)))
    return parts


def _kind(start: int, end: int, own_start: int, own_end: int, head: int, tail: int) -> str:
    if head == 0 and tail == 0:
        return "middle"
    if end <= own_start:
        return "head"
    if start >= own_end:
        return "tail"
    return "own"


def fold_label(kind: str, chars: int, prompts: int) -> str:
    others = prompts - 1
    if kind in ("head", "tail"):
        return f"{chars:,} characters shared with the other {others:,} prompt{'s' * (others != 1)} of this batch"
    if kind == "own":
        return f"{chars:,} more characters of this call's own part"
    return f"{chars:,} more characters"


def fold_html(text: str, parts: list[Part], prompts: int = 1) -> str:
    """The parts as HTML: shown text as is, each fold a <details> that opens
    on up to OPEN_CHARS of its text (all text escaped)."""
    out = []
    for part in parts:
        body = text[part.start:part.end]
        if not part.folded:
            out.append(html.escape(body))
            continue
        more = len(body) - OPEN_CHARS
        note = (f"<i class='rlm-sc-fold-more'>… {more:,} more characters folded (the editor can show them all)</i>"
                if more > 0 else "")
        out.append(f"<details class='rlm-sc-fold' data-kind='{part.kind}'><summary>"
                   f"{html.escape(fold_label(part.kind, len(body), prompts))}</summary>"
                   f"{html.escape(body[:OPEN_CHARS])}{note}</details>")
    return "".join(out)


__all__ = ["AROUND", "EDGE", "FOLD_FROM", "OPEN_CHARS", "Part", "Shared", "fold", "fold_html", "fold_label",
           "shared_parts"]
