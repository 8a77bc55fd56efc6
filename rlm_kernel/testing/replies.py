"""What the scripted model says: a :class:`Reply` (text, reasoning, pacing,
faults of its stream) and :class:`Script`, which routes requests to scripted
root replies and computed sub-call answers; helpers that read a request."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Reply:
    """What the server sends back for one request. ``text`` None sends a null
    ``content`` (as reasoning models do when all they wrote was thinking);
    ``reasoning`` is sent as the message's ``reasoning_content``."""

    text: str | None = ""
    reasoning: str | None = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    raw_body: bytes | None = None  # sent as-is (malformed or truncated JSON)
    delay: float = 0.0
    drop: bool = False  # close the connection without answering
    empty_choices: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    # Streaming like a real model (when the request has "stream": true):
    # the first token after ``ttft`` seconds, then ``tokens_per_s`` tokens a
    # second (None: all at once), the reasoning first. ``break_after`` chars of
    # content streamed, the connection drops (no terminating chunk), or with
    # ``break_cleanly`` the body ends properly there, but with neither a finish
    # reason nor ``[DONE]`` (a proxy whose upstream dropped); ``no_done`` ends the
    # whole stream cleanly but without ``data: [DONE]``.
    ttft: float = 0.0
    tokens_per_s: float | None = None
    break_after: int | None = None
    break_cleanly: bool = False
    no_done: bool = False
    usage_delay: float = 0.0  # seconds between the finish chunk and the usage chunk
    # Called as on_piece(field, piece) right after each streamed piece is
    # written to the socket ("reasoning_content" or "content"): a benchmark
    # times the page against it.
    on_piece: Callable[[str, str], None] | None = None

    def generation_s(self) -> float:
        """How long writing the reply takes: ttft, then every token at ``tokens_per_s``."""
        if not self.tokens_per_s:
            return self.ttft
        count = len(tokens(self.reasoning or "")) + len(tokens(self.text or ""))
        return self.ttft + count / self.tokens_per_s


Responder = Callable[[dict[str, Any]], "Reply | str"]

_TOKEN = re.compile(r"\s*\S{1,4}|\s+")


def tokens(text: str) -> list[str]:
    """``text`` cut into pieces of about a token each (up to 4 characters
    and the spaces before them), as a streaming server sends them."""
    return _TOKEN.findall(text)


def prompt_text(body: dict[str, Any]) -> str:
    """The last user message of a request (the sub-call prompt)."""
    for message in reversed(body.get("messages", [])):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return "".join(part.get("text", "") for part in content)
            return content or ""
    return ""


def all_text(body: dict[str, Any]) -> str:
    parts = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            parts.extend(part.get("text", "") for part in content)
        elif content:
            parts.append(content)
    return "\n".join(parts)


class Script:
    """Routes by model name: root models get scripted replies in order, the
    rest get ``sub(prompt)``. ``root`` items may be strings, Replies, or
    callables taking the request body."""

    def __init__(
        self,
        root: Iterable[Any] = (),
        sub: Callable[[str], Reply | str] | None = None,
        root_models: tuple[str, ...] = ("root-model",),
        default_root: str = "FINAL(no more scripted replies)",
    ) -> None:
        self._root = list(root)
        self._lock = threading.Lock()
        self.sub = sub or (lambda prompt: f"echo: {prompt[:80]}")
        self.root_models = root_models
        self.default_root = default_root

    def __call__(self, body: dict[str, Any]) -> Reply | str:
        if str(body.get("model", "")).startswith(self.root_models):  # "root-model", "root-model-2", ...
            with self._lock:
                item = self._root.pop(0) if self._root else self.default_root
            return item(body) if callable(item) else item
        return self.sub(prompt_text(body))


__all__ = ["Reply", "Responder", "Script", "all_text", "prompt_text", "tokens"]
