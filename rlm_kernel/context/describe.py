"""What the root model is told about a loaded context (in its first
message): how many documents of which kinds, their pages, sizes, the
largest and smallest, the tables' columns and row counts, and what was
skipped. Never any of their text. A plain str, list or dict, or files of
plain text only, keep the engine's short description (None here)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from .._words import plural
from .document import Document, Documents, ImageFile, Tables, kind_of, source_of
from .kinds import TEXT

INDEX_LIMIT = 25  # entries listed one per line; more are summarised
_COLUMNS = 12


def is_table(value: Any) -> bool:
    return type(value).__name__ == "DataFrame" and hasattr(value, "columns") and hasattr(value, "attrs")


def structured(value: Any) -> bool:
    """Whether the loader's description says more than the engine's would."""
    entries = value if isinstance(value, list) else [value]
    if isinstance(value, Documents) and value.skipped:
        return True
    return any(isinstance(e, (Tables, ImageFile)) or is_table(e)
               or (isinstance(e, Document) and (e.kind not in TEXT or len(e._spans) > 1)) for e in entries)


def describe(value: Any) -> str | None:
    if not structured(value):
        return None
    if not isinstance(value, list):
        what = {"sqlite": "database", "xlsx": "workbook", "image": "image"}.get(kind_of(value) or "", "document")
        return f"`context` is one {'table' if is_table(value) else what}: {_one(value)}."
    entries = list(value)
    kinds = Counter(kind_of(e) or type(e).__name__ for e in entries)
    counted = ", ".join(f"{n:,} {k.upper() if k in ('pdf', 'docx', 'pptx', 'xlsx', 'epub', 'html', 'csv', 'tsv') else k}"
                        for k, n in kinds.most_common())
    chars = sum(len(e) for e in entries if isinstance(e, str))
    units = Counter()  # type: Counter[str]
    for entry in entries:
        if isinstance(entry, Document) and entry._spans:
            units[entry.unit] += len(entry._spans)
    parts = ", ".join(plural(n, unit) for unit, n in units.most_common())
    lines = [f"`context` is a list of {plural(len(entries), 'document')} ({counted}), {chars:,} characters of text"
             + (f" ({parts})" if parts else "") + "."]
    texts = [(len(e), i) for i, e in enumerate(entries) if isinstance(e, str)]
    if len(texts) > 1:
        (most, big), (least, small) = max(texts), min(texts)
        lines.append(f"Largest: context[{big}] {source_of(entries[big])} ({most:,} characters); smallest: "
                     f"context[{small}] {source_of(entries[small])} ({least:,} characters).")
    shown = entries if len(entries) <= INDEX_LIMIT else entries[:INDEX_LIMIT - 5]
    lines.append("Index:")
    lines += [f"- context[{i}]: {_one(e)}" for i, e in enumerate(shown)]
    if len(shown) < len(entries):
        lines.append(f"- ... and {len(entries) - len(shown):,} more (`for i, d in enumerate(context): "
                     "print(i, d.source, d.kind, len(d))` lists them).")
    skipped = getattr(value, "skipped", None) or []
    if skipped:
        lines.append(f"Skipped {plural(len(skipped), 'input')} (not in `context`; `context.skipped` has them): "
                     + " ".join(str(s) for s in skipped[:10])
                     + (f" And {len(skipped) - 10:,} more." if len(skipped) > 10 else ""))
    return "\n".join(lines)


def _one(entry: Any) -> str:
    source = source_of(entry) or "?"
    if isinstance(entry, Document):
        units = len(entry._spans)
        shape = f", {plural(units, entry.unit)}" if units > 1 or entry.kind not in (*TEXT, "html") else ""
        title = entry.metadata.get("title")
        named = f", title {str(title)[:80]!r}" if title and str(title) not in source else ""
        return f"{source} ({entry.kind}{shape}, {len(entry):,} characters{named})"
    if isinstance(entry, Tables):
        parts = "; ".join(f"{name!r}: {_table(frame)}" for name, frame in list(entry.items())[:8])
        more = f"; and {len(entry) - 8:,} more" if len(entry) > 8 else ""
        return f"{source} ({entry.kind}: a dict of {plural(len(entry), 'table')}, DataFrames by name: {parts}{more})"
    if is_table(entry):
        return f"{source} (a pandas DataFrame: {_table(entry)})"
    if isinstance(entry, ImageFile):
        size = f"{entry.width}x{entry.height} " if entry.width else ""
        return f"{source} (an image, {size}{entry.mime}, {len(entry):,} bytes; pass it to llm_query(..., images=[...]))"
    if isinstance(entry, str):
        return f"{source} (text, {len(entry):,} characters)"
    return f"{source} ({type(entry).__name__})"


def _table(frame: Any) -> str:
    columns = [str(c) for c in frame.columns]
    named = ", ".join(columns[:_COLUMNS]) + (f", ... ({len(columns):,} in all)" if len(columns) > _COLUMNS else "")
    return f"{len(frame):,} rows x {len(columns):,} columns ({named})"


__all__ = ["describe", "is_table", "structured"]
