"""Small wording helpers shared by what people and the root model read."""

from __future__ import annotations


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 step``, ``2 steps``, ``1,000 characters``."""
    return f"{count:,} {word if count == 1 else (many or word + 's')}"
