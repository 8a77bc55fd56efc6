"""Replay: re-running a cell reuses the sub-call responses recorded in it.

Every code cell that made sub-calls keeps them in ``metadata.rlm.subcalls``
(prompt hash, response, usage; ``pinned`` when a person edited the
response). A :class:`ReplayBook` holds those records by cell id; when the
cell runs again, each ``llm_query`` / ``rlm_query`` whose model and prompt
match a recorded one (in order, per prompt) gets the recorded response
instead of a model call (a sub-call's images are part of its prompt hash:
the same prompt with other images is a fresh call). Pinned responses are used even when replay is off;
a prompt that changed, or one whose recorded call failed, is a fresh call.

A person may also rewrite the prompt of a pinned sub-call (``edited_prompt``
in the record): the record still matches the prompt the code sends (its
``prompt_hash`` is the original's), and the pinned response, written by
hand or the model's answer to the edited prompt, is what the code gets.
"""

from __future__ import annotations

import threading
from collections import defaultdict, deque
from typing import Any

from .cells import rlm_meta
from .cells import source as cell_source
from .records import prompt_hash


class ReplayCursor:
    """The recorded sub-calls of one cell, handed out once each."""

    def __init__(self, records: list[dict[str, Any]], enabled: bool) -> None:
        self._by_prompt: dict[str, deque[dict[str, Any]]] = defaultdict(deque)
        self._models = {r.get("model") or "" for r in records}
        for record in records:
            usable = record.get("pinned") or (enabled and record.get("status") == "done")
            if usable and record.get("prompt_hash") and record.get("response") is not None:
                self._by_prompt[record["prompt_hash"]].append(record)
        self._edits: dict[str, deque[str]] = defaultdict(deque)  # prompt -> edited prompts handed out
        self._lock = threading.Lock()

    def take(self, model: str, prompt: str, images: Any = ()) -> dict[str, Any] | None:
        """The next recorded call of ``prompt`` (with ``images``) to ``model``. A pinned response
        is a person's word for that prompt and holds whatever sub-model is
        configured now; with no model configured (a notebook opened without
        keys) any recorded model's response serves."""
        with self._lock:
            record = self._take(model, prompt, images)
            if record is not None and record.get("edited_prompt") is not None:
                self._edits[prompt].append(record["edited_prompt"])
            return record

    def _take(self, model: str, prompt: str, images: Any) -> dict[str, Any] | None:
        queue = self._by_prompt.get(prompt_hash(model, prompt, images))
        if queue:
            return queue.popleft()
        for recorded_model in self._models - {model}:
            queue = self._by_prompt.get(prompt_hash(recorded_model, prompt, images))
            if not queue:
                continue
            if not model:
                return queue.popleft()
            for record in queue:
                if record.get("pinned"):
                    queue.remove(record)
                    return record
        return None

    def edited_prompt(self, prompt: str) -> str | None:
        """The prompt a person wrote in place of ``prompt``, for the pinned
        record just handed out for it (None when the prompt was not edited)."""
        with self._lock:
            edits = self._edits.get(prompt)
            return edits.popleft() if edits else None

    def __bool__(self) -> bool:
        return any(self._by_prompt.values())


class ReplayBook:
    """Recorded sub-calls by cell id, from the notebook and from this session."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.cells: dict[str, list[dict[str, Any]]] = {}
        self._by_source: dict[str, str] = {}
        self.replayed = 0
        self.fresh = 0
        self._lock = threading.Lock()

    @classmethod
    def from_cells(cls, cells: list[Any], enabled: bool = True) -> ReplayBook:
        book = cls(enabled)
        book.load_cells(cells)
        return book

    def load_cells(self, cells: list[Any]) -> None:
        """Take the records of every cell that has some (replacing what the
        book had for those cells)."""
        with self._lock:
            for cell in cells:
                records = rlm_meta(cell).get("subcalls")
                cell_id = cell.get("id")
                if records and cell_id:
                    self.cells[cell_id] = [dict(r) for r in records]
                    self._by_source[cell_source(cell).strip()] = cell_id

    def set_cell(self, cell_id: str, records: list[dict[str, Any]], source: str | None = None) -> None:
        with self._lock:
            self.cells[cell_id] = [dict(r) for r in records]
            if source is not None:
                self._by_source[source.strip()] = cell_id

    def cell_for_source(self, source: str) -> str | None:
        """The id of a recorded cell with exactly this source (for clients
        that don't say which cell they run, like nbclient)."""
        return self._by_source.get(source.strip())

    def pin(self, cell_id: str, record_id: str, response: str,
            edited_prompt: str | None = None) -> dict[str, Any] | None:
        """Pin a person's response for one recorded sub-call (and the prompt
        they wrote instead of the code's, if any); returns the record."""
        with self._lock:
            for record in self.cells.get(cell_id, []):
                if record.get("id") == record_id:
                    record.update(response=response, pinned=True, status="done")
                    record.pop("error", None)
                    if edited_prompt is None:
                        record.pop("edited_prompt", None)
                    else:
                        record["edited_prompt"] = edited_prompt
                    return dict(record)
        return None

    def cursor(self, cell_id: str | None) -> ReplayCursor | None:
        if not cell_id:
            return None
        records = self.cells.get(cell_id)
        return ReplayCursor(records, self.enabled) if records else None

    def count(self, replayed: int, fresh: int) -> None:
        with self._lock:
            self.replayed += replayed
            self.fresh += fresh


def record_metadata(record: Any) -> dict[str, Any]:
    """A sub-call's record for cell metadata, with the prompt a person wrote
    in its place (``edited_prompt``; the hash stays the code's prompt's)."""
    meta = record.as_metadata()
    edited = getattr(record, "edited_prompt", None)
    if edited is not None:
        meta["edited_prompt"] = edited
    return meta


def note_edited_prompts(cursor: ReplayCursor | None, records: list[Any]) -> None:
    """Give replayed records the prompt a person wrote for them, so their
    view shows it and the cell's metadata keeps it."""
    if cursor is None:
        return
    for record in records:
        if record.replayed and record.pinned:
            edited = cursor.edited_prompt(record.prompt)
            if edited is not None:
                record.edited_prompt = edited


__all__ = ["ReplayBook", "ReplayCursor", "note_edited_prompts", "record_metadata"]
