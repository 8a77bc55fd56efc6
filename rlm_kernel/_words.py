"""Small wording helpers shared by what people and the root model read."""

from __future__ import annotations

import math


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 step``, ``2 steps``, ``1,000 characters``."""
    return f"{count:,} {word if count == 1 else (many or word + 's')}"


def tokens_text(count: int) -> str:
    """``950 tok``, ``12.3k tok``, ``1.09M tok``: the one way we write tokens."""
    if count < 1000:
        return f"{count} tok"
    if count < 999_950:  # what rounds to 1000.0k is 1.00M
        return f"{count / 1000:.1f}k tok"
    return f"{count / 1_000_000:.2f}M tok"


def cached_text(cached: int) -> str:
    """`` (31.0k cached)``: of the tokens, those read from the provider's prompt cache ('' for none)."""
    return f" ({tokens_text(cached).removesuffix(' tok')} cached)" if cached > 0 else ""


def compactions_text(count: int) -> str:
    """``history compacted``, ``history compacted 2×``."""
    return "history compacted" + (f" {count}×" if count > 1 else "")


def money(usd: float) -> str:
    """``$1.25``, ``$0.213``, ``$0.00042``: two significant digits at least."""
    if usd <= 0:
        return "$0"
    if usd >= 0.1:
        return f"${usd:,.2f}"
    if usd >= 0.01:
        return f"${usd:.3f}"
    return f"${usd:.{1 - math.floor(math.log10(usd))}f}"


def price_text(usd: float | None, known_usd: float = 0.0) -> str:
    """What a run or call cost: ``$0.0213``; ``price unknown`` when no call
    had a known price; ``$0.0213 + unknown`` when some had one (``known_usd``)
    and some not. The one way we say a price is unknown."""
    if usd is not None:
        return money(usd)
    return f"{money(known_usd)} + unknown" if known_usd > 0 else "price unknown"
