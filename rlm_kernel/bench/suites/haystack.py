"""Filler text of an exact length from the real sources, built in one join
(no quadratic string building, so 1M tokens (~4 MB) take milliseconds)."""

from __future__ import annotations

import random

from .texts import essays, kjv_chapters


def essay_haystack(rng: random.Random, chars: int) -> str:
    """Paul Graham's essays in a shuffled order, repeated (reshuffled each
    round) until ``chars`` characters, cut to exactly that."""
    pool = [text for _, text in essays()]
    pieces: list[str] = []
    total = 0
    while total < chars:
        order = pool[:]
        rng.shuffle(order)
        for text in order:
            pieces.append(text)
            total += len(text) + 2
            if total >= chars:
                break
    return "\n\n".join(pieces)[:chars]


def sentence_boundary(text: str, position: int) -> int:
    """The first position at or after ``position`` that starts a sentence
    (just after ". "), or the end of the text."""
    if position <= 0:
        return 0
    found = text.find(". ", position)
    return len(text) if found < 0 else found + 2


def filler_documents(rng: random.Random, chars: int, size: int = 3000) -> list[tuple[str, str]]:
    """(title, body) pieces of about ``size`` characters cut from the essays
    and the King James Bible, in a shuffled order, adding up to ``chars``."""
    sources: list[tuple[str, str]] = [(f"Essay: {name}", text) for name, text in essays()]
    sources += [(f"Scripture: {title}", text) for title, text in kjv_chapters()]
    docs: list[tuple[str, str]] = []
    total = 0
    while chars - total >= 400:
        title, text = sources[rng.randrange(len(sources))]
        want = min(size, chars - total - len(title) - 20)
        if len(text) > want:
            start = sentence_boundary(text, rng.randrange(len(text) - want // 2))
            body = text[start:start + want]
            end = body.rfind(". ")
            body = body[:end + 1] if end > want // 3 else body
        else:
            body = text
        body = body.strip()
        if len(body) < 200:
            continue
        docs.append((title, body))
        total += len(body) + len(title) + 20
    return docs
