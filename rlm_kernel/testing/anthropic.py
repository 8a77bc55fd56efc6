"""A minimal Anthropic Messages API (``POST .../v1/messages``) for the scripted server.

litellm reaches it as ``anthropic/<model>`` with ``api_base`` pointing at the
server (``http://127.0.0.1:PORT``; with the server's ``.../v1`` URL litellm
posts to ``/v1/v1/messages``, which is routed here too). The reply comes
from the server's responder as for every request; this module only speaks
Anthropic's shape: ``system`` and content blocks in, a ``message`` (or its
server-sent events when ``stream`` is true) out, errors as
``{"type": "error", "error": {...}}``.

It also keeps a prompt cache as Anthropic's works, so tests can check cache
breakpoints and their accounting: the request is read as one sequence of
blocks (``system``, then each message's content); a block marked with
``cache_control`` is a breakpoint; the longest prefix already written at a
breakpoint of an earlier request is *read* (``cache_read_input_tokens``),
the rest up to the last breakpoint is *written*
(``cache_creation_input_tokens``) and every breakpoint's prefix is then
stored; the tokens after the last breakpoint are plain ``input_tokens``.
A block counts ``len(text) // 4`` tokens (at least 1); there is no minimum
cacheable length. :func:`state` gives a server's cache and every usage it
reported.
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .replies import Reply
    from .server import ScriptedServer, _Handler


@dataclass
class AnthropicState:
    """One server's prompt cache and the usage it reported, in order."""

    prefixes: set[str] = field(default_factory=set)
    reported: list[dict[str, Any]] = field(default_factory=list)  # (model, usage) of each message sent
    lock: threading.Lock = field(default_factory=threading.Lock)

    def totals(self) -> dict[str, int]:
        with self.lock:
            rows = [r["usage"] for r in self.reported]
        keys = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        return {key: sum(int(u.get(key) or 0) for u in rows) for key in keys}


def state(server: ScriptedServer) -> AnthropicState:
    """The Anthropic side of ``server`` (made on first use)."""
    return server.__dict__.setdefault("_anthropic", AnthropicState())


def blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's blocks in the order Anthropic caches them: system, then messages."""
    out: list[dict[str, Any]] = []
    system = body.get("system")
    if isinstance(system, str):
        out.append({"type": "text", "text": system})
    elif isinstance(system, list):
        out.extend(b for b in system if isinstance(b, dict))
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            out.append({"type": "text", "text": content, "role": message.get("role")})
        elif isinstance(content, list):
            out.extend({**b, "role": message.get("role")} for b in content if isinstance(b, dict))
    return out


def breakpoints(body: dict[str, Any]) -> list[int]:
    """Indexes (into :func:`blocks`) of the blocks marked with ``cache_control``."""
    return [i for i, b in enumerate(blocks(body)) if b.get("cache_control")]


def _tokens(block: dict[str, Any]) -> int:
    text = block.get("text") or block.get("thinking") or json.dumps(block, sort_keys=True)
    return max(1, len(text) // 4)


def usage_for(server: ScriptedServer, body: dict[str, Any], output_tokens: int,
              prompt_tokens: int | None = None) -> dict[str, int]:
    """This request's usage under the server's prompt cache (which it updates)."""
    parts = blocks(body)
    sizes = [_tokens(b) for b in parts]
    digest = hashlib.sha256()
    keys = []
    for block in parts:
        clean = {k: v for k, v in block.items() if k != "cache_control"}
        digest.update(json.dumps(clean, sort_keys=True).encode())
        keys.append(digest.copy().hexdigest())
    marks = [i for i, b in enumerate(parts) if b.get("cache_control")]
    cache = state(server)
    read = write = 0
    with cache.lock:
        if marks:
            last = marks[-1]
            hit = max((i for i in range(last + 1) if keys[i] in cache.prefixes), default=-1)
            read = sum(sizes[:hit + 1])
            write = sum(sizes[hit + 1:last + 1])
            cache.prefixes.update(keys[i] for i in marks)
    total = sum(sizes) if prompt_tokens is None else max(prompt_tokens, read + write)
    return {"input_tokens": total - read - write, "output_tokens": output_tokens,
            "cache_creation_input_tokens": write, "cache_read_input_tokens": read}


def answer(handler: _Handler, body: dict[str, Any], reply: Reply) -> dict[str, int] | None:
    """Send ``reply`` as the Messages API does; the usage sent (as prompt and
    completion tokens, for the server's ledger), or None for an error."""
    server = handler.server.owner
    if reply.status != 200:
        kind = "rate_limit_error" if reply.status == 429 else "invalid_request_error"
        error = {"type": "error", "error": {"type": kind, "message": reply.text or "scripted error"}}
        handler._send_json(reply.status, error, reply.headers)
        return None
    text = reply.text or ""
    output = reply.completion_tokens
    if output is None:
        output = max(1, (len(text) + len(reply.reasoning or "")) // 4)
    usage = usage_for(server, body, output, reply.prompt_tokens)
    content: list[dict[str, Any]] = []
    if reply.reasoning is not None:
        content.append({"type": "thinking", "thinking": reply.reasoning, "signature": "scripted"})
    content.append({"type": "text", "text": text})
    message = {"id": "msg_" + uuid.uuid4().hex[:12], "type": "message", "role": "assistant",
               "model": body.get("model", "scripted"), "content": content, "stop_reason": "end_turn",
               "stop_sequence": None, "usage": usage}
    cache = state(server)
    with cache.lock:
        cache.reported.append({"model": message["model"], "usage": dict(usage)})
    if body.get("stream"):
        handler._send_raw(200, _events(message), {"Content-Type": "text/event-stream"})
    else:
        handler._send_json(200, message, reply.headers)
    prompt = usage["input_tokens"] + usage["cache_creation_input_tokens"] + usage["cache_read_input_tokens"]
    return {"prompt_tokens": prompt, "completion_tokens": output}


def _events(message: dict[str, Any]) -> bytes:
    """The message as the server-sent events of a streamed reply."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        empty = {"type": kind, kind: ""} if kind == "text" else {"type": kind, "thinking": "", "signature": ""}
        delta = ({"type": "text_delta", "text": block["text"]} if kind == "text"
                 else {"type": "thinking_delta", "thinking": block["thinking"]})
        events += [("content_block_start", {"type": "content_block_start", "index": index, "content_block": empty}),
                   ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})]
        if kind == "thinking":
            events.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                                   "delta": {"type": "signature_delta",
                                                             "signature": block["signature"]}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events += [("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                  "usage": {"output_tokens": usage["output_tokens"]}}),
               ("message_stop", {"type": "message_stop"})]
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)


__all__ = ["AnthropicState", "answer", "blocks", "breakpoints", "state", "usage_for"]
