"""Sub-call records: what the notebook keeps of each sub-call (model, prompt
by hash and preview, response, usage, state), and a failed prompt's slot in
a batch's answers."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from ..protocol.images import Image, hashes_key

PREVIEW_CHARS = 48  # the prompt itself is not kept: its hash and a one-line preview


class SubcallFailure(str):
    """The slot of a failed prompt in a batch: a str (so code that joins or
    slices answers keeps working) that says what went wrong, with
    ``.error`` holding the message."""

    error: str

    def __new__(cls, error: str) -> SubcallFailure:
        text = super().__new__(cls, f"[sub-call error: {error}]")
        text.error = error
        return text


@dataclass
class SubcallRecord:
    id: str
    kind: str  # llm | rlm
    model: str
    prompt: str
    status: str = "queued"  # queued | running | done | error
    response: str | None = None
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    latency_s: float | None = None
    attempts: int = 0
    batch: str | None = None
    child: dict[str, Any] | None = None
    replayed: bool = False  # the response came from the notebook, not a model call
    pinned: bool = False  # a person edited the response and pinned it
    edited_prompt: str | None = None  # a pinned call whose prompt a person rewrote (the hash stays the code's)
    cell_id: str | None = None  # the notebook cell whose code made the call
    deployment: dict[str, str] | None = None  # which deployment answered (calls through a Router)
    images: list[Image] = field(default_factory=list)  # sent after the prompt; their hashes are part of its identity
    started: float = field(default_factory=time.monotonic)

    def replay(self, recorded: dict[str, Any]) -> None:
        """Take the response of a recorded sub-call instead of calling a model."""
        usage = recorded.get("usage") or {}
        self.status, self.response, self.replayed = "done", recorded.get("response") or "", True
        self.pinned = bool(recorded.get("pinned"))
        if self.pinned and recorded.get("edited_prompt") is not None:
            self.edited_prompt = recorded["edited_prompt"]
        self.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        self.completion_tokens = int(usage.get("completion_tokens") or 0)
        self.cost_usd, self.latency_s = 0.0, 0.0
        if recorded.get("child") is not None:
            self.child = recorded["child"]

    def as_metadata(self) -> dict[str, Any]:
        """Compact form for cell metadata: the prompt by hash and preview.
        ``kind`` is left out for plain llm calls and ``cost_usd`` when the
        price is unknown (a 10,000-sub-call run stays under 5 MB)."""
        record: dict[str, Any] = {
            "id": self.id,
            "model": self.model,
            "prompt_hash": prompt_hash(self.model, self.prompt, self.images),
            "prompt_preview": self.prompt[:PREVIEW_CHARS],
            "prompt_chars": len(self.prompt),
            "status": self.status,
            "response": self.response,
            "usage": {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens},
            "latency_s": None if self.latency_s is None else round(self.latency_s, 3),
        }
        if self.kind != "llm":
            record["kind"] = self.kind
        if self.cost_usd is not None:
            record["cost_usd"] = self.cost_usd
        if self.error:
            record["error"] = self.error
        if self.attempts > 1:
            record["attempts"] = self.attempts
        if self.batch:
            record["batch"] = self.batch
        if self.child is not None:
            record["child"] = self.child
        if self.deployment:
            record["deployment"] = self.deployment
        if self.images:
            record["images"] = [image.hash for image in self.images]  # the images: the cell's metadata.rlm.images
        if self.replayed:
            record["replayed"] = True
        if self.pinned:
            record["pinned"] = True
        if self.edited_prompt is not None:
            record["edited_prompt"] = self.edited_prompt
        return record


def prompt_hash(model: str, prompt: str, images: list[Image] | tuple[Image, ...] = ()) -> str:
    """A sub-call's identity: its model, prompt and images (by their hashes)."""
    key = f"{model}\x00{prompt}{hashes_key(list(images))}"
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def message_content(prompt: str, images: list[Image]) -> str | list[dict[str, Any]]:
    """A sub-call's user message: the prompt, then its images as image parts."""
    return [{"type": "text", "text": prompt}, *(image.part() for image in images)] if images else prompt


__all__ = ["PREVIEW_CHARS", "SubcallFailure", "SubcallRecord", "message_content", "prompt_hash"]
