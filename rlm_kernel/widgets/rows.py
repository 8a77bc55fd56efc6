"""A sub-call as the page shows it: its status as a person reads it, its
tags, and the compact row the batch list keeps for it."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from .text_fold import AROUND, EDGE, FOLD_FROM, OPEN_CHARS, Shared, fold

if TYPE_CHECKING:
    from ..engine.protocol.images import Image
    from ..engine.trajectory.records import SubcallRecord

PAGE_CHARS = 2_000_000  # text the page keeps for a whole batch, shared among its rows
PREVIEW = 160  # characters of a row's one-line prompt preview
SHARED_PREVIEW = 40  # a shared head longer than this is left out of the preview


def shown_status(record: SubcallRecord) -> str:
    """The status as a person reads it: a call the run's stop cancelled is
    'cancelled' (its record keeps status 'error', error 'cancelled', or for a
    background call the run's end cancelled, 'cancelled: ...' saying so)."""
    cancelled = record.status == "error" and (record.error or "").split(":")[0] == "cancelled"
    return "cancelled" if cancelled else record.status


def flags(record: SubcallRecord) -> list[str]:
    return [name for name, on in (("pinned", record.pinned), ("prompt-edited", record.edited_prompt is not None),
                                  ("replayed", record.replayed)) if on]


@functools.lru_cache(maxsize=256)
def thumbnail(image: Image) -> str:
    """A small PNG data URL of a sub-call's image ('' when it cannot be made)."""
    try:
        return image.thumbnail_url()
    except Exception:
        return ""


def thumbnails(records: list[SubcallRecord]) -> dict[str, str]:
    """The thumbnails of the records' images, each once, by image hash."""
    return {image.hash: thumbnail(image) for record in records for image in record.images}


class RowMaker:
    """Turns a record into the page's row; the text kept per row shrinks as
    the batch grows, so the page (and a saved notebook) stay small."""

    def __init__(self, shared: Shared, count: int) -> None:
        self.shared = shared
        per_row = max(240, min(4_000, PAGE_CHARS // max(1, count)))
        self.preview = min(PREVIEW, per_row // 4)
        self.response_chars = per_row * 3 // 8
        self.edge = max(30, min(EDGE, per_row // 10))
        self.around = max(15, min(AROUND, per_row // 20))
        self.fold_from = min(FOLD_FROM, per_row // 4)

    def shared_text(self, prompt: str) -> tuple[str, str]:
        """The text of the shared folds (the same for every row), for the page to open."""
        head, tail = self.shared.bounds(prompt)
        head_fold = prompt[:max(0, head - self.around)]
        tail_fold = prompt[len(prompt) - tail + self.around:] if tail > self.around else ""
        return head_fold[:OPEN_CHARS], tail_fold[:OPEN_CHARS]

    def row(self, record: SubcallRecord) -> dict[str, Any]:
        edited = record.edited_prompt
        prompt = edited if edited is not None else record.prompt
        head, tail = self.shared.bounds(prompt, record.prompt)
        view: list[Any] = []
        for part in fold(prompt, head, tail, edge=self.edge, around=self.around,
                                 fold_from=self.fold_from):
            view.append(prompt[part.start:part.end] if not part.folded else [part.kind, part.end - part.start])
        # Past long shared instructions the preview starts at the call's own
        # part, from the start of its line or word ("Part 7 of", not "7 of").
        start = head if head > SHARED_PREVIEW else 0
        line = prompt.rfind("\n", max(0, start - SHARED_PREVIEW), start)
        if line >= 0:
            start = line + 1
        while start > max(0, head - SHARED_PREVIEW) and not prompt[start - 1].isspace():
            start -= 1
        answer = (record.response or "") if record.status != "error" else f"ERROR: {record.error}"
        return {
            "s": shown_status(record),
            "g": flags(record),
            "p": " ".join(prompt[start:start + self.preview * 2].split())[:self.preview],
            "n": len(prompt),
            "v": view,
            "r": answer[:self.response_chars],
            "rn": len(answer),
            "k": [record.prompt_tokens, record.completion_tokens],
            "l": None if record.latency_s is None else round(record.latency_s, 3),
            "c": record.cost_usd,
            "i": [image.hash for image in record.images],
        }


__all__ = ["PREVIEW", "RowMaker", "flags", "shown_status", "thumbnail", "thumbnails"]
